package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/taskview"
)

// withAgent adds keys to agent dev of config's YAML; top adds sections.
func withAgent(yaml, agent, top string) string {
	if agent != "" {
		yaml = strings.Replace(yaml, "    tools: [\"mcp__everything__*\"]\n", "    tools: [\"mcp__everything__*\"]\n"+agent, 1)
	}
	return yaml + top
}

// firstTask waits for the gateway's first session task.
func (r *rig) firstTask(t testing.TB) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ts, _ := r.h.Tasks(context.Background()); len(ts) == 1 {
			return ts[0].Task
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no session task")
	return ""
}

// count returns how many records of each type task's log holds.
func (r *rig) count(t testing.TB, task string) map[string]int {
	t.Helper()
	envs, err := r.h.Events(context.Background(), task, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range envs {
		n[e.Type]++
	}
	return n
}

type answer struct {
	res *sdk.CallToolResult
	err error
}

// TestGatewayQuorum: a call whose approval needs two distinct approvers
// waits while the client waits: one approval is counted and is not
// enough, the same person again adds nothing, a second person runs it.
func TestGatewayQuorum(t *testing.T) {
	yaml := withAgent(config(t, "1h"), "", `
approvals:
  rules:
    - name: two-for-logging
      when: 'tool.matches("toggle-simulated-logging")'
      quorum: 2
`)
	r := open(t, yaml, gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
		done <- answer{res, err}
	}()
	task := r.firstTask(t)
	req := r.waitFor(t, task, noeta.TypeApprovalRequested)
	p, _, err := req.Decode()
	if err != nil {
		t.Fatal(err)
	}
	ar := p.(*noeta.ApprovalRequested)
	if ar.Quorum != 2 {
		t.Fatalf("the request's quorum is %d, want 2", ar.Quorum)
	}
	if err := r.h.Approve(ctx, task, ar.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:alice"}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, task, noeta.TypeApprovalCounted)
	// The same person again, in another spelling: not a second approver.
	if err := r.h.Approve(ctx, task, ar.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "CLI:Alice"}); err == nil || !strings.Contains(err.Error(), "approved this request already") {
		t.Fatalf("the same approver twice: %v", err)
	}
	n := r.count(t, task)
	if n[noeta.TypeApprovalResolved] != 0 || n[noeta.TypeToolCallStarted] != 0 {
		t.Fatalf("one approver ran the call: %v", n)
	}
	select {
	case a := <-done:
		t.Fatalf("the call returned with one approval of two: %+v %v", a.res, a.err)
	default:
	}
	if err := r.h.Approve(ctx, task, ar.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:bob"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("the call approved by two: %+v %v", a.res, a.err)
	}
	n = r.count(t, task)
	if n[noeta.TypeApprovalResolved] != 1 || n[noeta.TypeToolCallStarted] != 1 {
		t.Fatalf("after the quorum: %v, want one ApprovalResolved and one ToolCallStarted", n)
	}
}

// TestGatewayBudget: the budget runs out mid-session; every call after it
// is an error result naming the budget guard, and the session stays
// usable (it answers, it ends).
func TestGatewayBudget(t *testing.T) {
	r := open(t, withAgent(config(t, "1h"), "    budget: {max_tool_calls: 2}\n", ""), gateway.Options{})
	cs, stop := r.connect(t)
	ctx := context.Background()
	for i := range 4 {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": fmt.Sprint("m", i)}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		switch {
		case i < 2 && (res.IsError || text(res) != fmt.Sprint("Echo: m", i)):
			t.Fatalf("call %d within the budget: %+v %q", i, res, text(res))
		case i >= 2 && (!res.IsError || !strings.Contains(text(res), "denied by budget") || !strings.Contains(text(res), "max_tool_calls=2")):
			t.Fatalf("call %d past the budget: %+v %q", i, res, text(res))
		}
	}
	task := r.sessionTask(t)
	stop()
	r.waitFor(t, task, noeta.TypeTaskCompleted)
	if n := r.count(t, task); n[noeta.TypeToolCallStarted] != 2 || n[noeta.TypeToolCallDenied] != 2 {
		t.Fatalf("log: %v, want two calls run and two denied", n)
	}
}

