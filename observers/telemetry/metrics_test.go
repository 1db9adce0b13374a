package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/observers"
)

// ---- a known run, written through memlog (shared with trace_test.go) ----

// telemetryStart is the manual clock's start; every record advances it by a
// second, so record times (and span times) are known.
var telemetryStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// telemetryRun is the log of a known run: a root task (agent researcher) with
// one allowed call, one budget denial, one call a human approved (which then
// failed), and a child task (agent helper) with one allowed call, one
// permission denial and a finish denied by the rules guard (so it fails);
// the root then completes.
type telemetryRun struct {
	store       *memlog.Store
	clock       *memlog.ManualClock
	root, child string
	// records are every committed record, log and inbox, in commit order, as
	// a subscriber saw them.
	records []eventlog.Envelope
}

// telemetryWriter writes records the way the engine would, through memlog.
type telemetryWriter struct {
	t     *testing.T
	s     *memlog.Store
	clock *memlog.ManualClock
	roots map[string]string
}

func (w *telemetryWriter) tick() { w.clock.Advance(time.Second) }

func (w *telemetryWriter) create(id, agent, parent string, origin eventlog.Origin) {
	w.t.Helper()
	root, depth := id, 0
	if parent != "" {
		root, depth = w.roots[parent], 1
	}
	w.roots[id] = root
	env, err := eventlog.NewEnvelope(id, origin, "telemetry-test", noeta.TaskCreated{
		TaskID: id, Agent: agent, Goal: "goal of " + id, ParentTaskID: parent, RootTaskID: root, SubtaskDepth: depth,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	env.CorrelationID = root
	w.tick()
	if _, err := w.s.Create(w.t.Context(), env); err != nil {
		w.t.Fatalf("Create(%s): %v", id, err)
	}
	if err := w.s.Enqueue(w.t.Context(), id, eventlog.EnqueueOptions{Parent: parent}); err != nil {
		w.t.Fatalf("Enqueue(%s): %v", id, err)
	}
}

func (w *telemetryWriter) lease(task string) eventlog.Lease {
	w.t.Helper()
	l, err := w.s.Lease(w.t.Context(), eventlog.LeaseRequest{Worker: "telemetry-worker", Task: task, TTL: time.Hour})
	if err != nil {
		w.t.Fatalf("Lease(%s): %v", task, err)
	}
	return l
}

func (w *telemetryWriter) emit(l eventlog.Lease, origin eventlog.Origin, p noeta.Payload) {
	w.t.Helper()
	env, err := eventlog.NewEnvelope(l.Task, origin, "telemetry-test", p)
	if err != nil {
		w.t.Fatal(err)
	}
	env.CorrelationID = w.roots[l.Task]
	w.tick()
	if _, err := w.s.Emit(w.t.Context(), l, env, eventlog.EmitOptions{}); err != nil {
		w.t.Fatalf("Emit(%s on %s): %v", p.EventType(), l.Task, err)
	}
}

func (w *telemetryWriter) release(l eventlog.Lease, rel eventlog.Release) {
	w.t.Helper()
	rel.ConsumedWake = l.Wake
	if err := w.s.Release(w.t.Context(), l, rel); err != nil {
		w.t.Fatalf("Release(%s): %v", l.Task, err)
	}
}

func (w *telemetryWriter) wake(task string, wk noeta.Wake) {
	w.t.Helper()
	if _, err := w.s.Wake(w.t.Context(), task, wk); err != nil {
		w.t.Fatalf("Wake(%s): %v", task, err)
	}
}

// newTelemetryRun writes the run and returns its records.
func newTelemetryRun(t *testing.T) *telemetryRun {
	t.Helper()
	clock := memlog.NewManualClock(telemetryStart)
	s, err := memlog.New(memlog.Options{Clock: clock, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	run := &telemetryRun{store: s, clock: clock, root: "root-task", child: "child-task"}
	var mu sync.Mutex
	sub := s.Subscribe(func(_ context.Context, env eventlog.Envelope) error {
		mu.Lock()
		run.records = append(run.records, env.Clone())
		mu.Unlock()
		return nil
	})
	defer sub.Cancel()

	w := &telemetryWriter{t: t, s: s, clock: clock, roots: map[string]string{}}
	eng, tool := eventlog.OriginEngine, eventlog.OriginTool
	root, child := run.root, run.child
	approval := noeta.HumanResponseWake("approval-call-1-2")

	// Root, first segment: an allowed call, a budget denial, an approval
	// request.
	w.create(root, "researcher", "", eventlog.OriginSystem)
	l := w.lease(root)
	w.emit(l, eng, noeta.TurnStarted{Turn: 1})
	w.emit(l, eng, noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, CostUSD: 0.01, InputTokens: 100, OutputTokens: 20})
	w.emit(l, eng, noeta.ToolCallStarted{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`), Turn: 1})
	w.emit(l, tool, noeta.ToolCallFinished{CallID: "call-1-0", Tool: "echo", OK: true, Output: json.RawMessage(`"hi"`), DurationMS: 12})
	w.emit(l, eng, noeta.ToolCallDenied{CallID: "call-1-1", Tool: "echo", Guard: "budget", Reason: "max_tool_calls 1 reached"})
	w.emit(l, eng, noeta.ApprovalRequested{Handle: approval.Handle, Action: noeta.ApprovalToolCall, CallID: "call-1-2", Tool: "shell",
		Args: json.RawMessage(`{"command":"ls"}`), Guard: "permission", Reason: "shell is high risk"})
	w.emit(l, eng, noeta.TaskSuspended{Reason: "waiting_approval", WakeOn: approval})
	w.release(l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &approval, Reason: "waiting_approval"})

	// A human approves; the approved call runs and fails; the root spawns.
	answer := approval
	answer.Decision, answer.Approver = string(noeta.ApprovalApprove), "alice@example.com"
	w.wake(root, answer)
	l = w.lease(root)
	w.emit(l, eng, noeta.TaskWoken{WakeEvent: answer})
	w.emit(l, eng, noeta.ApprovalResolved{Handle: approval.Handle, Decision: noeta.ApprovalApprove, Approver: "alice@example.com", Reason: "looks safe"})
	w.emit(l, eng, noeta.ToolCallStarted{CallID: "call-1-2", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Turn: 1})
	w.emit(l, tool, noeta.ToolCallFinished{CallID: "call-1-2", Tool: "shell", OK: false, Error: "exit status 1", DurationMS: 30})
	w.emit(l, eng, noeta.TurnStarted{Turn: 2})
	w.emit(l, eng, noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionSpawn, CostUSD: 0.02, InputTokens: 50, OutputTokens: 10})
	w.emit(l, eng, noeta.SubtaskSpawned{SubtaskID: child, Agent: "helper", Goal: "help"})
	w.create(child, "helper", root, eng)
	waitChild := noeta.SubtaskCompletedWake(child)
	w.emit(l, eng, noeta.TaskSuspended{Reason: "waiting_subtask", WakeOn: waitChild})
	w.release(l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &waitChild, Reason: "waiting_subtask"})

	// The child: an allowed call (same call id as the root's first), a
	// permission denial, a finish denied by rules.
	cl := w.lease(child)
	w.emit(cl, eng, noeta.TurnStarted{Turn: 1})
	w.emit(cl, eng, noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, InputTokens: 10, OutputTokens: 5})
	w.emit(cl, eng, noeta.ToolCallStarted{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`), Turn: 1})
	w.emit(cl, tool, noeta.ToolCallFinished{CallID: "call-1-0", Tool: "read_file", OK: true, Output: json.RawMessage(`"hello"`), DurationMS: 3})
	w.emit(cl, eng, noeta.ToolCallDenied{CallID: "call-1-1", Tool: "write_file", Guard: "permission", Reason: "write_file is not allowed"})
	w.emit(cl, eng, noeta.TurnStarted{Turn: 2})
	w.emit(cl, eng, noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish})
	w.emit(cl, eng, noeta.FinishDenied{Guard: "rules", Reason: "the answer quotes a secret"})
	w.emit(cl, eng, noeta.TaskFailed{Error: "finish denied by rules: the answer quotes a secret", Guard: "rules"})
	w.release(cl, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "failed"})

	// The child lifecycle hands the outcome to the root's inbox and wakes it.
	res := noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusFailed, Error: "finish denied by rules: the answer quotes a secret"}
	inEnv, err := eventlog.NewEnvelope(root, eventlog.OriginObserver, "child_lifecycle", res)
	if err != nil {
		t.Fatal(err)
	}
	inEnv.CorrelationID = root
	w.tick()
	if _, err := s.SystemEmit(t.Context(), root, observers.InboxKeyPrefix+child, inEnv); err != nil {
		t.Fatal(err)
	}
	w.wake(root, waitChild)

	// The root records the result and completes.
	l = w.lease(root)
	w.emit(l, eng, noeta.TaskWoken{WakeEvent: waitChild})
	w.emit(l, eng, noeta.SubtaskResultRecorded{SubtaskID: child, Status: res.Status, Error: res.Error})
	w.emit(l, eng, noeta.TurnStarted{Turn: 3})
	w.emit(l, eng, noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionFinish, CostUSD: 0.03, InputTokens: 30, OutputTokens: 40})
	w.emit(l, eng, noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)})
	w.release(l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "completed"})

	mu.Lock()
	defer mu.Unlock()
	if len(run.records) != 36 {
		t.Fatalf("the run committed %d records, want 36", len(run.records))
	}
	return run
}

