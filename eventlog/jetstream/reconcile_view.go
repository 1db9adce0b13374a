package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math"
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
// Besides the changes, the passes read every row in a rolling round (ADR
// 0110): each pass reads a slice of the rows stream in sequence order,
// sized so that the round has read every row written before it began
// within FullSweepInterval, and a round follows the one before when that
// interval has gone by. A read of every row at once (11-13 s of CPU at a
// million rows) was the hourly cost before; a slice is what the round's
// pace asks (about 4,200 rows a pass at a million rows and the default
// intervals). The round is what the changes cannot give:
//   - the rows written before the view began: a Dispatcher's first round,
//     and a round after the view was lost (the rows stream was created
//     again or its last sequence went back, as after a restore; the read
//     of the changes stalled on a message the server cannot load) or a
//     reconnect asked for one (at most once every ten times the last
//     round's busy time), reads them at catch-up pace: slices of
//     sliceCatchUp rows, passes following at a third of a core;
//   - a timer due beyond the horizon is not in the view: the round takes it
//     in before it is due (the horizon is three intervals ahead, and a row
//     is visited at least once in any two intervals and a pass or two);
//   - a timer's schedule is checked when the round visits its row (a lost
//     one not yet due is re-armed; one due is fired by any pass, and the
//     backstop of every process fires it timerGrace late);
//   - whatever a fault did to the view that this reasoning did not foresee
//     is undone: a row the round visits replaces an older one in the view,
//     and a row the view holds from before the round's last sequence that
//     the round did not visit (its message is gone, the leader confirms)
//     leaves it.
//
// A row carries the sequence of the message it was read from: a slice may
// be read from a replica that has not yet applied the latest writes, and an
// older message never replaces a newer one in the view (nor in its record
// of awaited subtasks). A row such a slice puts into the view may be one
// the changes took out at a later sequence: on a replicated stream the
// leader confirms it in the same pass. A pass on demand (RequeueStale)
// reads the round's rest at once.

// DefaultFullSweepInterval is the period in which the passes' rolling round
// reads every row (DispatcherConfig.FullSweepInterval).
const DefaultFullSweepInterval = time.Hour

const (
	// sliceMin is the fewest rows a pass's slice of the round reads: below
	// it a round is read whole at one pass, as a few thousand rows cost a
	// few milliseconds.
	sliceMin = 4096
	// sliceCatchUp is a slice while the round catches up: about 0.3-0.4 s
	// of CPU here (11 µs a row, docs/benchmarks.md).
	sliceCatchUp = 32768
	// reconcileCatchUpFactor: while a round catches up, the next pass
	// follows after this many times the last one's length.
	reconcileCatchUpFactor = 2
)

// rowView is what the passes keep between them; only a pass (holding
// passSem) reads or changes it.
type rowView struct {
	valid bool
	// rows are the pertinent rows, trimmed of what a pass does not read
	// (viewRow), each with the sequence of its message. A row in it is
	// never changed, only replaced.
	rows map[string]*taskRow
	// seq is the last sequence of the rows stream the changes read;
	// created is the stream's creation time when the view began.
	seq     uint64
	created time.Time
	// replicated: the rows stream has more than one replica, so a read
	// may come from one that lags.
	replicated bool
	// round is the rolling read of every row under way, or the last one.
	round sweepRound
	// scheduled are the rows the slice of this pass visited suspended on
	// a deadline ahead: their schedules are checked. confirm are the rows
	// the slice put into the view from a replicated stream: the leader
	// confirms them in this pass, as a lagging replica may have handed
	// over a row that was replaced since (the changes took the newer out
	// of the view, and the older would come back).
	scheduled, confirm map[string]bool
	// ended says, for the subtasks parents in the view wait on and whose
	// own rows are not in it, whether their rows are terminal, as of a
	// sequence; every row read at a later sequence updates the entry it
	// has, so one read of a subtask's row lasts as long as a parent waits
	// on it.
	ended map[string]endedAt
}

// endedAt is an entry of rowView.ended.
type endedAt struct {
	ended bool
	seq   uint64
}

