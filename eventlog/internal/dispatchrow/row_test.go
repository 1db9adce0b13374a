package dispatchrow

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	task = "t1"
	ttl  = 30 * time.Second
)

var (
	lease1 = eventlog.Lease{ID: "L1", Task: task}
	event  = noeta.ExternalWake("ci")
	human  = noeta.HumanResponseWake("h1")
)

// The rows the cases start from; each call returns a fresh one.

func ready() Row { return New("q", false) }

func leased() Row {
	r := ready()
	r.Grant(lease1.ID, "w", t0.Add(ttl))
	return r
}

func leasedWith(f func(r *Row)) func() Row {
	return func() Row { r := leased(); f(&r); return r }
}

func suspendedOn(cond noeta.Wake) func() Row {
	return func() Row {
		r := leased()
		if err := r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting"}, t0); err != nil {
			panic(err)
		}
		return r
	}
}

func terminal() Row {
	r := leased()
	if err := r.Release(lease1, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"}, t0); err != nil {
		panic(err)
	}
	return r
}

func answered(decision string) noeta.Wake {
	w := human
	w.Decision = decision
	w.Approver = "alice"
	return w
}

// withMatched is a leased row holding an unconsumed matched wake.
var withMatched = func() Row {
	r := suspendedOn(human)()
	if _, err := r.Wake(task, answered("approve"), 8); err != nil {
		panic(err)
	}
	r.Grant("L1", "w", t0.Add(ttl))
	return r
}

