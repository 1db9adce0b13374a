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
// fires once after it starts again (a backend that keeps state across a
// restart: Backend.Restart).
func testExpiryAcrossRestart(t *testing.T, b Backend) {
	if b.Restart == nil {
		t.Skip("SKIPPED ON PURPOSE: this backend keeps nothing across a restart (Backend.Restart is nil), so there is no restart to survive")
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
