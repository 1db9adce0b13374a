package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The reconciler. A task's liveness must not hang on one message surviving:
// the ready signal published after the write that made a row ready, the
// expiry marker the leases watcher acts on, the schedule the broker fires.
// A process killed between a write and its side effect, or a failover that
// loses a notification, leaves a row that no signal will ever move. So every
// Dispatcher re-derives, from the rows and the lease keys, what should be
// ready or reclaimable and repairs the difference:
//
//   - a ready, unreserved row with no signal on its subject gets one
//     (publishing is idempotent: the ready stream holds one message per
//     subject and refuses a second), and one whose signal sat stranded
//     (its queue's consumer idle past it) gets it again (stranded.go);
//   - a leased row whose lease key is gone, or whose expiry has passed, is
//     requeued, through the same fenced compare-and-set as the watcher's
//     (ReclaimMax counts it);
//   - a row suspended on a timer gets its schedule again if it has none
//     (checked when the rolling round visits the row), or is woken if its
//     deadline has passed;
//   - a parent waiting on subtasks whose rows all say they ended is named
//     to AwaitingSubtasks.
//
// A pass runs when the Dispatcher opens, after each reconnect of its
// connection, after its ingress consumer had to be created again, and every
// SweepInterval (jittered). It reads in bulk (the rows written since the
// pass before and a slice of the round that reads every row, onto the rows
// it keeps between passes, reconcile_view.go; the lease keys when a row is
// leased, one stream info for the signals when one is ready), which may
// lag the leaders; each candidate it finds is then checked and acted on
// with leader reads and compare-and-set writes, so a stale view costs a
// read, never a wrong transition. See docs/adr/0020-reconciler.md and
// docs/adr/0092-a-pass-reads-the-rows-written-since-the-last.md and
// docs/adr/0110-every-row-is-read-in-a-rolling-round.md.

// reconcileRetry bounds the pause after a failed pass (the servers are
// electing leaders, or unreachable): it grows from reconcileRetryMin.
const (
	reconcileRetryMin = 500 * time.Millisecond
	reconcileRetryMax = 5 * time.Second
	// reconcileSettle is the shortest gap between two passes, so a burst of
	// triggers (reconnects, consumer re-creations) costs one pass.
	reconcileSettle = 250 * time.Millisecond
	// reconcilePassMax bounds one pass, so a server that stops answering
	// in the middle of a bulk read cannot stall the reconciler for good.
	reconcilePassMax = 2 * time.Minute
	// reconcileDutyFactor: the period between passes is at least this many
	// times the last pass's length.
	reconcileDutyFactor = 10
)

// retryCap bounds the growing wait after failures to repair (a failed pass,
// a ready signal whose publish failed): no longer than the period between
// passes that succeed, so a failure never holds the repairs back longer
// than a success would, and never longer than reconcileRetryMax. A short
// SweepInterval (a short lease TTL) is a deployment that asked for prompt
// repairs, and the end of an outage is when they are wanted.
func retryCap(sweep time.Duration) time.Duration {
	return max(reconcileRetryMin, min(sweep, reconcileRetryMax))
}

// reconcileLoop runs passes until ctx ends: one at once, then on every
// trigger and every SweepInterval. The jitter keeps the Dispatchers of a
// deployment, often started together, from reconciling in step: each pass
// would find the same candidates, and only one compare-and-set wins.
func (d *Dispatcher) reconcileLoop(ctx context.Context, status <-chan nats.Status) {
	defer d.wg.Done()
	wait := time.Duration(0)
	retry := reconcileRetryMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-d.kick:
			t.Stop()
		case _, ok := <-status:
			t.Stop()
			if !ok {
				status = nil
				continue
			}
			// Reconnected: a node may have restarted under the rows, so
			// a round at catch-up pace is wanted as soon as its duty
			// allows.
			d.fullWanted.Store(true)
		}
		if err := sleepCtx(ctx, reconcileSettle); err != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, reconcilePassMax)
		began := time.Now()
		ids, hurry, err := d.pass(pctx, false)
		took := time.Since(began)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("reconcile pass failed; retrying", "in", retry, "err", err)
			wait = retry
			retry = min(2*retry, retryCap(d.cfg.SweepInterval))
			continue
		case len(ids) > 0:
			d.log.Info("reconcile requeued expired leases", "tasks", ids)
		}
		retry = reconcileRetryMin
		// A pass reads the rows written since the one before and a
		// slice of the round (11-15 µs a row here, docs/benchmarks.md):
		// the period stretches so that passes take at most a tenth of the
		// time, instead of one pass following another. While the round
		// catches up (a view begun afresh), passes take a third, and come
		// no later than the pass asked.
		period := max(d.cfg.SweepInterval, reconcileDutyFactor*took)
		if hurry > 0 {
			period = max(reconcileCatchUpFactor*took, hurry)
		}
		wait = time.Duration(float64(period) * (0.75 + 0.5*rand.Float64()))
	}
}

