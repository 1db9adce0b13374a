package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// leaseKey is the liveness key of one lease. It names the lease, not only
// the task: a lease's key is written before the row names the lease and
// deleted after the row let it go, and with one key per task those two
// windows of consecutive leases would overlap (a late delete of the old key
// would kill the new lease, a watcher could requeue a lease whose key was
// not yet written). With one key per lease, "the row names lease L and key
// <task>.<L> is gone" means exactly "L has ended".
func leaseKey(task, leaseID string) string { return task + "." + leaseID }

// leaseValue is the value of a lease key, for operators reading the bucket.
type leaseValue struct {
	LeaseID    string `json:"lease_id"`
	Generation uint64 `json:"generation"`
	Worker     string `json:"worker"`
}

func (d *Dispatcher) putLeaseKey(ctx context.Context, task, leaseID string, gen uint64, worker string) error {
	val, _ := json.Marshal(leaseValue{LeaseID: leaseID, Generation: gen, Worker: worker})
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if _, err := d.leases.Put(ctx, leaseKey(task, leaseID), val); err != nil {
		return fmt.Errorf("jetstream: lease key of %s: %w", task, err)
	}
	return nil
}

// refreshLeaseKey rewrites a live lease's key, which restarts its age (the
// bucket's TTL counts from the last write). The write is a compare-and-set on
// the revision just read, so a key that expired or was deleted in between is
// not brought back.
func (d *Dispatcher) refreshLeaseKey(ctx context.Context, lease eventlog.Lease, gen uint64) error {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	key := leaseKey(lease.Task, lease.ID)
	e, err := d.leases.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: task %q: lease %q has expired at the server", eventlog.ErrInvalidLease, lease.Task, lease.ID)
	}
	if err != nil {
		return fmt.Errorf("jetstream: lease key of %s: %w", lease.Task, err)
	}
	val, _ := json.Marshal(leaseValue{LeaseID: lease.ID, Generation: gen, Worker: lease.Worker})
	if _, err := d.leases.Update(ctx, key, val, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: task %q: lease %q expired at the server during the heartbeat", eventlog.ErrInvalidLease, lease.Task, lease.ID)
		}
		return fmt.Errorf("jetstream: lease key of %s: %w", lease.Task, err)
	}
	return nil
}

// watchLeases requeues expired leases as the server reports them. Every
// Dispatcher runs it, so there is no sweeper to elect: on a delete or expiry
// marker of <task>.<lease>, each one tries to requeue the task if its row
// still names that lease; the compare-and-set lets one win, and the others
// find the row changed.
func (d *Dispatcher) watchLeases(w jetstream.KeyWatcher) {
	defer d.wg.Done()
	for {
		select {
		case <-d.done:
			return
		case e, ok := <-w.Updates():
			if !ok {
				if !d.closed.Load() {
					d.log.Error("the leases watcher stopped; expired leases are requeued only by sweeps until this Dispatcher is reopened")
				}
				return
			}
			if e == nil || e.Operation() == jetstream.KeyValuePut {
				continue
			}
			task, leaseID, ok := strings.Cut(e.Key(), ".")
			if !ok {
				continue
			}
			ctx, cancel := d.detached()
			if _, err := d.reclaim(ctx, task, leaseID, true); err != nil && !errors.Is(err, errSkip) {
				d.log.Warn("requeue of an expired lease failed; retrying in the background", "task", task, "lease", leaseID, "err", err)
				d.goTracked(func() { d.retryReclaim(task, leaseID) })
			}
			cancel()
		}
	}
}

// retryReclaim retries a requeue the watcher could not write, with a growing
// pause, for about a minute; the sweep covers anything longer.
func (d *Dispatcher) retryReclaim(task, leaseID string) {
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
		_, err := d.reclaim(ctx, task, leaseID, true)
		cancel()
		if err == nil || errors.Is(err, errSkip) {
			return
		}
		d.log.Warn("requeue of an expired lease", "task", task, "lease", leaseID, "err", err)
	}
	d.log.Error("gave up requeueing an expired lease; the sweep will", "task", task, "lease", leaseID)
}

// reclaim requeues task if its row still names leaseID as a lease that has
// ended: keyGone says its key is known to be gone; otherwise the local
// expiry must have passed. It reports whether the task went ready (false:
// it ended terminal); errSkip if there was nothing to reclaim.
func (d *Dispatcher) reclaim(ctx context.Context, task, leaseID string, keyGone bool) (bool, error) {
	var ready bool
	_, err := d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		if r == nil || r.Status != eventlog.DispatchLeased || r.LeaseID != leaseID {
			return nil, errSkip
		}
		if !keyGone && d.cfg.Now().Before(r.Expires) {
			return nil, errSkip // heartbeated in the meantime
		}
		ready = r.requeue(d.cfg.ReclaimMax)
		return r, nil
	})
	if err == nil {
		d.stats.requeued.Add(1)
	}
	return ready, err
}

