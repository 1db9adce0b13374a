package jetstream

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// TestReconcileSnapshotHoldsOnlyPertinentRows: a pass reads every row but
// keeps only those it may act on. Reproduction (issue 17, engine bench
// --idle ... --nats): every pass held every row in a map, so an engine
// with a million tasks suspended on external events allocated and held
// about a million rows every pass (538 MB of the 6.7 GB allocated while
// growing 100,000), and its RSS grew with the suspended population
// although none of them needed anything.
func TestReconcileSnapshotHoldsOnlyPertinentRows(t *testing.T) {
	ctx := t.Context()
	d := passlessDispatcher(t, embeddedConn(t))
	const q = "snap"
	park := func(next eventlog.DispatchStatus, cond *noeta.Wake) string {
		task := noeta.NewTaskID()
		if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: q, Reserved: true}); err != nil {
			t.Fatal(err)
		}
		l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
		if err != nil {
			t.Fatal(err)
		}
		if next == eventlog.DispatchLeased {
			return task
		}
		if err := d.Release(ctx, l, eventlog.Release{Next: next, WakeOn: cond}); err != nil {
			t.Fatal(err)
		}
		return task
	}
	external := noeta.ExternalWake("bench")
	for range 40 {
		park(eventlog.DispatchSuspended, &external)
	}
	ended := park(eventlog.DispatchTerminal, nil)
	waiting := noeta.SubtaskCompletedWake(ended)
	timer := noeta.TimerWake(time.Now().Add(time.Hour))
	want := map[string]string{
		park(eventlog.DispatchLeased, nil):         "leased",
		park(eventlog.DispatchSuspended, &timer):   "suspended on a timer",
		park(eventlog.DispatchSuspended, &waiting): "awaiting a subtask",
	}
	ready := noeta.NewTaskID()
	if err := d.Enqueue(ctx, ready, eventlog.EnqueueOptions{Queue: q}); err != nil {
		t.Fatal(err)
	}
	want[ready] = "ready"

	s, err := d.readSnapshot(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for task, what := range want {
		if s.rows[task] == nil {
			t.Errorf("the %s row is not in the snapshot", what)
		}
	}
	if len(s.rows) != len(want) {
		t.Errorf("the snapshot holds %d rows, want the %d pertinent ones (40 suspended on an external event and 1 ended are not)", len(s.rows), len(want))
	}
	// The parent's ended subtask was dropped; the pass reads it to nudge.
	if _, err := d.sweep(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileReadRowsEveryRowOnce: the bulk read, pulled a bounded batch
// at a time, hands over the latest value of every row once, across many
// batches, with deleted rows marked; it stops at its bound or at the
// sequence it is given, and an empty bucket ends at once.
func TestReconcileReadRowsEveryRowOnce(t *testing.T) {
	ctx := t.Context()
	d := passlessDispatcher(t, embeddedConn(t))
	type read struct {
		rows    map[string]string
		deleted int
		last    uint64
		drained bool
	}
	count := func(from, end, limit uint64) read {
		got := read{rows: map[string]string{}}
		var prev uint64
		last, drained, err := d.readRowsUntil(ctx, from, end, limit, func(task string, val []byte, deleted bool, seq uint64) {
			if seq <= prev {
				t.Errorf("sequence %d handed over after %d", seq, prev)
			}
			prev = seq
			if _, dup := got.rows[task]; dup {
				t.Errorf("row %s handed over twice", task)
			}
			if deleted {
				got.deleted++
				return
			}
			got.rows[task] = string(val)
		})
		if err != nil {
			t.Fatal(err)
		}
		got.last, got.drained = last, drained
		return got
	}
	if got := count(1, 0, 0); len(got.rows) != 0 || !got.drained {
		t.Fatalf("an empty bucket gave %d rows (drained %v)", len(got.rows), got.drained)
	}
	const rows, deleted = 3*rowReadBatch + 17, 40
	ids := make([]string, rows)
	for i := range ids {
		ids[i] = noeta.NewTaskID()
		if _, err := d.tasks.Put(ctx, ids[i], []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		if i < deleted {
			if err := d.tasks.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		} else if _, err := d.tasks.Put(ctx, id, []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	got := count(1, 0, 0)
	if len(got.rows) != rows-deleted || got.deleted != deleted || !got.drained || got.last != 2*rows {
		t.Errorf("%d rows and %d deletes handed over up to %d (drained %v), want %d, %d and %d", len(got.rows), got.deleted, got.last, got.drained, rows-deleted, deleted, 2*rows)
	}
	for task, v := range got.rows {
		if v != "new" {
			t.Errorf("row %s handed over as %q, want its latest value", task, v)
		}
	}
	// Bounded by a count, then by a sequence.
	if got := count(1, 0, 100); len(got.rows)+got.deleted != 100 || got.drained {
		t.Errorf("a read of 100 handed over %d (drained %v)", len(got.rows)+got.deleted, got.drained)
	}
	if got := count(rows+1, rows+500, 0); len(got.rows)+got.deleted != 500 || got.last != rows+500 || got.drained {
		t.Errorf("a read up to sequence %d handed over %d up to %d (drained %v), want 500", rows+500, len(got.rows)+got.deleted, got.last, got.drained)
	}
}

// embeddedConn starts an embedded server of the test's own and connects.
func embeddedConn(t *testing.T) *nats.Conn {
	t.Helper()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// passlessDispatcher opens a Dispatcher whose passes run only when the test
// asks.
func passlessDispatcher(t *testing.T, nc *nats.Conn) *Dispatcher {
	t.Helper()
	d, err := OpenDispatcher(t.Context(), nc, DispatcherConfig{SweepInterval: -1, LeaseTTL: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestReconcileViewLostReadsEveryRow: when the rows stream cannot vouch for
// what changed since the view's sequence (it was created again, or its last
// sequence went back and the leader has nothing from it on, as after a
// restore),
// or a reconnect asks for it, a round reads every row again, and a ready
// row that lost its signal meanwhile is still repaired.
func TestReconcileViewLostReadsEveryRow(t *testing.T) {
	ctx := t.Context()
	nc := embeddedConn(t)
	d := passlessDispatcher(t, nc)
	if _, err := d.RequeueStale(ctx); err != nil {
		t.Fatal(err)
	}
	for i, lose := range []struct {
		what string
		do   func()
	}{
		{"the stream created again", func() { d.view.created = d.view.created.Add(-time.Hour) }},
		{"the last sequence gone back", func() { d.view.seq += 1000 }},
		// At most one catch-up round in ten times the last round's busy time.
		{"a reconnect", func() { d.fullWanted.Store(true); time.Sleep(reconcileDutyFactor * d.view.round.busy) }},
	} {
		task := noeta.NewTaskID()
		if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "lost"}); err != nil {
			t.Fatal(err)
		}
		subj := d.subj.ready("lost", task)
		if err := d.ready.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			t.Fatal(err)
		}
		lose.do()
		if _, err := d.RequeueStale(ctx); err != nil {
			t.Fatal(err)
		}
		if s := d.Stats(); s.FullReconciles != uint64(i+2) || s.Resignalled != uint64(i+1) {
			t.Errorf("%s: %d rounds, %d re-signalled; want %d and %d", lose.what, s.FullReconciles, s.Resignalled, i+2, i+1)
		}
	}
}
