package demo

import (
	"bytes"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/examples"
	"github.com/noeta-go/noeta/host"
)

// TestRun runs every example on an embedded server, as engine demo does:
// each ends as the table says, its timeline is printed under a heading,
// and the summary counts none that did not.
func TestRun(t *testing.T) {
	ctx := t.Context()
	body, err := fs.ReadFile(examples.FS, "noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("examples/noeta.yaml", body)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h, err := hostconfig.Open(ctx, hostconfig.Options{DataDir: dir + "/data", Config: cfg, Workers: 2, Deferred: true, Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var out, msgs bytes.Buffer
	results, err := Run(ctx, h, dir, Options{Workers: 2, Approver: "cli:demo", Out: &out, Msgs: &msgs})
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), msgs.String())
	}
	if len(results) != len(Cases) {
		t.Fatalf("%d results, want one per example of the table (%d)", len(results), len(Cases))
	}
	for _, r := range results {
		if string(r.Rest.Status) != r.Want {
			t.Errorf("%s ended %s, want %s", r.Name, r.Rest.Status, r.Want)
		}
		base := strings.TrimSuffix(r.Name, ".yaml")
		if !strings.Contains(out.String(), "\n== "+base+": "+r.Shows) {
			t.Errorf("no heading for %s", base)
		}
	}
	for _, want := range []string{"ApprovalResolved", "approve by cli:demo: the demo's table says approve", "deny by cli:demo: the demo's table says deny", "ToolCallDenied"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the timelines lack %q", want)
		}
	}
	var sum bytes.Buffer
	if failed := WriteSummary(&sum, results); failed != 0 {
		t.Errorf("%d examples not as expected:\n%s", failed, sum.String())
	}
	if t.Failed() {
		t.Logf("out:\n%s\nmsgs:\n%s", out.String(), msgs.String())
	}
}

// TestWriteSummary: an example that did not end as it must is counted and
// said so.
func TestWriteSummary(t *testing.T) {
	var b bytes.Buffer
	failed := WriteSummary(&b, []Result{
		{Name: "01-a.yaml", Shows: "a thing", Want: "completed", Rest: host.Rest{Status: host.RestCompleted}, Took: 1500 * time.Millisecond},
		{Name: "02-b.yaml", Shows: "b thing", Want: "completed", Rest: host.Rest{Status: host.RestFailed}},
	})
	if failed != 1 {
		t.Errorf("failed = %d, want 1", failed)
	}
	for _, want := range []string{"completed, as expected (1.50s)", "failed, NOT AS EXPECTED (want completed)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

func TestQueueToken(t *testing.T) {
	for in, want := range map[string]string{"01-allowed-call": "01-allowed-call", "a.b c/é": "a_b_c__"} {
		if got := queueToken(in); got != want {
			t.Errorf("queueToken(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteVerdict: the tour's last line, and whether it went as it must.
func TestWriteVerdict(t *testing.T) {
	tests := []struct {
		total, failed int
		interrupted   bool
		want          string
		ok            bool
	}{
		{8, 0, false, "all 8 examples ended as expected\n", true},
		{8, 2, false, "2 of 8 examples did not end as expected\n", false},
		{3, 0, true, "interrupted\n", false},
		{3, 1, true, "interrupted\n", false},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if ok := WriteVerdict(&b, tt.total, tt.failed, tt.interrupted); ok != tt.ok || b.String() != tt.want {
			t.Errorf("WriteVerdict(%d, %d, %v) = %v, %q; want %v, %q", tt.total, tt.failed, tt.interrupted, ok, b.String(), tt.ok, tt.want)
		}
	}
}

// TestConfig: the embedded examples' config loads, with the agents the
// table's examples run.
func TestConfig(t *testing.T) {
	cfg, err := Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != "examples/noeta.yaml" || cfg.Governance == nil || len(cfg.Governance.Agents()) == 0 {
		t.Errorf("Config() = %+v", cfg)
	}
}