// sweepRound is one rolling read of every row written up to end.
type sweepRound struct {
	n     uint64 // numbers the rounds of the view: a row's viewRound says which visited it
	began time.Time
	end   uint64 // the view's seq when the round began: the changes read what follows
	next  uint64 // the sequence the next slice starts from
	read  uint64 // the messages the round's slices read so far
	msgs  uint64 // the messages the rows stream held when the round began
	// busy is the time spent in its slices: a reconnect starts a round
	// only ten times that after the last began.
	busy       time.Duration
	sliceBegan time.Time // when the slice under way began
	// catchUp: read at sliceCatchUp a pass (the view does not yet hold the
	// rows written before it began).
	catchUp bool
	// stalled counts the slices in a row that stalled at next; keys, once
	// a second one has, are the rows still to read one at a time, and
	// keyFails the passes in a row whose read of the first failed.
	stalled  int
	keys     []string
	keyFails int
	// empty counts the catch-up slices in a row that read nothing.
	empty int
	done  bool
}

// finishTries and finishWait bound how long a pass on demand waits for a
// lagging replica to hand over the round's rest.
const (
	finishTries = 20
	finishWait  = 50 * time.Millisecond
)

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

// firstRowFrom reads from the rows stream's leader the first row message at
// or after seq (nil: none it can load), bounded as every request of a
// pass.
func (d *Dispatcher) firstRowFrom(ctx context.Context, seq uint64) (*storedMsg, error) {
	ctx, cancel := d.passRequest(ctx)
	defer cancel()
	return d.leaderGet(ctx, "KV_"+d.cfg.tasksBucket(), msgGetRequest{Seq: seq, NextFor: "$KV." + d.cfg.tasksBucket() + ".>"})
}

// errViewLost: the changes cannot be read onto the view; a new view is
// read.
var errViewLost = errors.New("jetstream: the reconcile view cannot be brought up to date")

// horizon is how far ahead a row suspended on a deadline is kept in the
// view. A row is visited by the round at least once in any two round
// intervals and a pass's gap or two (a round's last pass may come a gap
// late); three intervals leave one to spare, so a row left out is visited
// again well before its deadline comes within backstopHorizon.
func (d *Dispatcher) horizon(now time.Time) time.Time {
	return now.Add(3*d.cfg.FullSweepInterval + backstopHorizon)
}

