package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/hostconfig"

	"os"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy"
)

// TestIdleIDs: the scale mode keeps no ids, it derives them; a
// million must be a million distinct, valid task ids, the same on every
// call (a wake after the restart names a task grown before it).
func TestIdleIDs(t *testing.T) {
	idle := newIdleTasks()
	const n = 1_000_000
	seen := make(map[string]struct{}, n)
	for i := range int64(n) {
		id := idle.id(i)
		if i%100_000 == 0 {
			if err := noeta.ValidateTaskID(id); err != nil {
				t.Fatalf("id %d %q: %v", i, id, err)
			}
			if again := idle.id(i); again != id {
				t.Fatalf("id %d is %q, then %q", i, id, again)
			}
		}
		seen[id] = struct{}{}
	}
	if len(seen) != n {
		t.Errorf("%d distinct ids of %d", len(seen), n)
	}
	if other := newIdleTasks(); other.id(0) == idle.id(0) {
		t.Error("two runs derived the same first id: a second run on one store would collide")
	}
}

func TestParseMix(t *testing.T) {
	tests := []struct {
		in      string
		want    Mix
		wantErr string
	}{
		{"", Mix{}, ""},
		{"deny=0.1,approve=0.2,spawn=0.05,wait=0.05", Mix{Deny: 0.1, Approve: 0.2, Spawn: 0.05, Wait: 0.05}, ""},
		{" wait=1 ", Mix{Wait: 1}, ""},
		{"deny=2", Mix{}, "from 0 to 1"},
		{"deny=-0.1", Mix{}, "from 0 to 1"},
		{"deny=NaN", Mix{}, "from 0 to 1"},
		{"deny=0.6,approve=0.6", Mix{}, "over 1"},
		{"sleep=0.1", Mix{}, `unknown kind "sleep"`},
		{"deny", Mix{}, "not kind=share"},
	}
	for _, tt := range tests {
		got, err := ParseMix(tt.in)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseMix(%q): error %v, want one naming %q", tt.in, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("ParseMix(%q): %v", tt.in, err)
		case got != tt.want:
			t.Errorf("ParseMix(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseLevels(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"1000, 10000,100000", []int{1000, 10000, 100000}, true},
		{"10,5", nil, false},
		{"5,5", nil, false},
		{"0", nil, false},
		{"a", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseLevels(tt.in)
		if (err == nil) != tt.ok || !slicesEqual(got, tt.want) {
			t.Errorf("ParseLevels(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOptionsCheck: options that cannot apply are refused before anything
// starts, naming the flag.
func TestOptionsCheck(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/file"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		o        Options
		embedded bool
		want     string // "" is no error
	}{
		{"defaults", Options{Tasks: 1, Calls: 1, Probes: 1}, true, ""},
		{"negative tasks", Options{Tasks: -1, Probes: 1}, true, "at least 0"},
		{"no probes", Options{Probes: 0}, true, "at least 1"},
		{"server pid on embedded", Options{Probes: 1, ServerPID: os.Getpid()}, true, "the server of --nats"},
		{"server dir on embedded", Options{Probes: 1, ServerDir: dir}, true, "the server of --nats"},
		{"negative pid", Options{Probes: 1, ServerPID: -1}, false, "want a process id"},
		{"own pid over nats", Options{Probes: 1, ServerPID: os.Getpid(), ServerDir: dir}, false, ""},
		{"server dir a file", Options{Probes: 1, ServerDir: file}, false, "is not a directory"},
		{"profile under a file", Options{Probes: 1, Profile: file + "/p"}, true, "--profile"},
	}
	for _, tt := range tests {
		err := tt.o.Check(tt.embedded)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestScript: a task's script is drawn from the mix, the same for the same
// task every time, each call of its kind, and is a script a task file may
// carry; Config governs it.
func TestScript(t *testing.T) {
	for _, tt := range []struct {
		mix  Mix
		want string // the kind every step of the draw must be
	}{
		{Mix{}, `"text":"call `},
		{Mix{Deny: 1}, `"text":"deny `},
		{Mix{Approve: 1}, `"text":"approve `},
		{Mix{Spawn: 1}, `"spawn"`},
		{Mix{Wait: 1}, `"event_kind":"` + EventKind + `"`},
	} {
		a, err := Script(3, 4, tt.mix)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Script(3, 4, tt.mix)
		if !bytes.Equal(a, b) {
			t.Errorf("%+v: two draws of task 3 differ:\n%s\n%s", tt.mix, a, b)
		}
		var steps []json.RawMessage
		if err := json.Unmarshal(a, &steps); err != nil || len(steps) != 5 {
			t.Fatalf("%+v: %d steps (%v), want 4 and a finish:\n%s", tt.mix, len(steps), err, a)
		}
		for i, s := range steps[:4] {
			if !strings.Contains(string(s), tt.want) {
				t.Errorf("%+v: step %d is %s, want %s", tt.mix, i, s, tt.want)
			}
		}
		tf := `{"agent": "bench", "goal": "g", "script": ` + string(a) + `}`
		if _, err := policy.ParseTaskFile("task.json", []byte(tf)); err != nil {
			t.Errorf("%+v: the script is no task file's: %v", tt.mix, err)
		}
	}
	if _, err := Config(20); err != nil {
		t.Fatalf("Config: %v", err)
	}
}

// openHost opens a host on an embedded server in a directory of the test's,
// governed by Config.
func openHost(t *testing.T, ctx context.Context, dir string, calls int) *hostconfig.Host {
	t.Helper()
	cfg, err := Config(calls)
	if err != nil {
		t.Fatal(err)
	}
	h, err := hostconfig.Open(ctx, hostconfig.Options{DataDir: dir, Config: cfg, Workers: 2, Name: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRun runs a small load of every kind of call on an embedded server:
// every task at rest and completed, the records, approvals, wakes and probe
// appends counted.
func TestRun(t *testing.T) {
	ctx := t.Context()
	h := openHost(t, ctx, t.TempDir(), 3)
	var progress bytes.Buffer
	res, h2, err := Run(ctx, h, Options{
		Tasks: 6, Calls: 3, Probes: 1, Workers: 2, Target: "test",
		Mix:      Mix{Deny: 0.2, Approve: 0.2, Spawn: 0.2, Wait: 0.2},
		Progress: &progress,
	})
	defer h2.Close()
	if err != nil {
		t.Fatal(err)
	}
	if h2 != h {
		t.Error("Run without a restart handed back another host")
	}
	if res.Target != "test" || res.Tasks != 6 || res.Calls != 3 || res.Workers != 2 {
		t.Errorf("the result does not describe the run: %+v", res)
	}
	if res.Completed != 6 || res.Failed != 0 {
		t.Errorf("completed %d failed %d; want 6 and 0", res.Completed, res.Failed)
	}
	if res.Records < 6*6 || res.Appends == 0 || res.Wakes == 0 || res.ToolCalls == 0 {
		t.Errorf("not measured: %+v", res)
	}
	if !strings.Contains(progress.String(), "bench: 6/6 tasks at rest") {
		t.Errorf("progress %q does not say every task came to rest", progress.String())
	}
	// The denials and approvals of the mix are in the logs.
	tasks, err := h.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ts := range tasks {
		evs, err := h.Events(ctx, ts.Task, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen[e.Type] = true
		}
	}
	for _, typ := range []string{noeta.TypeToolCallDenied, noeta.TypeApprovalResolved, noeta.TypeSubtaskSpawned, noeta.TypeTaskWoken} {
		if !seen[typ] {
			t.Errorf("no %s in any task's log", typ)
		}
	}
}

// TestRunScale runs the scale mode at two small levels and restarts the
// host through Reopen: each level and the restart measured, and the host
// handed back is the reopened one.
func TestRunScale(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	h := openHost(t, ctx, dir, 0)
	var reopened *hostconfig.Host
	res, h2, err := Run(ctx, h, Options{
		Levels: []int{3, 6}, Probes: 3, Restart: true, Quiet: true,
		Reopen: func(ctx context.Context, d string) (*hostconfig.Host, error) {
			if d != dir {
				t.Errorf("reopened on %s, want %s", d, dir)
			}
			reopened = openHost(t, ctx, d, 0)
			return reopened, nil
		},
	})
	defer h2.Close()
	if err != nil {
		t.Fatal(err)
	}
	if h2 != reopened {
		t.Error("Run did not hand back the reopened host")
	}
	if len(res.Levels) != 2 || res.Levels[0].Suspended != 3 || res.Levels[1].Suspended != 6 {
		t.Fatalf("levels %+v; want 3 and 6", res.Levels)
	}
	for _, l := range res.Levels {
		if l.AppendP50us <= 0 || l.WakeLeaseP50us <= 0 || l.DiskBytes <= 0 {
			t.Errorf("level %d not measured: %+v", l.Suspended, l)
		}
	}
	if res.Restart == nil || res.Restart.ResumeMs <= 0 {
		t.Errorf("restart not measured: %+v", res.Restart)
	}
}

// TestRestartNeedsReopen: a restart without a way to reopen the host is an
// error, not a closed host and a panic.
func TestRestartNeedsReopen(t *testing.T) {
	ctx := t.Context()
	h := openHost(t, ctx, t.TempDir(), 0)
	_, h2, err := Run(ctx, h, Options{Levels: []int{1}, Probes: 1, Restart: true, Quiet: true})
	defer h2.Close()
	if err == nil || !strings.Contains(err.Error(), "Reopen") {
		t.Fatalf("err %v, want one naming Reopen", err)
	}
}

// TestResultWrite: the table names each figure; the JSON is the Result.
func TestResultWrite(t *testing.T) {
	r := Result{Target: "data /d", Tasks: 2, Calls: 3, Workers: 4, Seconds: 2, TasksPerSec: 1, Records: 40, RecordsPerSec: 20,
		Completed: 2, Appends: 10, AppendP50us: 100, AppendP99us: 900, Wakes: 3, WakeLeaseP50us: 50, WakeLeaseP99us: 70,
		ObserverP99us: 12, DurableWaits: 12, ToolCalls: 6, WaitsPerCall: 2, CPUSeconds: 1, RSSMiB: 30, MaxRSSMiB: 40}
	var b bytes.Buffer
	if err := r.Write(&b, false); err != nil {
		t.Fatal(err)
	}
	want := `target                 data /d
tasks × calls          2 × 3, 4 workers
time                   2.00s (2 completed, 0 failed)
tasks/s                1.0
records/s              20 (40 records)
fenced append p50/p99  100 / 900 µs (10 probe appends)
wake→lease p50/p99     50 / 70 µs (3 wakes)
commit→observer p99    12 µs
durable waits          2.00 per tool call (12 waits, 6 calls)
CPU                    1.00s (50% of one core)
RSS                    30 MiB now, 40 MiB peak
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := r.Write(&b, true); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Records != 40 || back.Levels != nil {
		t.Errorf("JSON %s decodes to %+v (%v)", b.String(), back, err)
	}
}
