package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
// Dispatcher runs it, so there is no sweeper to elect: on an expiry marker of
// <task>.<lease> (the server's MaxAge marker, which nats.go reports as a
// purge) or a deliberate purge of the key, each one tries to requeue the
// task if its row still names that lease; the compare-and-set lets one win,
// and the others find the row changed.
//
// A plain delete is the key of a lease that ended normally, deleted after
// its row moved on (afterWrite), and so is the expiry marker the server
// writes for that delete one TTL later when this Dispatcher deleted it
// (endedLeases): there is nothing to requeue, and reading the row for each
// of a busy fleet's releases made the watcher fall behind and its
// subscription's queue grow with them (docs/scale.md).
// Where a key is removed so that the watchers requeue its task (a grant
// whose row write was ambiguous, a cancelled grant not given back), it is
// purged; a key removed by hand is the reconciler's.
func (d *Dispatcher) watchLeases(w jetstream.KeyWatcher) {
	defer d.wg.Done()
	for {
		select {
		case <-d.done:
			return
		case e, ok := <-w.Updates():
			if !ok {
				// Stopped on its own (its subscription ended): watch again,
				// and let the reconciler requeue what expired meanwhile.
				if w = d.rewatchLeases(); w == nil {
					return
				}
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePurge || d.ended.take(e.Key()) {
				continue
			}
			d.stats.watchedEnds.Add(1)
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
// pause, for about a minute; the reconciler covers anything longer.
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
	d.log.Error("gave up requeueing an expired lease; the reconciler will", "task", task, "lease", leaseID)
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
		ready = r.Requeue(d.cfg.ReclaimMax)
		return r, nil
	})
	if err == nil {
		d.stats.requeued.Add(1)
	}
	return ready, err
}

// rewatchLeases starts the leases watcher again after it stopped on its
// own, retrying with a growing pause until it succeeds or Close begins
// (nil).
func (d *Dispatcher) rewatchLeases() jetstream.KeyWatcher {
	w, _ := restartUntilClosed(d, "leases watcher",
		func() (jetstream.KeyWatcher, error) {
			return d.leases.WatchAll(d.bg, jetstream.UpdatesOnly(), jetstream.MetaOnly())
		},
		func(w jetstream.KeyWatcher) { d.watcher = w },
		func(w jetstream.KeyWatcher) { _ = w.Stop() })
	return w
}