// refreshView brings the view up to date: the changes since the pass
// before, and a slice of the round (finish: the round's rest). While the
// round catches up it reports how soon the next pass should come (0: it
// is not catching up): at once after a slice that read rows; after a
// growing wait, up to SweepInterval (at least reconcileRetryMax), after
// one that read none (its consumer on a replica that lags, or failing). A
// slice that fails is reported and left to the next pass: the pass goes on
// with the view the changes brought up to date. The caller holds passSem.
func (d *Dispatcher) refreshView(ctx context.Context, finish bool) (hurry time.Duration, err error) {
	now := d.cfg.Now()
	v := &d.view
	v.scheduled = map[string]bool{}
	info, err := d.rowsStream(ctx)
	if err != nil {
		return 0, err
	}
	if v.valid {
		err := d.readChanges(ctx, info, now)
		if errors.Is(err, errViewLost) {
			d.log.Warn("reconcile reads every row again", "why", err)
			v.valid = false
		} else if err != nil {
			return 0, err
		}
	}
	switch {
	case !v.valid:
		// Every row is read again by a round at catch-up pace; the
		// changes go on from the leader's last sequence. What the old
		// view held is dropped: its sequences may belong to another
		// stream.
		*v = rowView{valid: true, rows: map[string]*taskRow{}, seq: info.State.LastSeq, created: info.Created,
			round: sweepRound{n: v.round.n}, scheduled: map[string]bool{}, confirm: map[string]bool{}, ended: map[string]endedAt{}}
		d.beginRound(ctx, info, now, true)
	case d.fullWanted.Load() && v.round.catchUp && !v.round.done:
		d.fullWanted.Store(false) // the round under way reads every row at that pace
	case d.fullWanted.Load() && !now.Before(v.round.began.Add(reconcileDutyFactor*v.round.busy)):
		d.beginRound(ctx, info, now, true)
	case v.round.done && !now.Before(v.round.began.Add(d.cfg.FullSweepInterval)):
		d.beginRound(ctx, info, now, false)
	}
	v.replicated = info.Config.Replicas > 1
	read, err := d.readSlice(ctx, now, finish)
	// A pass on demand reads on while its consumer's replica catches up
	// with the leader (a new consumer may land on another).
	for tries := 0; finish && err == nil && !v.round.done && tries < finishTries; tries++ {
		if err := sleepCtx(ctx, finishWait); err != nil {
			return 0, err
		}
		var more uint64
		more, err = d.readSlice(ctx, now, finish)
		read += more
	}
	switch {
	case err != nil && (ctx.Err() != nil || finish):
		return 0, err
	case err != nil:
		d.log.Warn("the reconcile round's slice failed; the next pass reads on", "from", v.round.next, "err", err)
	case finish && !v.round.done:
		// A pass on demand promises every row: a read that lags the
		// leader fails it rather than leaving rows unread.
		return 0, fmt.Errorf("jetstream: the reconcile round could not read up to sequence %d of %s (read to %d); try again", v.round.end, d.cfg.tasksBucket(), v.round.next-1)
	}
	switch {
	case !v.round.catchUp || v.round.done:
		return 0, nil
	case read > 0:
		v.round.empty = 0
		return reconcileSettle, nil
	}
	wait := reconcileRetryMin << min(v.round.empty, 10)
	v.round.empty++
	return min(wait, max(d.cfg.SweepInterval, reconcileRetryMax)), nil
}

// beginRound starts a round over every row up to the view's sequence.
func (d *Dispatcher) beginRound(ctx context.Context, info *jetstream.StreamInfo, now time.Time, catchUp bool) {
	v := &d.view
	if catchUp {
		d.fullWanted.Store(false)
	}
	v.round = sweepRound{n: v.round.n + 1, began: now, end: v.seq, next: max(info.State.FirstSeq, 1),
		msgs: info.State.Msgs, catchUp: catchUp, sliceBegan: time.Now()}
	if v.round.end < v.round.next || info.State.Msgs == 0 {
		d.endRound(ctx, true) // no message up to end: nothing the view holds from before it is left
	}
}

// sliceSize is how many rows this pass's slice reads: what the round must
// have read by the next pass to end within FullSweepInterval (all that is
// left without a loop of passes), at least sliceMin, and sliceCatchUp
// while it catches up. 0 reads to the round's end.
func (d *Dispatcher) sliceSize(now time.Time) uint64 {
	r := &d.view.round
	gap := d.passGap
	if gap <= 0 {
		return 0
	}
	f := float64(now.Sub(r.began)+gap) / float64(d.cfg.FullSweepInterval)
	if f >= 1 {
		return 0
	}
	want := uint64(math.Ceil(max(f, 0) * float64(r.msgs)))
	n := uint64(sliceMin)
	if want > r.read {
		n = max(n, want-r.read)
	}
	if r.catchUp {
		n = max(n, sliceCatchUp)
	}
	return n
}