// ---- scraping ----

// scrape GETs /metrics from srv and parses the text format.
func scrape(t *testing.T, srv *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// series returns a family's samples as "k=v,k=v" (labels sorted) -> value;
// a histogram's value is its count.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range fams {
				if !yield(n) {
					return
				}
			}
		})
		t.Fatalf("no family %s in /metrics; families: %v", name, names)
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		var kv []string
		for _, l := range m.GetLabel() {
			kv = append(kv, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(kv)
		var v float64
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		}
		out[strings.Join(kv, ",")] = v
	}
	return out
}

func wantSeries(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]float64) {
	t.Helper()
	got := series(t, fams, name)
	if len(got) != len(want) {
		t.Errorf("%s: got %d series %v, want %v", name, len(got), got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s{%s} = %v (present %v), want %v", name, k, g, ok, v)
		}
	}
}

func newTestMetrics(t *testing.T, cfg MetricsConfig) (*Metrics, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := NewMetrics(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return m, srv
}

// ---- cases ----

func TestMetricsOfAKnownRun(t *testing.T) {
	run := newTelemetryRun(t)
	now := telemetryStart.Add(time.Hour)
	stats := map[string]observers.ObserverStats{
		"audit":   {Observed: 30, Dropped: 3, Failed: 1, Panicked: 1, Queued: 2},
		"metrics": {Observed: 36},
	}
	m, srv := newTestMetrics(t, MetricsConfig{Now: func() time.Time { return now }})
	m.SetStats(func() map[string]observers.ObserverStats { return stats })
	if m.Name() != "metrics" {
		t.Errorf("Name %q", m.Name())
	}
	for _, env := range run.records {
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatalf("Observe(%s seq %d): %v", env.Type, env.Seq, err)
		}
	}
	fams := scrape(t, srv)

	wantSeries(t, fams, "noeta_guard_decisions_total", map[string]float64{
		"guard=,verdict=allow":                      2, // echo in the root, read_file in the child; the approved shell call is not an allow
		"guard=budget,verdict=deny":                 1,
		"guard=permission,verdict=require_approval": 1,
		"guard=permission,verdict=deny":             1,
		"guard=rules,verdict=deny":                  1,
	})
	wantSeries(t, fams, "noeta_approvals_total", map[string]float64{"action=tool_call,decision=approve": 1})
	wantSeries(t, fams, "noeta_tool_calls_total", map[string]float64{
		"outcome=ok,tool=echo": 1, "outcome=failed,tool=shell": 1, "outcome=ok,tool=read_file": 1,
	})
	wantSeries(t, fams, "noeta_tool_call_duration_seconds", map[string]float64{"tool=echo": 1, "tool=shell": 1, "tool=read_file": 1})
	wantSeries(t, fams, "noeta_tasks_total", map[string]float64{"status=completed": 1, "status=failed": 1})
	wantSeries(t, fams, "noeta_leases_total", map[string]float64{"": 4})
	wantSeries(t, fams, "noeta_wakes_total", map[string]float64{"kind=human_response": 1, "kind=subtask_completed": 1})
	wantSeries(t, fams, "noeta_observer_lag_seconds", map[string]float64{"": 36})
	wantSeries(t, fams, "noeta_observer_drops_total", map[string]float64{"observer=audit": 3, "observer=metrics": 0})
	wantSeries(t, fams, "noeta_observer_failures_total", map[string]float64{"observer=audit": 2, "observer=metrics": 0})
	wantSeries(t, fams, "noeta_observer_queued", map[string]float64{"observer=audit": 2, "observer=metrics": 0})

	events := series(t, fams, "noeta_events_total")
	var total float64
	for _, v := range events {
		total += v
	}
	if total != 36 {
		t.Errorf("noeta_events_total sums to %v, want 36: %v", total, events)
	}
	for k, v := range map[string]float64{
		"origin=system,type=TaskCreated":        1,
		"origin=engine,type=TaskCreated":        1,
		"origin=engine,type=ToolCallStarted":    3,
		"origin=tool,type=ToolCallFinished":     3,
		"origin=engine,type=LeaseGranted":       4,
		"origin=observer,type=SubtaskCompleted": 1,
	} {
		if events[k] != v {
			t.Errorf("noeta_events_total{%s} = %v, want %v", k, events[k], v)
		}
	}

	// The lag histogram measures now − commit time: the run's records were
	// committed 1 s apart from telemetryStart+1s, so their lags are known.
	h := fams["noeta_observer_lag_seconds"].GetMetric()[0].GetHistogram()
	var wantSum float64
	for _, env := range run.records {
		wantSum += now.Sub(env.Time).Seconds()
	}
	if h.GetSampleSum() != wantSum {
		t.Errorf("lag sum %v, want %v", h.GetSampleSum(), wantSum)
	}
	// No task or call id ever becomes a label.
	for name, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if v := l.GetValue(); strings.Contains(v, run.root) || strings.Contains(v, run.child) || strings.HasPrefix(v, "call-") {
					t.Errorf("%s has label %s=%s", name, l.GetName(), v)
				}
			}
		}
	}
}

