package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/internal/natsconn"
)

// serveConfig is the governance config of the serve tests.
const serveConfig = `
agents:
  worker:
    tools: [echo, sleep]
    permission_mode: bypassPermissions
    budget: {max_iterations: 50, max_tool_calls: 50}
`

// deployment is a NATS server (or cluster) with one prefix, and the test's
// own stack on it, from which tasks are submitted and inspected.
type deployment struct {
	conn   connOpts
	st     *hostconfig.Host
	config string // the governance config file
	ws     string // the workspace
}

func newDeployment(t *testing.T, url, prefix string, replicas int, ttl time.Duration) *deployment {
	t.Helper()
	conn := connOpts{nc: natsconn.Options{URL: url}, prefix: prefix, replicas: replicas, leaseTTL: ttl}
	tw := &testWriter{t: t}
	t.Cleanup(func() { // after the stack's Close, registered below
		tw.mu.Lock()
		tw.done = true
		tw.mu.Unlock()
	})
	logger := slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The first process on a fresh cluster creates the streams and buckets;
	// while the cluster settles, a creation may time out: try again.
	cfg, err := govfile.Parse("serve.yaml", []byte(serveConfig))
	if err != nil {
		t.Fatal(err)
	}
	var st *hostconfig.Host
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if st, err = hostconfig.Open(t.Context(), hostconfig.Options{
			NATS: conn.nc, Prefix: prefix, Replicas: replicas, LeaseTTL: ttl, Name: "test", Logger: logger,
			Config: cfg,
		}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		t.Logf("open the deployment's stack: %v; trying again", err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(st.Close)
	return &deployment{conn: conn, st: st, config: writeFile(t, "noeta.yaml", serveConfig), ws: workspace(t)}
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// serveArgs are the arguments of a serve process on the deployment.
func (d *deployment) serveArgs(extra ...string) []string {
	args := []string{"serve", "--nats", d.conn.nc.URL, "--prefix", d.conn.prefix,
		"--replicas", strconv.Itoa(d.conn.replicas), "--config", d.config, "--workspace", d.ws,
		"--log-format", "json", "--http", ""}
	if d.conn.leaseTTL > 0 {
		args = append(args, "--lease-ttl", d.conn.leaseTTL.String())
	}
	return append(args, extra...)
}

// submit submits n tasks of script and returns their ids.
func (d *deployment) submit(t *testing.T, n int, script string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := d.st.Submit(t.Context(), host.Submission{Agent: "worker", Goal: fmt.Sprintf("task %d", i), Script: json.RawMessage(script)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// rows returns the dispatcher row of each task.
func (d *deployment) rows(t *testing.T, ids []string) map[string]eventlog.DispatchState {
	t.Helper()
	out := make(map[string]eventlog.DispatchState, len(ids))
	for _, id := range ids {
		ds, err := d.st.Dispatch(t.Context(), id)
		if err != nil {
			t.Fatalf("inspect %s: %v", id, err)
		}
		out[id] = ds
	}
	return out
}

func countStatus(rows map[string]eventlog.DispatchState, s eventlog.DispatchStatus) int {
	n := 0
	for _, ds := range rows {
		if ds.Status == s {
			n++
		}
	}
	return n
}

// waitFor polls cond every 50ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkLog reads a task's log and checks it: every seq 1..n, a fold that
// succeeds, a terminal status. It returns the workers of its LeaseGranted
// records, in order.
func checkLog(t *testing.T, d *deployment, id string) (workers []string, st *engine.State) {
	t.Helper()
	envs, err := d.st.Events(t.Context(), id, 0)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	for i, env := range envs {
		if env.Seq != uint64(i+1) {
			t.Fatalf("task %s: record %d has seq %d: the log is not dense", id, i+1, env.Seq)
		}
		if env.Type == noeta.TypeLeaseGranted {
			p, _, err := env.Decode()
			if err != nil {
				t.Fatal(err)
			}
			workers = append(workers, p.(*noeta.LeaseGranted).Worker)
		}
	}
	st, err = engine.Fold(envs)
	if err != nil {
		t.Fatalf("fold %s: %v", id, err)
	}
	return workers, st
}

// proc is a running engine subprocess.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
	exited time.Time
}

func startEngine(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(engineBin, args...)
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		p.exited = time.Now()
		p.done <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		if t.Failed() {
			t.Logf("engine %d stderr:\n%s", cmd.Process.Pid, p.stderr)
		}
	})
	return p
}

// waitLog waits for a log line with msg.
func (p *proc) waitLog(t *testing.T, msg string, within time.Duration) {
	t.Helper()
	want := `"msg":"` + msg + `"`
	deadline := time.Now().Add(within)
	for !strings.Contains(p.stderr.String(), want) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("engine %d exited (%v) before logging %q:\n%s", p.cmd.Process.Pid, err, msg, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine %d did not log %q within %v:\n%s", p.cmd.Process.Pid, msg, within, p.stderr)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("engine %d did not exit within %v:\n%s", p.cmd.Process.Pid, within, p.stderr)
	}
	return -1
}

// ownedBy reports whether a worker name is one of the process's: workers are
// named engine@<host>:<pid>/w<n>.
func (p *proc) ownedBy(worker string) bool {
	return strings.Contains(worker, ":"+strconv.Itoa(p.cmd.Process.Pid)+"/w")
}
