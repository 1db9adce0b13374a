package memlog

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// dispatcher is the Store's eventlog.Dispatcher state. One mutex guards all of
// it: every operation is a handful of map and list steps, so a finer scheme
// would buy nothing and would make "concurrent callers never get the same
// task" harder to see.
//
// Lock order: a task's log lock (taskLog.mu, held by Emit around Valid) comes
// before d.mu, and d.mu comes before the clock's own lock (Now, AfterFunc and
// stop funcs are called under d.mu). Nothing here ever takes a log lock, and
// clock callbacks are only ever run by the clock, never from under d.mu.
type dispatcher struct {
	s *Store

	mu     sync.Mutex
	closed bool
	rows   map[string]*row
	seq    uint64 // insertion order of rows, for RequeueStale's result order

	// ready holds, per queue, the ready rows an untargeted Lease may take, in
	// FIFO order. Reserved ready rows are kept out: a row's reservation cannot
	// change while it is ready (only a Lease, which takes it out of ready, or a
	// forced Enqueue of a non-ready row sets it), so leaving them out keeps an
	// untargeted Lease O(1) however many reserved rows are parked.
	ready map[string]*list.List

	// leased indexes the leased rows, so a sweep does not scan terminal ones.
	leased map[*row]struct{}

	// waiters holds, per queue, the channel that blocked untargeted Leases
	// watch. It is made when someone waits and closed (then dropped) when a row
	// joins that queue's ready list, so nothing is allocated while nobody waits.
	waiters map[string]chan struct{}
}

// row is the dispatcher's record of one task (the reference's per-task row).
type row struct {
	task   string
	seq    uint64
	status eventlog.DispatchStatus
	queue  string // fixed at creation

	reserved bool
	elem     *list.Element // in d.ready[queue] while ready and not reserved

	// The current lease (leaseID and expires are zero unless leased);
	// generation and worker describe the current or last lease.
	leaseID    string
	generation uint64
	worker     string
	expires    time.Time
	ttl        time.Duration // Heartbeat extends by the TTL the lease was granted with
	heartbeats int

	failAttempts int    // never reset
	reclaims     int    // stale reclaims in a row without progress
	ending       string // why the dispatcher gave up on the task (eventlog.Lease.Ending)

	wakeOn  *noeta.Wake // while suspended
	reason  string      // suspend or terminal reason
	matched *noeta.Wake // matched, not yet consumed
	pending []noeta.Wake

	// The row's one clock timer: lease expiry while leased, the timer_fired
	// deadline while suspended. timerTok changes on every stop, so a callback
	// that was already running when it was stopped sees it is stale.
	stop     func() bool
	timerTok uint64
}

func (d *dispatcher) init(s *Store) {
	d.s = s
	d.rows = map[string]*row{}
	d.ready = map[string]*list.List{}
	d.leased = map[*row]struct{}{}
	d.waiters = map[string]chan struct{}{}
}

// close stops every outstanding timer. Blocked Leases are released by s.done,
// which Store.Close closes first.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, r := range d.rows {
		d.stopTimer(r)
	}
}

// lock takes d.mu unless the dispatcher is closed. An operation that passed
// s.check can still race Close; refusing it here keeps it from installing a
// timer that close already swept past.
func (d *dispatcher) lock() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return eventlog.ErrClosed
	}
	return nil
}

// --- eventlog.LeaseRegistry ------------------------------------------------

// Valid implements eventlog.LeaseRegistry. It runs on every Emit, under the
// task's writer lock, so it is one map lookup and no validation: a malformed
// task id simply names no live lease.
func (s *Store) Valid(ctx context.Context, lease eventlog.Lease) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return false, err
	}
	defer d.mu.Unlock()
	_, err := d.liveRow(lease, s.clock.Now())
	return err == nil, nil
}

// leaseLive is Valid for the log's fence: the clock reading is the append's
// own, and the error says why a lease is not live.
func (s *Store) leaseLive(lease eventlog.Lease, now time.Time) error {
	d := &s.disp
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	_, err := d.liveRow(lease, now)
	return err
}

