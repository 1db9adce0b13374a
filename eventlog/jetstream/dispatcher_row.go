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
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
)

// taskRow is the dispatcher's record of one task, the value of key <task> in
// KV <prefix>_tasks: the row of the dispatcher's state machine
// (dispatchrow.Row, whose transitions every operation runs inside mutate),
// and what this backend needs beside it. What memlog keeps in memory
// structures (queue position, timers) lives in the ready stream and the
// wake stream instead. The embedded row's fields are stored at the top
// level of the JSON value, as they always were.
type taskRow struct {
	dispatchrow.Row

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

	// viewSeq and viewRound, in the reconcile view only: the sequence of
	// the message the row was read from, and the round that last visited
	// it (reconcile_view.go).
	viewSeq, viewRound uint64
}

// row is the state machine's row of r, nil when there is none (the
// dispatcher does not know the task), for the guards that say so.
func (r *taskRow) row() *dispatchrow.Row {
	if r == nil {
		return nil
	}
	return &r.Row
}

// deadlineOf is eventlog.Deadline: when a timed condition times out.
func deadlineOf(w *noeta.Wake) (time.Time, bool) { return eventlog.Deadline(w) }

// noteApplied records an applied input sequence in list (Applied or
// AppliedTimers).
func noteApplied(list *[]uint64, seq uint64) {
	*list = append(*list, seq)
	if n := len(*list); n > appliedKeep {
		*list = slices.Delete(*list, 0, n-appliedKeep)
	}
}

// armsTimer reports whether writing nu over old starts a timer
// (dispatchrow.ArmsTimer).
func armsTimer(old, nu *taskRow) bool { return dispatchrow.ArmsTimer(old.row(), nu.row()) }

// --- liveness ------------------------------------------------------------

// liveRow is dispatchrow.Live: the local half of a lease's liveness, by the
// row and the local clock. The server's half (the lease key) is checked
// where it matters: Valid and Heartbeat.
func liveRow(r *taskRow, lease eventlog.Lease, now time.Time) error {
	return dispatchrow.Live(r.row(), lease, now)
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
	if dispatchrow.NewSpell(old.row(), nu.row()) {
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
// still in that ready spell, with a growing pause (up to retryCap, or 5 s
// with no reconciler), for about a minute; the reconciler (or the next
// Enqueue) covers anything longer.
func (d *Dispatcher) resignal(task string, epoch uint64) {
	pause, most := 100*time.Millisecond, reconcileRetryMax
	if d.cfg.SweepInterval > 0 {
		most = retryCap(d.cfg.SweepInterval)
	}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		t := time.NewTimer(pause)
		select {
		case <-d.done:
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, most)
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
	c.Row = r.Row.Clone()
	c.Applied = slices.Clone(r.Applied)
	c.AppliedTimers = slices.Clone(r.AppliedTimers)
	return &c
}
