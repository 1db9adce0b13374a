package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// laterApproval is a task whose first turn waits for an external event and
// whose second proposes an echo call the gate sends to a human: its request
// is approval-call-2-0-<nonce>, and it does not exist until the event comes.
const laterApproval = `
agent: boss
goal: ask later
script:
  - wait_external: {event_kind: go}
  - tool_calls: [{tool: echo, args: {text: "ran"}}]
  - finish: {answer: done}
`

// nowApproval proposes, in its first turn, an echo call the gate sends to a
// human.
const nowApproval = `
agent: boss
goal: ask now
script:
  - tool_calls: [{tool: echo, args: {text: "ran"}}]
  - finish: {answer: done}
`

// TestApproveBeforeRequestRefused: an answer to a request the task has not
// made is refused, and the request, once made, waits for a human; the
// predictable handle of the old shape answers nothing, nor does a guessed
// nonce.
//
// Before: `engine approve TASK approval-call-2-0` sent while turn 1 waited
// was accepted and buffered ("approved, buffered"), and turn 2's call ran
// as soon as it was proposed, approved by an answer given before the
// request existed.
func TestApproveBeforeRequestRefused(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")))
			h.start(1)
			ctx := context.Background()
			id := h.submit(laterApproval)
			h.waitFor(id, "the wait of turn 1", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended && s.Turn.N == 1 })
			h.waitReleased(id, eventlog.DispatchSuspended)

			for _, handle := range []string{"approval-call-2-0", "approval-call-2-0-0000000000", "approval-call-1-0"} {
				err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "mallory", "early", noeta.AuthLocal)
				if !errors.Is(err, eventlog.ErrNotWaiting) {
					t.Fatalf("Approve %s before the request: got %v, want %v", handle, err, eventlog.ErrNotWaiting)
				}
				if !strings.Contains(err.Error(), "asked nothing under "+handle) {
					t.Errorf("Approve %s before the request: the error %q does not say what is wrong", handle, err)
				}
			}
			if _, err := h.b.disp.Wake(ctx, id, noeta.ExternalWake("go")); err != nil {
				t.Fatal(err)
			}
			st := h.waitFor(id, "the request of turn 2", func(s *engine.State) bool {
				return s.Status == noeta.StatusSuspended && s.Turn.N == 2 && s.Reason == engine.ReasonWaitingApproval
			})
			h.waitReleased(id, eventlog.DispatchSuspended)
			handle := st.WakeOn.Handle
			if !approvalHandle("approval-call-2-0").MatchString(handle) {
				t.Fatalf("handle %q, want approval-call-2-0-<nonce>", handle)
			}
			if _, ok := st.Governance.PendingApprovals[handle]; !ok || len(st.Governance.Approvals) != 0 || st.Governance.ToolCalls != 0 {
				t.Fatalf("after the request: pending %v, approvals %v, tool calls %d; want the request open, unanswered, nothing run",
					st.Governance.PendingApprovals, st.Governance.Approvals, st.Governance.ToolCalls)
			}
			if ds, err := h.b.disp.Inspect(ctx, id); err != nil || ds.Status != eventlog.DispatchSuspended || ds.MatchedWake != nil || ds.PendingWakes != 0 {
				t.Fatalf("dispatcher after the request: %+v, %v; want suspended with nothing matched or kept", ds, err)
			}

			// The old shape and a wrong nonce still answer nothing, and the
			// refusal names the open request.
			for _, wrong := range []string{"approval-call-2-0", handle[:len(handle)-1] + "x"} {
				if wrong == handle {
					continue
				}
				err := h.eng.Approve(ctx, id, wrong, noeta.ApprovalApprove, "mallory", "guessed", noeta.AuthLocal)
				if !errors.Is(err, eventlog.ErrNotWaiting) || !strings.Contains(err.Error(), "open now: "+handle) {
					t.Fatalf("Approve %s: got %v, want %v naming %s", wrong, err, eventlog.ErrNotWaiting, handle)
				}
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "seen", noeta.AuthLocal); err != nil {
				t.Fatalf("Approve %s: %v", handle, err)
			}
			st = h.waitStatus(id, noeta.StatusTerminal)
			if len(st.Governance.Approvals) != 1 || st.Governance.Approvals[0].Approver != "alice" || st.Governance.ToolCalls != 1 {
				t.Errorf("approvals %+v, tool calls %d; want one, by alice, and the call run\n%s", st.Governance.Approvals, st.Governance.ToolCalls, h.dump(id))
			}
		})
	}
}