// kickReconcile asks for a pass now; kicks coalesce.
func (d *Dispatcher) kickReconcile() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func sleepCtx(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reopenLane creates l's consumer again and resumes pulling from it, after
// the iterator it replaces stopped on its own (the consumer was deleted, or
// the connection's pull subscription ended). It retries with a growing
// pause until it succeeds or Close begins (nil). Messages stored while no
// iterator ran are still in the stream and are applied once it runs; a pass
// of the reconciler is asked for, as whatever the stall held up (a fired
// timer, a signal) may have been lost with it.
func (d *Dispatcher) reopenLane(l lane, old jetstream.MessagesContext) jetstream.MessagesContext {
	old.Stop()
	it, _ := restartUntilClosed(d, l.what+" consumer",
		func() (jetstream.MessagesContext, error) {
			ctx, cancel := d.detached()
			defer cancel()
			return d.openLane(ctx, l)
		},
		func(it jetstream.MessagesContext) { d.inputs[l.consumer] = it },
		func(it jetstream.MessagesContext) { it.Stop() })
	return it
}

// restartUntilClosed calls open until it succeeds, with a growing pause, and
// installs what it opened under d.mu; once Close has begun it stops what it
// opened and returns false. A pass of the reconciler is asked for after a
// restart: whatever the stall held up may have been lost with it.
func restartUntilClosed[T any](d *Dispatcher, what string, open func() (T, error), install, stop func(T)) (T, bool) {
	var zero T
	pause := reconcileRetryMin
	for !d.closed.Load() {
		v, err := open()
		if err == nil {
			d.mu.Lock()
			if d.closing {
				d.mu.Unlock()
				stop(v)
				return zero, false
			}
			install(v)
			d.mu.Unlock()
			d.log.Info(what + " started again")
			d.kickReconcile()
			return v, true
		}
		d.log.Warn(what+" stopped; starting it again", "in", pause, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-d.done:
			t.Stop()
			return zero, false
		case <-t.C:
		}
		pause = min(2*pause, reconcileRetryMax)
	}
	return zero, false
}

// repairSignal publishes task's ready signal if its row is ready and
// unreserved; a signal already there makes it a no-op. It is how a path that
// finds a row already ready (a redelivered wake, a resumed spawn) makes sure
// the row is not ready in name only.
func (d *Dispatcher) repairSignal(ctx context.Context, task string) error {
	r, _, err := d.getRow(ctx, task)
	if err != nil || r == nil || r.Status != eventlog.DispatchReady || r.Reserved {
		return err
	}
	return d.signal(ctx, task, r.Queue, r.ReadyEpoch, false)
}

// RepairSignal publishes task's ready signal if the dispatcher row is
// ready and unreserved and has none, and does nothing otherwise: unlike
// Enqueue it never changes a row, so it is safe to call on a task that may
// be leased at this very moment. A process that finds a task it expected to
// create already there (a resumed spawn) calls it, since the process that
// created the row may have died before publishing its signal.
func (d *Dispatcher) RepairSignal(ctx context.Context, task string) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	if err := validTaskID("task", task); err != nil {
		return err
	}
	if err := d.repairSignal(ctx, task); err != nil {
		return fmt.Errorf("jetstream: ready signal of %s: %w", task, err)
	}
	return nil
}

