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
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
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
	// FIFO order but for rows whose spell goes ahead (Row.Front). Reserved ready rows are kept out: a row's reservation cannot
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

	// handoffs holds, per queue, the blocked untargeted Leases an Enqueue
	// with HandOff may hand a new task to, in the order they (last) began
	// waiting. A claimed one is removed and sent its lease under mu.
	handoffs map[string][]*waiter
}

// waiter is a blocked untargeted Lease.
type waiter struct {
	worker string
	ttl    time.Duration
	// handed gets the lease an Enqueue granted it, sent under mu once it
	// was taken off handoffs (so once); buffered, so sending never blocks.
	handed chan eventlog.Lease
}

// row is the dispatcher's record of one task: the state machine's row
// (dispatchrow.Row, whose transitions every operation runs), and what this
// backend keeps beside it in memory.
type row struct {
	dispatchrow.Row
	task string
	seq  uint64

	elem *list.Element // in d.ready[queue] while ready and not reserved
	ttl  time.Duration // Heartbeat extends by the TTL the lease was granted with

	// The row's one clock timer: lease expiry while leased, the timed
	// condition's deadline while suspended. timerTok changes on every stop,
	// so a callback that was already running when it was stopped sees it is
	// stale.
	stop     func() bool
	timerTok uint64
}

// sm is the state machine's row of r, nil when there is none, for the
// guards that say so.
func (r *row) sm() *dispatchrow.Row {
	if r == nil {
		return nil
	}
	return &r.Row
}

func (d *dispatcher) init(s *Store) {
	d.s = s
	d.rows = map[string]*row{}
	d.ready = map[string]*list.List{}
	d.leased = map[*row]struct{}{}
	d.waiters = map[string]chan struct{}{}
	d.handoffs = map[string][]*waiter{}
}

// close stops every outstanding timer, if s is the current Store. Blocked
// Leases are released by s.done, which Store.Close closes first.
func (d *dispatcher) close(s *Store) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.s != s {
		return // a handle reopened since: the memory is another Store's
	}
	d.closed = true
	for _, r := range d.rows {
		d.stopTimer(r)
	}
}

// reopen hands the dispatcher from the closed Store old to ns, if old is
// its current Store, and arms every row's timer again: the expiry of a
// lease, the deadline of a timed condition.
func (d *dispatcher) reopen(old, ns *Store) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.s != old {
		return false
	}
	d.s = ns
	d.closed = false
	clear(d.waiters) // their Leases returned with the old Store
	clear(d.handoffs)
	now := ns.clock.Now()
	for _, r := range d.rows {
		switch _, timed := r.Deadline(); {
		case r.Status == eventlog.DispatchLeased:
			d.scheduleExpiry(r, now)
		case timed:
			d.scheduleFire(r, now)
		}
	}
	return true
}