// liveRow returns the row lease.Task if lease is its live lease, else an
// error wrapping ErrInvalidLease that says why.
func (d *dispatcher) liveRow(lease eventlog.Lease, now time.Time) (*row, error) {
	r := d.rows[lease.Task]
	switch {
	case r == nil:
		return nil, fmt.Errorf("%w: task %q: lease %q: the dispatcher does not know the task", eventlog.ErrInvalidLease, lease.Task, lease.ID)
	case lease.ID == "":
		return nil, fmt.Errorf("%w: task %q: no lease id given", eventlog.ErrInvalidLease, lease.Task)
	case r.status != eventlog.DispatchLeased:
		return nil, fmt.Errorf("%w: task %q: lease %q: the task is %s, not leased", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.status)
	case r.leaseID != lease.ID:
		return nil, fmt.Errorf("%w: task %q: lease %q: the task is held by lease %q (generation %d)", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.leaseID, r.generation)
	case !now.Before(r.expires):
		// Not revived, not swept here: the expiry timer (or RequeueStale)
		// requeues the row, so reclaim counting stays in one place.
		return nil, fmt.Errorf("%w: task %q: lease %q expired at %s", eventlog.ErrInvalidLease, lease.Task, lease.ID, r.expires.Format(time.RFC3339Nano))
	}
	return r, nil
}

// --- eventlog.Dispatcher ---------------------------------------------------

// Enqueue implements eventlog.Dispatcher.
func (s *Store) Enqueue(ctx context.Context, task string, opts eventlog.EnqueueOptions) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := validTaskID("task", task); err != nil {
		return err
	}
	if opts.Parent != "" {
		if err := validTaskID("EnqueueOptions.Parent", opts.Parent); err != nil {
			return err
		}
	}
	if err := eventlog.ValidateQueue("EnqueueOptions.Queue", opts.Queue); err != nil {
		return err
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()

	r := d.rows[task]
	if r == nil {
		queue := opts.Queue
		if queue == "" {
			queue = eventlog.DefaultQueue
			if p := d.rows[opts.Parent]; p != nil {
				queue = p.queue
			}
		}
		d.seq++
		r = &row{task: task, seq: d.seq, queue: queue, reserved: opts.Reserved}
		d.rows[task] = r
		d.makeReady(r)
		return nil
	}
	if r.status == eventlog.DispatchReady {
		// Keeps its place and its reservation: a repeated enqueue (an observer
		// replaying, a retry) must not push a task to the back or unreserve it.
		return nil
	}
	// Forced back to ready: the way to fence a stuck worker or revive a task.
	d.clearLease(r)
	r.reclaims = 0
	r.matched = nil
	r.reserved = opts.Reserved
	d.makeReady(r)
	return nil
}

// Lease implements eventlog.Dispatcher.
func (s *Store) Lease(ctx context.Context, req eventlog.LeaseRequest) (eventlog.Lease, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.Lease{}, err
	}
	if req.Worker == "" {
		return eventlog.Lease{}, fmt.Errorf("%w: LeaseRequest.Worker is empty", eventlog.ErrInvalidArgument)
	}
	if req.TTL < 0 {
		return eventlog.Lease{}, fmt.Errorf("%w: LeaseRequest.TTL is negative (%s)", eventlog.ErrInvalidArgument, req.TTL)
	}
	if err := eventlog.ValidateQueue("LeaseRequest.Queue", req.Queue); err != nil {
		return eventlog.Lease{}, err
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = s.opts.LeaseTTL
	}
	d := &s.disp

	if req.Task != "" {
		if err := validTaskID("LeaseRequest.Task", req.Task); err != nil {
			return eventlog.Lease{}, err
		}
		if err := d.lock(); err != nil {
			return eventlog.Lease{}, err
		}
		defer d.mu.Unlock()
		r := d.rows[req.Task]
		if r == nil {
			return eventlog.Lease{}, fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNoReadyTask, req.Task)
		}
		if r.status != eventlog.DispatchReady {
			return eventlog.Lease{}, fmt.Errorf("%w: task %q is %s", eventlog.ErrNoReadyTask, req.Task, r.status)
		}
		return d.grant(r, req.Worker, ttl, s.clock.Now()), nil
	}

	queue := req.Queue
	if queue == "" {
		queue = eventlog.DefaultQueue
	}
	for {
		if err := d.lock(); err != nil {
			return eventlog.Lease{}, err
		}
		if l := d.ready[queue]; l != nil && l.Len() > 0 {
			lease := d.grant(l.Front().Value.(*row), req.Worker, ttl, s.clock.Now())
			d.mu.Unlock()
			return lease, nil
		}
		if !req.Wait {
			d.mu.Unlock()
			return eventlog.Lease{}, fmt.Errorf("%w: queue %q has no ready, unreserved task", eventlog.ErrNoReadyTask, queue)
		}
		ch := d.waiters[queue]
		if ch == nil {
			ch = make(chan struct{})
			d.waiters[queue] = ch
		}
		d.mu.Unlock()

		select {
		case <-ctx.Done():
			return eventlog.Lease{}, ctx.Err()
		case <-s.done:
			return eventlog.Lease{}, eventlog.ErrClosed
		case <-ch:
			// Another waiter may win the row; the loop looks again.
		}
		if err := s.check(ctx); err != nil {
			return eventlog.Lease{}, err
		}
	}
}