// RequeueStale implements eventlog.Dispatcher: a reconcile pass, now. The
// leased rows whose lease had ended and that went ready are returned in
// creation order.
func (d *Dispatcher) RequeueStale(ctx context.Context) ([]string, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	return d.sweep(ctx)
}

// snapshot is a bulk, possibly lagging view of the dispatcher's state.
type snapshot struct {
	// rows holds only the rows a pass may act on or look at (pertinent):
	// the view's, which it keeps between passes (reconcile_view.go). Read
	// only: the next pass changes the view.
	rows    map[string]*taskRow
	keys    map[string]bool // lease keys that exist
	signals map[string]bool // ready subjects holding a signal
	// scheduled are the rows the round visited in this pass whose timer is
	// ahead: their schedules are checked. confirm are rows the round put
	// into the view from a replicated stream: the leader confirms them.
	scheduled, confirm map[string]bool
	// hurry: the round does not yet hold every row written before it, and
	// the next pass should come within this.
	hurry time.Duration
}

// readSnapshot brings the view up to date (reconcile_view.go) first and
// reads the lease keys after: a grant writes the key before the row names
// the lease, so a row read here names a lease whose key was written before
// the key listing began, and a key missing from the listing ended in
// between (or the listing lagged; the candidate is checked again with the
// leader). The caller holds passSem.
func (d *Dispatcher) readSnapshot(ctx context.Context, finish bool) (*snapshot, error) {
	hurry, err := d.refreshView(ctx, finish)
	if err != nil {
		return nil, err
	}
	s := &snapshot{rows: d.view.rows, keys: map[string]bool{}, signals: map[string]bool{}, scheduled: d.view.scheduled, confirm: d.view.confirm, hurry: hurry}
	// The lease keys and the signals are listed only for rows that can
	// use them: the listing of the keys reads, besides the live leases, a
	// lease TTL's worth of the markers released and expired keys leave.
	leased, ready := 0, 0
	for _, r := range s.rows {
		switch {
		case r.Status == eventlog.DispatchLeased:
			leased++
		case r.Status == eventlog.DispatchReady && !r.Reserved:
			ready++
		}
	}
	// Each listing is bounded as requests of a pass are (a request timeout
	// for every page of listingPage entries it may take), not by the
	// pass's own two minutes: a request the servers never answer (its
	// leader killed under it) held every serve's passes, and the handoffs
	// only they redo, for two minutes in the partition run.
	if leased > 0 {
		lctx, cancel := d.listingRequest(ctx, leased)
		kl, err := d.leases.ListKeys(lctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			cancel()
			return nil, fmt.Errorf("jetstream: list %s: %w", d.cfg.leasesBucket(), err)
		}
		if err == nil {
			for k := range kl.Keys() {
				s.keys[k] = true
			}
		}
		err = lctx.Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("jetstream: list %s: %w", d.cfg.leasesBucket(), err) // the listing may have been cut short
		}
	}
	if ready > 0 {
		sctx, cancel := d.listingRequest(ctx, ready)
		s.signals, err = streamSubjects(sctx, d.ready, d.subj.readyAll())
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// listingPage is how many subjects a server lists in one page of a stream
// info (nats-server's JSMaxSubjectDetails); a listing of the lease keys is
// given the same pace.
const listingPage = 100_000

// listingRequest bounds a listing of about n entries: a request timeout for
// each page it may take, and one more.
func (d *Dispatcher) listingRequest(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(1+n/listingPage+1)*d.cfg.RequestTimeout)
}

// rowReadBatch bounds the rows a bulk read holds in flight: the server
// sends no more until the engine has taken them. A KV watcher (the read
// before) is a push consumer, which the server fed faster than the rows
// were decoded, and nats.go queued up to 64 MiB of them: 33 MiB of the
// engine's live heap, 130-180 MiB of its RSS, at a million rows. Measured
// at a million rows (docs/scale.md): 256 held the RSS to 50 MiB but
// slowed appends beside the pass to 3-4 ms p50; 2048, 62 MiB and 1.6-2 ms;
// the watcher, 130-180 MiB and 0.6-0.8 ms.
const rowReadBatch = 2048

