package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// taskRow is the dispatcher's record of one task, the value of key <task> in
// KV <prefix>_tasks. Its fields and transitions mirror memlog's row one for
// one; what memlog keeps in memory structures (queue position, timers) lives
// in the ready stream and the wake stream instead.
type taskRow struct {
	Status   eventlog.DispatchStatus `json:"status"`
	Queue    string                  `json:"queue"` // fixed at creation
	Reserved bool                    `json:"reserved,omitempty"`
	// ReadyEpoch counts the row's transitions to ready. A ready signal
	// carries the epoch it was published for, so a signal left over from an
	// earlier ready spell (the task was then leased by name) is recognised as
	// stale even when the task is ready again.
	ReadyEpoch uint64 `json:"ready_epoch,omitempty"`
	// Front says this ready spell goes ahead of the queue: a task whose
	// lease expired (or whose grant was cancelled before its holder got it)
	// is taken over after the TTL, not after the TTL and the whole queue.
	// Its spell is signalled twice, on the front subject and at the back;
	// whichever is fetched first leases it and the other goes stale.
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

	// Applied holds the stream sequences of the last ingress messages applied
	// to the row, so a redelivery is recognised and not applied again.
	Applied []uint64 `json:"applied_ingress,omitempty"`
	// AppliedTimers holds the same for the timers stream, whose sequences
	// are its own.
	AppliedTimers []uint64 `json:"applied_timers,omitempty"`

	Created time.Time `json:"created"` // RequeueStale reports in creation order
	// Op identifies the write that produced this value: after an ambiguous
	// write (a timeout), reading it back tells whether the write landed.
	Op string `json:"op"`
}

// --- transitions (pure: every side effect is derived from old and new row) --

// grant leases the ready row. Reclaims is deliberately left alone: taking a
// lease is not progress, or a task that crashes every worker would never hit
// ReclaimMax.
func (r *taskRow) grant(leaseID, worker string, expires time.Time) {
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

// clearLease ends the lease, if any. Generation and Worker stay, as the
// record of the last lease.
func (r *taskRow) clearLease() {
	r.LeaseID = ""
	r.Expires = time.Time{}
	r.Heartbeats = 0
}

// makeReady puts the row at the back of its queue: a new epoch, whose signal
// is published after the write.
func (r *taskRow) makeReady() {
	r.Status = eventlog.DispatchReady
	r.WakeOn = nil
	r.Reason = ""
	r.ReadyEpoch++
	r.Front = false
}

// makeTerminal ends the row. The pending buffer goes (nothing will ever
// suspend the task again to drain it); an unconsumed matched wake stays.
func (r *taskRow) makeTerminal(reason string) {
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
// a few seconds). It reports whether the row went ready: always.
func (r *taskRow) giveUp(reason string) bool {
	if r.Ending == "" {
		r.Ending = reason
	}
	r.makeReady()
	return true
}

// match makes wake the matched wake and the row ready.
func (r *taskRow) match(wake noeta.Wake) {
	r.Matched = &wake
	r.Reserved = false
	r.makeReady()
}

// suspend parks the row on wakeOn (which it owns) and then, in this order,
// looks for a reason to make it ready at once: an unconsumed matched wake (so
// it is re-delivered), the first buffered wake that matches (arrival order), a
// timer_fired deadline already due. Otherwise a timer_fired condition is
// armed as a message schedule before the row is written (see armTimer). The
// lease must already be cleared.
//
// A human_response in the buffer (only a row written before answers stopped
// being buffered can hold one) is dropped, never matched: it answered
// nothing that was asked.
func (r *taskRow) suspend(wakeOn *noeta.Wake, reason string, now time.Time) {
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
	if deadline, ok := deadlineOf(wakeOn); ok && !now.Before(deadline) {
		r.fireTimer()
	}
}

// deadlineOf is eventlog.Deadline: when a timed condition times out.
func deadlineOf(w *noeta.Wake) (time.Time, bool) { return eventlog.Deadline(w) }

// fireTimer matches the timed condition with what its timer delivers
// (eventlog.TimerAnswer): a timer_fired condition itself, the recorded
// deadline, not the firing time, so a redelivery is byte-identical; an
// expiring human_response a denial by the timer.
func (r *taskRow) fireTimer() {
	r.match(eventlog.TimerAnswer(*r.WakeOn))
}

// requeue reclaims an expired lease: ready again; once the row has been
// reclaimed reclaimMax times in a row (counted after the increment) it is
// given up (giveUp). It reports whether the row went ready. The matched
// wake is kept either way.
func (r *taskRow) requeue(reclaimMax int) bool {
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

// applyWake delivers ev: the matched wake if the row is suspended on a
// condition it matches, else buffered (also on a terminal row: a buffer is
// only cleared by a transition to terminal, never drained after it) unless
// the buffer holds maxPending already (ErrTooManyWakes). A human_response
// that does not match is refused (CheckAnswer's error), not buffered.
func (r *taskRow) applyWake(task string, ev noeta.Wake, maxPending int) (bool, error) {
	if ev.Kind == noeta.WakeHumanResponse {
		if err := eventlog.CheckAnswer(task, r.Status, r.WakeOn, r.Matched, ev); err != nil {
			return false, err
		}
	}
	if r.Status == eventlog.DispatchSuspended && noeta.Matches(r.WakeOn, &ev) {
		// The event, not the condition, becomes the matched wake: it carries
		// what the waker had to say.
		r.match(ev)
		return true, nil
	}
	if len(r.Pending) >= maxPending {
		return false, eventlog.TooManyWakes(task, string(ev.Kind), maxPending)
	}
	r.Pending = append(r.Pending, ev)
	return false, nil
}

// noteApplied records an applied input sequence in list (Applied or
// AppliedTimers).
func noteApplied(list *[]uint64, seq uint64) {
	*list = append(*list, seq)
	if n := len(*list); n > appliedKeep {
		*list = slices.Delete(*list, 0, n-appliedKeep)
	}
}

// armsTimer reports whether writing nu over old starts a timer: nu waits on
// a timed condition (deadlineOf) it did not already wait on in the same
// suspend. A suspend of a new generation on the same condition arms it
// again, with the same deadline: an approval that stays open across a
// refused answer still expires when it was to.
func armsTimer(old, nu *taskRow) bool {
	if _, timed := deadlineOf(nu.WakeOn); nu.Status != eventlog.DispatchSuspended || !timed {
		return false
	}
	return old == nil || old.Status != eventlog.DispatchSuspended || old.Generation != nu.Generation ||
		old.WakeOn == nil || !old.WakeOn.Equal(*nu.WakeOn)
}

// --- liveness ------------------------------------------------------------

// liveRow reports, as an error wrapping ErrInvalidLease that says why, that
// lease is not the live lease of row r by the row and the local clock. The
// server's half (the lease key) is checked where it matters: Valid and
// Heartbeat.
func liveRow(r *taskRow, lease eventlog.Lease, now time.Time) error {
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
		// Not revived, not requeued here: the watcher (or RequeueStale)
		// requeues the row, so reclaim counting stays in one place.
		return fmt.Errorf("%w: task %q: lease %q expired at %s", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.Expires.Format(time.RFC3339Nano))
	}
	return nil
}

// --- reading and writing rows ---------------------------------------------

// errSkip, returned by a mutate function, writes nothing; mutate returns it.
var errSkip = errors.New("jetstream: dispatcher: nothing to write")

// getRow reads task's row from the bucket's leader: (nil, nil) if none.
func (d *Dispatcher) getRow(ctx context.Context, task string) (*taskRow, uint64, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	e, err := d.tasks.Get(ctx, task)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
	}
	r, err := decodeRow(task, e.Value())
	if err != nil {
		return nil, 0, err
	}
	return r, e.Revision(), nil
}

func decodeRow(task string, b []byte) (*taskRow, error) {
	var r taskRow
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("jetstream: dispatcher row %s is corrupt: %w", task, err)
	}
	return &r, nil
}

