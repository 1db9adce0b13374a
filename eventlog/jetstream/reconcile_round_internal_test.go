package jetstream

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
)

// The tests of the rolling round (ADR 0110): every row is read within
// FullSweepInterval, a slice a pass, and what the changes alone cannot find
// is found by it.

// testClock is a clock a test sets.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *testClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }

// roundDispatcher opens a Dispatcher on a server of the test's own whose
// passes run only when the test asks, on a clock the test sets, with an
// hour's round paced for passes gap apart.
func roundDispatcher(t *testing.T, gap time.Duration) (*Dispatcher, *nats.Conn, *testClock) {
	t.Helper()
	nc := embeddedConn(t)
	clock := newTestClock(time.Now())
	d, err := OpenDispatcher(t.Context(), nc, DispatcherConfig{SweepInterval: -1, FullSweepInterval: time.Hour,
		LeaseTTL: time.Minute, Now: clock.now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	d.passGap = gap // before any pass: no loop runs beside
	return d, nc, clock
}

// suspendOnTimer leaves a new task of d suspended on a timer at fireAt.
func suspendOnTimer(t *testing.T, d *Dispatcher, fireAt time.Time) (string, noeta.Wake) {
	t.Helper()
	ctx := t.Context()
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "q", Reserved: true}); err != nil {
		t.Fatal(err)
	}
	l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
	if err != nil {
		t.Fatal(err)
	}
	cond := noeta.TimerWake(fireAt)
	if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	return task, cond
}

// passReads runs a pass as the loop does (a slice of the round) and
// returns the rows it read and the rounds it ended.
func passReads(t *testing.T, d *Dispatcher) (rows, rounds uint64) {
	t.Helper()
	before := d.Stats()
	if _, _, err := d.pass(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	after := d.Stats()
	return after.RowsRead - before.RowsRead, after.FullReconciles - before.FullReconciles
}

// TestReconcileRoundReadsInSlices: a Dispatcher's first round reads at
// catch-up pace; the rounds after it read a slice a pass, what the round
// must have read by the next pass to end within FullSweepInterval, and the
// rest at once when that interval is about to run out. Reproduction (issue
// 31, docs/benchmarks.md): the hourly full read of a million rows was one
// pass of 11-13 s of CPU.
func TestReconcileRoundReadsInSlices(t *testing.T) {
	d, nc, clock := roundDispatcher(t, 15*time.Minute)
	const rows = 5 * sliceMin
	loadIdleRows(t, nc, d, rows)

	if n, rounds := passReads(t, d); n != rows || rounds != 1 {
		t.Fatalf("the first pass read %d rows and ended %d rounds, want all %d at catch-up pace and 1", n, rounds, rows)
	}
	if n, rounds := passReads(t, d); n != 0 || rounds != 0 {
		t.Fatalf("a pass within the round's interval read %d rows (%d rounds), want 0", n, rounds)
	}
	// A round an hour after: passes a quarter of the interval apart read
	// a quarter of the rows each, and what is left when the interval is
	// about to run out.
	clock.add(time.Hour)
	for i, want := range []uint64{rows / 4, rows / 4} {
		if n, rounds := passReads(t, d); n != want || rounds != 0 {
			t.Fatalf("pass %d of the round read %d rows and ended %d rounds, want %d and 0", i+1, n, rounds, want)
		}
		clock.add(15 * time.Minute)
	}
	clock.add(15 * time.Minute) // 45 minutes in: the next pass would come past the interval
	if n, rounds := passReads(t, d); n != rows/2 || rounds != 1 {
		t.Fatalf("the round's last pass read %d rows and ended %d rounds, want %d and 1", n, rounds, rows/2)
	}
	// A slice reads no fewer than sliceMin rows, however early.
	clock.add(time.Hour)
	d.passGap = time.Second
	if n, _ := passReads(t, d); n != sliceMin {
		t.Errorf("a slice read %d rows, want sliceMin (%d)", n, sliceMin)
	}
}

// TestReconcileRoundReArmsALostSchedule: the schedule of a timer within the
// horizon, lost before it is due, is armed again when the round visits its
// row, and not checked between visits.
func TestReconcileRoundReArmsALostSchedule(t *testing.T) {
	d, _, clock := roundDispatcher(t, -1)
	ctx := t.Context()
	task, _ := suspendOnTimer(t, d, clock.now().Add(90*time.Minute)) // within the horizon
	subj := d.subj.timer(task, 1)
	armed := func() bool {
		t.Helper()
		ok, err := d.scheduled(ctx, task, 1)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !armed() {
		t.Fatal("the suspend armed no schedule")
	}
	passReads(t, d) // the first round visits the row, schedule in place
	if err := d.timers.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
	passReads(t, d)
	if armed() {
		t.Fatal("a pass between visits of the round checked the schedule")
	}
	clock.add(time.Hour) // the next round; the deadline is half an hour ahead
	if _, rounds := passReads(t, d); rounds != 1 {
		t.Fatalf("the pass ended %d rounds, want 1", rounds)
	}
	if !armed() {
		t.Error("the round visited the row and left its schedule lost")
	}
}

// TestReconcileRoundDropsRowsGoneFromTheStream: a row the view holds whose
// message left the stream without a marker (an operator's purge of its
// subject) is dropped when a round has read past it. The round ends though
// its last sequence holds no message any more (the leader says nothing is
// left before it).
func TestReconcileRoundDropsRowsGoneFromTheStream(t *testing.T) {
	d, nc, clock := roundDispatcher(t, -1)
	ctx := t.Context()
	loadIdleRows(t, nc, d, 30)
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	passReads(t, d)
	row := d.view.rows[task]
	if row == nil {
		t.Fatal("the ready row is not in the view")
	}
	s, err := d.js.Stream(ctx, "KV_"+d.cfg.tasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+d.cfg.tasksBucket()+"."+task)); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Hour)
	if _, rounds := passReads(t, d); rounds != 1 {
		t.Fatalf("the pass ended %d rounds, want 1 (its last sequence is gone)", rounds)
	}
	if d.view.rows[task] != nil {
		t.Error("the row whose message is gone stayed in the view")
	}
}

