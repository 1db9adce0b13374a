package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/webui"
)

// observedConfig is examples/noeta.yaml with an audit file and a
// PostToolUse hook that appends "<tool> <call id>" to hookOut.
func observedConfig(t *testing.T, auditFile, hookOut string) string {
	t.Helper()
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	extra := "observers:\n  audit: {file: " + auditFile + "}\n" +
		"hooks:\n  post_tool_use:\n    - match_tool: \"*\"\n      command: [/bin/sh, -c, 'echo \"$NOETA_TOOL $NOETA_CALL_ID\" >> " + hookOut + "']\n"
	return writeFile(t, "noeta.yaml", string(base)+"\n"+extra)
}

// auditRecord is what the tests read of an audit line.
type auditRecord struct {
	Task     string `json:"task"`
	Type     string `json:"type"`
	Approver string `json:"approver"`
	Decision string `json:"decision"`
	Tool     string `json:"tool"`
	CallID   string `json:"call_id"`
}

// checkAudit verifies the trail with engine audit verify and returns its
// records of task.
func checkAudit(t *testing.T, file, task string) []auditRecord {
	t.Helper()
	code, out, errOut := runCmd(t, "audit", "verify", file)
	if code != 0 {
		t.Fatalf("audit verify %s: exit %d\n%s\n%s", file, code, out, errOut)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []auditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r auditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if r.Task == task {
			recs = append(recs, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// wantAudited checks that recs hold the approval by approver, the shell
// call it let run, and the task's end.
func wantAudited(t *testing.T, recs []auditRecord, approver string) {
	t.Helper()
	var approved, called, finished, completed bool
	for _, r := range recs {
		switch r.Type {
		case "ApprovalResolved":
			approved = approved || (r.Decision == "approve" && r.Approver == approver)
		case "ToolCallStarted":
			called = called || r.Tool == "shell"
		case "ToolCallFinished":
			finished = finished || r.Tool == "shell"
		case "TaskCompleted":
			completed = true
		}
	}
	if !approved || !called || !finished || !completed {
		t.Errorf("audit: approval by %s %v, shell call %v/%v, completion %v; records: %+v", approver, approved, called, finished, completed, recs)
	}
}

// wantHookRan checks that the PostToolUse hook wrote the shell call.
func wantHookRan(t *testing.T, hookOut string) {
	t.Helper()
	b, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatalf("the PostToolUse hook did not run: %v", err)
	}
	if !regexp.MustCompile(`(?m)^shell call-1-0$`).Match(b) {
		t.Errorf("the hook wrote %q, want a line \"shell call-1-0\"", b)
	}
}

// TestRunRunsConfiguredObservers: engine run runs the config's audit and
// hooks observers in process. Before, both sections were parsed and never
// run: no audit trail was written and the hook never ran.
func TestRunRunsConfiguredObservers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	auditFile, hookOut := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "hook.out")
	cfg := observedConfig(t, auditFile, hookOut)
	code, out, errOut := runCmd(t, "run", example("06-approval-granted.yaml"), "--config", cfg, "--approvals", "approve",
		"--data", t.TempDir(), "--workspace", workspace(t))
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`task ([0-9A-Z]{26}):`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run names no task:\n%s", out)
	}
	wantAudited(t, checkAudit(t, auditFile, m[1]), approvals.LocalApprover())
	wantHookRan(t, hookOut)
}

// TestServeRunsConfiguredObservers: serve on the embedded default runs the
// config's audit and hooks observers; submit and approve, clients of the
// serving process, need none of their own.
func TestServeRunsConfiguredObservers(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	auditFile, hookOut := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "hook.out")
	cfg := observedConfig(t, auditFile, hookOut)
	p := startEngine(t, "serve", "--config", cfg, "--data", data, "--workspace", workspace(t), "--http", "", "--log-format", "json")
	p.waitLog(t, "serving", time.Minute)

	code, out, errOut := runCmd(t, "submit", example("06-approval-granted.yaml"), "--config", cfg, "--data", data)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	handleRE := regexp.MustCompile(`approval-call-1-0-[0-9a-hjkmnp-tv-z]{10}`)
	var handle string
	waitFor(t, time.Minute, "the task to ask for approval", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data)
		handle = handleRE.FindString(out)
		return handle != ""
	})
	code, out, errOut = runCmd(t, "approve", id, handle, "--as", "alice", "--data", data)
	if code != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	waitFor(t, time.Minute, "the task to end", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data)
		return strings.Contains(out, "status    terminal")
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, p.stderr)
	}
	wantAudited(t, checkAudit(t, auditFile, id), "alice")
	wantHookRan(t, hookOut)
}