// lockLive takes the dispatcher lock and returns lease's row if the lease is
// live, with the clock reading it was judged at. On success the caller holds
// d.mu and must unlock it; on error the lock is not held.
func (s *Store) lockLive(lease eventlog.Lease) (*row, time.Time, error) {
	if err := validTaskID("lease.Task", lease.Task); err != nil {
		return nil, time.Time{}, err
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return nil, time.Time{}, err
	}
	now := s.clock.Now()
	r, err := d.liveRow(lease, now)
	if err != nil {
		d.mu.Unlock()
		return nil, time.Time{}, err
	}
	return r, now, nil
}

// Heartbeat implements eventlog.Dispatcher.
func (s *Store) Heartbeat(ctx context.Context, lease eventlog.Lease) (time.Time, error) {
	if err := s.check(ctx); err != nil {
		return time.Time{}, err
	}
	r, now, err := s.lockLive(lease)
	if err != nil {
		return time.Time{}, err
	}
	d := &s.disp
	defer d.mu.Unlock()
	// The cap is checked before the increment: HeartbeatMax heartbeats
	// succeed, the next one releases the task.
	if r.heartbeats >= s.opts.HeartbeatMax {
		n := r.heartbeats
		d.clearLease(r)
		r.reclaims = 0
		if r.matched != nil {
			// A wake is in flight: ready, so the next lease re-delivers it.
			d.makeReady(r)
		} else {
			// wake_on is kept (nil on every normal path), so the task waits
			// for a human or a forced Enqueue.
			d.suspend(r, r.wakeOn, eventlog.ReasonLeaseQuotaExceeded, now)
		}
		return time.Time{}, fmt.Errorf("%w: task %q: lease %q already had %d heartbeats, the cap is %d; the task was released (now %s)",
			eventlog.ErrLeaseQuotaExceeded, lease.Task, lease.ID, n, s.opts.HeartbeatMax, r.status)
	}
	r.heartbeats++
	r.reclaims = 0 // a heartbeat is progress
	r.expires = now.Add(r.ttl)
	d.scheduleExpiry(r, now)
	return r.expires, nil
}

// Release implements eventlog.Dispatcher.
func (s *Store) Release(ctx context.Context, lease eventlog.Lease, rel eventlog.Release) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if rel.Next != eventlog.DispatchSuspended && rel.Next != eventlog.DispatchTerminal {
		return fmt.Errorf("%w: Release.Next is %q; want %q or %q",
			eventlog.ErrInvalidArgument, rel.Next, eventlog.DispatchSuspended, eventlog.DispatchTerminal)
	}
	if rel.WakeOn != nil {
		if err := rel.WakeOn.Validate(); err != nil {
			return fmt.Errorf("%w: Release.WakeOn: %w", eventlog.ErrInvalidArgument, err)
		}
	}
	r, now, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	if rel.ConsumedWake != nil {
		if r.matched == nil {
			return fmt.Errorf("%w: task %q: lease %q names a consumed %s wake but none is stored",
				eventlog.ErrWakeMismatch, lease.Task, lease.ID, rel.ConsumedWake.Kind)
		}
		if !r.matched.Equal(*rel.ConsumedWake) {
			return fmt.Errorf("%w: task %q: lease %q names a consumed %s wake that is not the stored %s wake",
				eventlog.ErrWakeMismatch, lease.Task, lease.ID, rel.ConsumedWake.Kind, r.matched.Kind)
		}
	}
	// Nothing can fail past this point, so a mismatch above changed nothing.
	d.clearLease(r)
	r.reclaims = 0 // a release is progress
	if rel.ConsumedWake != nil {
		r.matched = nil
	}
	if rel.Next == eventlog.DispatchTerminal {
		// An unconsumed matched wake is kept on purpose: it is the evidence
		// of a wake that never got handled.
		d.makeTerminal(r, rel.Reason)
		return nil
	}
	d.suspend(r, cloneWake(rel.WakeOn), rel.Reason, now)
	return nil
}