// mutate is every transition: it reads task's row, lets fn change a copy
// (fn gets nil when there is no row, and may return a new one), and writes
// the result with a compare-and-set on the revision read (a create when
// there was no row). A conflict (another process wrote in between; 10071 and
// 10164 both arrive as a revision mismatch) re-reads and runs fn again, after
// a short jittered pause so racing writers spread out. fn may do IO; it must
// be safe to run again. Errors from fn, errSkip included, are returned as is.
//
// The side effects of a transition are derived from the old and new row, so
// no transition can forget one: a timer the new row waits on is armed before
// the write (a crash after it leaves a harmless schedule, never a missing
// one); the old lease's key is deleted and a new ready spell is signalled
// after it (a crash between leaves work for the watcher and the reconciler).
func (d *Dispatcher) mutate(ctx context.Context, task string, fn func(r *taskRow) (*taskRow, error)) (*taskRow, error) {
	for attempt := 0; ; attempt++ {
		old, rev, err := d.getRow(ctx, task)
		if err != nil {
			return nil, err
		}
		var cur *taskRow
		if old != nil {
			cur = old.deepCopy()
		}
		nu, err := fn(cur)
		if err != nil {
			return nil, err
		}
		nu.Op = noeta.NewID()
		if armsTimer(old, nu) {
			if err := d.armTimer(ctx, task, nu.Generation, *nu.WakeOn); err != nil {
				return nil, err
			}
		}
		val, err := json.Marshal(nu)
		if err != nil {
			return nil, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
		}
		wctx, cancel := d.withTimeout(ctx)
		if rev == 0 {
			_, err = d.tasks.Create(wctx, task, val)
		} else {
			_, err = d.tasks.Update(wctx, task, val, rev)
		}
		cancel()
		if err == nil {
			d.afterWrite(task, old, nu)
			return nu, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if err := pause(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		// Ambiguous (a timeout, a leader change, the caller's ctx ending
		// mid-write): the row says whether this write landed.
		rctx, rcancel := d.detached()
		back, _, rerr := d.getRow(rctx, task)
		rcancel()
		if rerr == nil && back != nil && back.Op == nu.Op {
			d.afterWrite(task, old, nu)
			return nu, nil
		}
		return nil, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
	}
}

// pause sleeps a jittered, growing moment before a retried compare-and-set.
func pause(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(200*time.Microsecond) << min(attempt, 6)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// afterWrite runs the side effects of a committed transition from old to nu.
// They cannot undo it, so a failure is logged, not returned: the caller's
// transition happened, and the leases watcher (a lease key left behind
// expires on its own) or the reconciler (a signal left unpublished) repairs the
// rest.
func (d *Dispatcher) afterWrite(task string, old, nu *taskRow) {
	ctx, cancel := d.detached()
	defer cancel()
	if armsTimer(old, nu) {
		d.backstopTimer(task, nu.Generation, nu.WakeOn.Clone())
	}
	if old != nil && old.Status == eventlog.DispatchLeased && old.LeaseID != "" &&
		(nu.Status != eventlog.DispatchLeased || nu.LeaseID != old.LeaseID) {
		d.ended.add(leaseKey(task, old.LeaseID))
		if err := d.leases.Delete(ctx, leaseKey(task, old.LeaseID)); err != nil {
			d.log.Warn("delete lease key after the lease ended; it will expire on its own", "task", task, "lease", old.LeaseID, "err", err)
		}
	}
	if nu.Status == eventlog.DispatchReady && !nu.Reserved &&
		(old == nil || old.Status != eventlog.DispatchReady || old.ReadyEpoch != nu.ReadyEpoch) {
		if nu.Front {
			// Best effort: the signal at the back (below, retried until it
			// is there) still leases the task if this one is lost.
			if err := d.signalFront(ctx, task, nu.Queue, nu.ReadyEpoch); err != nil {
				d.log.Warn("publish ready signal ahead of the queue; it waits its turn at the back", "task", task, "queue", nu.Queue, "err", err)
			}
		}
		if err := d.signal(ctx, task, nu.Queue, nu.ReadyEpoch, true); err != nil {
			d.log.Warn("publish ready signal; retrying in the background", "task", task, "queue", nu.Queue, "err", err)
			d.goTracked(func() { d.resignal(task, nu.ReadyEpoch) })
		}
	} else if nu.Status == eventlog.DispatchReady && !nu.Reserved && old != nil && old.Status == eventlog.DispatchReady {
		// A write that leaves a ready row in the same ready spell (a wake
		// buffered on it): the signal of that spell may have been lost to
		// a crash right after the write that began it, so it is published
		// again, which is refused, harmlessly, if it is there.
		if err := d.signal(ctx, task, nu.Queue, nu.ReadyEpoch, false); err != nil {
			d.log.Warn("repair ready signal; the reconciler will", "task", task, "queue", nu.Queue, "err", err)
		}
	}
}

// resignal retries a ready signal whose publish failed, while the row is
// still in that ready spell, with a growing pause, for about a minute; the
// reconciler (or the next Enqueue) covers anything longer.
func (d *Dispatcher) resignal(task string, epoch uint64) {
	pause := 100 * time.Millisecond
	for range 16 {
		t := time.NewTimer(pause)
		select {
		case <-d.done:
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Second)
		ctx, cancel := d.detached()
		r, _, err := d.getRow(ctx, task)
		if err == nil && (r == nil || r.Status != eventlog.DispatchReady || r.Reserved || r.ReadyEpoch != epoch) {
			cancel()
			return // the spell ended: nothing to signal
		}
		if err == nil {
			err = d.signal(ctx, task, r.Queue, epoch, true)
		}
		cancel()
		if err == nil {
			return
		}
		d.log.Warn("publish ready signal", "task", task, "err", err)
	}
	d.log.Error("gave up publishing a ready signal; the reconciler will", "task", task)
}

// deepCopy copies the row's slices and pointers, so fn's changes never reach
// the value mutate compares against.
func (r *taskRow) deepCopy() *taskRow {
	c := *r
	c.WakeOn = cloneWake(r.WakeOn)
	c.Matched = cloneWake(r.Matched)
	if r.Pending != nil {
		c.Pending = make([]noeta.Wake, len(r.Pending))
		for i, w := range r.Pending {
			c.Pending[i] = w.Clone()
		}
	}
	c.Applied = slices.Clone(r.Applied)
	c.AppliedTimers = slices.Clone(r.AppliedTimers)
	return &c
}

// state is the row as Inspect reports it.
func (r *taskRow) state(task string) eventlog.DispatchState {
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
