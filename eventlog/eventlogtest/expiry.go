package eventlogtest

import (
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The cases of expiring approvals (listed in dispatcherCases): a suspend on
// a human_response condition with ExpireAt is woken at the deadline with a
// denial by the timer, once, and only while the row still suspends on that
// condition. Before, ExpireAt was ignored: a pending approval waited
// forever.

// expiringCond is a fresh human_response condition that expires at at.
func expiringCond(at time.Time) noeta.Wake {
	c := humanCond()
	c.ExpireAt = at.UTC().Round(0)
	return c
}

// wantExpired waits until task is ready with the timer's denial of cond,
// checks its fields one by one, and returns it.
func wantExpired(t *testing.T, b Backend, task string, cond noeta.Wake) noeta.Wake {
	t.Helper()
	eventually(t, b, "expiry at "+cond.ExpireAt.String(), statusIs(t, b, task, eventlog.DispatchReady))
	st := inspect(t, b, task)
	want := eventlog.TimerAnswer(cond)
	wantWake(t, "MatchedWake of an expired request", st.MatchedWake, want)
	if got := st.MatchedWake; got != nil {
		if got.Kind != noeta.WakeHumanResponse || got.Handle != cond.Handle || got.Decision != string(noeta.ApprovalDeny) ||
			got.Approver != noeta.ApproverTimeout || got.Auth != noeta.AuthTimer || !got.ExpireAt.IsZero() ||
			!strings.Contains(got.Text, cond.ExpireAt.UTC().Format(time.RFC3339)) {
			t.Errorf("expiry answer: got %s, want a deny of handle %s by %q, auth %q, whose text names %s",
				wakeString(got), cond.Handle, noeta.ApproverTimeout, noeta.AuthTimer, cond.ExpireAt.UTC().Format(time.RFC3339))
		}
	}
	return want
}

// consumeAndWait leases task, consumes its matched wake and suspends it on
// a fresh event, and returns that condition.
func consumeAndWait(t *testing.T, b Backend, task string) noeta.Wake {
	t.Helper()
	l := leaseTask(t, b, task)
	next := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting", ConsumedWake: l.Wake})
	return next
}

func wantQuiet(t *testing.T, b Backend, task, what string) {
	t.Helper()
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, what)
	if st.MatchedWake != nil || st.PendingWakes != 0 {
		t.Errorf("%s: got MatchedWake %s PendingWakes %d, want none", what, wakeString(st.MatchedWake), st.PendingWakes)
	}
}

func testExpiryFiresOnce(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, l := newLeased(t, b)
	cond := expiringCond(grantedAt(t, b, l).Add(d))
	suspendOn(t, b, l, cond)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "right after the suspend")
	wantWake(t, "WakeOn (with its expiry)", st.WakeOn, cond)
	if b.Advance != nil {
		advance(t, b, d-time.Second)
		wantStatus(t, b, task, eventlog.DispatchSuspended, "a second before the expiry")
		advance(t, b, time.Second)
	} else {
		advance(t, b, d)
	}
	ans := wantExpired(t, b, task, cond)
	l = leaseTask(t, b, task)
	wantWake(t, "lease after the expiry", l.Wake, ans)
	next := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting", ConsumedWake: l.Wake})
	advance(t, b, 2*d)
	wantQuiet(t, b, task, "after the expiry was consumed and its deadline passed again")
}

// testExpiryNotAfterAnswer: an answer before the deadline wins; the timer
// neither replaces it nor fires later.
func testExpiryNotAfterAnswer(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, l := newLeased(t, b)
	cond := expiringCond(grantedAt(t, b, l).Add(d))
	suspendOn(t, b, l, cond)
	ev := answer(cond, "approve", "alice")
	wake(t, b, task, ev, true)
	advance(t, b, 2*d)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the answer and past the deadline")
	wantWake(t, "MatchedWake (the answer, not the expiry)", st.MatchedWake, ev)
	consumeAndWait(t, b, task)
	advance(t, b, d)
	wantQuiet(t, b, task, "after the answer was consumed")
}