// readSlice reads the round's next slice onto the view (finish: up to the
// round's end), ends the round when it has read up to the round's last
// sequence, and returns the messages it read.
func (d *Dispatcher) readSlice(ctx context.Context, now time.Time, finish bool) (read uint64, err error) {
	v := &d.view
	r := &v.round
	if r.done {
		return 0, nil
	}
	r.sliceBegan = time.Now()
	defer func() { r.busy += time.Since(r.sliceBegan) }()
	horizon := d.horizon(now)
	limit := d.sliceSize(now)
	if finish {
		limit = 0
	}
	if r.keys != nil {
		return d.readRowsOneByOne(ctx, horizon, limit)
	}
	last, drained, err := d.readRowsUntil(ctx, r.next, r.end, limit, func(task string, val []byte, deleted bool, seq uint64) {
		read++
		if seq > r.end {
			return // written after the round began: the changes read it
		}
		if deleted {
			d.applyRow(task, nil, seq, horizon, true)
			return
		}
		row, err := decodeRow(task, val)
		if err != nil {
			d.log.Error("reconcile skips a corrupt row", "task", task, "err", err)
		}
		d.applyRow(task, row, seq, horizon, true)
	})
	r.read += read
	if last > 0 {
		r.next = max(r.next, last+1)
		r.stalled = 0
	}
	switch {
	case errors.Is(err, errSnapshotStalled):
		// A stall may pass (the consumer moved to a replica with
		// nothing past the cursor, an election); it is tried again at
		// the next pass. At a second one in the same place, a message the
		// leader can load from there says it was passing; none, that a
		// message the server cannot load stops every consumer at it, and
		// the rest is read one row at a time, a share a pass.
		// A pass on demand cannot wait for the next: it reads one row at
		// a time at once.
		if r.stalled++; !finish {
			if r.stalled < 2 {
				return read, err
			}
			m, gerr := d.firstRowFrom(ctx, r.next)
			if gerr != nil {
				return read, gerr
			}
			if m != nil && m.Sequence <= r.end {
				r.stalled = 0
				return read, err
			}
		}
		keys, kerr := rowKeys(ctx, d.js, d.cfg.tasksBucket())
		if kerr != nil {
			return read, fmt.Errorf("jetstream: read %s: %w", d.cfg.tasksBucket(), kerr)
		}
		d.log.Warn("the reconcile round stalled; it reads the rows not in its view one at a time", "at", r.next, "rows", len(keys))
		r.keys = keys
		if finish {
			tried, err := d.readRowsOneByOne(ctx, horizon, 0)
			return read + tried, err
		}
		return read, nil
	case err != nil:
		return read, err
	case last >= r.end:
		d.endRound(ctx, true)
	case drained:
		// The read found nothing more before the round's last sequence:
		// either that is so (the messages up to it were removed), or the
		// read's consumer sits on a replica that has not applied them
		// yet, and the next pass reads on. The leader tells which.
		m, err := d.firstRowFrom(ctx, r.next)
		if err != nil {
			return read, err
		}
		if m == nil || m.Sequence > r.end {
			d.endRound(ctx, true)
		}
	}
	return read, nil
}

// endRound ends the round; visited says whether it read every message up
// to its last sequence in order, so that a row the view holds from before
// that sequence and the round did not visit is gone from the stream: the
// leader confirms it (a replica's read may have had holes) before it
// leaves the view.
func (d *Dispatcher) endRound(ctx context.Context, visited bool) {
	v := &d.view
	if visited {
		horizon := d.horizon(d.cfg.Now())
		deadline := time.Now().Add(oneByOneBudget)
		for task, row := range v.rows {
			if row.viewSeq > v.round.end || row.viewRound == v.round.n {
				continue
			}
			if !time.Now().Before(deadline) {
				break // the rest is kept: the next round asks again
			}
			gctx, cancel := d.passRequest(ctx)
			r, rev, err := d.getRow(gctx, task)
			cancel()
			switch {
			case err != nil:
				// Kept: the next round asks again.
			case r == nil:
				delete(v.rows, task)
				delete(v.confirm, task)
			default:
				d.applyRow(task, r, rev, horizon, false)
			}
		}
	}
	v.round.done = true
	v.round.keys = nil
	d.stats.fullReconciles.Add(1)
	if v.round.catchUp {
		d.log.Info("reconcile has read every row", "messages", v.round.read, "busy", v.round.busy+time.Since(v.round.sliceBegan), "took", d.cfg.Now().Sub(v.round.began))
	}
}