// TestReconcileViewKeepsTheNewerRow: a message older than the one the view
// holds for a row, or than the one its record of awaited subtasks read (a
// slice read from a replica that has not applied the latest writes),
// never replaces it, and a newer one does; a row a slice puts into the
// view from a replicated stream is confirmed by the leader in its pass.
func TestReconcileViewKeepsTheNewerRow(t *testing.T) {
	d := &Dispatcher{cfg: DispatcherConfig{Now: time.Now}, view: rowView{rows: map[string]*taskRow{},
		scheduled: map[string]bool{}, confirm: map[string]bool{}, ended: map[string]endedAt{}}}
	horizon := time.Now().Add(time.Hour)
	ready := &taskRow{Row: dispatchrow.Row{Status: eventlog.DispatchReady, Queue: "q"}}
	ended := &taskRow{Row: dispatchrow.Row{Status: eventlog.DispatchTerminal}}
	d.applyRow("t", ready, 10, horizon, false)
	d.applyRow("t", ended, 5, horizon, true)
	if r := d.view.rows["t"]; r == nil || r.Status != eventlog.DispatchReady || r.viewSeq != 10 {
		t.Fatalf("an older message replaced the row: %+v", r)
	}
	d.applyRow("t", nil, 7, horizon, true) // an older delete marker
	if d.view.rows["t"] == nil {
		t.Fatal("an older delete took the row out")
	}
	d.applyRow("t", ended, 11, horizon, true)
	if r := d.view.rows["t"]; r != nil {
		t.Fatalf("a newer message that ended the row left it in the view: %+v", r)
	}

	// A subtask a parent waits on, read ended at 20.
	d.view.ended["sub"] = endedAt{}
	d.applyRow("sub", ended, 20, horizon, false)
	d.applyRow("sub", ready, 15, horizon, true)
	if e := d.view.ended["sub"]; !e.ended || e.seq != 20 {
		t.Fatalf("an older message of an awaited subtask changed its record: %+v", e)
	}

	// Inserted by a slice: confirmed when the stream is replicated.
	d.applyRow("a", ready, 30, horizon, true)
	d.view.replicated = true
	d.applyRow("b", ready, 31, horizon, true)
	d.applyRow("c", ready, 32, horizon, false)
	if d.view.confirm["a"] || !d.view.confirm["b"] || d.view.confirm["c"] {
		t.Errorf("confirm holds %v, want only the row a slice put in from a replicated stream", d.view.confirm)
	}
	s := &snapshot{rows: d.view.rows, keys: map[string]bool{}, signals: map[string]bool{d.subj.ready("q", "b"): true}, confirm: d.view.confirm}
	if !d.candidate(s, "b", d.view.rows["b"], time.Now()) {
		t.Error("a row to confirm is not a candidate")
	}
}