// TestApproveRace: an approve and a deny sent together on one request: one
// wins, the other is told it lost (ErrAlreadyAnswered, naming the winner),
// and an answer after the task moved on is told the same from the log.
//
// Before: both were accepted; the second was buffered and reported as
// "buffered", and the loser never learnt that its answer did nothing.
func TestApproveRace(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")))
			h.start(1)
			ctx := context.Background()
			id := h.submit(nowApproval)
			st := h.waitFor(id, "the request", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended })
			handle := st.WakeOn.Handle

			decisions := []noeta.ApprovalDecision{noeta.ApprovalApprove, noeta.ApprovalDeny}
			approvers := []string{"alice", "bob"}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range decisions {
				wg.Go(func() {
					<-start
					errs[i] = h.eng.Approve(ctx, id, handle, decisions[i], approvers[i], "race", noeta.AuthLocal)
				})
			}
			close(start)
			wg.Wait()
			winner, loser := 0, 1
			if errs[0] != nil {
				winner, loser = 1, 0
			}
			if errs[winner] != nil || !errors.Is(errs[loser], eventlog.ErrAlreadyAnswered) {
				t.Fatalf("race: got %v and %v; want one nil and one %v", errs[0], errs[1], eventlog.ErrAlreadyAnswered)
			}
			if !strings.Contains(errs[loser].Error(), approvers[winner]) {
				t.Errorf("the loser's error %q does not name the winner %s", errs[loser], approvers[winner])
			}
			st = h.waitStatus(id, noeta.StatusTerminal)
			if len(st.Governance.Approvals) != 1 || st.Governance.Approvals[0].Approver != approvers[winner] || st.Governance.Approvals[0].Decision != decisions[winner] {
				t.Fatalf("approvals %+v, want the winner's alone", st.Governance.Approvals)
			}
			err := h.eng.Approve(ctx, id, handle, noeta.ApprovalDeny, "carol", "late", noeta.AuthLocal)
			if !errors.Is(err, eventlog.ErrAlreadyAnswered) || !strings.Contains(err.Error(), approvers[winner]) {
				t.Errorf("an answer after the task ended: got %v, want %v naming %s", err, eventlog.ErrAlreadyAnswered, approvers[winner])
			}
		})
	}
}

// forgingDispatcher hands out leases carrying a wake of its choosing: a
// dispatcher that buffered a human's answer it should have refused, or a
// row written before answers stopped being buffered.
type forgingDispatcher struct {
	eventlog.Dispatcher
	mu     sync.Mutex
	forged map[string]noeta.Wake // task → the wake its next lease carries
}