// Yield implements eventlog.Dispatcher.
func (s *Store) Yield(ctx context.Context, lease eventlog.Lease) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	r, _, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	d.clearLease(r)
	r.reclaims = 0
	d.makeReady(r)
	return nil
}

// Fail implements eventlog.Dispatcher.
func (s *Store) Fail(ctx context.Context, lease eventlog.Lease, f eventlog.Failure) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	r, _, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	d.clearLease(r)
	r.reclaims = 0
	if !f.Retryable {
		d.makeTerminal(r, f.Reason)
		return nil
	}
	r.failAttempts++
	if r.failAttempts < s.opts.MaxFailAttempts {
		d.makeReady(r)
		return nil
	}
	d.giveUp(r, eventlog.GiveUpReason(eventlog.ReasonMaxAttemptsExceeded, f.Reason))
	return nil
}

// Wake implements eventlog.Dispatcher.
func (s *Store) Wake(ctx context.Context, task string, event noeta.Wake) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if err := validTaskID("task", task); err != nil {
		return false, err
	}
	if err := event.Validate(); err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %w", eventlog.ErrInvalidArgument, task, err)
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return false, err
	}
	defer d.mu.Unlock()
	r := d.rows[task]
	if r == nil {
		return false, fmt.Errorf("%w: wake for task %q: the dispatcher does not know the task", eventlog.ErrNotFound, task)
	}
	event = event.Clone()
	event.ReceivedAt = time.Time{}
	if event.Kind == noeta.WakeHumanResponse {
		// A human answers what is asked now: never buffered.
		if err := eventlog.CheckAnswer(task, r.status, r.wakeOn, r.matched, event); err != nil {
			return false, err
		}
		// Received now, by this store's clock, whatever the caller put
		// there: the engine judges the answer against its request's
		// expiry by it.
		event.ReceivedAt = s.clock.Now().UTC().Truncate(time.Millisecond)
	}
	if r.status == eventlog.DispatchSuspended && noeta.Matches(r.wakeOn, &event) {
		// The event, not the condition, becomes the matched wake: it carries
		// what the waker had to say (a subtask's result, a human's answer).
		d.match(r, event.Clone())
		return true, nil
	}
	if len(r.pending) >= d.s.opts.MaxPendingWakes {
		return false, eventlog.TooManyWakes(task, string(event.Kind), d.s.opts.MaxPendingWakes)
	}
	// Kept for the next suspend, also on a terminal task: a buffer is only
	// cleared by a transition to terminal, never drained after it.
	r.pending = append(r.pending, event.Clone())
	return false, nil
}

// RequeueStale implements eventlog.Dispatcher. The expiry timers normally do
// this as leases run out; the sweep catches whatever a timer has not yet (a
// clock that delivers late, a caller that wants it now).
func (s *Store) RequeueStale(ctx context.Context) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	now := s.clock.Now()
	var stale []*row
	for r := range d.leased {
		if !now.Before(r.expires) {
			stale = append(stale, r)
		}
	}
	slices.SortFunc(stale, func(a, b *row) int { return cmp.Compare(a.seq, b.seq) })
	ids := []string{}
	for _, r := range stale {
		if d.requeue(r) {
			ids = append(ids, r.task)
		}
	}
	return ids, nil
}