func TestMetricsHandlerServesOnlyMetrics(t *testing.T) {
	_, srv := newTestMetrics(t, MetricsConfig{})
	resp, err := http.Get(srv.URL + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s, want 404", resp.Status)
	}
	// Before any record: no series from records, and no Stats series.
	fams := scrape(t, srv)
	for name := range fams {
		if strings.HasPrefix(name, "noeta_") {
			t.Errorf("family %s before any record", name)
		}
	}
}

func TestMetricsAreAtLeastOnce(t *testing.T) {
	run := newTelemetryRun(t)
	m, srv := newTestMetrics(t, MetricsConfig{})
	var denial eventlog.Envelope
	for _, env := range run.records {
		if env.Type == noeta.TypeToolCallDenied && env.Task == run.root {
			denial = env
		}
	}
	for range 2 { // a redelivery counts again
		if err := m.Observe(t.Context(), denial); err != nil {
			t.Fatal(err)
		}
	}
	wantSeries(t, scrape(t, srv), "noeta_guard_decisions_total", map[string]float64{"guard=budget,verdict=deny": 2})
}

func TestMetricsApprovalsWithoutTheirRequest(t *testing.T) {
	// A process that starts after the request (or forgot it) counts the
	// approved call's start as an allow and the resolution's action as
	// unknown.
	run := newTelemetryRun(t)
	m, srv := newTestMetrics(t, MetricsConfig{})
	i := slices.IndexFunc(run.records, func(e eventlog.Envelope) bool { return e.Type == noeta.TypeApprovalRequested })
	for _, env := range run.records[i+1:] {
		if env.Task != run.root {
			continue
		}
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, srv)
	wantSeries(t, fams, "noeta_approvals_total", map[string]float64{"action=unknown,decision=approve": 1})
	wantSeries(t, fams, "noeta_guard_decisions_total", map[string]float64{"guard=,verdict=allow": 1})
}