// lock takes d.mu unless the dispatcher is closed or s is not its current
// Store. An operation that passed s.check can still race Close; refusing it
// here keeps it from installing a timer that close already swept past, and
// keeps a closed handle from acting on a memory another Store has reopened.
func (d *dispatcher) lock(s *Store) error {
	d.mu.Lock()
	if d.closed || d.s != s {
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
	if err := d.lock(s); err != nil {
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
	if err := d.lock(s); err != nil {
		return err
	}
	defer d.mu.Unlock()
	_, err := d.liveRow(lease, now)
	return err
}

// liveRow returns the row lease.Task if lease is its live lease, else an
// error wrapping ErrInvalidLease that says why (dispatchrow.Live).
func (d *dispatcher) liveRow(lease eventlog.Lease, now time.Time) (*row, error) {
	r := d.rows[lease.Task]
	if err := dispatchrow.Live(r.sm(), lease, now); err != nil {
		return nil, err
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
	if err := d.lock(s); err != nil {
		return err
	}
	defer d.mu.Unlock()

	r := d.rows[task]
	if r == nil {
		queue := opts.Queue
		if queue == "" {
			queue = eventlog.DefaultQueue
			if p := d.rows[opts.Parent]; p != nil {
				queue = p.Queue
			}
		}
		d.seq++
		r = &row{Row: dispatchrow.New(queue, opts.Reserved), task: task, seq: d.seq}
		d.rows[task] = r
		if opts.HandOff && !opts.Reserved {
			if ws := d.handoffs[queue]; len(ws) > 0 {
				w := ws[0]
				d.dropHandoff(queue, 0)
				w.handed <- d.grant(r, w.worker, w.ttl, s.clock.Now())
				return nil
			}
		}
		d.settle(r, nil, time.Time{})
		return nil
	}
	old := r.Row
	if r.Enqueue(opts.Reserved) {
		d.settle(r, &old, time.Time{})
	}
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
		if err := d.lock(s); err != nil {
			return eventlog.Lease{}, err
		}
		defer d.mu.Unlock()
		r := d.rows[req.Task]
		if err := dispatchrow.CheckTake(req.Task, r.sm()); err != nil {
			return eventlog.Lease{}, err
		}
		return d.grant(r, req.Worker, ttl, s.clock.Now()), nil
	}

	queue := req.Queue
	if queue == "" {
		queue = eventlog.DefaultQueue
	}
	for {
		if err := d.lock(s); err != nil {
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
		w := &waiter{worker: req.Worker, ttl: ttl, handed: make(chan eventlog.Lease, 1)}
		d.handoffs[queue] = append(d.handoffs[queue], w)
		d.mu.Unlock()

		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.done:
			err = eventlog.ErrClosed
		case <-ch:
			// Another waiter may win the row; the loop looks again.
		case lease := <-w.handed:
			w.handed <- lease // taken below, as a claim seen late is
		}
		if lease, ok := d.unwait(s, queue, w); ok {
			if err == nil {
				err = s.check(ctx)
			}
			if err == nil {
				return lease, nil
			}
			d.giveBack(s, lease)
			return eventlog.Lease{}, err
		}
		if err == nil {
			err = s.check(ctx)
		}
		if err != nil {
			return eventlog.Lease{}, err
		}
	}
}

// unwait removes w from queue's hand-off waiters. If an Enqueue claimed it
// first, it returns the lease that Enqueue granted it.
func (d *dispatcher) unwait(s *Store, queue string, w *waiter) (eventlog.Lease, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.handoffs[queue]
	if i := slices.Index(ws, w); i >= 0 || d.s != s {
		if i >= 0 {
			d.dropHandoff(queue, i)
		}
		return eventlog.Lease{}, false
	}
	select {
	case lease := <-w.handed:
		return lease, true
	default:
		return eventlog.Lease{}, false // cleared by a reopen
	}
}

// dropHandoff removes the i-th hand-off waiter of queue.
func (d *dispatcher) dropHandoff(queue string, i int) {
	ws := slices.Delete(d.handoffs[queue], i, i+1)
	if len(ws) == 0 {
		delete(d.handoffs, queue)
		return
	}
	d.handoffs[queue] = ws
}

// giveBack returns a lease handed to a Lease that had gone: ready again,
// ahead of its queue, as jetstream's ungrant does.
func (d *dispatcher) giveBack(s *Store, lease eventlog.Lease) {
	if d.lock(s) != nil {
		// Closed: a reopened Store arms the lease's expiry, which requeues
		// the task (the JetStream dispatcher gives it back instead).
		return
	}
	defer d.mu.Unlock()
	if r := d.rows[lease.Task]; r != nil {
		old := r.Row
		if r.GiveBack(lease, false) {
			d.settle(r, &old, s.clock.Now())
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
	if err := d.lock(s); err != nil {
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
	old := r.Row
	if err := r.Heartbeat(lease, now, now.Add(r.ttl), s.opts.HeartbeatMax); err != nil {
		// Past the cap the task was released; any other error changed nothing.
		d.settle(r, &old, now)
		return time.Time{}, err
	}
	d.settle(r, &old, now)
	return r.Expires, nil
}

// Release implements eventlog.Dispatcher.
func (s *Store) Release(ctx context.Context, lease eventlog.Lease, rel eventlog.Release) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := dispatchrow.CheckRelease(rel); err != nil {
		return err
	}
	r, now, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	old := r.Row
	if err := r.Release(lease, rel, now); err != nil {
		return err
	}
	d.settle(r, &old, now)
	return nil
}

// Yield implements eventlog.Dispatcher.
func (s *Store) Yield(ctx context.Context, lease eventlog.Lease) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	r, now, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	old := r.Row
	if err := r.Yield(lease, now); err != nil {
		return err
	}
	d.settle(r, &old, now)
	return nil
}

// Fail implements eventlog.Dispatcher.
func (s *Store) Fail(ctx context.Context, lease eventlog.Lease, f eventlog.Failure) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	r, now, err := s.lockLive(lease)
	if err != nil {
		return err
	}
	d := &s.disp
	defer d.mu.Unlock()
	old := r.Row
	if err := r.Fail(lease, f, now, s.opts.MaxFailAttempts); err != nil {
		return err
	}
	d.settle(r, &old, now)
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
	if err := d.lock(s); err != nil {
		return false, err
	}
	defer d.mu.Unlock()
	r := d.rows[task]
	if r == nil {
		return false, fmt.Errorf("%w: wake for task %q: the dispatcher does not know the task", eventlog.ErrNotFound, task)
	}
	event = event.Clone()
	event.ReceivedAt = time.Time{}
	now := s.clock.Now()
	if event.Kind == noeta.WakeHumanResponse {
		// Received now, by this store's clock, whatever the caller put
		// there: the engine judges the answer against its request's
		// expiry by it. (An answer the row refuses is dropped with it.)
		event.ReceivedAt = now.UTC().Truncate(time.Millisecond)
	}
	old := r.Row
	matched, err := r.Wake(task, event, s.opts.MaxPendingWakes)
	if err != nil {
		return false, err
	}
	d.settle(r, &old, now)
	return matched, nil
}

// RequeueStale implements eventlog.Dispatcher. The expiry timers normally do
// this as leases run out; the sweep catches whatever a timer has not yet (a
// clock that delivers late, a caller that wants it now).
func (s *Store) RequeueStale(ctx context.Context) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	d := &s.disp
	if err := d.lock(s); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	now := s.clock.Now()
	var stale []*row
	for r := range d.leased {
		if r.Expired(now) {
			stale = append(stale, r)
		}
	}
	slices.SortFunc(stale, func(a, b *row) int { return cmp.Compare(a.seq, b.seq) })
	ids := []string{}
	for _, r := range stale {
		old := r.Row
		ready := r.Requeue(s.opts.ReclaimMax)
		d.settle(r, &old, now)
		if ready {
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
	if err := d.lock(s); err != nil {
		return eventlog.DispatchState{}, err
	}
	defer d.mu.Unlock()
	r := d.rows[task]
	if r == nil {
		return eventlog.DispatchState{}, fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNotFound, task)
	}
	return r.State(task), nil
}

// --- side effects (all under d.mu) -----------------------------------------

// grant leases the ready row r for ttl.
func (d *dispatcher) grant(r *row, worker string, ttl time.Duration, now time.Time) eventlog.Lease {
	old := r.Row
	r.ttl = ttl
	r.Grant(noeta.NewID(), worker, now.Add(ttl))
	d.settle(r, &old, now)
	return r.Lease(r.task)
}

// settle brings what this backend keeps beside r in memory in line with a
// transition of r from old (nil for a new row) at now, as jetstream's
// afterWrite derives its side effects from the old and new row: r's place in
// its ready queue (a new ready spell joins it, at the front if the row says
// so, and wakes a blocked Lease), the index of leased rows, and r's one
// timer (the lease's expiry, or the timed condition's deadline).
func (d *dispatcher) settle(r *row, old *dispatchrow.Row, now time.Time) {
	if dispatchrow.NewSpell(old, &r.Row) {
		d.unqueue(r)
		l := d.ready[r.Queue]
		if l == nil {
			l = list.New()
			d.ready[r.Queue] = l
		}
		if r.Front {
			r.elem = l.PushFront(r)
		} else {
			r.elem = l.PushBack(r)
		}
		if ch := d.waiters[r.Queue]; ch != nil {
			close(ch)
			delete(d.waiters, r.Queue)
		}
	} else if r.Status != eventlog.DispatchReady || r.Reserved {
		// Only a targeted Lease can take a reserved row; see dispatcher.ready.
		d.unqueue(r)
	}
	switch {
	case r.Status == eventlog.DispatchLeased:
		d.leased[r] = struct{}{}
		if old == nil || old.Status != eventlog.DispatchLeased || old.LeaseID != r.LeaseID || !old.Expires.Equal(r.Expires) {
			d.scheduleExpiry(r, now)
		}
	case dispatchrow.ArmsTimer(old, &r.Row):
		delete(d.leased, r)
		d.scheduleFire(r, now)
	default:
		delete(d.leased, r)
		if _, timed := r.Deadline(); !timed {
			d.stopTimer(r)
		} // else still suspended on the condition whose timer is armed
	}
}

func (d *dispatcher) unqueue(r *row) {
	if r.elem != nil {
		d.ready[r.Queue].Remove(r.elem)
		r.elem = nil
	}
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
	s := d.s
	r.stop = s.clock.AfterFunc(after, func() {
		if s.closed.Load() {
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
	id := r.LeaseID
	d.schedule(r, r.Expires.Sub(now), func(now time.Time) {
		if r.Status != eventlog.DispatchLeased || r.LeaseID != id {
			return
		}
		if !r.Expired(now) {
			// A clock may deliver early by its own Now (the wall clock
			// jumping back): look again when the lease really runs out.
			d.scheduleExpiry(r, now)
			return
		}
		old := r.Row
		r.Requeue(d.s.opts.ReclaimMax)
		d.settle(r, &old, now)
	})
}

// scheduleFire arms the timer of r's timed condition (a timer_fired, or a
// human_response that expires).
func (d *dispatcher) scheduleFire(r *row, now time.Time) {
	cond := r.WakeOn.Clone()
	deadline, _ := eventlog.Deadline(&cond)
	gen := r.Generation
	d.schedule(r, deadline.Sub(now), func(now time.Time) {
		if r.Status != eventlog.DispatchSuspended || r.Generation != gen || r.WakeOn == nil || !r.WakeOn.Equal(cond) {
			return
		}
		if now.Before(deadline) {
			d.scheduleFire(r, now)
			return
		}
		old := r.Row
		r.FireTimer()
		d.settle(r, &old, now)
	})
}

// --- helpers ----------------------------------------------------------------

func validTaskID(field, id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return fmt.Errorf("%w: %s: %w", eventlog.ErrInvalidArgument, field, err)
	}
	return nil
}