// readRowsUntil hands fn every message of the rows stream from sequence
// from on, deletes included (deleted: a delete or purge marker), with its
// sequence, through an ordered pull consumer that holds at most
// rowReadBatch rows in flight. It stops after limit messages (0: no bound),
// at the first message at or past end (0: none), or when the consumer has
// delivered the last message that existed when it began (drained), or
// with errSnapshotStalled when none came for snapshotIdle, and returns the
// highest stream sequence it handed over.
func (d *Dispatcher) readRowsUntil(ctx context.Context, from, end, limit uint64, fn func(task string, val []byte, deleted bool, seq uint64)) (last uint64, drained bool, err error) {
	bucket := d.cfg.tasksBucket()
	prefix := "$KV." + bucket + "."
	cfg := jetstream.OrderedConsumerConfig{
		// The filter stays, though the bucket's stream holds its keys alone
		// and an unfiltered start is cheaper for the server (about 60 ms a
		// pass at a million rows): deploy/nats's engine role may create a
		// consumer on the rows bucket only filtered to its keys.
		FilterSubjects: []string{prefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
		// The server drops the consumer soon after the pass lets it go.
		InactiveThreshold: 30 * time.Second,
	}
	// The creation is one request; the messages are bounded apart
	// (snapshotIdle).
	cctx, cancel := d.passRequest(ctx)
	c, err := d.js.OrderedConsumer(cctx, "KV_"+bucket, cfg)
	cancel()
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: read %s: %w", bucket, err)
	}
	batch := rowReadBatch
	if limit > 0 && limit < uint64(batch) {
		batch = int(limit)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return 0, false, fmt.Errorf("jetstream: read %s: %w", bucket, err)
	}
	defer it.Stop()
	if info := c.CachedInfo(); info != nil && info.NumPending == 0 {
		return 0, true, nil // nothing to read
	}
	var n uint64
	for {
		if err := ctx.Err(); err != nil {
			return last, false, err
		}
		m, err := it.Next(jetstream.NextMaxWait(snapshotIdle))
		switch {
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return last, false, errSnapshotStalled
		case err != nil && ctx.Err() != nil:
			return last, false, ctx.Err()
		case err != nil:
			return last, false, fmt.Errorf("jetstream: read %s: %w", bucket, err)
		}
		d.stats.rowsRead.Add(1)
		n++
		md, err := m.Metadata()
		if err != nil {
			return last, false, fmt.Errorf("jetstream: read %s: %w", bucket, err)
		}
		seq := md.Sequence.Stream
		deleted := m.Headers().Get("KV-Operation") == "DEL" || m.Headers().Get("KV-Operation") == "PURGE" ||
			m.Headers().Get(jetstream.MarkerReasonHeader) != ""
		if task, ok := strings.CutPrefix(m.Subject(), prefix); ok {
			fn(task, m.Data(), deleted, seq)
		}
		last = max(last, seq)
		switch {
		case md.NumPending == 0:
			return last, true, nil
		case end > 0 && seq >= end, limit > 0 && n >= limit:
			return last, false, nil
		}
	}
}

// snapshotIdle is how long the bulk read of the rows may go without a
// message before it is taken to have stalled: the read waits until it has
// been handed the last row the bucket held when it began, and a row whose message
// the server can no longer load (a damaged block) is counted and never
// handed, so the read would never end and no pass would ever finish.
const snapshotIdle = 10 * time.Second

var errSnapshotStalled = errors.New("jetstream: the bulk read of the rows stalled")