// TestBadObserversConfig: an observers section that is wrong, or whose audit
// file cannot be opened, is bad config (exit 2) naming the file, line and
// field, before any task runs.
func TestBadObserversConfig(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(base), "\n")
	notADir := writeFile(t, "file", "x")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	tests := []struct {
		name, section, want string
	}{
		{"two sinks", "observers:\n  audit: {file: a.jsonl, stdout: true}\n", `:%d: observers.audit: needs exactly one sink, has file and stdout`},
		{"unknown sink", "observers:\n  audit:\n    kafka: x\n", `:%d: observers.audit.kafka: unknown key`},
		{"unopenable file", "observers:\n  audit:\n    file: " + filepath.Join(notADir, "audit.jsonl") + "\n", `:%d: observers.audit.file: `},
		{"metrics on a busy port", "observers:\n  metrics: {listen: \"" + busy + "\"}\n", `:%d: observers.metrics.listen: listen tcp ` + busy},
		{"bad trace protocol", "observers:\n  trace: {otlp_endpoint: \"localhost:4317\", protocol: carrier-pigeon}\n", `:%d: observers.trace.protocol: `},
		// A live stream nothing would serve: no listener of its own, and no
		// HTTP in run (nor in serve --http "").
		{"fanout with no HTTP", "observers:\n  fanout: {}\n", `:%d: observers.fanout: `},
		// Its own listener has no TLS; before, it served every record to
		// anyone on the network.
		{"fanout beyond loopback", "observers:\n  fanout: {listen: \"0.0.0.0:0\"}\n", `:%d: observers.fanout.listen: "0.0.0.0:0" listens beyond loopback`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeFile(t, "noeta.yaml", string(base)+tt.section)
			// The error is on the last line of the section.
			line := lines + strings.Count(tt.section, "\n")
			for _, verb := range [][]string{
				{"run", example("01-allowed-call.yaml"), "--workspace", workspace(t)},
				{"serve", "--http", "", "--workspace", workspace(t)},
			} {
				code, out, errOut := runCmd(t, append(verb, "--config", cfg, "--data", t.TempDir())...)
				want := cfg + strings.Replace(tt.want, "%d", strconv.Itoa(line), 1)
				if code != exitUsage || !strings.Contains(errOut, want) {
					t.Errorf("%s: exit %d, want %d and %q\n%s\n%s", verb[0], code, exitUsage, want, out, errOut)
				}
				if strings.Contains(out, "LeaseGranted") {
					t.Errorf("%s ran a task with a bad config:\n%s", verb[0], out)
				}
			}
		})
	}
}

