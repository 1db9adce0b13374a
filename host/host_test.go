package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog/memlog"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// exampleConfig is examples/noeta.yaml.
func exampleConfig(t testing.TB) *config.File {
	t.Helper()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// task parses a task file.
func task(t testing.TB, body string) Submission {
	t.Helper()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// openMem opens a host of cfg on a memlog backend of its own, with the
// built-in tools (unconfined: confinement is hostconfig's, tested there)
// and what o adds.
func openMem(t testing.TB, cfg *config.File, o Options) *Host {
	t.Helper()
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	o.Governance, o.Approvals = cfg.Governance, cfg.Approvals
	if o.Tools == nil {
		builtins, err := tools.Builtins(tools.BuiltinConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if o.Tools, err = tools.NewRegistry(builtins...); err != nil {
			t.Fatal(err)
		}
	}
	if o.Workspace == "" {
		o.Workspace = t.TempDir()
	}
	h, err := Open(t.Context(), b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func openRunner(t *testing.T) *Host {
	t.Helper()
	return openMem(t, exampleConfig(t), Options{Workers: 2})
}

// TestWaitForATree: Wait follows a fan-out to its end (the subtasks' results
// handed to the parent by the host's ChildLifecycle), and says when a tree
// waits for a human, with the request; an answer through Approve lets it
// finish.
func TestWaitForATree(t *testing.T) {
	t.Parallel()
	h := openRunner(t)
	ctx := t.Context()
	body, err := os.ReadFile("../examples/08-fan-out.yaml")
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(ctx, task(t, string(body)))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != RestCompleted || string(rest.Answer) != `"1, 2 and 3"` {
		t.Fatalf("fan-out: %+v, %v", rest, err)
	}

	id, err = h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err = h.Wait(ctx, id)
	if err != nil || rest.Status != RestWaiting || len(rest.Waiting) != 1 || rest.Waiting[0].Approval == nil || rest.Waiting[0].Approval.Tool != "shell" {
		t.Fatalf("approval: %+v, %v", rest, err)
	}
	w := rest.Waiting[0]
	if err := h.Approve(ctx, id, w.Handle, Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "looks safe"}); err != nil {
		t.Fatal(err)
	}
	// A second answer to the same request is refused and kept nowhere.
	if err := h.Deny(ctx, id, w.Handle, "bob", "too late"); !errors.Is(err, eventlog.ErrAlreadyAnswered) && !errors.Is(err, eventlog.ErrNotWaiting) {
		t.Errorf("second answer: %v, want refused", err)
	}
	rest, err = h.Wait(ctx, id)
	if err != nil || rest.Status != RestCompleted {
		t.Fatalf("after the approval: %+v, %v", rest, err)
	}
	st, err := h.Inspect(ctx, id)
	if err != nil || len(st.Governance.Approvals) != 1 || st.Governance.Approvals[0].Approver != "alice" {
		t.Fatalf("approvals: %+v, %v", st, err)
	}
}

// TestCancelTree: Cancel with tree ends a parent waiting on its subtasks and
// every subtask; without tree, only the task named.
func TestCancelTree(t *testing.T) {
	t.Parallel()
	h := openRunner(t)
	ctx := t.Context()
	sub := "{agent: helper, goal: wait, script: [{wait_timer: {seconds: 3600}}, {finish: {answer: late}}]}"
	id, err := h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - spawn: ["+sub+", "+sub+"]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	deadline := time.Now().Add(time.Minute)
	for len(children) < 2 || !allSuspended(t, h, append(children, id)) {
		if time.Now().After(deadline) {
			t.Fatalf("the tree did not settle: %v", children)
		}
		time.Sleep(20 * time.Millisecond)
		children = children[:0]
		envs, _ := h.Events(ctx, id, 0)
		for _, env := range envs {
			if p, _, err := env.Decode(); err == nil {
				if sp, ok := p.(*noeta.SubtaskSpawned); ok {
					children = append(children, sp.SubtaskID)
				}
			}
		}
	}
	done, err := h.Cancel(ctx, id, "no longer needed", true)
	if err != nil || len(done) != 3 {
		t.Fatalf("cancel tree: %v, %v", done, err)
	}
	for _, task := range append(children, id) {
		st, err := h.Inspect(ctx, task)
		if err != nil || st.Status != noeta.StatusTerminal {
			t.Errorf("task %s: %+v, %v", task, st, err)
		}
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != RestCancelled || rest.Detail != "no longer needed" {
		t.Errorf("rest: %+v, %v", rest, err)
	}
}

func allSuspended(t *testing.T, h *Host, ids []string) bool {
	for _, id := range ids {
		ds, err := h.Dispatch(t.Context(), id)
		if err != nil || ds.Status != eventlog.DispatchSuspended {
			return false
		}
	}
	return true
}

// TestBadOptions: options that cannot work are refused before anything
// starts, naming the option.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	gov := exampleConfig(t).Governance
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Workers: 1, Tools: reg}, "needs a governance config"},
		{Options{Workers: 1, Governance: gov}, "needs its tools"},
		{Options{Workers: -1, Governance: gov}, "workers is -1"},
		{Options{Workers: MaxWorkers + 1, Governance: gov}, "workers is"},
		{Options{Queue: "a b"}, "queue"},
	} {
		_, err := Open(t.Context(), b, c.o)
		if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrBadOptions with %q", c.o, err, c.want)
		}
	}
	if _, err := Open(t.Context(), nil, Options{}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("no backend: %v", err)
	}
}