// readRowsOneByOne reads from the leader, one at a time, the keys a round
// that stalled twice has left (rowView.round.keys: every key not in the
// view when it stalled; the rows the round dropped as not pertinent are
// read again, as remembering every key read would cost what dropping them
// saves), at most limit of them (0: no bound) and for at most
// oneByOneBudget, and ends the round when none is left. A key whose read
// fails ends this pass's share and is tried again at the next; one that
// fails oneByOneTries passes in a row is reported and left out (engine
// doctor names a row the server cannot load). It returns the keys tried,
// which the round counts as read.
func (d *Dispatcher) readRowsOneByOne(ctx context.Context, horizon time.Time, limit uint64) (tried uint64, err error) {
	r := &d.view.round
	deadline := time.Now().Add(oneByOneBudget)
	for len(r.keys) > 0 && (limit == 0 || tried < limit) && time.Now().Before(deadline) {
		task := r.keys[0]
		if d.view.rows[task] == nil {
			gctx, cancel := d.passRequest(ctx)
			row, rev, err := d.getRow(gctx, task)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return tried, ctx.Err()
			case err != nil:
				if r.keyFails++; r.keyFails < oneByOneTries {
					return tried, err
				}
				d.log.Error("reconcile leaves out a row it could not read; engine doctor reports it", "task", task, "err", err)
			case row != nil:
				d.stats.rowsRead.Add(1)
				d.applyRow(task, row, rev, horizon, false)
			}
		}
		tried++
		r.read++
		r.keyFails = 0
		r.keys = r.keys[1:]
	}
	if len(r.keys) == 0 {
		d.endRound(ctx, false)
	}
	return tried, nil
}

const (
	// oneByOneBudget bounds a pass's share of a round read one row at a
	// time: a leader read each, and a pass must keep time for its repairs.
	oneByOneBudget = reconcilePassMax / 4
	oneByOneTries  = 3
)

// streamSubjects lists the subjects of stream matching filter that hold a
// message (the stream leader answers).
func streamSubjects(ctx context.Context, s jetstream.Stream, filter string) (map[string]bool, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("jetstream: subjects of %s: %w", s.CachedInfo().Config.Name, err)
	}
	out := make(map[string]bool, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if n > 0 {
			out[subj] = true
		}
	}
	return out, nil
}

// candidate reports whether row r of task, as the snapshot saw it, may need
// a repair.
func (d *Dispatcher) candidate(s *snapshot, task string, r *taskRow, now time.Time) bool {
	if s.confirm[task] {
		return true
	}
	switch r.Status {
	case eventlog.DispatchLeased:
		return !s.keys[leaseKey(task, r.LeaseID)] || !now.Before(r.Expires)
	case eventlog.DispatchReady:
		return !r.Reserved && !s.signals[d.subj.ready(r.Queue, task)]
	case eventlog.DispatchSuspended:
		deadline, timed := deadlineOf(r.WakeOn)
		if !timed || r.Matched != nil {
			return false
		}
		if now.Before(deadline) {
			// Its schedule is checked when the round visits the row;
			// between visits the backstops stand behind the schedules.
			return s.scheduled[task]
		}
		// Due: the broker fires the schedule up to a second late (whole
		// seconds), its wake applied through the ingress, and the backstop
		// this pass leaves timerGrace after the deadline. A pass fires it
		// only past that, so that passes every second (a short lease TTL)
		// do not race every timer's own firing (a schedule just fired may
		// be gone from the stream while its wake is still on the way).
		return !now.Before(deadline.Add(timerGrace))
	}
	return false
}

// sweep is one reconcile pass that reads the rest of the round under way
// (a pass on demand covers every row). It returns the tasks whose ended
// lease it requeued to ready, in creation order.
func (d *Dispatcher) sweep(ctx context.Context) ([]string, error) {
	ids, _, err := d.pass(ctx, true)
	return ids, err
}

