package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The view a Dispatcher's passes keep between them (ADR 0092). A pass used
// to read every row of the rows bucket (11-15 µs of CPU a row: 11-15 s a
// pass at a million rows, docs/benchmarks.md), although a row that is terminal, or suspended
// on an event or a timer far ahead, can need nothing from it. The rows
// bucket is a stream, and every row write is a message with a sequence
// higher than any before it: a Dispatcher that has read every row once
// learns what changed since by reading the messages past the last sequence
// it read. So it keeps the rows a pass may act on (pertinent: leased,
// ready, suspended on a deadline within the horizon or on subtasks), as of
// a sequence of the rows stream, and each pass reads only the rows written
// since. No write of the dispatcher changes, and no second record can
// disagree with a row: the change feed is the rows stream itself, so there
// is no window between a row's write and its index entry for a crash to
// fall into.
//
// A full read (every row, as every pass did before) still runs:
//   - at the first pass of a Dispatcher (the view is in memory only);
//   - when the view cannot be trusted: the rows stream was created again or
//     its last sequence went back (a restore), or the read of the changes
//     stalled on a message the server cannot load;
//   - after a reconnect of the connection, at most once every ten times
//     the length of the last full read;
//   - every FullSweepInterval (default an hour): a timer due beyond the
//     horizon is not in the view and joins it at a full read before it is
//     due; a timer's schedule is only checked by a full read (a lost one
//     not yet due is re-armed there; one due is fired by any pass, and the
//     backstop of every process fires it timerGrace late); and whatever a
//     fault did to the view that this reasoning did not foresee is undone.

// DefaultFullSweepInterval is how often a Dispatcher reads every row,
// besides at its first pass (DispatcherConfig.FullSweepInterval).
const DefaultFullSweepInterval = time.Hour

// rowView is what the passes keep between them; only a pass (holding
// passSem) reads or changes it.
type rowView struct {
	valid bool
	// rows are the pertinent rows as of seq, trimmed of what a pass does
	// not read (viewRow). A row in it is never changed, only replaced.
	rows map[string]*taskRow
	// seq is the last sequence of the rows stream the view includes;
	// created is the stream's creation time when the view was read.
	seq     uint64
	created time.Time
	// horizon: rows suspended on a deadline after it are left out, for a
	// later full read.
	horizon time.Time
	// fullAt is when the last full read began, fullTook how long it took.
	fullAt   time.Time
	fullTook time.Duration
	// ended says, for the subtasks parents in the view wait on and whose
	// own rows are not in it, whether their rows are terminal; every row
	// read updates the entry it has, so one read of a subtask's row lasts
	// as long as a parent waits on it.
	ended map[string]bool
}

// passRequest bounds one request of a reconcile pass by RequestTimeout,
// whatever the pass's own deadline (reconcilePassMax, which withTimeout
// would leave alone): a request the server never answers (its meta leader
// lost in a fault, a publish the user may not make) fails the pass at once
// and the next one tries again, instead of holding every pass of the
// process, and the repairs only they make, for the pass's two minutes
// (TestReconcilePassRequestsBounded).
func (d *Dispatcher) passRequest(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.cfg.RequestTimeout)
}

// errViewLost: the changes cannot be read onto the view; a full read
// replaces it.
var errViewLost = errors.New("jetstream: the reconcile view cannot be brought up to date")

// fullInterval is the period of the full reads: FullSweepInterval, and at
// least ten times the length of the last one.
func (d *Dispatcher) fullInterval() time.Duration {
	return max(d.cfg.FullSweepInterval, reconcileDutyFactor*d.view.fullTook)
}

// fullDue reports whether this pass must read every row.
func (d *Dispatcher) fullDue(now time.Time) bool {
	v := &d.view
	switch {
	case !v.valid:
		return true
	case !now.Before(v.fullAt.Add(d.fullInterval())):
		return true
	case d.fullWanted.Load() && !now.Before(v.fullAt.Add(reconcileDutyFactor*v.fullTook)):
		return true
	}
	return false
}

// refreshView brings the view up to date, by the changes since it was read
// or by a full read, and reports which. The caller holds passSem.
func (d *Dispatcher) refreshView(ctx context.Context) (full bool, err error) {
	now := d.cfg.Now()
	if !d.fullDue(now) {
		err := d.readChanges(ctx)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, errViewLost) {
			return false, err
		}
		d.log.Warn("reconcile reads every row again", "why", err)
		d.view.valid = false
	}
	return true, d.readAll(ctx, now)
}

// rowsStream looks the rows bucket's stream up (its leader answers).
func (d *Dispatcher) rowsStream(ctx context.Context) (*jetstream.StreamInfo, error) {
	ctx, cancel := d.passRequest(ctx)
	defer cancel()
	s, err := d.js.Stream(ctx, "KV_"+d.cfg.tasksBucket())
	if err != nil {
		return nil, fmt.Errorf("jetstream: read %s: %w", d.cfg.tasksBucket(), err)
	}
	return s.CachedInfo(), nil
}