// TestGatewayRepetition: the repetition guard denies the third identical
// call in a row; another call goes through.
func TestGatewayRepetition(t *testing.T) {
	r := open(t, withAgent(config(t, "1h"), "    repetition: {threshold: 3, action: deny}\n", ""), gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()
	same := &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "again"}}
	for i := range 3 {
		res, err := cs.CallTool(ctx, same)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 && res.IsError {
			t.Fatalf("identical call %d: %q", i+1, text(res))
		}
		if i == 2 && (!res.IsError || !strings.Contains(text(res), "denied by repetition")) {
			t.Fatalf("the third identical call: %+v %q", res, text(res))
		}
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "other"}})
	if err != nil || res.IsError {
		t.Fatalf("another call after the repetition: %+v %v", res, err)
	}
}

// TestGatewayFlood: many calls at once on one session and across
// sessions. A session holds at most MaxQueued waiting: the others are
// refused with an error result saying so, never made. Every call
// accepted runs and is recorded exactly once, and its client gets its own
// result.
func TestGatewayFlood(t *testing.T) {
	const sessions, perSession, maxQueued = 3, 40, 4
	r := open(t, config(t, "1h"), gateway.Options{MaxQueued: maxQueued})
	ctx := context.Background()
	var (
		mu       sync.Mutex
		accepted = map[string]bool{} // message → answered with its own echo
		refused  int
	)
	var wg sync.WaitGroup
	var stops []func()
	for s := range sessions {
		cs, stop := r.connect(t)
		stops = append(stops, stop)
		for i := range perSession {
			msg := fmt.Sprintf("s%d-%d", s, i)
			wg.Go(func() {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": msg}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("%s: %v", msg, err)
				case res.IsError && strings.Contains(text(res), "already waiting their turn") && strings.Contains(text(res), "the call was not made"):
					refused++
				case res.IsError || text(res) != "Echo: "+msg:
					t.Errorf("%s: %+v %q", msg, res, text(res))
				default:
					accepted[msg] = true
				}
			})
		}
	}
	wg.Wait()
	tasks, err := r.h.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range stops {
		stop()
	}
	t.Logf("%d calls: %d run, %d refused", sessions*perSession, len(accepted), refused)
	if len(accepted)+refused != sessions*perSession || len(accepted) < sessions {
		t.Fatalf("%d run and %d refused of %d", len(accepted), refused, sessions*perSession)
	}
	if len(tasks) != sessions {
		t.Fatalf("%d tasks for %d sessions", len(tasks), sessions)
	}
	// Each accepted call is in the log once, started and finished; no
	// refused one is.
	recorded := map[string]int{}
	for _, ts := range tasks {
		r.waitFor(t, ts.Task, noeta.TypeTaskCompleted)
		envs, err := r.h.Events(ctx, ts.Task, 0)
		if err != nil {
			t.Fatal(err)
		}
		started := map[string]bool{}
		for _, e := range envs {
			p, _, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			switch p := p.(type) {
			case *noeta.ToolCallStarted:
				var a struct{ Message string }
				if err := json.Unmarshal(p.Args, &a); err != nil {
					t.Fatal(err)
				}
				recorded[a.Message]++
				started[p.CallID] = true
			case *noeta.ToolCallFinished:
				if !started[p.CallID] || !p.OK {
					t.Errorf("task %s: %s finished (ok %v) without its start", ts.Task, p.CallID, p.OK)
				}
				delete(started, p.CallID)
			}
		}
		if len(started) > 0 {
			t.Errorf("task %s: calls started and never finished: %v", ts.Task, started)
		}
	}
	for msg := range accepted {
		if recorded[msg] != 1 {
			t.Errorf("%s answered, recorded %d times", msg, recorded[msg])
		}
	}
	if len(recorded) != len(accepted) {
		t.Errorf("%d calls recorded, %d answered", len(recorded), len(accepted))
	}
}

