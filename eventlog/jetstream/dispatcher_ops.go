package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
)

// Valid implements eventlog.LeaseRegistry. It runs on every Emit of the
// JetStream log, so it is two reads made at once: the row (leased, by this
// lease, and not past its expiry by the local clock) and the lease key (it
// exists: the server has not expired it). The key is the server's clock, so
// no local clock can keep a lease alive; the local expiry, taken before the
// key was written, only ever ends a lease earlier than the server would, so
// Valid turns false exactly at Lease.Expires and never later.
//
// A malformed task or lease id names no live lease: false, no error.
func (d *Dispatcher) Valid(ctx context.Context, lease eventlog.Lease) (bool, error) {
	if err := d.check(ctx); err != nil {
		return false, err
	}
	if noeta.ValidateTaskID(lease.Task) != nil || noeta.ValidateToken("lease id", lease.ID, 64) != nil {
		return false, nil
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	key := make(chan error, 1)
	go func() {
		_, err := d.leases.Get(ctx, leaseKey(lease.Task, lease.ID))
		key <- err
	}()
	r, _, err := d.getRow(ctx, lease.Task)
	if err != nil {
		return false, err
	}
	if liveRow(r, lease, d.cfg.Now()) != nil {
		return false, nil // the key read finishes on its own (its channel is buffered)
	}
	if err := <-key; err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("jetstream: lease key of %s: %w", lease.Task, err)
	}
	if r.Reclaims > 0 {
		d.goTracked(func() { d.noteProgress(lease) })
	}
	return true, nil
}

// noteProgress ends a row's run of stale reclaims once the lease that
// followed them writes to the task's log (Valid is the log's check before
// every append): its holder got as far as the log, which is progress. So
// ReclaimMax ends only a task whose holders die before they write anything;
// one that dies later in its turn (a tool that kills the process) is the
// engine's to stop, by the abandoned attempts its log records. Without this,
// a task whose hosts were killed under it three times in a row ended
// terminal in the dispatcher with no terminal record in its log, and its
// parent waited for it forever. Best effort: a failed write leaves the
// count, which only ends the task sooner.
func (d *Dispatcher) noteProgress(lease eventlog.Lease) {
	ctx, cancel := d.detached()
	defer cancel()
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		if !r.row().Progress(lease, d.cfg.Now()) {
			return nil, errSkip
		}
		return r, nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		d.log.Warn("reset the reclaim count after a write under the lease", "task", lease.Task, "err", err)
	}
}

// Enqueue implements eventlog.Dispatcher.
func (d *Dispatcher) Enqueue(ctx context.Context, task string, opts eventlog.EnqueueOptions) error {
	if err := d.check(ctx); err != nil {
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
	if opts.Queue != "" {
		if err := validQueue("EnqueueOptions.Queue", opts.Queue); err != nil {
			return err
		}
	}
	if opts.HandOff && !opts.Reserved {
		handed, err := d.handOff(ctx, task, opts)
		if err != nil || handed {
			return err
		}
	}
	var already *taskRow
	_, err := d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		if r == nil {
			queue, err := d.newQueue(ctx, opts)
			if err != nil {
				return nil, err
			}
			return &taskRow{Row: dispatchrow.New(queue, opts.Reserved), Created: d.cfg.Now().UTC()}, nil
		}
		// Forced back to ready (the old lease's key is deleted after the
		// write), unless it is ready already.
		if !r.Enqueue(opts.Reserved) {
			already = r
			return nil, errSkip
		}
		return r, nil
	})
	if errors.Is(err, errSkip) {
		// A retried Enqueue also repairs a signal lost to a crash: publishing
		// is refused, harmlessly, when one is already there.
		if !already.Reserved {
			if err := d.signal(ctx, task, already.Queue, already.ReadyEpoch, false); err != nil {
				return fmt.Errorf("jetstream: ready signal of %s: %w", task, err)
			}
		}
		return nil
	}
	return err
}

// newQueue is the queue of a task enqueued for the first time with opts:
// opts.Queue, else its parent's if the parent has a row, else the default.
func (d *Dispatcher) newQueue(ctx context.Context, opts eventlog.EnqueueOptions) (string, error) {
	if opts.Queue != "" {
		return opts.Queue, nil
	}
	if opts.Parent != "" {
		p, _, err := d.getRow(ctx, opts.Parent)
		if err != nil {
			return "", err
		}
		if p != nil {
			return p.Queue, nil
		}
	}
	return eventlog.DefaultQueue, nil
}