// Inspect implements eventlog.Dispatcher.
func (s *Store) Inspect(ctx context.Context, task string) (eventlog.DispatchState, error) {
	if err := s.check(ctx); err != nil {
		return eventlog.DispatchState{}, err
	}
	if err := validTaskID("task", task); err != nil {
		return eventlog.DispatchState{}, err
	}
	d := &s.disp
	if err := d.lock(); err != nil {
		return eventlog.DispatchState{}, err
	}
	defer d.mu.Unlock()
	r := d.rows[task]
	if r == nil {
		return eventlog.DispatchState{}, fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNotFound, task)
	}
	return eventlog.DispatchState{
		Task:         r.task,
		Status:       r.status,
		Queue:        r.queue,
		Reserved:     r.reserved,
		Reason:       r.reason,
		WakeOn:       cloneWake(r.wakeOn),
		MatchedWake:  cloneWake(r.matched),
		PendingWakes: len(r.pending),
		LeaseID:      r.leaseID,
		Generation:   r.generation,
		Worker:       r.worker,
		Expires:      r.expires,
		Heartbeats:   r.heartbeats,
		FailAttempts: r.failAttempts,
		ReclaimCount: r.reclaims,
		Ending:       r.ending,
	}, nil
}

// --- transitions (all under d.mu) -----------------------------------------

// grant leases the ready row r. reclaims is deliberately left alone: taking a
// lease is not progress, or a task that crashes every worker would never hit
// ReclaimMax.
func (d *dispatcher) grant(r *row, worker string, ttl time.Duration, now time.Time) eventlog.Lease {
	d.unqueue(r)
	r.status = eventlog.DispatchLeased
	r.generation++
	r.leaseID = noeta.NewID()
	r.worker = worker
	r.ttl = ttl
	r.expires = now.Add(ttl)
	r.heartbeats = 0
	r.reason = ""
	r.reserved = false // a reservation is claimed once
	d.leased[r] = struct{}{}
	d.scheduleExpiry(r, now)
	return eventlog.Lease{
		ID:         r.leaseID,
		Task:       r.task,
		Generation: r.generation,
		Worker:     r.worker,
		Expires:    r.expires,
		Wake:       cloneWake(r.matched), // delivered, and kept until consumed
		Ending:     r.ending,
	}
}

// clearLease ends the row's lease, if any, and stops its timer. generation and
// worker stay, as the record of the last lease.
func (d *dispatcher) clearLease(r *row) {
	d.stopTimer(r)
	delete(d.leased, r)
	r.leaseID = ""
	r.expires = time.Time{}
	r.heartbeats = 0
}

// makeReady puts r at the back of its queue.
func (d *dispatcher) makeReady(r *row) {
	d.stopTimer(r)
	d.unqueue(r)
	r.status = eventlog.DispatchReady
	r.wakeOn = nil
	r.reason = ""
	if r.reserved {
		return // only a targeted Lease can take it; see dispatcher.ready
	}
	l := d.ready[r.queue]
	if l == nil {
		l = list.New()
		d.ready[r.queue] = l
	}
	r.elem = l.PushBack(r)
	if ch := d.waiters[r.queue]; ch != nil {
		close(ch)
		delete(d.waiters, r.queue)
	}
}

func (d *dispatcher) unqueue(r *row) {
	if r.elem != nil {
		d.ready[r.queue].Remove(r.elem)
		r.elem = nil
	}
}

// makeTerminal ends r. The pending buffer goes (nothing will ever suspend the
// task again to drain it); an unconsumed matched wake stays.
func (d *dispatcher) makeTerminal(r *row, reason string) {
	d.stopTimer(r)
	r.status = eventlog.DispatchTerminal
	r.wakeOn = nil
	r.reason = reason
	r.pending = nil
	r.ending = ""
}

// giveUp ends r's run of failures: ready for one more lease, which carries
// reason as its Ending so its holder records the end in the log. When that
// lease failed or expired too, ready again for another, the first reason
// kept: the dispatcher never ends a task whose end is not in its log (a
// row terminal alone left the log suspended or running for ever, and
// everything that reads it, a waiting parent included, with it; found by
// the partition run). It reports whether r went ready: always.
func (d *dispatcher) giveUp(r *row, reason string) bool {
	if r.ending == "" {
		r.ending = reason
	}
	d.makeReady(r)
	return true
}

// match makes wake the matched wake of r and r ready.
func (d *dispatcher) match(r *row, wake noeta.Wake) {
	r.matched = &wake
	r.reserved = false
	d.makeReady(r)
}