// TestGatewayAuditAndEvents: a session's task is in the audit trail, whose
// chain verifies, and engine events shows every call of it.
func TestGatewayAuditAndEvents(t *testing.T) {
	trail := filepath.Join(t.TempDir(), "audit.jsonl")
	r := open(t, config(t, "1h")+"observers: {audit: {file: "+trail+"}}\n", gateway.Options{})
	cs, stop := r.connect(t)
	ctx := context.Background()
	calls := []struct {
		msg    string
		denied bool
	}{{"one", false}, {"two", false}, {"three", false}}
	for _, c := range calls {
		if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": c.msg}}); err != nil || res.IsError {
			t.Fatalf("%s: %+v %v", c.msg, res, err)
		}
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 5, "steps": 1}})
	if err != nil || !res.IsError {
		t.Fatalf("denied: %+v %v", res, err)
	}
	task := r.sessionTask(t)
	stop()
	r.waitFor(t, task, noeta.TypeTaskCompleted)
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}

	// engine events (its taskview, as the CLI prints it with --json).
	var out bytes.Buffer
	if err := taskview.Events(ctx, r.h, task, false, true, &out); err != nil {
		t.Fatal(err)
	}
	// A CloudEvent a line (docs/adr/0088).
	type shownEvent struct {
		Type     string `json:"type"`
		Sequence string `json:"sequence"`
	}
	var shown []shownEvent
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e shownEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("engine events --json: %v: %s", err, sc.Bytes())
		}
		shown = append(shown, e)
	}
	if len(shown) != len(envs) {
		t.Fatalf("engine events shows %d records, the log holds %d", len(shown), len(envs))
	}
	started, finished, denied := 0, 0, 0
	for i, e := range shown {
		typ := strings.TrimPrefix(e.Type, "noeta.")
		if e.Sequence != fmt.Sprint(envs[i].Seq) || typ != envs[i].Type {
			t.Fatalf("record %d: shown %s %s, logged %d %s", i, e.Sequence, e.Type, envs[i].Seq, envs[i].Type)
		}
		switch typ {
		case noeta.TypeToolCallStarted:
			started++
		case noeta.TypeToolCallFinished:
			finished++
		case noeta.TypeToolCallDenied:
			denied++
		}
	}
	if started != 3 || finished != 3 || denied != 1 {
		t.Fatalf("engine events: %d started, %d finished, %d denied; want 3, 3, 1", started, finished, denied)
	}
	var text bytes.Buffer
	if err := taskview.Events(ctx, r.h, task, false, false, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"client", "mcp__everything__echo c1", "guard=rules", "TaskCompleted"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("engine events does not show %q:\n%s", want, text.String())
		}
	}

	// The audit trail: every record of the task, chained.
	last := envs[len(envs)-1].Seq
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(trail)
		if bytes.Contains(b, []byte(`"seq":`+fmt.Sprint(last)+`,`)) && bytes.Contains(b, []byte(noeta.TypeTaskCompleted)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit trail never got seq %d of %s:\n%s", last, task, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := observers.VerifyAuditFile(trail)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Tasks != 1 || rep.Records < len(envs) {
		t.Fatalf("audit verify: %v (%d records, %d tasks), want intact with the task's %d records", rep, rep.Records, rep.Tasks, len(envs))
	}
}

// TestGatewayTurnBudget: max_iterations runs out mid-session (each call is
// a turn, and so is each park); every call after it comes back, as an
// error result, and the session's end ends the task.
func TestGatewayTurnBudget(t *testing.T) {
	r := open(t, withAgent(config(t, "1h"), "    budget: {max_iterations: 2}\n", ""), gateway.Options{})
	cs, stop := r.connect(t)
	ctx := context.Background()
	for i := range 4 {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": fmt.Sprint("m", i)}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i < 2 && (res.IsError || text(res) != fmt.Sprint("Echo: m", i)) {
			t.Fatalf("call %d within the budget: %+v %q", i, res, text(res))
		}
		// The task fails as the budget runs out: the calls after it say so.
		if i >= 2 && (!res.IsError || !strings.Contains(text(res), "max_iterations=2 exceeded") || !strings.Contains(text(res), "the call was not made")) {
			t.Fatalf("call %d past the budget: %+v %q", i, res, text(res))
		}
	}
	task := r.sessionTask(t)
	stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ds, err := r.h.Dispatch(ctx, task)
		if err == nil && ds.Status == eventlog.DispatchTerminal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not end: %+v %v", ds, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.count(t, task); n[noeta.TypeToolCallStarted] != 2 {
		t.Fatalf("log: %v, want two calls run", n)
	}
}
