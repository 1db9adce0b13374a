package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
)

// The hand-off (EnqueueOptions.HandOff, ADR 0112). A blocked untargeted
// Lease of this Dispatcher is a waiter of its queue. An Enqueue that creates
// a task's row with HandOff claims the first one, writes the row
// leased to it (its lease key first, as every grant), and sends it the
// lease: the task is never ready, no signal is published, fetched or
// acknowledged, and the row is written once instead of twice.
//
// A claimed waiter takes what the claimer sends, whatever else happens to
// it: a signal fetched meanwhile goes back to the queue (Nak), and a lease
// handed to a caller that has gone is given back (ungrant). The pull request
// a waiter had open at the server is kept as a spare for the queue's next
// waiter, so hand-offs do not pile pull requests up at the server; while
// nobody holds a spare, a signal it catches goes back to the queue at once.

// waiter is a blocked untargeted Lease of queue, for worker.
type waiter struct {
	queue, worker string
	// handed receives one result once the waiter is claimed (buffered:
	// the claimer never blocks): a lease, or ok false when the claimer's
	// write did not make one, and the waiter goes on waiting.
	handed chan handedLease
}

type handedLease struct {
	lease eventlog.Lease
	ok    bool
}

// sparePull is a waiter's pull request still open at the server, left by a
// waiter that was handed a task or gave up. watchSpare watches it until a
// waiter of the queue adopts it, or it ends.
type sparePull struct {
	queue string
	batch jetstream.MessageBatch
	// adopted is set under d.mu; took is closed then, and done once
	// watchSpare has stopped reading the batch. msg is a signal it
	// received after the adoption, for the adopter (read after done).
	adopted bool
	took    chan struct{}
	done    chan struct{}
	msg     jetstream.Msg
}

// addWaiter registers a blocked Lease of queue.
func (d *Dispatcher) addWaiter(queue, worker string) *waiter {
	w := &waiter{queue: queue, worker: worker, handed: make(chan handedLease, 1)}
	d.mu.Lock()
	d.waiting[queue] = append(d.waiting[queue], w)
	d.mu.Unlock()
	return w
}

// dropWaiter removes w from its queue's waiters. False means a claimer took
// it first: a result is, or will soon be, on w.handed.
func (d *Dispatcher) dropWaiter(w *waiter) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.waiting[w.queue]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	d.waiting[w.queue] = slices.Delete(ws, i, i+1)
	if len(d.waiting[w.queue]) == 0 {
		delete(d.waiting, w.queue)
	}
	return true
}

// claimWaiter takes queue's first waiter, or nil. Waiters are in the order
// they began waiting; one that began again (a claim that handed it nothing,
// a stale signal) is at the back.
func (d *Dispatcher) claimWaiter(queue string) *waiter {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.waiting[queue]
	if len(ws) == 0 {
		return nil
	}
	w := ws[0]
	d.waiting[queue] = slices.Delete(ws, 0, 1)
	if len(d.waiting[queue]) == 0 {
		delete(d.waiting, queue)
	}
	return w
}

// errRowExists: a hand-off found the task's row already there.
var errRowExists = errors.New("jetstream: dispatcher: the task has a row")

// handOff is Enqueue with HandOff for a task without a row: if a waiter of
// the task's queue is claimed, the row is created leased to it. It reports
// whether the task was handed off; false with a nil error means Enqueue
// goes on as without HandOff: nobody waits, the row exists, or the write
// failed (the plain Enqueue then finds the row as it is, and a row that
// landed leased to a waiter that was not told is forced back to ready).
func (d *Dispatcher) handOff(ctx context.Context, task string, opts eventlog.EnqueueOptions) (bool, error) {
	d.mu.Lock()
	nobody := len(d.waiting) == 0
	d.mu.Unlock()
	if nobody {
		return false, nil // before the parent's row is read for its queue
	}
	queue, err := d.newQueue(ctx, opts)
	if err != nil {
		return false, err
	}
	w := d.claimWaiter(queue)
	if w == nil {
		return false, nil
	}
	lease, err := d.createLeased(task, queue, w.worker)
	if err != nil {
		w.handed <- handedLease{}
		if !errors.Is(err, errRowExists) {
			d.log.Warn("hand a new task to a blocked lease; it joins its queue instead", "task", task, "queue", queue, "err", err)
		}
		return false, nil
	}
	w.handed <- handedLease{lease: lease, ok: true}
	d.stats.handOffs.Add(1)
	return true, nil
}