// suspend parks r on wakeOn (which it owns) and then, in this order, looks for
// a reason to make it ready at once: an unconsumed matched wake (so it is
// re-delivered), the first buffered wake that matches (arrival order), a
// timer_fired deadline already due. Only if none applies does a timer get
// installed. The lease must already be cleared.
func (d *dispatcher) suspend(r *row, wakeOn *noeta.Wake, reason string, now time.Time) {
	d.stopTimer(r)
	r.status = eventlog.DispatchSuspended
	r.wakeOn = wakeOn
	r.reason = reason
	if r.matched != nil {
		d.makeReady(r)
		return
	}
	if wakeOn == nil {
		return // nothing matches nil: a forced Enqueue or a human revives it
	}
	for i := range r.pending {
		if noeta.Matches(wakeOn, &r.pending[i]) {
			ev := r.pending[i]
			r.pending = slices.Delete(r.pending, i, i+1)
			d.match(r, ev)
			return
		}
	}
	deadline, timed := eventlog.Deadline(wakeOn)
	if !timed {
		return
	}
	if !now.Before(deadline) {
		d.fireTimer(r)
		return
	}
	d.scheduleFire(r, now)
}

// fireTimer matches r's timed condition with what its timer delivers
// (eventlog.TimerAnswer): a timer_fired condition itself, the recorded
// deadline, not the firing time, so a redelivery is byte-identical; an
// expiring human_response a denial by the timer.
func (d *dispatcher) fireTimer(r *row) {
	d.match(r, eventlog.TimerAnswer(*r.wakeOn))
}

// requeue reclaims r's expired lease: ready again, at the front of its
// queue (its holder's TTL was its wait; it does not wait for the whole queue
// again); once it has been reclaimed ReclaimMax times in a row (counted
// after the increment) it is given up (giveUp). It reports whether r went
// ready. The matched wake is kept either way.
func (d *dispatcher) requeue(r *row) bool {
	d.clearLease(r)
	r.reclaims++
	if r.reclaims >= d.s.opts.ReclaimMax && !d.giveUp(r, eventlog.ReasonStaleReclaimExceeded) {
		return false
	}
	if r.status != eventlog.DispatchReady {
		d.makeReady(r)
	}
	if r.elem != nil {
		d.ready[r.queue].MoveToFront(r.elem)
	}
	return true
}

// --- timers -----------------------------------------------------------------

func (d *dispatcher) stopTimer(r *row) {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	r.timerTok++
}

// schedule installs r's timer. fn runs under d.mu, only if the timer is still
// r's current one and the Store is open.
func (d *dispatcher) schedule(r *row, after time.Duration, fn func(now time.Time)) {
	d.stopTimer(r)
	tok := r.timerTok
	r.stop = d.s.clock.AfterFunc(after, func() {
		if d.s.closed.Load() {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.closed || r.timerTok != tok {
			return
		}
		r.stop = nil
		fn(d.s.clock.Now())
	})
}

// scheduleExpiry arms the expiry timer of r's current lease.
func (d *dispatcher) scheduleExpiry(r *row, now time.Time) {
	id := r.leaseID
	d.schedule(r, r.expires.Sub(now), func(now time.Time) {
		if r.status != eventlog.DispatchLeased || r.leaseID != id {
			return
		}
		if now.Before(r.expires) {
			// A clock may deliver early by its own Now (the wall clock
			// jumping back): look again when the lease really runs out.
			d.scheduleExpiry(r, now)
			return
		}
		d.requeue(r)
	})
}

// scheduleFire arms the timer of r's timed condition (a timer_fired, or a
// human_response that expires). A suspend of a new generation on the same
// condition arms it again, with the same deadline.
func (d *dispatcher) scheduleFire(r *row, now time.Time) {
	cond := r.wakeOn.Clone()
	deadline, _ := eventlog.Deadline(&cond)
	d.schedule(r, deadline.Sub(now), func(now time.Time) {
		if r.status != eventlog.DispatchSuspended || r.wakeOn == nil || !r.wakeOn.Equal(cond) {
			return
		}
		if now.Before(deadline) {
			d.scheduleFire(r, now)
			return
		}
		d.fireTimer(r)
	})
}

// --- helpers ----------------------------------------------------------------

func validTaskID(field, id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return fmt.Errorf("%w: %s: %w", eventlog.ErrInvalidArgument, field, err)
	}
	return nil
}

func cloneWake(w *noeta.Wake) *noeta.Wake {
	if w == nil {
		return nil
	}
	c := w.Clone()
	return &c
}