// RequeueStale implements eventlog.Dispatcher: a sweep over every row of the
// prefix. A leased row whose lease has ended (its key is gone, or its local
// expiry passed) is requeued, as the watchers would; the ids that went
// ready are returned in creation order. The sweep also repairs what a crash
// between two writes can leave: a ready, unreserved row gets its signal
// again (refused, harmlessly, if it has one), and a row suspended on a timer
// gets its schedule again, or is woken if the deadline has passed.
func (d *Dispatcher) RequeueStale(ctx context.Context) ([]string, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	return d.sweep(ctx)
}

func (d *Dispatcher) sweep(ctx context.Context) ([]string, error) {
	lister, err := d.tasks.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: list %s: %w", d.cfg.tasksBucket(), err)
	}
	seen := map[string]bool{}
	var tasks []string
	for k := range lister.Keys() {
		if !seen[k] { // a busy bucket may list a key twice
			seen[k] = true
			tasks = append(tasks, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	type hit struct {
		task    string
		created time.Time
	}
	var (
		mu       sync.Mutex
		hits     []hit
		firstErr error
		wg       sync.WaitGroup
		work     = make(chan string)
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for range min(8, len(tasks)) {
		wg.Go(func() {
			for task := range work {
				requeued, r, err := d.sweepRow(ctx, task)
				if err != nil {
					fail(err)
					continue
				}
				if requeued {
					mu.Lock()
					hits = append(hits, hit{task, r.Created})
					mu.Unlock()
				}
			}
		})
	}
	for _, t := range tasks {
		work <- t
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.task, b.task))
	})
	ids := make([]string, 0, len(hits))
	for _, h := range hits {
		ids = append(ids, h.task)
	}
	return ids, nil
}

// sweepRow does the sweep's work on one row and reports whether it requeued
// it to ready.
func (d *Dispatcher) sweepRow(ctx context.Context, task string) (bool, *taskRow, error) {
	r, _, err := d.getRow(ctx, task)
	if err != nil || r == nil {
		return false, nil, err
	}
	switch r.Status {
	case eventlog.DispatchLeased:
		keyGone := false
		if d.cfg.Now().Before(r.Expires) {
			kctx, cancel := d.withTimeout(ctx)
			_, err := d.leases.Get(kctx, leaseKey(task, r.LeaseID))
			cancel()
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				keyGone = true
			case err != nil:
				return false, nil, fmt.Errorf("jetstream: lease key of %s: %w", task, err)
			default:
				return false, nil, nil // live
			}
		}
		ready, err := d.reclaim(ctx, task, r.LeaseID, keyGone)
		if errors.Is(err, errSkip) {
			return false, nil, nil
		}
		return ready, r, err
	case eventlog.DispatchReady:
		if !r.Reserved {
			if err := d.signal(ctx, task, r.Queue, r.ReadyEpoch, false); err != nil {
				return false, nil, fmt.Errorf("jetstream: ready signal of %s: %w", task, err)
			}
		}
	case eventlog.DispatchSuspended:
		if r.WakeOn != nil && r.WakeOn.Kind == noeta.WakeTimerFired && r.Matched == nil {
			cond := r.WakeOn.Clone()
			if d.cfg.Now().Before(cond.FireAt) {
				if err := d.armTimer(ctx, task, r.Generation, cond); err != nil {
					return false, nil, err
				}
				break
			}
			if _, err := d.fireTimer(ctx, task, r.Generation, cond, 0); err != nil && !errors.Is(err, errSkip) {
				return false, nil, err
			}
		}
	}
	return false, nil, nil
}

// sweepLoop runs the sweep every SweepInterval (jittered, so processes
// started together do not sweep together).
func (d *Dispatcher) sweepLoop(ctx context.Context) {
	defer d.wg.Done()
	for {
		jitter := time.Duration(float64(d.cfg.SweepInterval) * (0.75 + 0.5*rand.Float64()))
		t := time.NewTimer(jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if ids, err := d.sweep(ctx); err != nil {
			if ctx.Err() == nil {
				d.log.Warn("sweep failed", "err", err)
			}
		} else if len(ids) > 0 {
			d.log.Info("sweep requeued expired leases", "tasks", ids)
		}
	}
}