func TestMetricsLabelValuesAreBounded(t *testing.T) {
	m, srv := newTestMetrics(t, MetricsConfig{MaxLabelValues: 2})
	for i, tool := range []string{"a", "b", "c", "d", "a"} {
		env, err := eventlog.NewEnvelope("t1", eventlog.OriginTool, "x", noeta.ToolCallFinished{CallID: "c", Tool: tool, OK: true})
		if err != nil {
			t.Fatal(err)
		}
		env.Seq = uint64(i + 2)
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	wantSeries(t, scrape(t, srv), "noeta_tool_calls_total", map[string]float64{
		"outcome=ok,tool=a": 2, "outcome=ok,tool=b": 1, "outcome=ok,tool=" + OtherLabelValue: 2,
	})
}

// TestMetricsEgress: where a call's sandboxed processes connected, from its
// ToolCallFinished, is counted by destination and verdict.
func TestMetricsEgress(t *testing.T) {
	m, srv := newTestMetrics(t, MetricsConfig{})
	env, err := eventlog.NewEnvelope("t1", eventlog.OriginTool, "x", noeta.ToolCallFinished{CallID: "c", Tool: "shell", OK: true,
		Egress: []noeta.Egress{
			{Host: "api.github.com", Port: 443, Allowed: true, Connections: 2, BytesOut: 100, BytesIn: 5000},
			{Host: "evil.example", Port: 80, Allowed: false, Reason: "not in the allow list", Connections: 1},
		}})
	if err != nil {
		t.Fatal(err)
	}
	env.Seq = 2
	if err := m.Observe(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, srv)
	wantSeries(t, fams, "noeta_sandbox_egress_connections_total", map[string]float64{
		"allowed=true,destination=api.github.com:443,tool=shell": 2,
		"allowed=false,destination=evil.example:80,tool=shell":   1,
	})
	wantSeries(t, fams, "noeta_sandbox_egress_bytes_total", map[string]float64{
		"destination=api.github.com:443,direction=out,tool=shell": 100,
		"destination=api.github.com:443,direction=in,tool=shell":  5000,
		"destination=evil.example:80,direction=out,tool=shell":    0,
		"destination=evil.example:80,direction=in,tool=shell":     0,
	})
}

// TestMetricsShadowVerdicts: each GuardShadowed counts once under its
// guard, rule and would-be verdict, and never as a guard decision: a shadow
// rule decided nothing.
func TestMetricsShadowVerdicts(t *testing.T) {
	m, srv := newTestMetrics(t, MetricsConfig{})
	recs := []noeta.GuardShadowed{
		{Guard: "rules", Rule: "rules[0]", Verdict: noeta.VerdictDeny, Decided: noeta.VerdictAllow},
		{Guard: "rules", Rule: "rules[0]", Verdict: noeta.VerdictDeny, Decided: noeta.VerdictDeny, DecidedBy: "permission"},
		{Guard: "trial", Rule: "guards[0].rules[1]", Verdict: noeta.VerdictRequireApproval, Decided: noeta.VerdictAllow},
		{Guard: "trial", Rule: "guards[0].rules[0]", Verdict: noeta.VerdictAllow, Decided: noeta.VerdictDeny, DecidedBy: "rules"},
		{Guard: "trial", Verdict: noeta.VerdictDeny, Failed: true, Decided: noeta.VerdictAllow},
	}
	for i, r := range recs {
		r.Action, r.CallID, r.Tool, r.Reason = noeta.ApprovalToolCall, "c", "shell", "r"
		env, err := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "x", r)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq = uint64(i + 2)
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, srv)
	wantSeries(t, fams, "noeta_guard_shadow_verdicts_total", map[string]float64{
		"guard=rules,rule=rules[0],verdict=deny":                       2,
		"guard=trial,rule=guards[0].rules[1],verdict=require_approval": 1,
		"guard=trial,rule=guards[0].rules[0],verdict=allow":            1,
		"guard=trial,rule=,verdict=deny":                               1,
	})
	if _, ok := fams["noeta_guard_decisions_total"]; ok {
		t.Errorf("shadow verdicts counted as guard decisions: %v", series(t, fams, "noeta_guard_decisions_total"))
	}
}

