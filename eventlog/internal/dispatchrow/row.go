// Package dispatchrow is the dispatcher's exactly-once state machine: the
// row a dispatcher keeps for each task, and every transition of it with its
// guard (enqueue, lease, heartbeat, release, yield, fail, wake, expiry,
// timer, give back). It does no IO and keeps no clock: a backend reads the
// row, runs one transition on it and stores the result, and derives its side
// effects (a ready queue's order, timers, lease keys) from the old and the
// new row.
//
// Both backends drive it: memlog holds rows in memory under one mutex,
// jetstream as JSON values in a KV bucket written with a compare-and-set, so
// the JSON names of [Row]'s fields are jetstream's stored format.
package dispatchrow

import (
	"fmt"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Row is the dispatcher's record of one task. What a backend keeps beside it
// (a queue position, a timer, the sequences of applied messages) is the
// backend's.
type Row struct {
	Status   eventlog.DispatchStatus `json:"status"`
	Queue    string                  `json:"queue"` // fixed at creation
	Reserved bool                    `json:"reserved,omitempty"`
	// ReadyEpoch counts the row's transitions to ready. A backend that
	// signals a ready spell (jetstream's ready stream) carries the epoch in
	// the signal, so a signal left over from an earlier spell (the task was
	// then leased by name) is recognised as stale even when the task is
	// ready again; one that queues in memory tells a new spell by it.
	ReadyEpoch uint64 `json:"ready_epoch,omitempty"`
	// Front says this ready spell goes ahead of the queue: a task whose
	// lease expired (or whose grant was given back before its holder got
	// it) is taken over after the TTL, not after the TTL and the whole
	// queue.
	Front bool `json:"front,omitempty"`

	// The current lease (LeaseID and Expires are zero unless leased);
	// Generation and Worker describe the current or last lease.
	LeaseID    string    `json:"lease_id,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
	Worker     string    `json:"worker,omitempty"`
	Expires    time.Time `json:"expires,omitzero"`
	Heartbeats int       `json:"heartbeats,omitempty"`

	FailAttempts int `json:"fail_attempts,omitempty"` // never reset
	Reclaims     int `json:"reclaim_count,omitempty"` // stale reclaims in a row without progress
	// Ending is why the dispatcher gave up on the task (eventlog.Lease.Ending),
	// until it is terminal.
	Ending string `json:"ending,omitempty"`

	WakeOn  *noeta.Wake  `json:"wake_on,omitempty"`       // while suspended
	Reason  string       `json:"reason,omitempty"`        // suspend or terminal reason
	Matched *noeta.Wake  `json:"matched_wake,omitempty"`  // matched, not yet consumed
	Pending []noeta.Wake `json:"pending_wakes,omitempty"` // buffered, in arrival order
}

// New returns the row of a task enqueued for the first time: ready, at the
// back of queue.
func New(queue string, reserved bool) Row {
	r := Row{Queue: queue, Reserved: reserved}
	r.makeReady()
	return r
}

// --- the transitions a caller asks for ----------------------------------------

// Enqueue forces the row back to ready: the way to fence a stuck worker or
// revive a task. A ready row keeps its place and its reservation (a repeated
// enqueue, an observer replaying or a retry, must not push a task to the back
// or unreserve it): Enqueue reports false and changes nothing.
func (r *Row) Enqueue(reserved bool) bool {
	if r.Status == eventlog.DispatchReady {
		return false
	}
	r.clearLease()
	r.Reclaims = 0
	r.Matched = nil
	r.Reserved = reserved
	r.makeReady()
	return true
}

// CheckTake is the guard of a lease by name: r (nil when the dispatcher does
// not know task) must be ready. An untargeted lease takes a row its backend
// found ready and unreserved.
func CheckTake(task string, r *Row) error {
	if r == nil {
		return fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNoReadyTask, task)
	}
	if r.Status != eventlog.DispatchReady {
		return fmt.Errorf("%w: task %q is %s", eventlog.ErrNoReadyTask, task, r.Status)
	}
	return nil
}

// Grant leases the ready row. Reclaims is deliberately left alone: taking a
// lease is not progress, or a task that crashes every worker would never hit
// ReclaimMax.
func (r *Row) Grant(leaseID, worker string, expires time.Time) {
	r.Status = eventlog.DispatchLeased
	r.Generation++
	r.LeaseID = leaseID
	r.Worker = worker
	r.Expires = expires
	r.Heartbeats = 0
	r.Reason = ""
	r.Reserved = false // a reservation is claimed once
	r.Front = false
}

// Lease is the current lease of the row, as handed to its holder: the
// matched wake is delivered with it, and kept until consumed.
func (r *Row) Lease(task string) eventlog.Lease {
	return eventlog.Lease{
		ID:         r.LeaseID,
		Task:       task,
		Generation: r.Generation,
		Worker:     r.Worker,
		Expires:    r.Expires,
		Wake:       cloneWake(r.Matched),
		Ending:     r.Ending,
	}
}

// Live reports, as an error wrapping ErrInvalidLease that says why, that
// lease is not the live lease of r (nil when the dispatcher does not know
// the task) at now. It is the guard of every transition a lease holder asks
// for.
func Live(r *Row, lease eventlog.Lease, now time.Time) error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: task %q: lease %q: the dispatcher does not know the task", eventlog.ErrInvalidLease, lease.Task, lease.ID)
	case lease.ID == "":
		return fmt.Errorf("%w: task %q: no lease id given", eventlog.ErrInvalidLease, lease.Task)
	case r.Status != eventlog.DispatchLeased:
		return fmt.Errorf("%w: task %q: lease %q: the task is %s, not leased", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.Status)
	case r.LeaseID != lease.ID:
		return fmt.Errorf("%w: task %q: lease %q: the task is held by lease %q (generation %d)", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.LeaseID, r.Generation)
	case !now.Before(r.Expires):
		// Not revived, not requeued here: the backend's expiry (a timer,
		// a watcher, RequeueStale) requeues the row, so reclaim counting
		// stays in one place.
		return fmt.Errorf("%w: task %q: lease %q expired at %s", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.Expires.Format(time.RFC3339Nano))
	}
	return nil
}

// HeartbeatsLeft reports whether the current lease may still be extended:
// the cap is checked before the increment, so HeartbeatMax heartbeats
// succeed and the next one releases the task. A backend that must do IO
// before it extends (jetstream rewrites the lease key) asks first.
func (r *Row) HeartbeatsLeft(max int) bool { return r.Heartbeats < max }

// Heartbeat extends the live lease to expires. Past the cap it releases the
// task instead: ready if a wake is in flight (the next lease re-delivers
// it), else suspended on the row's WakeOn (nil on every normal path, so the
// task waits for a human or a forced Enqueue), and returns an error wrapping
// ErrLeaseQuotaExceeded; that row must be stored. Any other error changed
// nothing.
func (r *Row) Heartbeat(lease eventlog.Lease, now, expires time.Time, max int) error {
	if err := Live(r, lease, now); err != nil {
		return err
	}
	if !r.HeartbeatsLeft(max) {
		n := r.Heartbeats
		r.clearLease()
		r.Reclaims = 0
		if r.Matched != nil {
			r.makeReady()
		} else {
			r.suspend(r.WakeOn, eventlog.ReasonLeaseQuotaExceeded, now)
		}
		return fmt.Errorf("%w: task %q: lease %q already had %d heartbeats, the cap is %d; the task was released (now %s)",
			eventlog.ErrLeaseQuotaExceeded, lease.Task, lease.ID, n, max, r.Status)
	}
	r.Heartbeats++
	r.Reclaims = 0 // a heartbeat is progress
	r.Expires = expires
	return nil
}

// CheckRelease validates a Release's arguments, before any row is read.
func CheckRelease(rel eventlog.Release) error {
	if rel.Next != eventlog.DispatchSuspended && rel.Next != eventlog.DispatchTerminal {
		return fmt.Errorf("%w: Release.Next is %q; want %q or %q",
			eventlog.ErrInvalidArgument, rel.Next, eventlog.DispatchSuspended, eventlog.DispatchTerminal)
	}
	if rel.WakeOn != nil {
		if err := rel.WakeOn.Validate(); err != nil {
			return fmt.Errorf("%w: Release.WakeOn: %w", eventlog.ErrInvalidArgument, err)
		}
	}
	return nil
}

// Release ends the live lease: terminal, or suspended on rel.WakeOn (copied).
// A consumed wake must be the stored matched wake (ErrWakeMismatch); it is
// then cleared. On error the row is unchanged.
func (r *Row) Release(lease eventlog.Lease, rel eventlog.Release, now time.Time) error {
	if err := Live(r, lease, now); err != nil {
		return err
	}
	if rel.ConsumedWake != nil {
		if r.Matched == nil {
			return fmt.Errorf("%w: task %q: lease %q names a consumed %s wake but none is stored",
				eventlog.ErrWakeMismatch, lease.Task, lease.ID, rel.ConsumedWake.Kind)
		}
		if !r.Matched.Equal(*rel.ConsumedWake) {
			return fmt.Errorf("%w: task %q: lease %q names a consumed %s wake that is not the stored %s wake",
				eventlog.ErrWakeMismatch, lease.Task, lease.ID, rel.ConsumedWake.Kind, r.Matched.Kind)
		}
	}
	// Nothing can fail past this point, so a mismatch above changed nothing.
	r.clearLease()
	r.Reclaims = 0 // a release is progress
	if rel.ConsumedWake != nil {
		r.Matched = nil
	}
	if rel.Next == eventlog.DispatchTerminal {
		// An unconsumed matched wake is kept on purpose: it is the
		// evidence of a wake that never got handled.
		r.makeTerminal(rel.Reason)
		return nil
	}
	r.suspend(cloneWake(rel.WakeOn), rel.Reason, now)
	return nil
}

// Yield gives the live lease back: ready, at the back of the queue.
func (r *Row) Yield(lease eventlog.Lease, now time.Time) error {
	if err := Live(r, lease, now); err != nil {
		return err
	}
	r.clearLease()
	r.Reclaims = 0
	r.makeReady()
	return nil
}

// Fail ends the live lease on a failure: terminal if it cannot be retried;
// else ready again, until the task has failed maxFailAttempts times over its
// life and is given up (giveUp).
func (r *Row) Fail(lease eventlog.Lease, f eventlog.Failure, now time.Time, maxFailAttempts int) error {
	if err := Live(r, lease, now); err != nil {
		return err
	}
	r.clearLease()
	r.Reclaims = 0
	if !f.Retryable {
		r.makeTerminal(f.Reason)
		return nil
	}
	r.FailAttempts++
	if r.FailAttempts < maxFailAttempts {
		r.makeReady()
		return nil
	}
	r.giveUp(eventlog.GiveUpReason(eventlog.ReasonMaxAttemptsExceeded, f.Reason))
	return nil
}

// Wake delivers ev (which the row then owns) and reports whether it matched:
// the matched wake if the row is suspended on a condition it matches, else
// buffered (also on a terminal row: a buffer is only cleared by a transition
// to terminal, never drained after it) unless the buffer holds maxPending
// already (ErrTooManyWakes). A human_response answers what is asked now: one
// that does not match is refused (CheckAnswer's error), never buffered. On
// error the row is unchanged.
func (r *Row) Wake(task string, ev noeta.Wake, maxPending int) (bool, error) {
	if ev.Kind == noeta.WakeHumanResponse {
		if err := eventlog.CheckAnswer(task, r.Status, r.WakeOn, r.Matched, ev); err != nil {
			return false, err
		}
	}
	if r.Status == eventlog.DispatchSuspended && noeta.Matches(r.WakeOn, &ev) {
		// The event, not the condition, becomes the matched wake: it carries
		// what the waker had to say (a subtask's result, a human's answer).
		r.match(ev)
		return true, nil
	}
	if len(r.Pending) >= maxPending {
		return false, eventlog.TooManyWakes(task, string(ev.Kind), maxPending)
	}
	r.Pending = append(r.Pending, ev)
	return false, nil
}

// Progress ends the row's run of stale reclaims once the live lease that
// followed them wrote to the task's log: its holder got that far. It
// reports whether the row changed.
func (r *Row) Progress(lease eventlog.Lease, now time.Time) bool {
	if Live(r, lease, now) != nil || r.Reclaims == 0 {
		return false
	}
	r.Reclaims = 0
	return true
}

// GiveBack returns a lease granted to a caller that had gone: ready again,
// ahead of its queue, with the reservation it had. The generation the grant
// took stays taken; nothing was written under it. It reports false, changing
// nothing, when lease is no longer the row's.
func (r *Row) GiveBack(lease eventlog.Lease, reserved bool) bool {
	if r.Status != eventlog.DispatchLeased || r.LeaseID != lease.ID {
		return false
	}
	r.clearLease()
	r.Reserved = reserved
	r.makeReady()
	r.Front = true
	return true
}

// --- the transitions time makes -----------------------------------------------

// Expired reports whether the row holds a lease that ran out at now.
func (r *Row) Expired(now time.Time) bool {
	return r.Status == eventlog.DispatchLeased && !now.Before(r.Expires)
}

// Requeue reclaims an expired lease: ready again, ahead of its queue (its
// holder's TTL was its wait; it does not wait for the whole queue again);
// once the row has been reclaimed reclaimMax times in a row (counted after
// the increment) it is given up (giveUp). It reports whether the row went
// ready. The matched wake is kept either way.
func (r *Row) Requeue(reclaimMax int) bool {
	r.clearLease()
	r.Reclaims++
	if r.Reclaims >= reclaimMax && !r.giveUp(eventlog.ReasonStaleReclaimExceeded) {
		return false
	}
	if r.Status != eventlog.DispatchReady {
		r.makeReady()
	}
	r.Front = true
	return true
}

// FireTimer matches the timed condition the row is suspended on with what
// its timer delivers (eventlog.TimerAnswer): a timer_fired condition itself,
// the recorded deadline, not the firing time, so a redelivery is
// byte-identical; an expiring human_response a denial by the timer. The
// caller has checked that the row still waits on that condition.
func (r *Row) FireTimer() {
	r.match(eventlog.TimerAnswer(*r.WakeOn))
}

// Deadline is when the condition the row is suspended on times out, if it
// is suspended on a timed one.
func (r *Row) Deadline() (time.Time, bool) {
	if r.Status != eventlog.DispatchSuspended {
		return time.Time{}, false
	}
	return eventlog.Deadline(r.WakeOn)
}

// ArmsTimer reports whether writing nu over old (nil for a new row) starts
// a timer: nu waits on a timed condition it did not already wait on in the
// same suspend. A suspend of a new generation on the same condition arms it
// again, with the same deadline: an approval that stays open across a
// refused answer still expires when it was to.
func ArmsTimer(old, nu *Row) bool {
	if _, timed := nu.Deadline(); !timed {
		return false
	}
	return old == nil || old.Status != eventlog.DispatchSuspended || old.Generation != nu.Generation ||
		old.WakeOn == nil || !old.WakeOn.Equal(*nu.WakeOn)
}

// NewSpell reports whether writing nu over old (nil for a new row) begins a
// ready spell that can be taken without a name: a backend queues (or
// signals) the row then, at the front if nu.Front.
func NewSpell(old, nu *Row) bool {
	return nu.Status == eventlog.DispatchReady && !nu.Reserved &&
		(old == nil || old.Status != eventlog.DispatchReady || old.ReadyEpoch != nu.ReadyEpoch)
}

// --- the steps transitions are made of ----------------------------------------

// clearLease ends the lease, if any. Generation and Worker stay, as the
// record of the last lease.
func (r *Row) clearLease() {
	r.LeaseID = ""
	r.Expires = time.Time{}
	r.Heartbeats = 0
}

// makeReady puts the row at the back of its queue: a new epoch.
func (r *Row) makeReady() {
	r.Status = eventlog.DispatchReady
	r.WakeOn = nil
	r.Reason = ""
	r.ReadyEpoch++
	r.Front = false
}

// makeTerminal ends the row. The pending buffer goes (nothing will ever
// suspend the task again to drain it); an unconsumed matched wake stays.
func (r *Row) makeTerminal(reason string) {
	r.Status = eventlog.DispatchTerminal
	r.WakeOn = nil
	r.Reason = reason
	r.Pending = nil
	r.Ending = ""
}

// giveUp ends the row's run of failures: ready for one more lease, which
// carries reason as its Ending so its holder records the end in the log.
// When that lease failed or expired too, ready again for another, the
// first reason kept: the dispatcher never ends a task whose end is not in
// its log (a row terminal alone left the log suspended or running for
// ever, and a parent waiting on the task with it; found by the partition
// run, deploy/nats TestPartition, when the task stream was unavailable for
// a few seconds; ADR 0063). It reports whether the row went ready: always.
func (r *Row) giveUp(reason string) bool {
	if r.Ending == "" {
		r.Ending = reason
	}
	r.makeReady()
	return true
}

// match makes wake the matched wake and the row ready.
func (r *Row) match(wake noeta.Wake) {
	r.Matched = &wake
	r.Reserved = false
	r.makeReady()
}

// suspend parks the row on wakeOn (which it owns) and then, in this order,
// looks for a reason to make it ready at once: an unconsumed matched wake (so
// it is re-delivered), the first buffered wake that matches (arrival order), a
// timed deadline already due. Otherwise the backend arms the condition's
// timer (ArmsTimer). The lease must already be cleared.
//
// A human_response in the buffer (only a row written before answers stopped
// being buffered can hold one) is dropped, never matched: it answered
// nothing that was asked.
func (r *Row) suspend(wakeOn *noeta.Wake, reason string, now time.Time) {
	r.Status = eventlog.DispatchSuspended
	r.WakeOn = wakeOn
	r.Reason = reason
	r.Pending = slices.DeleteFunc(r.Pending, func(w noeta.Wake) bool { return w.Kind == noeta.WakeHumanResponse })
	if len(r.Pending) == 0 {
		r.Pending = nil
	}
	if r.Matched != nil {
		r.makeReady()
		return
	}
	if wakeOn == nil {
		return // nothing matches nil: a forced Enqueue or a human revives it
	}
	for i := range r.Pending {
		if noeta.Matches(wakeOn, &r.Pending[i]) {
			ev := r.Pending[i]
			r.Pending = slices.Delete(r.Pending, i, i+1)
			r.match(ev)
			return
		}
	}
	if deadline, ok := eventlog.Deadline(wakeOn); ok && !now.Before(deadline) {
		r.FireTimer()
	}
}

// --- reading ------------------------------------------------------------------

// Clone copies the row's slices and pointers, so changes to the copy never
// reach the original.
func (r *Row) Clone() Row {
	c := *r
	c.WakeOn = cloneWake(r.WakeOn)
	c.Matched = cloneWake(r.Matched)
	if r.Pending != nil {
		c.Pending = make([]noeta.Wake, len(r.Pending))
		for i, w := range r.Pending {
			c.Pending[i] = w.Clone()
		}
	}
	return c
}

// State is the row as Inspect reports it.
func (r *Row) State(task string) eventlog.DispatchState {
	return eventlog.DispatchState{
		Task:         task,
		Status:       r.Status,
		Queue:        r.Queue,
		Reserved:     r.Reserved,
		Reason:       r.Reason,
		WakeOn:       cloneWake(r.WakeOn),
		MatchedWake:  cloneWake(r.Matched),
		PendingWakes: len(r.Pending),
		LeaseID:      r.LeaseID,
		Generation:   r.Generation,
		Worker:       r.Worker,
		Expires:      r.Expires,
		Heartbeats:   r.Heartbeats,
		FailAttempts: r.FailAttempts,
		ReclaimCount: r.Reclaims,
		Ending:       r.Ending,
	}
}

func cloneWake(w *noeta.Wake) *noeta.Wake {
	if w == nil {
		return nil
	}
	c := w.Clone()
	return &c
}