// testExpiryRearmedAfterResuspend: a task suspends on the same expiring
// condition again (an answer the engine refused or counted); the deadline
// still holds, and once past it a new suspend expires at once.
func testExpiryRearmedAfterResuspend(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, l := newLeased(t, b)
	cond := expiringCond(grantedAt(t, b, l).Add(2 * d))
	suspendOn(t, b, l, cond)
	wake(t, b, task, answer(cond, "approve", "mallory"), true)
	l = leaseTask(t, b, task)
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval", ConsumedWake: l.Wake})
	wantStatus(t, b, task, eventlog.DispatchSuspended, "suspended again on the same request")
	advance(t, b, 2*d)
	wantExpired(t, b, task, cond)

	// The deadline has passed: suspending on the request again expires it
	// at once.
	l = leaseTask(t, b, task)
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval", ConsumedWake: l.Wake})
	wantExpired(t, b, task, cond)
}

// testExpiryAcrossRestart: a deadline armed before the dispatcher stops
// fires once after it starts again (Backend.Restart).
func testExpiryAcrossRestart(t *testing.T, b Backend) {
	if b.Restart == nil {
		t.Fatal("Backend.Restart is nil: every backend supports a restart (memlog reopens its memory)")
	}
	d := timerDelay(b)
	task, l := newLeased(t, b)
	cond := expiringCond(grantedAt(t, b, l).Add(d))
	suspendOn(t, b, l, cond)
	b = b.Restart(t)
	advance(t, b, d)
	wantExpired(t, b, task, cond)
	consumeAndWait(t, b, task)
	advance(t, b, 2*d)
	wantQuiet(t, b, task, "after the expiry was consumed, past its deadline again")
}

// testAnswerReceivedAtStamped: the dispatcher that receives a human answer
// stamps when it did, by its own clock, whatever the sender put in
// ReceivedAt, and the lease delivers the stamp with the answer. The engine
// judges an answer against its request's expiry by that time, so a sender
// that could set it would date a late answer before the deadline. Before,
// an answer carried no time of arrival, and the engine took an approval
// received after the expiry whenever it reached the task before the timer.
func testAnswerReceivedAtStamped(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	from := grantedAt(t, b, l).UTC().Truncate(time.Millisecond)
	cond := humanCond()
	suspendOn(t, b, l, cond)
	if b.Advance != nil {
		advance(t, b, 3*time.Second)
		from = from.Add(3 * time.Second)
	}
	ev := answer(cond, "approve", "alice")
	forged := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	ev.ReceivedAt = forged
	wake(t, b, task, ev, true)
	to := from
	if b.Advance == nil {
		to = time.Now().UTC()
	}
	got := inspect(t, b, task).MatchedWake
	if got == nil {
		t.Fatal("no matched wake after the answer")
	}
	if at := got.ReceivedAt; at.Equal(forged) || at.Before(from) || at.After(to) {
		t.Fatalf("ReceivedAt of the matched answer: got %s, want the dispatcher's clock at the answer, in [%s, %s], not the sender's %s",
			at.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), forged.Format(time.RFC3339))
	}
	l = leaseTask(t, b, task)
	if l.Wake == nil || !l.Wake.ReceivedAt.Equal(got.ReceivedAt) {
		t.Fatalf("the lease's wake: got %s, want the answer with ReceivedAt %s", wakeString(l.Wake), got.ReceivedAt.Format(time.RFC3339Nano))
	}
	// A wake that is not an answer carries no time of arrival.
	next := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting", ConsumedWake: l.Wake})
	ext := next.Clone()
	ext.ReceivedAt = forged
	wake(t, b, task, ext, true)
	if got := inspect(t, b, task).MatchedWake; got == nil || !got.ReceivedAt.IsZero() {
		t.Fatalf("an external event's wake: got %s, want no received_at", wakeString(got))
	}
}
