package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/tools"
)

// pathsConfig has an agent that may spawn helpers and a helper that may
// not, for the spawn paths.
const pathsConfig = `
agents:
  boss:
    tools: [echo]
    budget: {max_spawned_subtasks: 20}
    permissions: {allowed_subtask_agents: [helper]}
  helper:
    tools: [echo]
`

// gate is a user guard that asks for approval of one action point.
func gate(point string) guards.Guard {
	return guards.Func("gate", 150, func(_ context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
		if noeta.ActionPoint(a) == point {
			return noeta.RequireApproval("a human signs off on every " + point), nil
		}
		return noeta.Allow(), nil
	})
}

func withGuards(gs ...guards.Guard) func(*engine.Config) {
	return func(c *engine.Config) { c.UserGuards = gs }
}

func TestSpawnApproval(t *testing.T) {
	for _, d := range []noeta.ApprovalDecision{noeta.ApprovalApprove, noeta.ApprovalDeny} {
		t.Run(string(d), func(t *testing.T) {
			h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig, withGuards(gate("spawn_subtask")))
			h.start(2)
			id := h.submit(`
agent: boss
goal: delegate
script:
  - spawn: [{agent: helper, goal: "say hi", script: [{finish: {answer: hi}}]}]
  - finish: {answer: done}
`)
			approve(t, h, id, "approval-spawn-1", d, "")
			st := h.waitStatus(id, noeta.StatusTerminal)
			if d == noeta.ApprovalApprove {
				envs := wantLog(t, h, id,
					e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
					e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
					e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"), e("SubtaskSpawned"), e("TaskSnapshot"), e("TaskSuspended"),
					e("LeaseGranted"), e("TaskWoken"), e("SubtaskResultRecorded"),
					e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
				req := payload[noeta.ApprovalRequested](t, envs, noeta.TypeApprovalRequested)
				if req.Guard != "gate" || req.Agent != "helper" || !strings.Contains(string(req.Args), `"goal":"say hi"`) {
					t.Errorf("request %+v args %s", req, req.Args)
				}
				if len(st.Governance.SubtaskResults) != 1 || string(st.Governance.SubtaskResults[0].Result) != `"hi"` {
					t.Errorf("results %+v", st.Governance.SubtaskResults)
				}
				return
			}
			wantLog(t, h, id,
				e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
				e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
				e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"),
				e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
			if st.Governance.SpawnedSubtasks != 0 || len(st.Governance.Denials) != 1 {
				t.Errorf("governance %+v", st.Governance)
			}
		})
	}
}

func TestFinishApproval(t *testing.T) {
	for _, d := range []noeta.ApprovalDecision{noeta.ApprovalApprove, noeta.ApprovalDeny} {
		t.Run(string(d), func(t *testing.T) {
			h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig, withGuards(gate("finish")))
			h.start(1)
			id := h.submit(`
agent: boss
goal: finish when allowed
script:
  - finish: {answer: {"n": 42}}
`)
			approve(t, h, id, "approval-finish-1", d, "checked")
			st := h.waitStatus(id, noeta.StatusTerminal)
			if d == noeta.ApprovalApprove {
				wantLog(t, h, id,
					e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
					e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
					e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"), e("TaskSnapshot"), e("TaskCompleted"))
				if string(st.Answer) != `{"n":42}` {
					t.Errorf("answer %s", st.Answer)
				}
				return
			}
			// Refused: the policy decides again, and the script is spent.
			wantLog(t, h, id,
				e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
				e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
				e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"),
				e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskFailed"))
			if st.Reason != "script exhausted at turn 2" {
				t.Errorf("reason %q", st.Reason)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	deny := func(point string) guards.Guard {
		return guards.Func("freeze", 150, func(_ context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
			if noeta.ActionPoint(a) == point {
				return noeta.Deny("change freeze"), nil
			}
			return noeta.Allow(), nil
		})
	}
	var fan []string
	for range 17 {
		fan = append(fan, `{agent: helper, goal: g, script: [{finish: {answer: 1}}]}`)
	}
	cases := []struct {
		name, agent, script string
		guard               guards.Guard
		wantDenied          string // the refusal record
		wantGuard, wantErr  string
	}{
		{"finish denied", "boss", `[{finish: {answer: x}}]`, deny("finish"), "FinishDenied", "freeze", "finish denied: change freeze"},
		{"spawn of an agent not allowed", "boss", `[{spawn: [{agent: boss, goal: g}]}]`, nil, "SubtaskDenied", "permission", "subtask denied: "},
		{"spawn denied by a user guard", "boss", `[{spawn: [{agent: helper, goal: g}]}]`, deny("spawn_subtask"), "SubtaskDenied", "freeze", "subtask denied: change freeze"},
		{"fan-out over the cap", "boss", "[{spawn: [" + strings.Join(fan, ", ") + "]}]", nil, "SubtaskDenied", "engine", "subtask denied: fanout_batch_size:17>16"},
		{"fan-out asking approval", "boss", `[{spawn: [{agent: helper, goal: a}, {agent: helper, goal: b}]}]`, gate("spawn_subtask"), "SubtaskDenied", "gate", "subtask denied: approval_unsupported_in_fanout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var edit []func(*engine.Config)
			if c.guard != nil {
				edit = append(edit, withGuards(c.guard))
			}
			h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig, edit...)
			h.start(1)
			id := h.submit("agent: " + c.agent + "\ngoal: g\nscript: " + c.script + "\n")
			st := h.waitStatus(id, noeta.StatusTerminal)
			wantLog(t, h, id, e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
				e(c.wantDenied), e("TaskSnapshot"), e("TaskFailed"))
			if st.Guard != c.wantGuard || !strings.HasPrefix(st.Reason, c.wantErr) {
				t.Errorf("failed by %q: %q; want %q: %q…", st.Guard, st.Reason, c.wantGuard, c.wantErr)
			}
			if st.Governance.SpawnedSubtasks != 0 || len(st.Governance.Denials) != 1 || st.Governance.Denials[0].Guard != c.wantGuard {
				t.Errorf("governance %+v", st.Governance)
			}
		})
	}
}

func TestWaits(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig)
	h.start(2)
	id := h.submit(`
agent: boss
goal: wait for things
script:
  - yield_for_human: {question: "which branch?"}
  - wait_external: {event_kind: deploy-done}
  - wait_timer: {seconds: 0.05}
  - state_patch: {branch: main, nested: {a: 1}}
  - state_patch: {nested: {a: null, b: 2}}
  - finish: {answer: waited}
`)
	st := h.waitStatus(id, noeta.StatusSuspended)
	if st.WakeOn.Handle != "question-1" || st.Reason != "waiting_human: which branch?" {
		t.Fatalf("suspended %q on %+v", st.Reason, st.WakeOn)
	}
	h.waitReleased(id, eventlog.DispatchSuspended)
	ans := noeta.HumanResponseWake("question-1")
	ans.Text = "main"
	if _, err := h.b.disp.Wake(context.Background(), id, ans); err != nil {
		t.Fatal(err)
	}
	h.waitFor(id, "the external wait", func(s *engine.State) bool { return s.WakeOn != nil && s.WakeOn.Kind == noeta.WakeExternalEvent })
	h.waitReleased(id, eventlog.DispatchSuspended)
	ext := noeta.ExternalWake("deploy-done")
	ext.Data = json.RawMessage(`{"ok":true}`)
	if _, err := h.b.disp.Wake(context.Background(), id, ext); err != nil {
		t.Fatal(err)
	}
	st = h.waitStatus(id, noeta.StatusTerminal)
	wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskSuspended"),
		e("LeaseGranted"), e("TaskWoken"), e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskSuspended"),
		e("LeaseGranted"), e("TaskWoken"), e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskSuspended"),
		e("LeaseGranted"), e("TaskWoken"), e("TurnStarted"), e("PolicyDecided"), e("TaskStatePatched"),
		e("TurnStarted"), e("PolicyDecided"), e("TaskStatePatched"),
		e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
	if string(st.Data) != `{"branch":"main","nested":{"b":2}}` {
		t.Errorf("data %s", st.Data)
	}
	if st.LastWake == nil || st.LastWake.Kind != noeta.WakeTimerFired {
		t.Errorf("last wake %+v", st.LastWake)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig)
	h.start(1)
	id := h.submit(`
agent: boss
goal: wait forever
script:
  - wait_external: {event_kind: never}
`)
	h.waitStatus(id, noeta.StatusSuspended)
	h.waitReleased(id, eventlog.DispatchSuspended)
	ok, err := h.eng.Cancel(context.Background(), id, "operator stop")
	if err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	st := h.waitStatus(id, noeta.StatusTerminal)
	wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskSuspended"),
		e("LeaseGranted"), e("TaskSnapshot"), e("TaskCancelled"))
	if st.Reason != "operator stop" || len(st.Governance.Denials) != 1 {
		t.Errorf("state %+v", st)
	}
	h.waitReleased(id, eventlog.DispatchTerminal)
	if ok, err := h.eng.Cancel(context.Background(), id, "again"); ok || err != nil {
		t.Errorf("second Cancel: %v %v", ok, err)
	}
}

// TestCancelRunning cancels a task in the middle of a long tool call: the
// running segment stops at its next cancellation point and the task ends
// cancelled, with the interrupted call recorded as such.
func TestCancelRunning(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), `
agents:
  sleeper: {tools: [sleep, echo]}
`)
	h.start(1)
	id := h.submit(`
agent: sleeper
goal: sleep
script:
  - tool_calls: [{tool: sleep, args: {seconds: 30}}, {tool: echo}]
  - finish: {answer: never}
`)
	h.waitFor(id, "the sleep to start", func(s *engine.State) bool { return s.Turn.Calls["call-1-0"] == engine.CallStarted })
	if ok, err := h.eng.Cancel(context.Background(), id, "too slow"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	st := h.waitStatus(id, noeta.StatusTerminal)
	envs := wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallStarted"),
		e("LeaseGranted"), e("TaskSnapshot"), e("TaskCancelled"))
	if st.Reason != "too slow" || envs[len(envs)-1].LeaseGen != 2 {
		t.Errorf("state %+v", st)
	}
}