// Lease implements eventlog.Dispatcher. A targeted lease takes the row
// directly and then withdraws the ready signals of the spell it ended (see
// withdrawSignals); an untargeted one pulls the queue's next signal.
func (d *Dispatcher) Lease(ctx context.Context, req eventlog.LeaseRequest) (eventlog.Lease, error) {
	if err := d.check(ctx); err != nil {
		return eventlog.Lease{}, err
	}
	if req.Worker == "" {
		return eventlog.Lease{}, fmt.Errorf("%w: LeaseRequest.Worker is empty", eventlog.ErrInvalidArgument)
	}
	if req.TTL != 0 && req.TTL != d.cfg.LeaseTTL {
		// The TTL is the leases bucket's, shared by every lease of the prefix.
		return eventlog.Lease{}, fmt.Errorf("%w: LeaseRequest.TTL is %v; this dispatcher's leases all last DispatcherConfig.LeaseTTL (%v): give 0 or that",
			eventlog.ErrInvalidArgument, req.TTL, d.cfg.LeaseTTL)
	}
	if req.Task != "" {
		if err := validTaskID("LeaseRequest.Task", req.Task); err != nil {
			return eventlog.Lease{}, err
		}
		var spell readySpell // of the row the grant committed on (the last try's)
		lease, err := d.grant(ctx, req.Task, req.Worker, func(r *taskRow) error {
			if err := dispatchrow.CheckTake(req.Task, r.row()); err != nil {
				return err
			}
			spell = readySpell{queue: r.Queue, epoch: r.ReadyEpoch, signalled: !r.Reserved, front: r.Front}
			return nil
		})
		if err != nil {
			return eventlog.Lease{}, err
		}
		if spell.signalled {
			// In the background: the lease is the caller's from now, and
			// its time is not spent on the queue's housekeeping (on a
			// loaded cluster two more requests took a good part of a short
			// TTL).
			d.goTracked(func() {
				if h := d.hooks.beforeWithdraw; h != nil {
					h(lease)
				}
				d.withdrawSignals(req.Task, spell)
				if h := d.hooks.afterWithdraw; h != nil {
					h(lease)
				}
			})
		}
		return lease, nil
	}
	queue := req.Queue
	if queue == "" {
		queue = eventlog.DefaultQueue
	}
	if err := validQueue("LeaseRequest.Queue", queue); err != nil {
		return eventlog.Lease{}, err
	}
	return d.leaseFromQueue(ctx, queue, req.Worker, req.Wait)
}

// grant leases task to worker if may allows the row. The lease key is
// written before the row (the key must exist whenever a row names its
// lease, or a watcher or the reconciler would requeue the fresh lease), and the
// expiry is read from the clock before the key is written, so the local
// expiry is never later than the server's.
//
// Once begun, a grant is not cut by ctx: ending the caller's ctx between the
// key and the row, or during the row's write, left a write that might land
// after its ambiguity was judged, a row naming a lease nobody held, and the
// task stuck until the lease expired. The grant runs on a detached context
// (bounded by RequestTimeout) and, if ctx ended meanwhile, is undone before
// Lease returns ctx's error, so a Lease that returns an error leaves no lease
// behind and the task is leasable at once, ahead of its queue.
func (d *Dispatcher) grant(ctx context.Context, task, worker string, may func(r *taskRow) error) (eventlog.Lease, error) {
	leaseID := noeta.NewID()
	keyWritten := false
	reserved := false
	var lease eventlog.Lease
	gctx, gcancel := d.detached()
	defer gcancel()
	_, err := d.mutate(gctx, task, func(r *taskRow) (*taskRow, error) {
		if err := may(r); err != nil {
			return nil, err
		}
		now := d.cfg.Now()
		// Written again on a retry: the generation in it may have moved.
		if err := d.putLeaseKey(gctx, task, leaseID, r.Generation+1, worker); err != nil {
			return nil, err
		}
		keyWritten = true
		reserved = r.Reserved
		r.Grant(leaseID, worker, now.Add(d.cfg.LeaseTTL))
		lease = r.Lease(task)
		return r, nil
	})
	if err != nil {
		if keyWritten {
			// The row does not name this lease (or, after an unresolved
			// ambiguous write, might: purging the key then makes the
			// watchers requeue it, which is the safe outcome).
			_ = d.leases.Purge(gctx, leaseKey(task, leaseID))
		}
		return eventlog.Lease{}, err
	}
	if cerr := ctx.Err(); cerr != nil {
		d.ungrant(gctx, lease, reserved)
		return eventlog.Lease{}, cerr
	}
	return lease, nil
}

// ungrant gives back a lease granted to a caller that had gone: the row is
// ready again, ahead of its queue, with its reservation if it had one, and
// the lease's key is deleted after the write (afterWrite). The generation
// the grant took stays taken; nothing was written under it. If the write
// fails, the key is purged, and the watchers requeue the task as an expired
// lease at once.
func (d *Dispatcher) ungrant(ctx context.Context, lease eventlog.Lease, reserved bool) {
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		if r == nil || !r.GiveBack(lease, reserved) {
			return nil, errSkip
		}
		return r, nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		d.log.Warn("give back a lease granted to a cancelled request; its key goes, for the watchers to requeue it", "task", lease.Task, "lease", lease.ID, "err", err)
		_ = d.leases.Purge(ctx, leaseKey(lease.Task, lease.ID))
	}
}