// createLeased creates task's row leased to worker, in one write: the lease
// key first, then the row, created only if there is none (errRowExists
// otherwise, and the key is deleted: no row ever named it). As a grant, it
// runs on a detached context and reads the clock before writing the key.
func (d *Dispatcher) createLeased(task, queue, worker string) (eventlog.Lease, error) {
	ctx, cancel := d.detached()
	defer cancel()
	leaseID := noeta.NewID()
	now := d.cfg.Now()
	r := &taskRow{Row: dispatchrow.New(queue, false), Created: now.UTC()}
	if err := d.putLeaseKey(ctx, task, leaseID, r.Generation+1, worker); err != nil {
		return eventlog.Lease{}, err
	}
	r.Grant(leaseID, worker, now.Add(d.cfg.LeaseTTL))
	r.Op = noeta.NewID()
	val, err := json.Marshal(r)
	if err != nil {
		d.dropLeaseKey(ctx, task, leaseID)
		return eventlog.Lease{}, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
	}
	_, err = d.tasks.Create(ctx, task, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		d.dropLeaseKey(ctx, task, leaseID)
		return eventlog.Lease{}, errRowExists
	}
	if err != nil {
		// Ambiguous: the row says whether this write landed, as in mutate,
		// read on a context of its own (the write's may have run out).
		rctx, rcancel := d.detached()
		defer rcancel()
		back, _, rerr := d.getRow(rctx, task)
		if rerr != nil || back == nil || back.Op != r.Op {
			// Not ours (or unknown): purging the key makes the watchers
			// requeue the task if the write landed after all.
			_ = d.leases.Purge(rctx, leaseKey(task, leaseID))
			return eventlog.Lease{}, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
		}
	}
	d.afterWrite(task, nil, r)
	return r.Lease(task), nil
}

// dropLeaseKey deletes the key of a lease no row named, as afterWrite
// deletes an ended lease's: the watchers pass over a plain delete, and this
// Dispatcher's over the expiry marker the server writes for it later.
func (d *Dispatcher) dropLeaseKey(ctx context.Context, task, leaseID string) {
	d.ended.add(leaseKey(task, leaseID))
	_ = d.leases.Delete(ctx, leaseKey(task, leaseID))
}

// takeHanded waits for the result a claimer sends a claimed waiter. A lease
// handed to a caller whose ctx has ended, or to a closed Dispatcher, is
// given back, ahead of its queue, so no lease is left to expire.
func (d *Dispatcher) takeHanded(ctx context.Context, w *waiter) (eventlog.Lease, bool) {
	h := <-w.handed
	if !h.ok {
		return eventlog.Lease{}, false
	}
	if ctx.Err() != nil || d.closed.Load() {
		gctx, cancel := d.detached()
		d.ungrant(gctx, h.lease, false)
		cancel()
		return eventlog.Lease{}, false
	}
	return h.lease, true
}

// keepSpare leaves batch, a pull request that has delivered nothing (it may
// have ended since), for the queue's next waiter. Until one adopts it, a
// signal it delivers goes back to the queue at once, for any other fetcher.
func (d *Dispatcher) keepSpare(queue string, batch jetstream.MessageBatch) {
	sp := &sparePull{queue: queue, batch: batch, took: make(chan struct{}), done: make(chan struct{})}
	d.mu.Lock()
	d.spares[queue] = append(d.spares[queue], sp)
	d.mu.Unlock()
	if !d.goTracked(func() { d.watchSpare(sp) }) {
		d.dropSpare(sp)
		close(sp.done)
	}
}

func (d *Dispatcher) watchSpare(sp *sparePull) {
	defer close(sp.done)
	select {
	case m, ok := <-sp.batch.Messages():
		adopted := d.settleSpare(sp)
		if !ok {
			return
		}
		if adopted {
			sp.msg = m
			return
		}
		_ = m.Nak()
	case <-sp.took:
	case <-d.done:
		d.settleSpare(sp)
	}
}

// settleSpare removes sp from its queue's spares unless it was adopted, and
// reports whether it was.
func (d *Dispatcher) settleSpare(sp *sparePull) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sp.adopted {
		return true
	}
	d.dropSpareLocked(sp)
	return false
}

// dropSpare removes sp from its queue's spares.
func (d *Dispatcher) dropSpare(sp *sparePull) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropSpareLocked(sp)
}

func (d *Dispatcher) dropSpareLocked(sp *sparePull) {
	ss := d.spares[sp.queue]
	if i := slices.Index(ss, sp); i >= 0 {
		d.spares[sp.queue] = slices.Delete(ss, i, i+1)
	}
	if len(d.spares[sp.queue]) == 0 {
		delete(d.spares, sp.queue)
	}
}

// adoptSpare takes the oldest spare pull request of queue (the server hands
// the next signal to the oldest request): its batch, and a signal it
// delivered while being adopted; nil if there is none. An adopted spare is
// not bounded by the adopter's deadline; it ends within waitSlice of when
// it was sent.
func (d *Dispatcher) adoptSpare(queue string) (jetstream.MessageBatch, jetstream.Msg) {
	d.mu.Lock()
	ss := d.spares[queue]
	if len(ss) == 0 {
		d.mu.Unlock()
		return nil, nil
	}
	sp := ss[0]
	d.spares[queue] = slices.Delete(ss, 0, 1)
	if len(d.spares[queue]) == 0 {
		delete(d.spares, queue)
	}
	sp.adopted = true
	close(sp.took)
	d.mu.Unlock()
	<-sp.done
	return sp.batch, sp.msg
}