func (d *forgingDispatcher) Lease(ctx context.Context, req eventlog.LeaseRequest) (eventlog.Lease, error) {
	l, err := d.Dispatcher.Lease(ctx, req)
	if err != nil {
		return l, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.forged[l.Task]; ok && l.Wake == nil {
		l.Wake = &w
	}
	return l, nil
}

func (d *forgingDispatcher) Release(ctx context.Context, l eventlog.Lease, rel eventlog.Release) error {
	d.mu.Lock()
	if w, ok := d.forged[l.Task]; ok && rel.ConsumedWake != nil && rel.ConsumedWake.Equal(w) {
		rel.ConsumedWake = nil // the real row never matched it
		delete(d.forged, l.Task)
	}
	d.mu.Unlock()
	return d.Dispatcher.Release(ctx, l, rel)
}

// TestResumeRefusesForeignAnswer: a lease that delivers a human answer on
// a handle the task's log does not wait on resolves nothing: the task stays
// suspended on its own request, and the refusal is counted.
//
// Before: the segment failed with ErrWakeRecovery, not retryable, and the
// dispatcher ended the task.
func TestResumeRefusesForeignAnswer(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	fd := &forgingDispatcher{Dispatcher: b.disp, forged: map[string]noeta.Wake{}}
	b.disp = fd
	h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")))
	h.start(1)
	ctx := context.Background()
	id := h.submit(nowApproval)
	st := h.waitFor(id, "the request", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended })
	h.waitReleased(id, eventlog.DispatchSuspended)
	handle := st.WakeOn.Handle
	before := len(h.log(id))

	forged := noeta.HumanResponseWake("approval-call-1-0")
	forged.Decision, forged.Approver = string(noeta.ApprovalApprove), "mallory"
	fd.mu.Lock()
	fd.forged[id] = forged
	fd.mu.Unlock()
	if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(id, "the refusal", func(*engine.State) bool { return h.eng.RefusedAnswers() == 1 })
	h.waitReleased(id, eventlog.DispatchSuspended)
	st, err := h.eng.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != noeta.StatusSuspended || st.WakeOn == nil || st.WakeOn.Handle != handle || len(st.Governance.Approvals) != 0 || st.Governance.ToolCalls != 0 {
		t.Fatalf("after the forged answer: %s on %+v, approvals %v, tool calls %d; want still waiting on %s, nothing run\n%s",
			st.Status, st.WakeOn, st.Governance.Approvals, st.Governance.ToolCalls, handle, h.dump(id))
	}
	for _, env := range h.log(id)[before:] {
		if env.Type == noeta.TypeTaskWoken || env.Type == noeta.TypeApprovalResolved {
			t.Errorf("the forged answer wrote %s\n%s", env.Type, h.dump(id))
		}
	}
	if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "seen", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	if st := h.waitStatus(id, noeta.StatusTerminal); st.Governance.ToolCalls != 1 {
		t.Errorf("after the real answer: %+v", st.Governance)
	}
}

// TestOldHandleStillAnswered: a task that asked, before handles carried a
// nonce, under approval-call-1-0 and waits on it is answered under that
// handle, and the recorded call runs: the resumed turn finds its request
// by the call id, not by rebuilding the handle.
func TestOldHandleStillAnswered(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")))
	ctx := context.Background()
	id := h.submit(`
agent: boss
goal: asked long ago
script:
  - tool_calls: [{tool: echo, args: {text: "old"}}]
  - finish: {answer: done}
`)
	l, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "old-engine", Task: id})
	if err != nil {
		t.Fatal(err)
	}
	const old = "approval-call-1-0"
	last := uint64(1)
	for _, p := range []noeta.Payload{
		noeta.TurnStarted{Turn: 1},
		noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls},
		noeta.ApprovalRequested{Handle: old, Action: noeta.ApprovalToolCall, CallID: "call-1-0", Tool: "echo",
			Args: []byte(`{"text":"old"}`), Guard: "gate", Reason: "a human signs off"},
		noeta.TaskSuspended{Reason: engine.ReasonWaitingApproval, WakeOn: noeta.HumanResponseWake(old)},
	} {
		env, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "old-engine", p)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := b.log.Emit(ctx, l, env, eventlog.EmitOptions{})
		if err != nil {
			t.Fatalf("emit %s: %v", p.EventType(), err)
		}
		last = stored.Seq
	}
	w := noeta.HumanResponseWake(old)
	if err := b.disp.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &w, Reason: engine.ReasonWaitingApproval}); err != nil {
		t.Fatal(err)
	}
	h.start(1)
	if err := h.eng.Approve(ctx, id, old, noeta.ApprovalApprove, "alice", "seen", noeta.AuthLocal); err != nil {
		t.Fatalf("Approve %s: %v", old, err)
	}
	st := h.waitStatus(id, noeta.StatusTerminal)
	if st.Governance.ToolCalls != 1 || len(st.Governance.Approvals) != 1 || st.Governance.Approvals[0].Handle != old || string(st.Answer) != `"done"` {
		t.Fatalf("after the answer: %+v answer %s (log from seq %d)\n%s", st.Governance, st.Answer, last, h.dump(id))
	}
}