// Heartbeat implements eventlog.Dispatcher. The lease key is rewritten
// first, with a compare-and-set on its revision, so a key the server has
// already expired is never written again (an expired lease is not revived);
// then the row counts the heartbeat.
func (d *Dispatcher) Heartbeat(ctx context.Context, lease eventlog.Lease) (time.Time, error) {
	if err := d.check(ctx); err != nil {
		return time.Time{}, err
	}
	if err := validTaskID("lease.Task", lease.Task); err != nil {
		return time.Time{}, err
	}
	var (
		expires   time.Time
		refreshed bool
		quota     error
	)
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		now := d.cfg.Now()
		if err := liveRow(r, lease, now); err != nil {
			return nil, err
		}
		if !refreshed && r.HeartbeatsLeft(d.cfg.HeartbeatMax) {
			if err := d.refreshLeaseKey(ctx, lease, r.Generation); err != nil {
				return nil, err
			}
			refreshed = true
			expires = now.Add(d.cfg.LeaseTTL)
		}
		quota = nil
		if err := r.Heartbeat(lease, now, expires, d.cfg.HeartbeatMax); err != nil {
			if !errors.Is(err, eventlog.ErrLeaseQuotaExceeded) {
				return nil, err
			}
			quota = err // the task was released: the row is written
		}
		return r, nil
	})
	if err != nil {
		return time.Time{}, err
	}
	if quota != nil {
		return time.Time{}, quota
	}
	return expires, nil
}

// Release implements eventlog.Dispatcher.
func (d *Dispatcher) Release(ctx context.Context, lease eventlog.Lease, rel eventlog.Release) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	if err := dispatchrow.CheckRelease(rel); err != nil {
		return err
	}
	if err := validTaskID("lease.Task", lease.Task); err != nil {
		return err
	}
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		if err := r.row().Release(lease, rel, d.cfg.Now()); err != nil {
			return nil, err
		}
		return r, nil
	})
	return err
}

// Yield implements eventlog.Dispatcher.
func (d *Dispatcher) Yield(ctx context.Context, lease eventlog.Lease) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	if err := validTaskID("lease.Task", lease.Task); err != nil {
		return err
	}
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		if err := r.row().Yield(lease, d.cfg.Now()); err != nil {
			return nil, err
		}
		return r, nil
	})
	return err
}

// Fail implements eventlog.Dispatcher.
func (d *Dispatcher) Fail(ctx context.Context, lease eventlog.Lease, f eventlog.Failure) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	if err := validTaskID("lease.Task", lease.Task); err != nil {
		return err
	}
	_, err := d.mutate(ctx, lease.Task, func(r *taskRow) (*taskRow, error) {
		if err := r.row().Fail(lease, f, d.cfg.Now(), d.cfg.MaxFailAttempts); err != nil {
			return nil, err
		}
		return r, nil
	})
	return err
}

// Wake implements eventlog.Dispatcher: the event is applied to the row at
// once, with a compare-and-set, and the answer says whether it matched.
// Wakes published to the ingress subject (WakeSubject) are applied the same
// way by whichever Dispatcher consumes them.
func (d *Dispatcher) Wake(ctx context.Context, task string, event noeta.Wake) (bool, error) {
	if err := d.check(ctx); err != nil {
		return false, err
	}
	if err := validTaskID("task", task); err != nil {
		return false, err
	}
	if err := event.Validate(); err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %w", eventlog.ErrInvalidArgument, task, err)
	}
	event = event.Clone()
	event.ReceivedAt = time.Time{}
	if event.Kind == noeta.WakeHumanResponse {
		// Handed over in process: received now, by this dispatcher's clock,
		// whatever the caller put there.
		event.ReceivedAt = receivedAt(d.cfg.Now())
	}
	var matched bool
	_, err := d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		if r == nil {
			return nil, fmt.Errorf("%w: wake for task %q: the dispatcher does not know the task (it was never enqueued)", eventlog.ErrNotFound, task)
		}
		var err error
		if matched, err = r.Wake(task, event.Clone(), d.cfg.MaxPendingWakes); err != nil {
			return nil, err
		}
		return r, nil
	})
	if err != nil {
		return false, err
	}
	return matched, nil
}

// Inspect implements eventlog.Dispatcher.
func (d *Dispatcher) Inspect(ctx context.Context, task string) (eventlog.DispatchState, error) {
	if err := d.check(ctx); err != nil {
		return eventlog.DispatchState{}, err
	}
	if err := validTaskID("task", task); err != nil {
		return eventlog.DispatchState{}, err
	}
	r, _, err := d.getRow(ctx, task)
	if err != nil {
		return eventlog.DispatchState{}, err
	}
	if r == nil {
		return eventlog.DispatchState{}, fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNotFound, task)
	}
	return r.State(task), nil
}
