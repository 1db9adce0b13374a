package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// exampleConfig is examples/noeta.yaml.
func exampleConfig(t *testing.T) *config.File {
	t.Helper()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// task parses a task file.
func task(t *testing.T, body string) Submission {
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

func openRunner(t *testing.T, data string) *Host {
	t.Helper()
	h, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Workers: 2, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestWaitForATree: Wait follows a fan-out to its end (the subtasks' results
// handed to the parent by the host's ChildLifecycle), and says when a tree
// waits for a human, with the request; an answer through Approve lets it
// finish.
func TestWaitForATree(t *testing.T) {
	t.Parallel()
	h := openRunner(t, t.TempDir())
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
	h := openRunner(t, t.TempDir())
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

// TestDataDirOwnership: a second host that runs tasks is refused a data
// directory another holds, naming the holder; a client host attaches to the
// holder's server, submits there, and the holder runs the task.
func TestDataDirOwnership(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	runner := openRunner(t, data)
	_, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Workers: 1, Name: "second"})
	var busy *BusyError
	if !errors.As(err, &busy) || !errors.Is(err, ErrBusy) || busy.Holder.Verb != "test" || busy.Holder.PID != os.Getpid() {
		t.Fatalf("second runner: %v", err)
	}
	client, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if holder, ok := client.Attached(); !ok || holder.Verb != "test" {
		t.Fatalf("client: attached %v %+v", ok, holder)
	}
	id, err := client.Submit(t.Context(), task(t, "agent: helper\ngoal: g\nscript: [{tool_calls: [{tool: echo, args: {text: hi}}]}, {finish: {answer: ok}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := client.Wait(t.Context(), id)
	if err != nil || rest.Status != RestCompleted {
		t.Fatalf("client wait: %+v, %v", rest, err)
	}
	if runner.Segments() == 0 {
		t.Errorf("the holder ran no segment")
	}
	// A client runs nothing: no pool of its own, attached or not.
	if _, err := client.StartPool(t.Context(), PoolOptions{Workers: 1}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("a client started a pool: %v", err)
	}
	// An answer must say what it decides: none is never taken for an
	// approval.
	if err := client.Approve(t.Context(), id, "approval-call-1-0-0000000000", Answer{Approver: "alice"}); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("an answer without a decision: %v", err)
	}
}

// TestBadOptions: options that cannot work are refused before anything
// starts, naming the option.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	cfg := exampleConfig(t)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Workers: 1}, "needs a governance config"},
		{Options{Workers: -1, Config: cfg}, "workers is -1"},
		{Options{Workers: MaxWorkers + 1, Config: cfg}, "workers is"},
		{Options{ReadOnly: true, Workers: 1, Config: cfg}, "read-only host runs no workers"},
		{Options{Replicas: 3, Config: cfg}, "needs a cluster"},
		{Options{NATS: Connection{URL: "nats://127.0.0.1:1"}, DataDir: "x"}, "data directory is for the embedded server"},
		{Options{Prefix: "a.b"}, "prefix"},
		{Options{LeaseTTL: 1500 * time.Millisecond}, "whole seconds"},
		{Options{Queue: "a b"}, "queue"},
		{Options{NATS: Connection{URL: "nats://127.0.0.1:1", Password: "x"}}, "--password needs --user"},
	} {
		_, err := Open(t.Context(), c.o)
		if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrBadOptions with %q", c.o, err, c.want)
		}
	}
}

// TestCloseIsQuick: Close after a tree ran returns within seconds (the
// observers hand on what is queued; the server flushes its store). Bound
// only against a hang.
func TestCloseIsQuick(t *testing.T) {
	t.Parallel()
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: exampleConfig(t), Workers: 4, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rest, err := h.Wait(ctx, id); err == nil && rest.Status == RestCompleted {
		t.Errorf("Wait after Close: %+v", rest)
	}
}

// TestConfigNamesUnknownTool: a config whose agent names a tool the host
// does not have is refused at Open, naming the field; with that tool among
// Options.Tools it opens.
func TestConfigNamesUnknownTool(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  a: {tools: [echo, frobnicate]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "agents.a.tools[1]") || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("open: %v, want ErrBadConfig naming agents.a.tools[1]", err)
	}
	frob := tools.Define(tools.Def{Name: "frobnicate", Risk: tools.RiskLow, Run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{OK: true, Output: json.RawMessage(`"ok"`)}, nil
	}})
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Tools: []tools.Tool{frob}})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// TestStartRedoesOwedHandoffs: subtasks that ended while no process handed
// their results over (here a host that leaves it to an observer-worker that
// never ran) reach their parent once a host with the child-lifecycle
// observer starts, without Wait's own recovery: its dispatcher's first pass
// redoes the handoffs of the parents waiting on ended subtasks.
// Reproduction: the start-up recovery listed every task and read its log,
// and at a million tasks ran out of its deadline on every start.
func TestStartRedoesOwedHandoffs(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx := t.Context()
	body, err := os.ReadFile("../examples/08-fan-out.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first, err := Open(ctx, Options{DataDir: data, Config: exampleConfig(t), Workers: 2, Workspace: t.TempDir(), Name: "first", Skip: Skip{ChildLifecycle: true}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := first.Submit(ctx, task(t, string(body)))
	if err != nil {
		first.Close()
		t.Fatal(err)
	}
	// The parent suspends on its three subtasks, which all end.
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			first.Close()
			t.Fatal("the fan-out did not reach its subtasks' end")
		}
		time.Sleep(20 * time.Millisecond)
		var kids []string
		envs, _ := first.Events(ctx, id, 0)
		for _, env := range envs {
			if p, _, err := env.Decode(); err == nil {
				if sp, ok := p.(*noeta.SubtaskSpawned); ok {
					kids = append(kids, sp.SubtaskID)
				}
			}
		}
		if len(kids) == 3 && allSuspended(t, first, []string{id}) && allEnded(t, first, kids) {
			break
		}
	}
	first.Close()

	second := openRunner(t, data)
	deadline = time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the parent never received its subtasks' results")
		}
		if ds, err := second.Dispatch(ctx, id); err == nil && ds.Status == eventlog.DispatchTerminal {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rest, err := second.Wait(ctx, id)
	if err != nil || rest.Status != RestCompleted || string(rest.Answer) != `"1, 2 and 3"` {
		t.Fatalf("fan-out: %+v, %v", rest, err)
	}
}

func allEnded(t *testing.T, h *Host, ids []string) bool {
	for _, id := range ids {
		ds, err := h.Dispatch(t.Context(), id)
		if err != nil || ds.Status != eventlog.DispatchTerminal {
			return false
		}
	}
	return true
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