// TestReconcileLaggingInfoKeepsTheView: a stream info whose last sequence
// is behind the view's (a replica answering while the stream's group
// elects a leader) is checked with the leader, which still has the view's
// last message: the view is kept, not read again.
func TestReconcileLaggingInfoKeepsTheView(t *testing.T) {
	d, nc, clock := roundDispatcher(t, -1)
	ctx := t.Context()
	loadIdleRows(t, nc, d, 30)
	passReads(t, d)
	info, err := d.rowsStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lagging := *info
	lagging.State.LastSeq = d.view.seq - 5
	seq := d.view.seq
	for range 2 { // twice in a row: it is the leader that tells
		if err := d.readChanges(ctx, &lagging, clock.now()); err != nil {
			t.Fatalf("a lagging info lost the view: %v", err)
		}
	}
	if !d.view.valid || d.view.seq != seq {
		t.Errorf("the view after a lagging info: valid %v at %d, want valid at %d", d.view.valid, d.view.seq, seq)
	}
	// Gone back for real: the leader has nothing from the view's sequence on.
	ahead := *info
	d.view.seq += 1000
	if err := d.readChanges(ctx, &ahead, clock.now()); !errors.Is(err, errViewLost) {
		t.Errorf("a stream gone back: %v, want errViewLost", err)
	}
}