// TestApproveRunsConfiguredObservers: on the embedded default approve runs
// the task tree, so it runs the config's observers too; the trail the run
// began is continued, one chain per task across both processes.
func TestApproveRunsConfiguredObservers(t *testing.T) {
	t.Parallel()
	dir, data, ws := t.TempDir(), t.TempDir(), workspace(t)
	auditFile, hookOut := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "hook.out")
	cfg := observedConfig(t, auditFile, hookOut)
	code, out, errOut := runCmd(t, "run", example("06-approval-granted.yaml"), "--config", cfg, "--data", data, "--workspace", ws)
	if code != exitWaiting {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	id, handle := waitingHandle(t, out, "approval-call-1-0")
	code, out, errOut = runCmd(t, "approve", id, handle, "--as", "carol", "--config", cfg, "--data", data, "--workspace", ws)
	if code != exitDone {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	wantAudited(t, checkAudit(t, auditFile, id), "carol")
	wantHookRan(t, hookOut)
}

// TestServeObserversOff: serve --audit=false --hooks=false builds neither
// observer (observer-workers run them): on a NATS server, a config whose
// audit file could not be opened here serves, and nothing is audited or
// hooked. On the embedded default, where no observer-worker can connect,
// the same flags would leave the configured observers unrun: exit 2,
// saying so. (It used to serve, and the hooks silently never ran.)
func TestServeObserversOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notADir := writeFile(t, "file", "x")
	auditFile, hookOut := filepath.Join(notADir, "audit.jsonl"), filepath.Join(dir, "hook.out")
	cfg := observedConfig(t, auditFile, hookOut)
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, []string{"serve", "--config", cfg, "--nats", srv.ClientURL(), "--prefix", "obsoff", "--workspace", workspace(t),
			"--http", "", "--audit=false", "--hooks=false"}, &syncBuffer{}, &errb, noEnv)
	}()
	waitFor(t, time.Minute, "serve to start", func() bool {
		select {
		case code := <-done:
			done <- code
			return true
		default:
		}
		return strings.Contains(errb.String(), "msg=serving")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d\n%s", code, &errb)
	}
	if !strings.Contains(errb.String(), "hooks=false audit=false") {
		t.Errorf("serve does not log that the observers are off:\n%s", &errb)
	}

	for _, off := range []struct{ flag, field string }{{"--hooks=false", ": hooks: configured, but nothing would run it"}, {"--audit=false", ": observers.audit: configured, but nothing would run it"}} {
		cfg := observedConfig(t, filepath.Join(dir, "audit.jsonl"), hookOut)
		code, out, errOut := runCmd(t, "serve", "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t), "--http", "", off.flag)
		if code != exitUsage || !strings.Contains(errOut, off.field) || !strings.Contains(errOut, "embedded server") {
			t.Errorf("serve %s on the embedded default: exit %d, want 2 saying the observer would never run\n%s%s", off.flag, code, out, errOut)
		}
	}
}

// TestAuditStdoutBesideATimeline: an audit on stdout is refused by the verbs
// whose own output is on stdout (it would be mixed into run's timeline or
// --json stream) and accepted by serve, whose stdout is free.
func TestAuditStdoutBesideATimeline(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "noeta.yaml", string(base)+"observers:\n  audit: {stdout: true}\n")
	for _, json := range []bool{false, true} {
		args := []string{"run", example("01-allowed-call.yaml"), "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t)}
		if json {
			args = append(args, "--json")
		}
		code, out, errOut := runCmd(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "observers.audit.stdout: engine run prints its own output on stdout") {
			t.Errorf("run (json %v): exit %d\n%s\n%s", json, code, out, errOut)
		}
	}
}

// TestServeRunsConfiguredObserversOnACluster: the same as on the embedded
// default, on the 3-node test cluster (replicas 3): serve runs the config's
// audit and hooks over the records it commits; submit and approve are
// clients over NATS; the audit file verifies and holds the approval with its
// approver.
func TestServeRunsConfiguredObserversOnACluster(t *testing.T) {
	t.Parallel()
	cl, err := embedded.StartCluster(t.Context(), embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	d := newDeployment(t, cl.ClientURL(), "obscl", 3, 0)
	dir := t.TempDir()
	auditFile, hookOut := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "hook.out")
	cfg := observedConfig(t, auditFile, hookOut)
	nats := []string{"--nats", cl.ClientURL(), "--prefix", "obscl", "--replicas", "3"}
	p := startEngine(t, append([]string{"serve", "--config", cfg, "--workspace", workspace(t), "--http", "", "--log-format", "json"}, nats...)...)
	p.waitLog(t, "serving", 2*time.Minute)

	code, out, errOut := runCmd(t, append([]string{"submit", example("06-approval-granted.yaml"), "--config", cfg}, nats...)...)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	handleRE := regexp.MustCompile(`approval-call-1-0-[0-9a-hjkmnp-tv-z]{10}`)
	var handle string
	waitFor(t, 2*time.Minute, "the task to ask for approval", func() bool {
		_, out, _ := runCmd(t, append([]string{"inspect", id}, nats...)...)
		handle = handleRE.FindString(out)
		return handle != ""
	})
	code, out, errOut = runCmd(t, append([]string{"approve", id, handle, "--as", "alice"}, nats...)...)
	if code != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	waitFor(t, 2*time.Minute, "the task to end", func() bool {
		ds, err := d.st.Dispatch(t.Context(), id)
		return err == nil && ds.Status == eventlog.DispatchTerminal
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, p.stderr)
	}
	wantAudited(t, checkAudit(t, auditFile, id), "alice")
	wantHookRan(t, hookOut)
}

// freeAddr is a loopback address no one listens on (a listener's, closed).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeRunsConfiguredTelemetry: the observers: section's metrics (on a
// listener of its own), trace (OTLP/HTTP to a receiver) and fanout (SSE on
// serve's --http) run in serve. Before, the section knew only audit; the
// others could only run in an observer-worker.
func TestServeRunsConfiguredTelemetry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var exports int
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && len(b) > 0 {
			mu.Lock()
			exports++
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otlp.Close()
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, httpAddr := freeAddr(t), freeAddr(t)
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", string(base)+"http:\n  tokens:\n    - {name: alice, sha256: \""+sum+"\"}\n"+"observers:\n"+
		"  metrics: {listen: \""+metricsAddr+"\"}\n"+
		"  trace: {otlp_endpoint: \""+otlp.URL+"/v1/traces\", protocol: http, insecure: true}\n"+
		"  fanout: {}\n")
	data := t.TempDir()
	p := startEngine(t, "serve", "--config", cfg, "--data", data, "--workspace", workspace(t), "--http", httpAddr, "--log-format", "json")
	p.waitLog(t, "serving", time.Minute)
	code, out, errOut := runCmd(t, "submit", example("01-allowed-call.yaml"), "--config", cfg, "--data", data)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	get := func(url string) string {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			return ""
		}
		// The fanout's streams are for the http: section's principals.
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return string(b)
	}
	waitFor(t, time.Minute, "the task's end on the fanout stream", func() bool {
		return strings.Contains(get("http://"+httpAddr+"/tasks/"+id+"/events?follow=false"), "TaskCompleted")
	})
	waitFor(t, time.Minute, "the metrics observer's counters on observers.metrics.listen", func() bool {
		m := get("http://" + metricsAddr + "/metrics")
		return strings.Contains(m, `noeta_tasks_total{status="completed"} 1`) && strings.Contains(m, "noeta_engine_segments_total")
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, p.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if exports == 0 {
		t.Errorf("no span reached the OTLP receiver\n%s", p.stderr)
	}
}
