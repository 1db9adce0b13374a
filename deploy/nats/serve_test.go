package nats_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// serveProc is an `engine serve` subprocess.
type serveProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	return startServeWrapped(t, nil, args...)
}

// startServeWrapped starts the serve under the argv prefix wrap (its
// network namespace).
func startServeWrapped(t *testing.T, wrap []string, args ...string) *serveProc {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), engineBin), args...)
	p := &serveProc{cmd: exec.Command(argv[0], argv[1:]...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	dieWithTest(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// ownedBy: serve's workers are named engine@<host>:<pid>/w<n>.
func (p *serveProc) ownedBy(worker string) bool {
	return strings.Contains(worker, ":"+strconv.Itoa(p.cmd.Process.Pid)+"/w")
}

// twoServesShare: two `engine serve` processes, connected to the three
// servers as the engine user, split 300 tasks; one is killed with SIGKILL
// once a third are done, and the other finishes every task, each with a
// dense log.
func twoServesShare(t *testing.T, urls string, e *engineSide) {
	const tasks = 300
	cfg := filepath.Join(t.TempDir(), "noeta.yaml")
	if err := os.WriteFile(cfg, []byte(governance), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--nats", urls, "--user", "engine", "--password", passwords["engine"],
		"--replicas", "3", "--config", cfg, "--queue", "serve", "--workers", "4", "--http", "", "--workspace", t.TempDir()}
	a := startServe(t, args...)
	b := startServe(t, args...)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ids := make([]string, 0, tasks)
	for range tasks {
		id, err := e.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "g", Script: json.RawMessage(scriptEcho), Queue: "serve"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	terminal := func() int {
		n := 0
		for _, id := range ids {
			if ds, err := e.disp.Inspect(ctx, id); err == nil && ds.Status == eventlog.DispatchTerminal {
				n++
			}
		}
		return n
	}
	for terminal() < tasks/3 {
		if ctx.Err() != nil {
			t.Fatalf("a third of the tasks did not end\nA: %s\nB: %s", a.out, b.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	killedAt := terminal()
	for terminal() < tasks {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d tasks ended after A was killed\nB: %s", terminal(), tasks, b.out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ranA, ranB := 0, 0
	for _, id := range ids {
		envs, err := e.log.Read(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		st, err := engine.Fold(envs) // refuses a gap in seq
		if err != nil || st.Status != noeta.StatusTerminal || string(st.Answer) != `"ok"` {
			t.Fatalf("task %s: %+v %v", id, st, err)
		}
		for _, env := range envs {
			if env.Type != noeta.TypeLeaseGranted {
				continue
			}
			var lg noeta.LeaseGranted
			_ = json.Unmarshal(env.Payload, &lg)
			switch {
			case a.ownedBy(lg.Worker):
				ranA++
			case b.ownedBy(lg.Worker):
				ranB++
			}
		}
	}
	if ranA == 0 || ranB == 0 {
		t.Errorf("segments run: A %d, B %d; both should have run some", ranA, ranB)
	}
	t.Logf("300 tasks: A ran %d segments before it was killed at %d ended tasks, B %d; every log dense and complete", ranA, killedAt, ranB)

	// The operator reads them back with the engine command, under its
	// read-only permissions (TestCluster fails on any violation).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", ids[0]}, "status    terminal"},
		{[]string{"events", ids[0]}, "TaskCompleted"},
		{[]string{"tasks"}, ids[len(ids)-1]},
	} {
		args := append(c.args, "--nats", urls, "--user", "operator", "--password", passwords["operator"])
		out, err := exec.Command(engineBin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("engine %s as operator: %v\n%s", c.args[0], err, out)
		}
	}

	// An approver answers a waiting task with the engine command, on its
	// approval subject (--as defaults to its user); B runs it on. Without
	// an approver name the command says to pass --as.
	waiting, err := e.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "ask", Script: json.RawMessage(scriptHuman), Queue: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ds, err := e.disp.Inspect(ctx, waiting)
		if err == nil && ds.Status == eventlog.DispatchSuspended {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the question was not asked: %+v %v\nB: %s", ds, err, b.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The approver and the operator list what waits, from the waiting
	// index the serve processes keep, with read-only rights on it.
	for _, user := range []string{"alice", "operator"} {
		out, err := exec.Command(engineBin, "approvals", "--json", "--nats", urls, "--user", user, "--password", passwords[user]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), waiting) {
			t.Errorf("engine approvals as %s: %v\n%s", user, err, out)
		}
	}
	out, err := exec.Command(engineBin, "approve", waiting, "question-1", "--nats", urls).CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "pass --as") {
		t.Errorf("engine approve --nats with no user and no --as: %v\n%s", err, out)
	}
	out, err = exec.Command(engineBin, "approve", waiting, "question-1",
		"--nats", urls, "--user", "alice", "--password", passwords["alice"]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alice's approval subject") {
		t.Fatalf("engine approve as alice: %v\n%s", err, out)
	}
	for {
		st, _, err := engine.FoldTask(ctx, e.log, e.log, waiting)
		if err == nil && st.Status == noeta.StatusTerminal {
			if st.LastWake == nil || st.LastWake.Approver != "alice" || st.LastWake.Auth != noeta.AuthNATS {
				t.Errorf("woken by %+v", st.LastWake)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the answered task did not finish: %+v %v\nB: %s", st, err, b.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