// applyRow puts onto the view what the message at seq says of task: its
// row, or nil (deleted, or unreadable). A message older than the one the
// view holds is passed over; byRound marks the row the round's.
func (d *Dispatcher) applyRow(task string, r *taskRow, seq uint64, horizon time.Time, byRound bool) {
	v := &d.view
	if e, ok := v.ended[task]; ok && seq >= e.seq {
		v.ended[task] = endedAt{ended: r != nil && r.Status == eventlog.DispatchTerminal, seq: seq}
	}
	if old := v.rows[task]; old != nil && old.viewSeq >= seq {
		if byRound && old.viewSeq == seq && old.viewRound != v.round.n {
			c := *old
			c.viewRound = v.round.n
			v.rows[task] = &c
			d.noteScheduled(task, &c)
		}
		return
	}
	if r == nil || !pertinent(r, horizon) {
		delete(v.rows, task)
		delete(v.confirm, task)
		return
	}
	row := viewRow(r)
	row.viewSeq, row.viewRound = seq, v.round.n
	v.rows[task] = row
	if byRound {
		d.noteScheduled(task, row)
		if v.replicated {
			v.confirm[task] = true
		}
	}
}

// noteScheduled marks a row the round visited whose timer is ahead, for
// its schedule to be checked.
func (d *Dispatcher) noteScheduled(task string, r *taskRow) {
	if deadline, timed := deadlineOf(r.WakeOn); r.Status == eventlog.DispatchSuspended && timed && r.Matched == nil && d.cfg.Now().Before(deadline) {
		d.view.scheduled[task] = true
	}
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

// readChanges applies to the view the rows written since its sequence.
func (d *Dispatcher) readChanges(ctx context.Context, info *jetstream.StreamInfo, now time.Time) error {
	v := &d.view
	switch {
	case !info.Created.Equal(v.created):
		// The creation time comes from the stream's assignment, the same
		// on every server: a stream created again, or restored on a
		// cluster.
		return fmt.Errorf("%w: %s was created again", errViewLost, d.cfg.tasksBucket())
	case info.State.LastSeq < v.seq:
		// A replica answers for a stream whose group has no leader (an
		// election on a loaded cluster), from its own state, which may
		// lag; a restore on a single server keeps the creation time and
		// shows only this. The leader tells which: the view's last
		// message, or a later one, is there unless the stream went back.
		m, err := d.firstRowFrom(ctx, v.seq)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("%w: the last sequence of %s went back from %d to %d", errViewLost, d.cfg.tasksBucket(), v.seq, info.State.LastSeq)
		}
		d.log.Warn("the rows stream's info lagged the view; its changes are read at the next pass", "view", v.seq, "info", info.State.LastSeq)
		return nil
	case info.State.LastSeq == v.seq:
		return nil // nothing written since
	}
	horizon := d.horizon(now)
	apply := func(task string, val []byte, deleted bool, seq uint64) {
		if deleted {
			d.applyRow(task, nil, seq, horizon, false)
			return
		}
		r, err := decodeRow(task, val)
		if err != nil {
			d.log.Error("reconcile skips a corrupt row", "task", task, "err", err)
		}
		d.applyRow(task, r, seq, horizon, false)
	}
	last, _, err := d.readRowsUntil(ctx, v.seq+1, 0, 0, apply)
	if errors.Is(err, errSnapshotStalled) {
		// Once more with a new consumer, which may land on another
		// replica (an ordered consumer's reset onto one with nothing
		// past its cursor waits for it): a second stall is a message the
		// server cannot load, and the view is read afresh around it.
		d.log.Warn("the read of the rows written since the last pass stalled; reading them again", "from", max(v.seq, last)+1)
		var again uint64
		again, _, err = d.readRowsUntil(ctx, max(v.seq, last)+1, 0, 0, apply)
		last = max(last, again)
		if errors.Is(err, errSnapshotStalled) {
			return fmt.Errorf("%w: %w", errViewLost, err)
		}
	}
	// The messages come in sequence order, so a read cut short has
	// applied every row written up to last: the next pass goes on from
	// there. A read that found nothing past seq although the leader has
	// written past it read a replica that has not applied those writes
	// yet (a row is only ever replaced by a later write, never removed,
	// so the leader's last message is there to be read): the view stays
	// where it is and the next pass reads them, rather than going on from
	// the leader's last and leaving them out until the next round.
	v.seq = max(v.seq, last)
	return err
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
