package eventlogtest

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The cases of human answers (human_response wakes; listed in
// dispatcherCases): an answer applies to the suspend of this moment or to
// nothing. Before these, Wake buffered an answer to a handle the task had
// not asked under yet, and the task's later suspend on that handle matched
// it at once: `engine approve TASK approval-call-2-0` sent before turn 2
// asked anything approved turn 2's shell call before any human had seen it.

// wantRefused wakes task with ev and wants err wrapping target, matched
// false, and nothing buffered.
func wantRefused(t *testing.T, b Backend, task string, ev noeta.Wake, target error, what string) {
	t.Helper()
	before := inspect(t, b, task)
	matched, err := b.Dispatcher.Wake(t.Context(), task, ev)
	checkErrIs(t, "Wake with "+what, err, target)
	if matched {
		t.Errorf("Wake with %s: got matched true, want false", what)
	}
	after := inspect(t, b, task)
	if after.PendingWakes != before.PendingWakes {
		t.Errorf("PendingWakes after %s: got %d, want %d (a refused answer is not kept)", what, after.PendingWakes, before.PendingWakes)
	}
	if after.Status != before.Status || wakeString(after.MatchedWake) != wakeString(before.MatchedWake) {
		t.Errorf("after %s: got %s matched %s, want unchanged %s matched %s",
			what, after.Status, wakeString(after.MatchedWake), before.Status, wakeString(before.MatchedWake))
	}
}

func testAnswerMatchesSuspend(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := humanCond()
	suspendOn(t, b, l, cond)
	ev := answer(cond, "approve", "alice")
	wake(t, b, task, ev, true)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the answer")
	wantWake(t, "MatchedWake", st.MatchedWake, ev)
}

// testAnswerBeforeAskRefused: an answer to a handle the task will suspend on
// later, sent while it runs (and while it is ready), is refused and not
// kept; the later suspend waits for a human.
func testAnswerBeforeAskRefused(t *testing.T, b Backend) {
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	cond := humanCond()
	wantRefused(t, b, task, answer(cond, "approve", "mallory"), eventlog.ErrNotWaiting, "an answer while ready")
	l := leaseTask(t, b, task)
	wantRefused(t, b, task, answer(cond, "approve", "mallory"), eventlog.ErrNotWaiting, "an answer while leased")
	suspendOn(t, b, l, cond)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after suspending on the handle answered too early")
	wantNoWake(t, "MatchedWake", st.MatchedWake)
	if st.PendingWakes != 0 {
		t.Errorf("PendingWakes: got %d, want 0", st.PendingWakes)
	}
	ev := answer(cond, "deny", "alice")
	wake(t, b, task, ev, true)
	wantWake(t, "MatchedWake (the answer given after the ask)", inspect(t, b, task).MatchedWake, ev)
}

func testAnswerWrongHandleRefused(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := humanCond()
	suspendOn(t, b, l, cond)
	wantRefused(t, b, task, answer(humanCond(), "approve", "alice"), eventlog.ErrNotWaiting, "an answer to another handle")
	// A handle that is a prefix or an extension of the real one is another handle.
	wantRefused(t, b, task, answer(noeta.HumanResponseWake(cond.Handle[:len(cond.Handle)-1]), "approve", "alice"), eventlog.ErrNotWaiting, "a truncated handle")
	wantRefused(t, b, task, answer(noeta.HumanResponseWake(cond.Handle+"0"), "approve", "alice"), eventlog.ErrNotWaiting, "an extended handle")
	wantStatus(t, b, task, eventlog.DispatchSuspended, "after the refused answers")
	ev := answer(cond, "approve", "alice")
	wake(t, b, task, ev, true)
}

// testAnswerOtherWaitRefused: an answer to a task that waits on something
// else, or has ended, or waits on nothing, is refused.
func testAnswerOtherWaitRefused(t *testing.T, b Backend) {
	ev := answer(humanCond(), "approve", "alice")

	task, l := newLeased(t, b)
	suspendOn(t, b, l, eventCond())
	wantRefused(t, b, task, ev, eventlog.ErrNotWaiting, "an answer to a task waiting on an external event")

	task2, l2 := newLeased(t, b)
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchSuspended, Reason: "parked"})
	wantRefused(t, b, task2, ev, eventlog.ErrNotWaiting, "an answer to a task suspended on nothing")

	task3, l3 := newLeased(t, b)
	cond := noeta.HumanResponseWake(ev.Handle)
	release(t, b, l3, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	wantRefused(t, b, task3, answer(cond, "approve", "alice"), eventlog.ErrNotWaiting, "an answer to an ended task")
}

// testAnswerRaceOneWins: answers raced on one handle; exactly one matches,
// every other gets ErrAlreadyAnswered, and the matched wake is the winner's.
func testAnswerRaceOneWins(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := humanCond()
	suspendOn(t, b, l, cond)
	const n = 6
	evs := make([]noeta.Wake, n)
	errs := make([]error, n)
	matched := make([]bool, n)
	for i := range evs {
		d := "approve"
		if i%2 == 1 {
			d = "deny"
		}
		evs[i] = answer(cond, d, "approver-"+string(rune('a'+i)))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range evs {
		wg.Go(func() {
			<-start
			matched[i], errs[i] = b.Dispatcher.Wake(t.Context(), task, evs[i])
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range evs {
		switch {
		case errs[i] == nil && matched[i]:
			if winner >= 0 {
				t.Fatalf("answers %d and %d both matched", winner, i)
			}
			winner = i
		case errors.Is(errs[i], eventlog.ErrAlreadyAnswered):
			if matched[i] {
				t.Errorf("answer %d: got matched true with %v", i, errs[i])
			}
		default:
			t.Errorf("answer %d: got matched %v, error %v; want a match or %v", i, matched[i], errs[i], eventlog.ErrAlreadyAnswered)
		}
	}
	if winner < 0 {
		t.Fatalf("no answer matched: %v", errs)
	}
	for i, err := range errs {
		if i != winner && !strings.Contains(err.Error(), evs[winner].Approver) {
			t.Errorf("answer %d: the error %q does not name the winner %s", i, err, evs[winner].Approver)
		}
	}
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the race")
	wantWake(t, "MatchedWake (the winner's)", st.MatchedWake, evs[winner])
	if st.PendingWakes != 0 {
		t.Errorf("PendingWakes after the race: got %d, want 0", st.PendingWakes)
	}
	// Once leased, still the winner's, and a late answer still loses.
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease", l2.Wake, evs[winner])
	wantRefused(t, b, task, answer(cond, "deny", "late"), eventlog.ErrAlreadyAnswered, "a late answer while the winner's is unconsumed")
}

// testAnswerAfterConsumeRefused: once the task consumed the answer, another
// answer on the handle matches nothing, even when the task suspends again.
func testAnswerAfterConsumeRefused(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := humanCond()
	suspendOn(t, b, l, cond)
	ev := answer(cond, "approve", "alice")
	wake(t, b, task, ev, true)
	l2 := leaseTask(t, b, task)
	next := humanCond()
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting_approval", ConsumedWake: l2.Wake})
	wantRefused(t, b, task, answer(cond, "deny", "bob"), eventlog.ErrNotWaiting, "an answer to a consumed handle")
	wantStatus(t, b, task, eventlog.DispatchSuspended, "after the refused answer")
}