// pass is sweep (finish: the round's rest, else a slice), and reports how
// soon the next pass should come while the round catches up (0: it is
// not). Passes run one at a time (RequeueStale beside the loop): each
// brings the view up to date from where the one before left it.
func (d *Dispatcher) pass(ctx context.Context, finish bool) (ids []string, hurry time.Duration, err error) {
	select {
	case d.passSem <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	defer func() { <-d.passSem }()
	s, err := d.readSnapshot(ctx, finish)
	if err != nil {
		return nil, 0, err
	}
	now := d.cfg.Now()
	var tasks []string
	for task, r := range s.rows {
		repair := d.candidate(s, task, r, now)
		if repair {
			tasks = append(tasks, task)
		}
		// A timer this pass does not fire (not due past its grace) gets
		// its backstop, a candidate for its schedule's check or for the
		// leader's confirmation included.
		if deadline, timed := deadlineOf(r.WakeOn); r.Status == eventlog.DispatchSuspended && timed && r.Matched == nil && now.Before(deadline.Add(timerGrace)) {
			d.backstopTimer(task, r.Generation, r.WakeOn.Clone())
		}
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
	type leaderRow struct {
		task string
		row  *taskRow
		rev  uint64
	}
	var reread []leaderRow
	for range min(8, len(tasks)) {
		wg.Go(func() {
			for task := range work {
				// One row's repair is a few requests: bounded as one, so
				// a request never answered costs this row, not the pass.
				rctx, cancel := d.passRequest(ctx)
				requeued, r, rev, err := d.sweepRow(rctx, task)
				cancel()
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				reread = append(reread, leaderRow{task, r, rev})
				if requeued {
					hits = append(hits, hit{task, r.Created})
				}
				mu.Unlock()
			}
		})
	}
	for _, t := range tasks {
		work <- t
	}
	close(work)
	wg.Wait()
	// The view takes what the leader said of the candidates: a row a slice
	// read from a lagging replica is not a candidate again and again, and
	// a row to confirm is confirmed (one whose read failed stays to be).
	horizon := d.horizon(now)
	for _, l := range reread {
		delete(d.view.confirm, l.task)
		if l.row == nil {
			delete(d.view.rows, l.task)
			continue
		}
		d.applyRow(l.task, l.row, l.rev, horizon, false)
	}
	if firstErr != nil {
		return nil, s.hurry, firstErr
	}
	// A repair of its own: a queue's consumer that cannot be asked (its
	// leader between elections) must not cost the rest of the pass, the
	// parents' handoffs above all.
	// Each of its requests is bounded, and all of them together: a signal
	// purged and not yet published again when the bound comes is a ready
	// row without one, which the next pass repairs.
	sctx, cancel := context.WithTimeout(ctx, 3*d.cfg.RequestTimeout)
	if err := d.checkStranded(sctx, s, now); err != nil && ctx.Err() == nil {
		d.log.Warn("the check for stranded ready signals failed; the next pass tries again", "err", err)
	}
	cancel()
	d.stats.reconciles.Add(1)
	d.nudgeParents(ctx, s)
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.task, b.task))
	})
	ids = make([]string, 0, len(hits))
	for _, h := range hits {
		ids = append(ids, h.task)
	}
	return ids, s.hurry, nil
}

// sweepRow repairs one candidate row, read again from the leader, and
// reports whether it requeued it to ready, and the row it read (nil: there
// is none) with its revision.
func (d *Dispatcher) sweepRow(ctx context.Context, task string) (requeued bool, r *taskRow, rev uint64, err error) {
	r, rev, err = d.getRow(ctx, task)
	if err != nil || r == nil {
		return false, nil, 0, err
	}
	requeued, err = d.repairRow(ctx, task, r)
	return requeued, r, rev, err
}