func TestMetricsBoundsWhatItRemembers(t *testing.T) {
	m, _ := newTestMetrics(t, MetricsConfig{MaxTasks: 2})
	for i, task := range []string{"t1", "t2", "t3"} {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "x", noeta.ApprovalRequested{
			Handle: "h", Action: noeta.ApprovalFinish, Guard: "g", Reason: "r"})
		if err != nil {
			t.Fatal(err)
		}
		env.Seq = uint64(i + 2)
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	n := m.memory.len()
	_, first := m.memory.get("t1")
	m.mu.Unlock()
	if n != 2 || first {
		t.Errorf("remembers %d tasks (t1: %v), want the 2 most recent", n, first)
	}
}

func TestMetricsInProcess(t *testing.T) {
	// Wired as a worker wires it: fed in process, its Stats from the runner.
	clock := memlog.NewManualClock(telemetryStart)
	s, err := memlog.New(memlog.Options{Clock: clock, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, srv := newTestMetrics(t, MetricsConfig{})
	r := observers.NewInProcess(s, observers.InProcessConfig{}, m)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	m.SetStats(r.Stats)

	w := &telemetryWriter{t: t, s: s, clock: clock, roots: map[string]string{}}
	w.create("solo", "researcher", "", eventlog.OriginSystem)
	l := w.lease("solo")
	w.emit(l, eventlog.OriginEngine, noeta.ToolCallStarted{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1})
	w.emit(l, eventlog.OriginTool, noeta.ToolCallFinished{CallID: "c1", Tool: "echo", OK: true, DurationMS: 1})
	w.emit(l, eventlog.OriginEngine, noeta.TaskCompleted{Answer: json.RawMessage(`"ok"`)})

	deadline := time.Now().Add(10 * time.Second)
	for r.Stats()["metrics"].Observed < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the records never reached the observer", r.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	fams := scrape(t, srv)
	wantSeries(t, fams, "noeta_guard_decisions_total", map[string]float64{"guard=,verdict=allow": 1})
	wantSeries(t, fams, "noeta_tasks_total", map[string]float64{"status=completed": 1})
	wantSeries(t, fams, "noeta_observer_drops_total", map[string]float64{"observer=metrics": 0})
	wantSeries(t, fams, "noeta_observer_lag_seconds", map[string]float64{"": 5})
}

func TestMetricsShutdown(t *testing.T) {
	m, err := NewMetrics(MetricsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	env, _ := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "x", noeta.TurnStarted{Turn: 1})
	if err := m.Observe(t.Context(), env); err == nil {
		t.Error("Observe after Shutdown succeeded")
	}
	if _, err := NewMetrics(MetricsConfig{MaxTasks: -1}); err == nil {
		t.Error("a negative MaxTasks was accepted")
	}
}