// TestPark: a turn found unfinished more often than AbandonCap in a row
// parks the task for a human; the human's go-ahead resumes the turn. Each
// call of the turn kills the worker running it, as a poison call would.
func TestPark(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	h, id, setKill := crashingBoss(t, b, nil, nil)
	ctx := context.Background()
	runUntilParked(t, h, b, id, func(int) {}, setKill)
	envs := wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), tl("ToolCallFinished"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), tl("ToolCallFinished"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), e("TaskSnapshot"), e("TaskSuspended"))
	var actions []string
	for _, env := range envs {
		if env.Type == noeta.TypeStepAttemptAbandoned {
			var p noeta.StepAttemptAbandoned
			_ = json.Unmarshal(env.Payload, &p)
			actions = append(actions, string(p.Action))
			if p.BaselineSeq != 3 {
				t.Errorf("baseline_seq %d, want 3 (the TurnStarted)", p.BaselineSeq)
			}
		}
	}
	if strings.Join(actions, ",") != "redrive,redrive,park" {
		t.Errorf("seals %v", actions)
	}
	st, _ := h.eng.Inspect(ctx, id)
	if st.WakeOn.Handle != engine.ParkHandle(1) || !strings.HasPrefix(st.Reason, engine.ReasonParked+":") {
		t.Fatalf("parked %q on %+v", st.Reason, st.WakeOn)
	}
	if err := h.eng.Approve(ctx, id, engine.ParkHandle(1), noeta.ApprovalApprove, "oncall", "go on", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	h.start(1)
	st = h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"survived"` || st.Governance.ToolCalls != 3 {
		t.Errorf("ended %+v\n%s", st, h.dump(id))
	}
	if n := len(h.log(id)); n != len(envs)+7 {
		t.Errorf("after the resume:\n%s", h.dump(id))
	}
}

// putFailing fails the content store's next fails puts, as a store
// between leader elections does.
type putFailing struct {
	eventlog.ContentStore
	fails *atomic.Int64
}

func (c putFailing) Put(ctx context.Context, body []byte, mediaType string) (noeta.ContentRef, error) {
	if c.fails.Add(-1) >= 0 {
		return noeta.ContentRef{}, errors.New("nats: no response from stream")
	}
	return c.ContentStore.Put(ctx, body, mediaType)
}

// TestParkedAgainUnderItsLease: a lease that parks a turn and then fails
// to write the suspend (its snapshot's body cannot be stored) runs again
// under the same lease (ADR 0115), finds the park's record its own, and
// parks the turn again: the turn declared parked never runs again, and
// the tool that kept killing its worker is not started a fourth time.
func TestParkedAgainUnderItsLease(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	var crashes, putFails atomic.Int64
	h, id, setKill := crashingBoss(t, b, &crashes, func(c *engine.Config) {
		c.SegmentRetryPause = 10 * time.Millisecond
		c.Content = putFailing{c.Content, &putFails}
	})
	ctx := context.Background()
	runUntilParked(t, h, b, id, func(i int) {
		if i == 3 {
			putFails.Store(1) // the parking segment's snapshot
		}
	}, setKill)
	if n := putFails.Load(); n >= 0 {
		t.Fatalf("the parking segment's snapshot was never refused: the test proves nothing\n%s", h.dump(id))
	}
	wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), tl("ToolCallFinished"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), tl("ToolCallFinished"), e("ToolCallStarted"),
		e("LeaseGranted"), e("StepAttemptAbandoned"), e("StepAttemptAbandoned"), e("TaskSnapshot"), e("TaskSuspended"))
	if n := crashes.Load(); n != 3 {
		t.Errorf("the crashing tool was started %d times, want 3\n%s", n, h.dump(id))
	}
	st, _ := h.eng.Inspect(ctx, id)
	if st.WakeOn == nil || st.WakeOn.Handle != engine.ParkHandle(1) {
		t.Fatalf("parked %q on %+v", st.Reason, st.WakeOn)
	}
}

// TestOwnTurnNotSealed: a segment that fails after its turn's first write
// (here the write of a finished call and the next call's start) runs again
// under its lease; the open turn is its own, so no StepAttemptAbandoned is
// written and nothing counts toward the cap that parks the task. The call
// whose end was lost is recorded as interrupted and not run again.
func TestOwnTurnNotSealed(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	var runs atomic.Int64
	var emitFails atomic.Int64
	count := tools.Define(tools.Def{Name: "count", Risk: tools.RiskLow, Run: func(context.Context, tools.Call) (tools.Result, error) {
		runs.Add(1)
		return tools.Result{OK: true, Output: json.RawMessage(`"ok"`)}, nil
	}})
	h := newHarness(t, b, "agents:\n  boss: {tools: [count]}\n", func(c *engine.Config) {
		c.SegmentRetryPause = 10 * time.Millisecond
		c.Log = finishFailing{c.Log, &emitFails}
		reg, err := tools.NewRegistry(count)
		if err != nil {
			t.Fatal(err)
		}
		c.Tools = reg
	})
	emitFails.Store(1)
	id := h.submit(`
agent: boss
goal: count twice
script:
  - tool_calls: [{tool: count}, {tool: count}]
  - finish: {answer: counted}
`)
	h.start(1)
	st := h.waitStatus(id, noeta.StatusTerminal)
	if n := emitFails.Load(); n >= 0 {
		t.Fatalf("no write of a finished call was refused: the test proves nothing\n%s", h.dump(id))
	}
	envs := h.log(id)
	interrupted := 0
	for _, env := range envs {
		switch env.Type {
		case noeta.TypeStepAttemptAbandoned:
			t.Errorf("seq %d: a StepAttemptAbandoned for the lease's own turn\n%s", env.Seq, h.dump(id))
		case noeta.TypeToolCallFinished:
			var p noeta.ToolCallFinished
			_ = json.Unmarshal(env.Payload, &p)
			if !p.OK {
				interrupted++
			}
		}
		if env.Seq > 1 && env.LeaseGen != 1 {
			t.Errorf("seq %d (%s) under lease generation %d, want 1", env.Seq, env.Type, env.LeaseGen)
		}
	}
	if string(st.Answer) != `"counted"` || interrupted != 1 || runs.Load() != 2 {
		t.Errorf("ended %q with %d interrupted calls and %d runs, want counted, 1 and 2\n%s", st.Answer, interrupted, runs.Load(), h.dump(id))
	}
}

// finishFailing refuses its next fails writes that carry a finished call
// (one record at a time: it is not a BatchWriter).
type finishFailing struct {
	engine.Log
	fails *atomic.Int64
}

func (l finishFailing) Emit(ctx context.Context, lease eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (eventlog.Envelope, error) {
	if env.Type == noeta.TypeToolCallFinished && l.fails.Add(-1) >= 0 {
		return eventlog.Envelope{}, errors.New("nats: no response from stream")
	}
	return l.Log.Emit(ctx, lease, env, opts)
}

// crashingBoss submits a task whose three calls each kill the worker
// running them (through the cancel given to setKill), on an engine whose
// AbandonCap is 2, edited by edit; crashes, if not nil, counts the calls
// started.
func crashingBoss(t *testing.T, b backend, crashes *atomic.Int64, edit func(*engine.Config)) (h *harness, id string, setKill func(context.CancelFunc)) {
	t.Helper()
	var kill context.CancelFunc
	crash := tools.Define(tools.Def{Name: "crash", Risk: tools.RiskLow, Run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		if crashes != nil {
			crashes.Add(1)
		}
		kill()
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	}})
	h = newHarness(t, b, "agents:\n  boss: {tools: [crash]}\n", func(c *engine.Config) {
		c.AbandonCap = 2
		reg, err := tools.NewRegistry(crash)
		if err != nil {
			t.Fatal(err)
		}
		c.Tools = reg
		if edit != nil {
			edit(c)
		}
	})
	id = h.submit(`
agent: boss
goal: crash a lot
script:
  - tool_calls: [{tool: crash}, {tool: crash}, {tool: crash}]
  - finish: {answer: survived}
`)
	return h, id, func(c context.CancelFunc) { kill = c }
}

// runUntilParked runs id's segments one lease at a time until one
// suspends; each segment's worker can be killed through the cancel given
// to setKill, and a killed worker's task is handed on as its expiry
// would. before runs ahead of segment i.
func runUntilParked(t *testing.T, h *harness, b backend, id string, before func(int), setKill func(context.CancelFunc)) {
	t.Helper()
	ctx := context.Background()
	var out engine.Outcome
	for i := 0; out.Status != noeta.StatusSuspended; i++ {
		if i == 5 {
			t.Fatalf("not parked after %d segments\n%s", i, h.dump(id))
		}
		lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: id, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		before(i)
		setKill(cancel)
		out, err = h.eng.RunLease(wctx, lease)
		cancel()
		if out.Status != noeta.StatusSuspended {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("segment %d: %v\n%s", i, err, h.dump(id))
			}
			// The worker is gone; hand the task on as its expiry would.
			if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestSubmitRefusals(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig)
	ctx := context.Background()
	if _, err := h.eng.Submit(ctx, engine.Submission{ID: "same", Agent: "boss", Goal: "g"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		sub  engine.Submission
		want error
	}{
		{"existing id, another goal", engine.Submission{ID: "same", Agent: "boss", Goal: "other"}, eventlog.ErrTaskExists},
		{"existing id, another submitter", engine.Submission{ID: "same", Agent: "boss", Goal: "g", SubmittedBy: "cli:eve"}, eventlog.ErrTaskExists},
		{"unknown agent", engine.Submission{Agent: "nobody", Goal: "g"}, eventlog.ErrInvalidArgument},
		{"empty goal", engine.Submission{Agent: "boss"}, eventlog.ErrInvalidArgument},
		{"bad id", engine.Submission{ID: "a.b", Agent: "boss", Goal: "g"}, eventlog.ErrInvalidArgument},
		{"bad script", engine.Submission{Agent: "boss", Goal: "g", Script: json.RawMessage(`{`)}, eventlog.ErrInvalidArgument},
	}
	for _, c := range cases {
		if _, err := h.eng.Submit(ctx, c.sub); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := h.eng.Approve(ctx, "same", "h", "maybe", "me", "", noeta.AuthLocal); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("Approve with decision maybe: %v", err)
	}
	if err := h.eng.Approve(ctx, "same", "h", noeta.ApprovalApprove, "", "", noeta.AuthLocal); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("Approve without approver: %v", err)
	}
}

// TestSubmitRetry: a submission retried under the id it chose is the task
// the first attempt made, not a second one (before, every retry of a submit
// whose answer was lost ran the task twice, as the chaos run once saw), and
// a first attempt that stopped between the log and the dispatcher's row is
// completed by the retry.
func TestSubmitRetry(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, pathsConfig)
			ctx := context.Background()
			sub := engine.Submission{ID: noeta.NewTaskID(), Agent: "boss", Goal: "g", SubmittedBy: "cli:alice",
				Script: json.RawMessage(`[{"finish":{"answer":"done"}}]`)}
			for i := range 3 {
				if id, err := h.eng.Submit(ctx, sub); err != nil || id != sub.ID {
					t.Fatalf("submit #%d: %q, %v", i+1, id, err)
				}
			}
			// A log whose row was never written: the first attempt died.
			orphan := noeta.TaskCreated{TaskID: noeta.NewTaskID(), Agent: "boss", Goal: "g", SubmittedBy: "cli:alice"}
			orphan.RootTaskID = orphan.TaskID
			env, err := eventlog.NewEnvelope(orphan.TaskID, eventlog.OriginSystem, "test", orphan)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.log.Create(ctx, env); err != nil {
				t.Fatal(err)
			}
			if _, err := b.disp.Inspect(ctx, orphan.TaskID); !errors.Is(err, eventlog.ErrNotFound) {
				t.Fatalf("the orphan has a row: %v", err)
			}
			if _, err := h.eng.Submit(ctx, engine.Submission{ID: orphan.TaskID, Agent: "boss", Goal: "g", SubmittedBy: "cli:alice"}); err != nil {
				t.Fatalf("retry of the orphan: %v", err)
			}
			h.start(2)
			st := h.waitStatus(sub.ID, noeta.StatusTerminal)
			if string(st.Answer) != `"done"` {
				t.Errorf("answer %s", st.Answer)
			}
			if n := len(h.log(sub.ID)); n > 10 {
				t.Errorf("the retried task has %d records:\n%s", n, h.dump(sub.ID))
			}
			if ds, err := b.disp.Inspect(ctx, orphan.TaskID); err != nil {
				t.Errorf("the orphan's retry made no row: %v", err)
			} else if ds.Status == "" {
				t.Errorf("the orphan's row: %+v", ds)
			}
		})
	}
}

// TestBigArgsAndOutputs: arguments and outputs over the inline limit go to
// the content store, the records carry refs, and the repetition guard still
// recognises three identical big calls (keyed by the hash of their args).
func TestBigArgsAndOutputs(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), `
agents:
  big:
    tools: [echo]
    repetition: {threshold: 3}
`)
	h.start(1)
	text := strings.Repeat("x", 5000)
	call := `{tool: echo, args: {text: "` + text + `"}}`
	id := h.submit("agent: big\ngoal: g\nscript:\n  - tool_calls: [" + call + ", " + call + ", " + call + "]\n  - finish: {answer: \"" + text + "\"}\n")
	approve(t, h, id, "approval-call-1-2", noeta.ApprovalApprove, "")
	st := h.waitStatus(id, noeta.StatusTerminal)
	envs := h.log(id)
	for _, env := range envs {
		if len(env.Payload) > noeta.PayloadMaxBytes {
			t.Errorf("%s seq %d is %d bytes", env.Type, env.Seq, len(env.Payload))
		}
	}
	started := payload[noeta.ToolCallStarted](t, envs, noeta.TypeToolCallStarted)
	fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
	req := payload[noeta.ApprovalRequested](t, envs, noeta.TypeApprovalRequested)
	if started.ArgsRef == nil || started.Args != nil || fin.OutputRef == nil || req.ArgsRef == nil || req.Guard != "repetition" {
		t.Fatalf("started %+v finished %+v request %+v", started, fin, req)
	}
	body, err := h.b.content.Get(context.Background(), *fin.OutputRef)
	if err != nil || !strings.Contains(string(body), text) {
		t.Errorf("output body %.60s… %v", body, err)
	}
	if st.AnswerRef == nil || st.Answer != nil || st.Governance.ToolCalls != 3 {
		t.Errorf("state %+v", st)
	}
}

// TestIdenticalWakesAreBothConsumed: a task that waits twice for the same
// external event is woken twice by two identical events; the second is not
// mistaken for a redelivery of the first.
func TestIdenticalWakesAreBothConsumed(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, pathsConfig)
			h.start(2)
			id := h.submit(`
agent: boss
goal: wait twice
script:
  - wait_external: {event_kind: ping}
  - wait_external: {event_kind: ping}
  - finish: {answer: pinged}
`)
			for i := 1; i <= 2; i++ {
				h.waitFor(id, "suspend", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended && s.Turn.N == i })
				h.waitReleased(id, eventlog.DispatchSuspended)
				if _, err := h.b.disp.Wake(context.Background(), id, noeta.ExternalWake("ping")); err != nil {
					t.Fatal(err)
				}
			}
			h.waitStatus(id, noeta.StatusTerminal)
			woken := 0
			for _, env := range h.log(id) {
				if env.Type == noeta.TypeTaskWoken {
					woken++
				}
			}
			if woken != 2 {
				t.Errorf("%d TaskWoken, want 2\n%s", woken, h.dump(id))
			}
		})
	}
}