// repairRow is sweepRow's repair of row r, read from the leader.
func (d *Dispatcher) repairRow(ctx context.Context, task string, r *taskRow) (bool, error) {
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
				return false, fmt.Errorf("jetstream: lease key of %s: %w", task, err)
			default:
				return false, nil // live
			}
		}
		ready, err := d.reclaim(ctx, task, r.LeaseID, keyGone)
		if errors.Is(err, errSkip) {
			return false, nil
		}
		return ready, err
	case eventlog.DispatchReady:
		if r.Reserved {
			break
		}
		// Published unless one is there (the snapshot may have missed it):
		// the stream refuses a second signal on the subject.
		there, err := d.readyLeaderGet(ctx, msgGetRequest{LastFor: d.subj.ready(r.Queue, task)})
		if err != nil {
			return false, err
		}
		if there != nil {
			break
		}
		if err := d.signal(ctx, task, r.Queue, r.ReadyEpoch, false); err != nil {
			return false, fmt.Errorf("jetstream: ready signal of %s: %w", task, err)
		}
		d.stats.resignalled.Add(1)
		d.log.Info("reconcile published a lost ready signal", "task", task, "queue", r.Queue, "epoch", r.ReadyEpoch)
	case eventlog.DispatchSuspended:
		if deadline, timed := deadlineOf(r.WakeOn); timed && r.Matched == nil {
			cond := r.WakeOn.Clone()
			if d.cfg.Now().Before(deadline) {
				armed, err := d.scheduled(ctx, task, r.Generation)
				if err != nil || armed {
					return false, err
				}
				if err := d.armTimer(ctx, task, r.Generation, cond); err != nil {
					return false, err
				}
				d.log.Info("reconcile re-armed a timer without its schedule", "task", task, "deadline", deadline)
				break
			}
			if d.cfg.Now().Before(deadline.Add(timerGrace)) {
				break // a row to confirm, due within the grace: its backstop fires it
			}
			_, err := d.fireTimer(ctx, task, r.Generation, cond, 0, false)
			if err != nil && !errors.Is(err, errSkip) {
				return false, err
			}
			if err == nil {
				d.log.Info("reconcile fired an overdue timer", "task", task, "deadline", deadline, "late", d.cfg.Now().Sub(deadline))
			}
		}
	}
	return false, nil
}

// scheduled reports whether the schedule of task's timer at generation gen
// is in the timers stream (its leader answers).
func (d *Dispatcher) scheduled(ctx context.Context, task string, gen uint64) (bool, error) {
	subj := d.subj.timer(task, gen)
	ctx, cancel := d.passRequest(ctx)
	defer cancel()
	info, err := d.timers.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return false, fmt.Errorf("jetstream: schedule of %s: %w", task, err)
	}
	return info.State.Subjects[subj] > 0, nil
}

// Timer backstops. The broker fires a timer's schedule on its own clock, but
// a schedule can be late or lost in a failover (it was seen firing 10-15 s
// late, or not at all, after the wake stream's leader was killed and
// restarted), and a timer must not wait for the next reconcile pass. So the
// process that arms a timer, and every reconciler that sees one due soon,
// also keeps a local timer: timerGrace after the deadline it fires the timer
// itself if the row still waits on it. The first to fire wins the
// compare-and-set; the broker's copy, arriving later, is dropped as stale.
const (
	// timerGrace covers the broker's rounding of the deadline up to the
	// whole second and the ingress round trip.
	timerGrace = 2 * time.Second
	// backstopHorizon: timers further ahead get their backstop from a later
	// reconcile pass, so a process does not hold one for every timer of the
	// deployment.
	backstopHorizon = time.Minute
)

// backstopTimer makes sure the timer of task's suspend at generation gen on
// cond fires, timerGrace after its deadline at the latest, while this
// Dispatcher runs.
func (d *Dispatcher) backstopTimer(task string, gen uint64, cond noeta.Wake) {
	deadline, timed := deadlineOf(&cond)
	if !timed {
		return
	}
	wait := deadline.Sub(d.cfg.Now()) + timerGrace
	if wait > backstopHorizon {
		return
	}
	key := task + "/" + strconv.FormatUint(gen, 10)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing || d.backstops[key] != nil {
		return
	}
	d.backstops[key] = time.AfterFunc(max(wait, 0), func() {
		d.mu.Lock()
		delete(d.backstops, key)
		d.mu.Unlock()
		d.goTracked(func() {
			ctx, cancel := d.detached()
			defer cancel()
			_, err := d.fireTimer(ctx, task, gen, cond, 0, false)
			switch {
			case err == nil:
				d.stats.timersBackstopped.Add(1)
				d.log.Info("fired a timer the broker had not fired in time", "task", task, "deadline", deadline,
					"late", d.cfg.Now().Sub(deadline))
			case !errors.Is(err, errSkip):
				d.log.Warn("fire an overdue timer; the reconciler will", "task", task, "err", err)
			}
		})
	})
}

// stopBackstops stops every pending backstop; Close calls it under mu.
func (d *Dispatcher) stopBackstops() {
	for k, t := range d.backstops {
		t.Stop()
		delete(d.backstops, k)
	}
}