// TestCloseIsQuick: Close after a tree ran returns within seconds (the
// observers hand on what is queued; the server flushes its store). Bound
// only against a hang.
func TestCloseIsQuick(t *testing.T) {
	t.Parallel()
	h := openMem(t, exampleConfig(t), Options{Workers: 4})
	body, err := os.ReadFile("../examples/08-fan-out.yaml")
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(t.Context(), task(t, string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(t.Context(), id); err != nil || rest.Status != RestCompleted {
		t.Fatalf("%+v %v", rest, err)
	}
	start := time.Now()
	h.Close()
	if took := time.Since(start); took > time.Minute {
		t.Errorf("Close took %v", took)
	}
	// The backend is the caller's: closed after the host, nothing answers.
	_ = h.Backend().(*memlog.Backend).Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rest, err := h.Wait(ctx, id); err == nil && rest.Status == RestCompleted {
		t.Errorf("Wait after Close: %+v", rest)
	}
}

// TestAwaitedChildren: Wait's recovery reads the logs of the subtasks the
// suspended tasks wait on, each once, and of nothing else.
func TestAwaitedChildren(t *testing.T) {
	one := noeta.SubtaskCompletedWake("a")
	group := noeta.GroupCompletedWake("g", []string{"b", "a", "c"})
	timer := noeta.TimerWake(time.Now())
	for _, tc := range []struct {
		name   string
		states map[string]eventlog.DispatchState
		want   string
	}{
		{"none", nil, "[]"},
		{"one and a group", map[string]eventlog.DispatchState{
			"p": {Status: eventlog.DispatchSuspended, WakeOn: &one},
			"q": {Status: eventlog.DispatchSuspended, WakeOn: &group},
		}, "[a b c]"},
		{"not suspended or not on subtasks", map[string]eventlog.DispatchState{
			"p": {Status: eventlog.DispatchLeased, WakeOn: &one},
			"q": {Status: eventlog.DispatchSuspended, WakeOn: &timer},
			"r": {Status: eventlog.DispatchSuspended},
		}, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(awaitedChildren(tc.states)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestReadOnlyOption: a host opened read-only on a backend that may write
// reads, and submits, cancels and answers in process nothing.
func TestReadOnlyOption(t *testing.T) {
	t.Parallel()
	cfg := exampleConfig(t)
	h := openMem(t, cfg, Options{ReadOnly: true})
	if !h.ReadOnly() {
		t.Fatal("not read-only")
	}
	sub := task(t, "agent: helper\ngoal: g\nscript: [{finish: {answer: ok}}]\n")
	if _, err := h.Submit(t.Context(), sub); !errors.Is(err, ErrReadOnly) {
		t.Errorf("submit: %v", err)
	}
	if _, err := h.Cancel(t.Context(), "01M8YE29RAYMXGK0EH11F3KEAG", "r", false); !errors.Is(err, ErrReadOnly) {
		t.Errorf("cancel: %v", err)
	}
	if err := h.Approve(t.Context(), "01M8YE29RAYMXGK0EH11F3KEAG", "approval-x", Answer{Decision: "approve", Approver: "ann"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("approve: %v", err)
	}
	if _, err := h.Tasks(t.Context()); err != nil {
		t.Errorf("tasks: %v", err)
	}
	if _, err := Open(t.Context(), h.Backend(), Options{ReadOnly: true, Workers: 1, Governance: cfg.Governance, Tools: h.Tools()}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("read-only with workers: %v", err)
	}
}
