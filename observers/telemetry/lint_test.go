package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

// TestMetricsLint: every series the metrics observer exposes, each of its
// instruments fed at least once (a run with tool calls, approvals, denials
// and a subtask; a model's turn; egress), the build info and the hooks'
// counters pass the Prometheus client's linter (promlint: names, units,
// suffixes, help).
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(BuildInfo())
	reg.MustRegister(HookRuns("noeta_engine_hook_runs_total", func() observers.HooksStats { return observers.HooksStats{Ran: 1} })...)
	m, err := NewMetrics(MetricsConfig{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(t.Context()) })
	m.SetStats(func() map[string]observers.ObserverStats {
		return map[string]observers.ObserverStats{"audit": {Observed: 3, Dropped: 1, Failed: 1, Queued: 1}}
	})
	records := append(newTelemetryRun(t).records, modelRun(t)...)
	egress, err := eventlog.NewEnvelope("t1", eventlog.OriginTool, "x", noeta.ToolCallFinished{CallID: "c", Tool: "shell", OK: true,
		Egress: []noeta.Egress{{Host: "api.github.com", Port: 443, Allowed: true, Connections: 1, BytesOut: 1, BytesIn: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	egress.Seq = 2
	shadowed, err := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "x", noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "c", Tool: "shell",
		Guard: "rules", Rule: "rules[0]", Verdict: noeta.VerdictDeny, Reason: "r", Decided: noeta.VerdictAllow})
	if err != nil {
		t.Fatal(err)
	}
	shadowed.Seq = 3
	for _, env := range append(records, egress, shadowed) {
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	t.Logf("%d series linted", n)
}