// TestTransitions runs every transition from every state it is asked in:
// what it allows changes the row as the want function says; what it refuses
// returns its error and leaves the row exactly as it was.
func TestTransitions(t *testing.T) {
	due := noeta.TimerWake(t0.Add(-time.Second))
	later := noeta.TimerWake(t0.Add(time.Minute))
	expiring := human
	expiring.ExpireAt = t0.Add(-time.Second)

	cases := []struct {
		name    string
		from    func() Row
		op      func(r *Row) error
		wantErr error // a refusal: the row must be unchanged (except ErrLeaseQuotaExceeded)
		want    func(t *testing.T, before, r Row)
	}{
		// --- enqueue
		{name: "enqueue ready is refused", from: ready,
			op: func(r *Row) error { return refusedIf(!r.Enqueue(true)) }, wantErr: errRefused},
		{name: "enqueue leased forces ready", from: leasedWith(func(r *Row) { r.Reclaims = 2 }),
			op: func(r *Row) error { return okIf(r.Enqueue(true)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.LeaseID != "" || r.Reclaims != 0 || !r.Reserved || r.ReadyEpoch != b.ReadyEpoch+1 || r.Generation != b.Generation {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "enqueue suspended drops the matched wake", from: func() Row { r := withMatched(); r.Status = eventlog.DispatchSuspended; return r },
			op: func(r *Row) error { return okIf(r.Enqueue(false)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched != nil || r.Reserved {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "enqueue terminal revives", from: terminal,
			op:   func(r *Row) error { return okIf(r.Enqueue(false)) },
			want: func(t *testing.T, b, r Row) { wantStatus(t, r, eventlog.DispatchReady) }},

		// --- take and grant
		{name: "take ready", from: ready, op: func(r *Row) error { return CheckTake(task, r) }},
		{name: "take leased is refused", from: leased, op: func(r *Row) error { return CheckTake(task, r) }, wantErr: eventlog.ErrNoReadyTask},
		{name: "take suspended is refused", from: suspendedOn(event), op: func(r *Row) error { return CheckTake(task, r) }, wantErr: eventlog.ErrNoReadyTask},
		{name: "take terminal is refused", from: terminal, op: func(r *Row) error { return CheckTake(task, r) }, wantErr: eventlog.ErrNoReadyTask},
		{name: "grant claims the reservation and the front", from: func() Row { r := New("q", true); r.Front = true; r.Reclaims = 1; return r },
			op: func(r *Row) error { r.Grant("L2", "w2", t0.Add(ttl)); return nil },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchLeased)
				if r.Generation != b.Generation+1 || r.Reserved || r.Front || r.LeaseID != "L2" || r.Worker != "w2" || r.Reclaims != 1 {
					t.Errorf("got %+v", r)
				}
			}},

		// --- heartbeat
		{name: "heartbeat extends", from: leasedWith(func(r *Row) { r.Reclaims = 2 }),
			op: func(r *Row) error { return r.Heartbeat(lease1, t0, t0.Add(2*ttl), 3) },
			want: func(t *testing.T, b, r Row) {
				if r.Heartbeats != 1 || r.Reclaims != 0 || !r.Expires.Equal(t0.Add(2*ttl)) {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "heartbeat of another lease is refused", from: leased,
			op: func(r *Row) error { return r.Heartbeat(eventlog.Lease{ID: "L9", Task: task}, t0, t0.Add(ttl), 3) }, wantErr: eventlog.ErrInvalidLease},
		{name: "heartbeat past the cap releases to suspended", from: leasedWith(func(r *Row) { r.Heartbeats = 3 }),
			op: func(r *Row) error { return r.Heartbeat(lease1, t0, t0.Add(ttl), 3) }, wantErr: eventlog.ErrLeaseQuotaExceeded,
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchSuspended)
				if r.Reason != eventlog.ReasonLeaseQuotaExceeded || r.LeaseID != "" {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "heartbeat past the cap with a wake in flight releases to ready", from: func() Row { r := withMatched(); r.Heartbeats = 3; return r },
			op: func(r *Row) error { return r.Heartbeat(lease1, t0, t0.Add(ttl), 3) }, wantErr: eventlog.ErrLeaseQuotaExceeded,
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil {
					t.Error("the matched wake was lost")
				}
			}},

		// --- release
		{name: "release terminal keeps an unconsumed matched wake", from: withMatched,
			op: func(r *Row) error {
				r.Pending = []noeta.Wake{event}
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchTerminal)
				if r.Matched == nil || r.Pending != nil || r.Reason != "done" || r.LeaseID != "" {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "release consumes the matched wake", from: withMatched,
			op: func(r *Row) error {
				m := *r.Matched
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &event, ConsumedWake: &m}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchSuspended)
				if r.Matched != nil || !r.WakeOn.Equal(event) {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "release naming a consumed wake none is stored is refused", from: leased,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &event}, t0)
			}, wantErr: eventlog.ErrWakeMismatch},
		{name: "release naming another consumed wake is refused", from: withMatched,
			op: func(r *Row) error {
				other := answered("deny")
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &other}, t0)
			}, wantErr: eventlog.ErrWakeMismatch},
		{name: "release of an expired lease is refused", from: leased,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchTerminal}, t0.Add(ttl))
			}, wantErr: eventlog.ErrInvalidLease},
		{name: "suspend with a matched wake kept goes ready", from: withMatched,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &event}, t0)
			},
			want: func(t *testing.T, b, r Row) { wantStatus(t, r, eventlog.DispatchReady) }},
		{name: "suspend matches the first buffered wake", from: leasedWith(func(r *Row) {
			r.Pending = []noeta.Wake{noeta.ExternalWake("other"), event, event}
		}),
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &event}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || !r.Matched.Equal(event) || len(r.Pending) != 2 || r.WakeOn != nil {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "suspend drops a buffered human_response", from: leasedWith(func(r *Row) { r.Pending = []noeta.Wake{answered("approve")} }),
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &human}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchSuspended)
				if r.Pending != nil || r.Matched != nil {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "suspend on a deadline already due fires", from: leased,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &due}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || !r.Matched.Equal(due) {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "suspend on an expiry already due is denied by the timer", from: leased,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &expiring}, t0)
			},
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || r.Matched.Decision != string(noeta.ApprovalDeny) || r.Matched.Auth != noeta.AuthTimer {
					t.Errorf("got %+v", r.Matched)
				}
			}},
		{name: "suspend on nothing waits", from: leased,
			op: func(r *Row) error {
				return r.Release(lease1, eventlog.Release{Next: eventlog.DispatchSuspended}, t0)
			},
			want: func(t *testing.T, b, r Row) { wantStatus(t, r, eventlog.DispatchSuspended) }},

		// --- yield and fail
		{name: "yield goes to the back", from: leased, op: func(r *Row) error { return r.Yield(lease1, t0) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Front || r.ReadyEpoch != b.ReadyEpoch+1 {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "yield of a suspended task is refused", from: suspendedOn(event), op: func(r *Row) error { return r.Yield(lease1, t0) }, wantErr: eventlog.ErrInvalidLease},
		{name: "fail not retryable ends", from: leased,
			op:   func(r *Row) error { return r.Fail(lease1, eventlog.Failure{Reason: "boom"}, t0, 3) },
			want: func(t *testing.T, b, r Row) { wantStatus(t, r, eventlog.DispatchTerminal) }},
		{name: "fail retryable retries", from: leased,
			op: func(r *Row) error { return r.Fail(lease1, eventlog.Failure{Reason: "boom", Retryable: true}, t0, 3) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.FailAttempts != 1 || r.Ending != "" {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "fail at the cap gives up with one more lease", from: leasedWith(func(r *Row) { r.FailAttempts = 2 }),
			op: func(r *Row) error { return r.Fail(lease1, eventlog.Failure{Reason: "boom", Retryable: true}, t0, 3) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Ending != eventlog.GiveUpReason(eventlog.ReasonMaxAttemptsExceeded, "boom") {
					t.Errorf("Ending: %q", r.Ending)
				}
			}},
		// ADR 0063: the dispatcher never ends a task whose end is not in
		// its log; the given-up lease's failure readies another with the
		// first reason (before, the row went terminal alone).
		{name: "fail of the given-up lease readies another with the first reason", from: leasedWith(func(r *Row) { r.FailAttempts = 3; r.Ending = "gave up" }),
			op: func(r *Row) error { return r.Fail(lease1, eventlog.Failure{Reason: "boom", Retryable: true}, t0, 3) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Ending != "gave up" || r.Reason != "" {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "fail of another lease is refused", from: leased,
			op: func(r *Row) error {
				return r.Fail(eventlog.Lease{ID: "L9", Task: task}, eventlog.Failure{Reason: "boom"}, t0, 3)
			}, wantErr: eventlog.ErrInvalidLease},

		// --- wake
		{name: "wake matching the suspend", from: suspendedOn(event),
			op: func(r *Row) error { return matchedIf(r.Wake(task, event, 8)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || r.WakeOn != nil {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "wake not matching is buffered", from: suspendedOn(event),
			op: func(r *Row) error { return bufferedIf(r.Wake(task, noeta.ExternalWake("other"), 8)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchSuspended)
				if len(r.Pending) != 1 {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "wake of a terminal task is buffered", from: terminal,
			op: func(r *Row) error { return bufferedIf(r.Wake(task, event, 8)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchTerminal)
				if len(r.Pending) != 1 {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "wake past the buffer's cap is refused", from: leasedWith(func(r *Row) { r.Pending = []noeta.Wake{event, event} }),
			op: func(r *Row) error { _, err := r.Wake(task, event, 2); return err }, wantErr: eventlog.ErrTooManyWakes},
		{name: "answer to nothing asked is refused", from: suspendedOn(event),
			op: func(r *Row) error { _, err := r.Wake(task, answered("approve"), 8); return err }, wantErr: eventlog.ErrNotWaiting},
		{name: "answer to a leased task is refused", from: leased,
			op: func(r *Row) error { _, err := r.Wake(task, answered("approve"), 8); return err }, wantErr: eventlog.ErrNotWaiting},
		{name: "second answer is refused", from: withMatched,
			op: func(r *Row) error { _, err := r.Wake(task, answered("deny"), 8); return err }, wantErr: eventlog.ErrAlreadyAnswered},
		{name: "answer to the question asked", from: suspendedOn(human),
			op: func(r *Row) error { return matchedIf(r.Wake(task, answered("approve"), 8)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || r.Matched.Decision != "approve" || r.Reserved {
					t.Errorf("got %+v", r)
				}
			}},

		// --- progress and give back
		{name: "progress resets the reclaims", from: leasedWith(func(r *Row) { r.Reclaims = 2 }),
			op:   func(r *Row) error { return okIf(r.Progress(lease1, t0)) },
			want: func(t *testing.T, b, r Row) { wantEq(t, "Reclaims", r.Reclaims, 0) }},
		{name: "progress without reclaims is refused", from: leased,
			op: func(r *Row) error { return refusedIf(!r.Progress(lease1, t0)) }, wantErr: errRefused},
		{name: "progress of an expired lease is refused", from: leasedWith(func(r *Row) { r.Reclaims = 2 }),
			op: func(r *Row) error { return refusedIf(!r.Progress(lease1, t0.Add(ttl))) }, wantErr: errRefused},
		{name: "give back goes ahead with the reservation", from: leased,
			op: func(r *Row) error { return okIf(r.GiveBack(lease1, true)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if !r.Front || !r.Reserved || r.LeaseID != "" || r.Generation != b.Generation {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "give back of another lease is refused", from: leased,
			op: func(r *Row) error { return refusedIf(!r.GiveBack(eventlog.Lease{ID: "L9"}, false)) }, wantErr: errRefused},
		{name: "give back of a ready row is refused", from: ready,
			op: func(r *Row) error { return refusedIf(!r.GiveBack(lease1, false)) }, wantErr: errRefused},

		// --- expiry and timers
		{name: "requeue goes ahead of the queue", from: leased,
			op: func(r *Row) error { return okIf(r.Requeue(3)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if !r.Front || r.Reclaims != 1 || r.LeaseID != "" || r.Ending != "" {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "requeue at the cap gives up with one more lease", from: leasedWith(func(r *Row) { r.Reclaims = 2 }),
			op: func(r *Row) error { return okIf(r.Requeue(3)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if !r.Front || r.Ending != eventlog.ReasonStaleReclaimExceeded {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "requeue of the given-up lease readies another (ADR 0063)", from: withEnding(eventlog.ReasonStaleReclaimExceeded, 3),
			op: func(r *Row) error { return okIf(r.Requeue(3)) },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Ending != eventlog.ReasonStaleReclaimExceeded || r.Matched == nil {
					t.Errorf("got %+v", r)
				}
			}},
		{name: "timer fires", from: suspendedOn(later),
			op: func(r *Row) error { r.FireTimer(); return nil },
			want: func(t *testing.T, b, r Row) {
				wantStatus(t, r, eventlog.DispatchReady)
				if r.Matched == nil || !r.Matched.Equal(later) {
					t.Errorf("got %+v", r)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.from()
			before := r.Clone()
			err := c.op(&r)
			if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
				t.Fatalf("error: got %v, want %v", err, c.wantErr)
			}
			if c.wantErr != nil && c.want == nil && !reflect.DeepEqual(before, r) {
				t.Fatalf("a refused transition changed the row:\nbefore %+v\nafter  %+v", before, r)
			}
			if c.want != nil {
				c.want(t, before, r)
			}
		})
	}
}

func withEnding(ending string, reclaims int) func() Row {
	return func() Row {
		r := withMatched()
		r.Ending = ending
		r.Reclaims = reclaims
		return r
	}
}

// TestLive: every reason a lease is not live, and the one way it is.
func TestLive(t *testing.T) {
	l := leased()
	susp := suspendedOn(event)()
	for _, c := range []struct {
		name  string
		r     *Row
		lease eventlog.Lease
		now   time.Time
		live  bool
	}{
		{"unknown task", nil, lease1, t0, false},
		{"no lease id", &l, eventlog.Lease{Task: task}, t0, false},
		{"not leased", &susp, lease1, t0, false},
		{"another lease", &l, eventlog.Lease{ID: "L9", Task: task}, t0, false},
		{"expired exactly at Expires", &l, lease1, t0.Add(ttl), false},
		{"live", &l, lease1, t0.Add(ttl - time.Nanosecond), true},
	} {
		err := Live(c.r, c.lease, c.now)
		if (err == nil) != c.live || (err != nil && !errors.Is(err, eventlog.ErrInvalidLease)) {
			t.Errorf("%s: got %v, want live %v", c.name, err, c.live)
		}
	}
	if !l.Expired(t0.Add(ttl)) || l.Expired(t0) || susp.Expired(t0.Add(time.Hour)) {
		t.Error("Expired disagrees with Live")
	}
}

func TestCheckRelease(t *testing.T) {
	bad := noeta.Wake{Kind: "nonsense"}
	for _, c := range []struct {
		rel eventlog.Release
		ok  bool
	}{
		{eventlog.Release{Next: eventlog.DispatchTerminal}, true},
		{eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &event}, true},
		{eventlog.Release{Next: eventlog.DispatchReady}, false},
		{eventlog.Release{Next: eventlog.DispatchLeased}, false},
		{eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &bad}, false},
	} {
		err := CheckRelease(c.rel)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, eventlog.ErrInvalidArgument)) {
			t.Errorf("%+v: got %v, want ok %v", c.rel, err, c.ok)
		}
	}
}

// TestSideEffects: what a backend derives from the old and the new row.
func TestSideEffects(t *testing.T) {
	later := noeta.TimerWake(t0.Add(time.Minute))
	susp := suspendedOn(later)()
	l := leased()
	resusp := susp.Clone()
	resusp.Generation++
	buffered := susp.Clone()
	buffered.Pending = []noeta.Wake{event}
	other := suspendedOn(noeta.TimerWake(t0.Add(2 * time.Minute)))()
	plain := suspendedOn(event)()
	for _, c := range []struct {
		name     string
		old, nu  *Row
		arms     bool
		newSpell bool
	}{
		{"a new row", nil, ptr(New("q", false)), false, true},
		{"a new reserved row", nil, ptr(New("q", true)), false, false},
		{"leased to suspended on a timer", &l, &susp, true, false},
		{"suspended on a timer, a wake buffered", &susp, &buffered, false, false},
		{"the same condition, a new generation", &susp, &resusp, true, false},
		{"another condition", &susp, &other, true, false},
		{"leased to suspended on no timer", &l, &plain, false, false},
		{"suspended to ready", &susp, ptr(func() Row { r := susp.Clone(); r.FireTimer(); return r }()), false, true},
		{"ready, the same spell", ptr(ready()), ptr(ready()), false, false},
	} {
		if got := ArmsTimer(c.old, c.nu); got != c.arms {
			t.Errorf("%s: ArmsTimer %v, want %v", c.name, got, c.arms)
		}
		if got := NewSpell(c.old, c.nu); got != c.newSpell {
			t.Errorf("%s: NewSpell %v, want %v", c.name, got, c.newSpell)
		}
	}
}

// TestRowJSON pins the JSON names of the row's fields: they are the stored
// format of jetstream's dispatcher rows.
func TestRowJSON(t *testing.T) {
	r := withMatched()
	r.Reserved, r.Front, r.Heartbeats, r.FailAttempts, r.Reclaims, r.Ending = true, true, 1, 2, 3, "e"
	r.WakeOn, r.Reason, r.Pending = &event, "why", []noeta.Wake{event}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"status", "queue", "reserved", "ready_epoch", "front", "lease_id", "generation", "worker", "expires",
		"heartbeats", "fail_attempts", "reclaim_count", "ending", "wake_on", "reason", "matched_wake", "pending_wakes"}
	if len(m) != len(want) {
		t.Errorf("got %d fields, want %d: %s", len(m), len(want), b)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing: %s", k, b)
		}
	}
	var back Row
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.State(task), r.State(task)) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back, r)
	}
}

// TestCloneIsDeep: a change to a clone never reaches the original.
func TestCloneIsDeep(t *testing.T) {
	r := withMatched()
	r.Pending = []noeta.Wake{noeta.GroupCompletedWake("g", []string{"a"})}
	r.WakeOn = &event
	c := r.Clone()
	c.Pending[0].SubtaskIDs[0] = "x"
	c.Matched.Decision = "x"
	c.WakeOn.EventKind = "x"
	if r.Pending[0].SubtaskIDs[0] != "a" || r.Matched.Decision != "approve" || r.WakeOn.EventKind != "ci" {
		t.Errorf("the clone shares memory with the original: %+v", r)
	}
}

var errRefused = errors.New("refused")

func refusedIf(b bool) error {
	if b {
		return errRefused
	}
	return nil
}

func okIf(b bool) error {
	if !b {
		return errors.New("the transition reported no change")
	}
	return nil
}

func matchedIf(m bool, err error) error {
	if err != nil {
		return err
	}
	return okIf(m)
}

func bufferedIf(m bool, err error) error {
	if err != nil {
		return err
	}
	return okIf(!m)
}

func wantStatus(t *testing.T, r Row, s eventlog.DispatchStatus) {
	t.Helper()
	if r.Status != s {
		t.Errorf("status: got %s, want %s (%+v)", r.Status, s, r)
	}
}

func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func ptr[T any](v T) *T { return &v }
