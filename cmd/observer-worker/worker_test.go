package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

var (
	natsURL string
	binPath string // the observer-worker binary, built from this package
)

func TestMain(m *testing.M) {
	if os.Getenv(stamperEnv) == "1" {
		// This binary re-run as BenchmarkCommitToObserver's stamper.
		if err := stampLines(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "stamper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "noeta-observer-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "observer-worker")
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build observer-worker:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := embedded.Start(ctx, embedded.Config{Dir: filepath.Join(dir, "nats")})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded server:", err)
		return 1
	}
	defer srv.Shutdown()
	natsURL = srv.ClientURL()
	return m.Run()
}

// proc is a running observer-worker subprocess.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited; then err is set
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startWorker(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("worker exited with %v after SIGTERM\n%s", p.err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("worker did not stop within 30s of SIGTERM\n%s", p.stderr)
	}
}

const taskConfig = `
agents:
  a:
    tools: [echo]
    permission_mode: bypassPermissions
`

// runEngine runs an engine with 4 workers on prefix until the test ends.
func runEngine(t *testing.T, prefix string) *engine.Engine {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{Prefix: prefix, LeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	cf, err := config.Parse("", []byte(taskConfig))
	if err != nil {
		t.Fatal(err)
	}
	builtins, _ := tools.Builtins(tools.BuiltinConfig{})
	reg, _ := tools.NewRegistry(builtins...)
	eng, err := engine.New(engine.Config{
		Log: log, Dispatcher: disp, Content: log, Governance: cf.Governance, Tools: reg,
		Policies: engine.ScriptedPolicies(log, policy.ParseScripted),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		eng.NewPool("e", 4).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return eng
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// TestTwoWorkersShareTheAuditGroup: two observer-worker processes split the
// partitions of one audit group and one audit file while an engine runs 500
// tasks; one is killed with SIGKILL midway and started again. The file ends
// with exactly one record per (task, seq), in each task's order, and its
// chains verify.
func TestTwoWorkersShareTheAuditGroup(t *testing.T) {
	const tasks = 500
	prefix := "ow1"
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	eng := runEngine(t, prefix)
	workerArgs := func(parts string) []string {
		return []string{"--nats", natsURL, "--prefix", prefix, "--observers", "audit", "--partitions", parts,
			"--audit-file", auditFile, "--audit-sync", "100ms", "--ack-wait", "2s", "--http", ""}
	}
	a := startWorker(t, workerArgs("0-31")...)
	b := startWorker(t, workerArgs("32-63")...)

	script := []byte(`[{"tool_calls":[{"tool":"echo","args":{"x":1}}]},{"finish":{"answer":"ok"}}]`)
	ids := make([]string, tasks)
	for i := range ids {
		id, err := eng.Submit(context.Background(), engine.Submission{Agent: "a", Goal: "g", Script: script})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	// Kill A with SIGKILL once a good part of the trail is written, and
	// start it again.
	deadline := time.Now().Add(2 * time.Minute)
	for countLines(t, auditFile) < 1500 {
		if time.Now().After(deadline) {
			st, err := eng.Inspect(context.Background(), ids[0])
			t.Fatalf("the audit file has %d lines (task %s: %+v %v)\nA: %s\nB: %s", countLines(t, auditFile), ids[0], st, err, a.stderr, b.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	killedAt := countLines(t, auditFile)
	a = startWorker(t, workerArgs("0-31")...)

	// Every task ends; then the trail must hold every record of every task.
	want := 0
	for _, id := range ids {
		for {
			st, err := eng.Inspect(context.Background(), id)
			if err == nil && st.Status == noeta.StatusTerminal {
				want += int(st.LastSeq)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s did not end: %+v %v", id, st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for countLines(t, auditFile) < want {
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("the audit file has %d of %d records\nA: %s\nB: %s", countLines(t, auditFile), want, a.stderr, b.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.stop(t)
	b.stop(t)

	f, err := os.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	last := map[string]uint64{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var rec struct {
			Task string `json:"task"`
			Seq  uint64 `json:"seq"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		k := fmt.Sprintf("%s/%d", rec.Task, rec.Seq)
		if seen[k] {
			t.Errorf("line %d: (%s) audited twice", n, k)
		}
		seen[k] = true
		if rec.Seq != last[rec.Task]+1 {
			t.Errorf("line %d: task %s seq %d follows seq %d", n, rec.Task, rec.Seq, last[rec.Task])
		}
		last[rec.Task] = rec.Seq
	}
	if n != want || len(last) != tasks {
		t.Errorf("the file has %d records of %d tasks, want %d of %d", n, len(last), want, tasks)
	}
	rep, err := observers.VerifyAuditFile(auditFile)
	if err != nil || !rep.OK() {
		t.Errorf("audit verify: %v %v", rep, err)
	}
	t.Logf("%d records of %d tasks; A was killed at %d lines; verify: %v", n, len(last), killedAt, rep)
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--nats is required"},
		{[]string{"--nats", "nats://x", "--observers", "audit,nope"}, "unknown observer"},
		{[]string{"--nats", "nats://x", "--partitions", "60-70"}, "--partitions"},
		{[]string{"--bogus"}, "unknown flag"},
		{[]string{"--nats", "nats://x", "--log-format", "xml"}, "--log-format"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestParsePartitions(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		err  bool
	}{
		{"all", "[]", false},
		{"0-3", "[0 1 2 3]", false},
		{"5,1-2,2", "[1 2 5]", false},
		{"63", "[63]", false},
		{"64", "", true},
		{"3-1", "", true},
		{"a", "", true},
	} {
		got, err := parsePartitions(c.in)
		if (err != nil) != c.err || !c.err && fmt.Sprint(got) != c.want && !(c.want == "[]" && got == nil) {
			t.Errorf("parsePartitions(%q) = %v, %v", c.in, got, err)
		}
	}
}

// TestCredentials: the worker authenticates with --user and NOETA_PASSWORD
// (or --creds), and no password reaches its output. Reproduction of the
// defect: it had no credential flags, so the README put the password in the
// URL, where ps shows it, and a failed connection printed "connect to
// nats://observer:PASSWORD@…".
func TestCredentials(t *testing.T) {
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), User: "observer", Password: "pw-of-the-observer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL(), srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{Prefix: "creds"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	tasks, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: "creds", Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tasks.Close() })
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	base := []string{"--observers", "audit", "--audit-stdout", "--http", "", "--prefix", "creds"}

	// Refused by the server: the error names the server, never the password.
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--nats", "nats://observer:wrong-S3CRET@" + strings.TrimPrefix(srv.ClientURL(), "nats://")}, nil},
		{[]string{"--nats", "nats://observer:p%zz wrong-S3CRET@127.0.0.1:1"}, nil},
		{[]string{"--nats", srv.ClientURL(), "--user", "observer"}, map[string]string{"NOETA_PASSWORD": "wrong-S3CRET"}},
		{[]string{"--nats", "nats://127.0.0.1:1", "--user", "observer", "--password", "wrong-S3CRET"}, nil},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var out, errb syncBuffer
		code := runEnv(ctx, append(c.args, base...), &out, &errb, env(c.env))
		cancel()
		if code != exitFail {
			t.Errorf("%v: exit %d, want 1\n%s", c.args, code, errb.String())
		}
		if strings.Contains(errb.String()+out.String(), "S3CRET") {
			t.Errorf("%v: the output leaks the password:\n%s", c.args, errb.String())
		}
	}

	// Accepted with the password from the environment: it runs until
	// stopped.
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, base, &out, &errb, env(map[string]string{
			"NOETA_NATS": srv.ClientURL(), "NOETA_USER": "observer", "NOETA_PASSWORD": "pw-of-the-observer",
		}))
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(errb.String(), "observer worker started") && time.Now().Before(deadline) {
		select {
		case code := <-done:
			t.Fatalf("exited %d before starting:\n%s", code, errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if strings.Contains(errb.String(), "pw-of-the-observer") {
		t.Errorf("the log leaks the password:\n%s", errb.String())
	}
}

// TestAuditFromConfig: without a sink flag, the audit observer takes the
// observers.audit section of --config, as serve does; before, the section
// was ignored and the worker asked for a flag.
func TestAuditFromConfig(t *testing.T) {
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	cfg := filepath.Join(dir, "noeta.yaml")
	if err := os.WriteFile(cfg, []byte("agents: {a: {tools: [echo]}}\nobservers:\n  audit: {file: "+auditFile+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runEngine(t, "auditcfg") // creates the prefix's streams
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, []string{"--nats", natsURL, "--prefix", "auditcfg", "--observers", "audit", "--config", cfg, "--http", ""},
			&out, &errb, func(string) (string, bool) { return "", false })
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(errb.String(), "observer worker started") && time.Now().Before(deadline) {
		select {
		case code := <-done:
			t.Fatalf("exited %d before starting:\n%s", code, errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if _, err := os.Stat(auditFile); err != nil {
		t.Errorf("the config's audit file was not opened: %v", err)
	}
}

// TestHTTPClosedByDefault: observer-worker's --http refuses plain HTTP
// beyond loopback (exit 2, naming the flag that allows it), and the fanout,
// which streams whole records on /tasks/{id}/events, starts only with a
// --config whose http: section says who may read it. Before, the worker
// served every task's records to anyone who reached the port.
func TestHTTPClosedByDefault(t *testing.T) {
	noHTTP := filepath.Join(t.TempDir(), "noeta.yaml")
	if err := os.WriteFile(noHTTP, []byte("agents: {a: {tools: [echo]}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", "nats://x", "--http", "0.0.0.0:0"}, "--behind-tls-proxy"},
		{[]string{"--nats", "nats://x", "--http", ":9464"}, "--http-tls-cert"},
		{[]string{"--nats", "nats://x", "--http-tls-key", "k.pem"}, "go together"},
		{[]string{"--nats", "nats://x", "--max-streams-per-client", "0"}, "--max-streams-per-client"},
		{[]string{"--nats", "nats://x", "--observers", "fanout"}, "fanout needs --config"},
		{[]string{"--nats", "nats://x", "--observers", "fanout", "--config", noHTTP}, "no http.tokens or http.trusted_proxy"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