// readAll replaces the view with one read of every row. The view's
// sequence is the last the read delivered, not the stream's last as its
// leader tells it: the read's consumer may sit on a replica that has not
// applied the latest writes (the server places a consumer of one replica
// on any peer of the stream), and a sequence taken from the leader would
// have the next pass's changes begin past rows the view never saw, left
// out until the next full read. The messages come in sequence order, so
// every row written up to the last delivered is in the view, and what was
// written after is read by the next pass's changes. A read that stalled
// and was completed one row at a time from the leader goes on from the
// stream's last before the read began (the stalled message is passed).
func (d *Dispatcher) readAll(ctx context.Context, now time.Time) error {
	began := time.Now()
	info, err := d.rowsStream(ctx)
	if err != nil {
		return err
	}
	horizon := now.Add(2*d.fullInterval() + backstopHorizon)
	rows := map[string]*taskRow{}
	seq, err := d.readRows(ctx, 0, func(task string, val []byte, deleted bool) {
		if deleted {
			return
		}
		r, err := decodeRow(task, val)
		if err != nil {
			d.log.Error("reconcile skips a corrupt row", "task", task, "err", err)
			return
		}
		d.noteEnded(task, r)
		if pertinent(r, horizon) {
			rows[task] = viewRow(r)
		}
	})
	if errors.Is(err, errSnapshotStalled) {
		seq = info.State.LastSeq
		err = d.readRowsOneByOne(ctx, rows, horizon)
	}
	if err != nil {
		return err
	}
	ended := d.view.ended
	if ended == nil {
		ended = map[string]bool{}
	}
	d.view = rowView{
		valid:    true,
		rows:     rows,
		seq:      seq,
		created:  info.Created,
		horizon:  horizon,
		fullAt:   now,
		fullTook: time.Since(began),
		ended:    ended,
	}
	d.fullWanted.Store(false)
	d.stats.fullReconciles.Add(1)
	return nil
}

// readChanges applies to the view the rows written since its sequence.
func (d *Dispatcher) readChanges(ctx context.Context) error {
	v := &d.view
	info, err := d.rowsStream(ctx)
	if err != nil {
		return err
	}
	switch {
	case !info.Created.Equal(v.created):
		return fmt.Errorf("%w: %s was created again", errViewLost, d.cfg.tasksBucket())
	case info.State.LastSeq < v.seq:
		return fmt.Errorf("%w: the last sequence of %s went back from %d to %d", errViewLost, d.cfg.tasksBucket(), v.seq, info.State.LastSeq)
	case info.State.LastSeq == v.seq:
		return nil // nothing written since
	}
	last, err := d.readRows(ctx, v.seq+1, func(task string, val []byte, deleted bool) {
		if deleted {
			delete(v.rows, task)
			if _, ok := v.ended[task]; ok {
				v.ended[task] = false
			}
			return
		}
		r, err := decodeRow(task, val)
		if err != nil {
			d.log.Error("reconcile skips a corrupt row", "task", task, "err", err)
			delete(v.rows, task)
			return
		}
		d.noteEnded(task, r)
		if pertinent(r, v.horizon) {
			v.rows[task] = viewRow(r)
		} else {
			delete(v.rows, task)
		}
	})
	if errors.Is(err, errSnapshotStalled) {
		return fmt.Errorf("%w: %w", errViewLost, err)
	}
	// The messages come in sequence order, so a read cut short has
	// applied every row written up to last: the next pass goes on from
	// there. A read that found nothing past seq although the leader has
	// written past it read a replica that has not applied those writes
	// yet (a row is only ever replaced by a later write, never removed,
	// so the leader's last message is there to be read): the view stays
	// where it is and the next pass reads them, rather than going on from
	// the leader's last and leaving them out until the next full read.
	v.seq = max(v.seq, last)
	return err
}

// noteEnded updates the entry of task in the view's record of awaited
// subtasks, if it has one.
func (d *Dispatcher) noteEnded(task string, r *taskRow) {
	if _, ok := d.view.ended[task]; ok {
		d.view.ended[task] = r.Status == eventlog.DispatchTerminal
	}
}

// pertinent says whether a pass needs row r in its view: a row that may be
// a candidate (leased, ready, suspended on a deadline before horizon) or
// that awaits subtasks. A subtask's row that was left out (it ended, or
// waits untimed) is read from the leader when a parent is found waiting on
// it, once (rowView.ended).
func pertinent(r *taskRow, horizon time.Time) bool {
	switch r.Status {
	case eventlog.DispatchLeased, eventlog.DispatchReady:
		return true
	case eventlog.DispatchSuspended:
		deadline, timed := deadlineOf(r.WakeOn)
		return timed && deadline.Before(horizon) || len(awaitedSubtasks(r)) > 0
	}
	return false
}

// matchedInView stands for a row's matched wake in the view: a pass asks
// only whether there is one, and a wake may carry a subtask's result.
var matchedInView = &noeta.Wake{Kind: noeta.WakeExternalEvent}

// viewRow is r as the view keeps it: what candidate, checkStranded and
// nudgeParents read. The buffers of wakes and applied sequences, which a
// pass never reads and which may hold kilobytes, are left out; a candidate
// is read again from the leader before anything is done to it.
func viewRow(r *taskRow) *taskRow {
	v := &taskRow{Row: r.Row, Created: r.Created}
	v.Pending = nil
	if v.Matched != nil {
		v.Matched = matchedInView
	}
	return v
}