// TestReconcileCatchUpInSlices: a view begun afresh reads the rows in
// slices of sliceCatchUp, each pass asking for the next soon while the
// round catches up; a pass on demand (RequeueStale) reads the round's rest
// at once.
func TestReconcileCatchUpInSlices(t *testing.T) {
	d, nc, _ := roundDispatcher(t, 15*time.Second)
	const rows = sliceCatchUp + 1000
	loadIdleRows(t, nc, d, rows)
	for i, want := range []struct {
		read       uint64
		catchingUp bool
	}{{sliceCatchUp, true}, {rows - sliceCatchUp, false}} {
		before := d.Stats()
		_, hurry, err := d.pass(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		if n := d.Stats().RowsRead - before.RowsRead; n != want.read || (hurry > 0) != want.catchingUp {
			t.Fatalf("catch-up pass %d read %d rows (next pass within %v), want %d (catching up: %v)", i+1, n, hurry, want.read, want.catchingUp)
		}
	}
	if s := d.Stats(); s.FullReconciles != 1 {
		t.Fatalf("%d rounds ended, want 1", s.FullReconciles)
	}
	d.view.valid = false
	before := d.Stats()
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.RowsRead-before.RowsRead != rows || s.FullReconciles != 2 {
		t.Errorf("RequeueStale read %d rows and ended %d rounds, want %d and 1", s.RowsRead-before.RowsRead, s.FullReconciles-before.FullReconciles, rows)
	}
}

// TestReconcileRoundTakesInFarTimers: a timer due beyond the horizon is
// left out of the view, and a round takes it in at least one round
// interval before it is due.
func TestReconcileRoundTakesInFarTimers(t *testing.T) {
	d, _, clock := roundDispatcher(t, -1)
	task, cond := suspendOnTimer(t, d, clock.now().Add(6*time.Hour))
	passReads(t, d)
	if d.view.rows[task] != nil {
		t.Fatal("a timer six hours ahead is in the view")
	}
	for clock.now().Before(cond.FireAt) {
		clock.add(time.Hour)
		passReads(t, d)
		if d.view.rows[task] != nil {
			if left := cond.FireAt.Sub(clock.now()); left < time.Hour {
				t.Fatalf("the timer joined the view %v before it is due, want at least the round interval", left)
			}
			return
		}
	}
	t.Fatal("the timer never joined the view before it was due")
}

// TestReconcileRoundReadsOneByOneAfterStalls: a round that stalled twice at
// the same place reads the keys not in its view one at a time from the
// leader, a share a pass paced as the slices are, and ends when none is
// left, with the rows it read in the view.
func TestReconcileRoundReadsOneByOneAfterStalls(t *testing.T) {
	d, nc, clock := roundDispatcher(t, 15*time.Minute)
	ctx := t.Context()
	loadIdleRows(t, nc, d, 3*sliceMin)
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	passReads(t, d)
	clock.add(time.Hour)
	// As a second stall leaves it: the keys not in the view.
	delete(d.view.rows, task)
	keys, err := rowKeys(ctx, d.js, d.cfg.tasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := d.rowsStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.view.round = sweepRound{n: d.view.round.n + 1, began: clock.now(), end: d.view.seq, next: 1, msgs: info.State.Msgs, keys: keys}
	passes := 0
	for !d.view.round.done {
		if passes++; passes > 10 {
			t.Fatalf("the round read one row at a time is not done after 10 passes (%d keys left)", len(d.view.round.keys))
		}
		passReads(t, d)
	}
	if passes < 2 {
		t.Errorf("the round read %d keys in one pass, want a share a pass", len(keys))
	}
	if d.view.rows[task] == nil {
		t.Error("the ready row read one at a time is not in the view")
	}
}

// TestReconcileRoundSkipsGarbageRows: rows that are not a row (binary
// bytes, a large value of zeros, an empty value) are left out of the view
// by the round and by the changes, and the pass goes on: a ready row whose
// signal was lost, read in the same slice, gets it again.
func TestReconcileRoundSkipsGarbageRows(t *testing.T) {
	d, _, _ := roundDispatcher(t, -1)
	ctx := t.Context()
	put := func(task string, val []byte) {
		t.Helper()
		if _, err := d.tasks.Put(ctx, task, val); err != nil {
			t.Fatal(err)
		}
	}
	garbage := [][]byte{{0x00, 0xff, 0xfe}, make([]byte, 512<<10), {}, []byte(`{"status": 7}`)}
	for _, g := range garbage {
		put(noeta.NewTaskID(), g)
	}
	ready := noeta.NewTaskID()
	if err := d.Enqueue(ctx, ready, eventlog.EnqueueOptions{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if err := d.ready.Purge(ctx, jetstream.WithPurgeSubject(d.subj.ready("q", ready))); err != nil {
		t.Fatal(err)
	}
	if _, rounds := passReads(t, d); rounds != 1 {
		t.Fatalf("the round over garbage rows ended %d rounds, want 1", rounds)
	}
	if n := len(d.view.rows); n != 1 || d.view.rows[ready] == nil {
		t.Errorf("the view holds %d rows, want only the ready one", n)
	}
	if s := d.Stats(); s.Resignalled != 1 {
		t.Errorf("re-signalled %d, want the ready row's", s.Resignalled)
	}
	// The ready row overwritten with garbage since: the changes take it out.
	put(ready, []byte("not a row"))
	passReads(t, d)
	if d.view.rows[ready] != nil {
		t.Error("a row overwritten with garbage stayed in the view")
	}
}