// nudgeParents hands AwaitingSubtasks every task that has waited, in one
// suspend, since the previous pass on subtasks whose rows all say they
// ended: that is a handoff lost, not one still on its way (a parent that has
// just suspended) nor a child still running, whose log nobody needs to read.
func (d *Dispatcher) nudgeParents(ctx context.Context, s *snapshot) {
	if d.cfg.AwaitingSubtasks == nil {
		return
	}
	// Passes run one at a time (passSem); awaitingMu is RecoverAwaiting's.
	d.awaitingMu.Lock()
	defer d.awaitingMu.Unlock()
	all := d.nudgeAll
	d.nudgeAll = false
	seen := make(map[string]uint64)
	// ended looks up subtasks whose rows the view left out in its record
	// (rowView.ended), which the rows read after keep up to date; a
	// subtask new to it is read from the leader once.
	known := d.view.ended
	awaited := map[string]bool{}
	ended := func(task string) bool {
		if r := s.rows[task]; r != nil {
			return r.Status == eventlog.DispatchTerminal
		}
		awaited[task] = true
		e, ok := known[task]
		if !ok {
			gctx, cancel := d.passRequest(ctx)
			r, rev, err := d.getRow(gctx, task)
			cancel()
			e = endedAt{ended: err == nil && r != nil && r.Status == eventlog.DispatchTerminal, seq: rev}
			if err == nil {
				known[task] = e
			}
		}
		return e.ended
	}
	for task, r := range s.rows {
		subtasks := awaitedSubtasks(r)
		if len(subtasks) == 0 || !allEnded(subtasks, ended) {
			continue
		}
		seen[task] = r.Generation
		if gen, ok := d.awaiting[task]; !all && (!ok || gen != r.Generation) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// A few reads and writes a subtask: bounded (a request timeout a
		// subtask and one more, at most six), so one parent whose store
		// does not answer leaves the others theirs.
		actx, cancel := context.WithTimeout(ctx, time.Duration(min(1+len(subtasks), 6))*d.cfg.RequestTimeout)
		d.cfg.AwaitingSubtasks(actx, task, subtasks)
		cancel()
	}
	// The record keeps the subtasks still awaited.
	for task := range known {
		if !awaited[task] {
			delete(known, task)
		}
	}
	d.awaiting = seen
}

// RecoverAwaiting asks the next reconcile pass to hand AwaitingSubtasks
// every parent that waits on subtasks whose rows all say they ended, at
// once rather than after a second pass, and asks for that pass now (the
// first pass of a Dispatcher just opened is already on its way). A
// process calls it when its child-lifecycle observer starts, so that a
// handoff a dead process owed is redone in the first seconds; it reads the
// rows the pass reads anyway and the logs of those subtasks only, never
// every task. It does nothing when the reconciler is off (a negative
// SweepInterval) or AwaitingSubtasks is nil.
func (d *Dispatcher) RecoverAwaiting() {
	d.awaitingMu.Lock()
	d.nudgeAll = true
	d.awaitingMu.Unlock()
	// Before the first pass has counted itself, its nudge is still to come
	// and takes the flag: a kick would only add a second pass straight
	// after it.
	if d.stats.reconciles.Load() > 0 {
		d.kickReconcile()
	}
}

// awaitedSubtasks are the subtasks a suspended row waits on with no wake
// matched yet; nil for any other row.
func awaitedSubtasks(r *taskRow) []string {
	if r.Status != eventlog.DispatchSuspended || r.WakeOn == nil || r.Matched != nil {
		return nil
	}
	switch r.WakeOn.Kind {
	case noeta.WakeSubtaskCompleted:
		return []string{r.WakeOn.SubtaskID}
	case noeta.WakeSubtaskGroupCompleted:
		return slices.Clone(r.WakeOn.SubtaskIDs)
	}
	return nil
}

func allEnded(tasks []string, ended func(string) bool) bool {
	for _, t := range tasks {
		if !ended(t) {
			return false
		}
	}
	return true
}
