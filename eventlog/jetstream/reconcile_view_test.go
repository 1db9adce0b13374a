package jetstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// The tests of the reconcile view (ADR 0092): a pass reads the rows written
// since the pass before, not every row, and what a crashed process left
// behind in a row is still found by it.

// parkIdle leaves n tasks of each idle kind on d: ended, suspended on an
// external event, and suspended on a timer two days ahead, beyond any
// pass's horizon.
func parkIdle(t *testing.T, d *jetstream.Dispatcher, n int) {
	t.Helper()
	q := testQueue()
	external := noeta.ExternalWake("never")
	later := noeta.TimerWake(time.Now().Add(48 * time.Hour))
	for i := range 3 * n {
		task := noeta.NewTaskID()
		mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q, Reserved: true})
		l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
		rel := eventlog.Release{Next: eventlog.DispatchTerminal}
		switch i % 3 {
		case 1:
			rel = eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &external}
		case 2:
			rel = eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &later}
		}
		if err := d.Release(t.Context(), l, rel); err != nil {
			t.Fatal(err)
		}
	}
}

func mustPass(t *testing.T, d *jetstream.Dispatcher) []string {
	t.Helper()
	ids, err := d.RequeueStale(t.Context())
	if err != nil {
		t.Fatalf("RequeueStale: %v", err)
	}
	return ids
}

// TestReconcilePassReadsOnlyChangedRows: once a Dispatcher has read every
// row, a pass reads the rows written since the pass before and no other.
// Reproduction (issue 31, docs/scale.md): every pass read every row, about
// 15 µs each, 15 s of CPU a pass at a million rows though none of them
// needed anything.
func TestReconcilePassReadsOnlyChangedRows(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b.url())
			nc := connect(t, b.url())
			d := openReconciling(t, nc, b.replicas, prefix, -1)
			const idle = 40
			parkIdle(t, d, idle)

			mustPass(t, d)
			first := d.Stats()
			if first.FullReconciles != 1 || first.RowsRead < 3*idle {
				t.Fatalf("the first pass: %d rounds, %d rows read; want one round reading the %d rows", first.FullReconciles, first.RowsRead, 3*idle)
			}
			for range 3 {
				mustPass(t, d)
			}
			if s := d.Stats(); s.RowsRead != first.RowsRead || s.FullReconciles != 1 {
				t.Fatalf("three passes with nothing written read %d rows (%d rounds), want 0", s.RowsRead-first.RowsRead, s.FullReconciles-1)
			}

			// A ready task whose signal is lost: one row written, one row
			// read, and the signal repaired.
			q, task := testQueue(), noeta.NewTaskID()
			mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
			dropSignal(t, nc, prefix, q, task)
			before := d.Stats()
			mustPass(t, d)
			after := d.Stats()
			if n := after.RowsRead - before.RowsRead; n != 1 {
				t.Errorf("the pass after one row was written read %d rows, want 1", n)
			}
			if n := after.Resignalled - before.Resignalled; n != 1 {
				t.Errorf("re-signalled %d tasks, want 1", n)
			}
			leasedFromQueue(t, d, q, task, reconcileLimit)
		})
	}
}

// putRow writes task's row into the rows bucket by hand, as a process that
// wrote it and was killed before any side effect (a signal, a lease key, a
// timer schedule) leaves it.
func putRow(t *testing.T, nc *nats.Conn, prefix, task string, row map[string]any) {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), prefix+"_tasks")
	if err != nil {
		t.Fatal(err)
	}
	row["created"] = time.Now().UTC()
	row["op"] = noeta.NewID()
	val, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), task, val); err != nil {
		t.Fatalf("write the row of %s: %v", task, err)
	}
}

// TestReconcileFindsRowsWrittenWithoutSideEffects: rows written after a
// pass by a process killed before their side effects (a ready row with no
// signal, a leased row whose lease key never came or has gone, a timer
// row whose schedule was never armed and whose deadline passed) are found
// by the next pass, which reads only them, and repaired. There is no
// second record of a row for such a crash to leave out: the pass reads
// what the rows stream holds past the sequence it read up to.
func TestReconcileFindsRowsWrittenWithoutSideEffects(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b.url())
			nc := connect(t, b.url())
			d := openReconciling(t, nc, b.replicas, prefix, -1)
			parkIdle(t, d, 10)
			mustPass(t, d)
			before := d.Stats()

			q := testQueue()
			ready, expired, keyless, timed := noeta.NewTaskID(), noeta.NewTaskID(), noeta.NewTaskID(), noeta.NewTaskID()
			putRow(t, nc, prefix, ready, map[string]any{"status": "ready", "queue": q, "ready_epoch": 1})
			putRow(t, nc, prefix, expired, map[string]any{"status": "leased", "queue": q, "ready_epoch": 1,
				"lease_id": noeta.NewID(), "generation": 1, "worker": "dead", "expires": time.Now().Add(-time.Second).UTC()})
			putRow(t, nc, prefix, keyless, map[string]any{"status": "leased", "queue": q, "ready_epoch": 1,
				"lease_id": noeta.NewID(), "generation": 1, "worker": "dead", "expires": time.Now().Add(time.Hour).UTC()})
			due := noeta.TimerWake(time.Now().Add(-time.Minute))
			putRow(t, nc, prefix, timed, map[string]any{"status": "suspended", "queue": q, "ready_epoch": 1,
				"generation": 1, "wake_on": due})

			ids := mustPass(t, d)
			after := d.Stats()
			if n := after.RowsRead - before.RowsRead; n != 4 {
				t.Errorf("the pass read %d rows, want the 4 written since the pass before", n)
			}
			if n := after.Resignalled - before.Resignalled; n != 1 {
				t.Errorf("re-signalled %d tasks, want 1", n)
			}
			if fmt.Sprint(ids) != fmt.Sprint([]string{expired, keyless}) && fmt.Sprint(ids) != fmt.Sprint([]string{keyless, expired}) {
				t.Errorf("requeued %v, want %s (lease expired) and %s (lease key gone)", ids, expired, keyless)
			}
			for _, task := range []string{expired, keyless, timed} {
				if st := mustInspect(t, d, task); st.Status != eventlog.DispatchReady {
					t.Errorf("task %s is %s, want ready", task, st.Status)
				}
			}
			if st := mustInspect(t, d, timed); st.MatchedWake == nil || st.MatchedWake.Kind != noeta.WakeTimerFired {
				t.Errorf("the overdue timer's task matched %+v, want its timer", st.MatchedWake)
			}
			got := map[string]bool{}
			waitFor(t, reconcileLimit, "the four tasks leased from their queue", func() error {
				l, err := d.Lease(t.Context(), eventlog.LeaseRequest{Worker: "w", Queue: q})
				if err == nil {
					got[l.Task] = true
				} else if !errors.Is(err, eventlog.ErrNoReadyTask) {
					return err
				}
				if len(got) < 4 {
					return fmt.Errorf("leased %d of 4", len(got))
				}
				return nil
			})
		})
	}
}

// TestReconcileFullPassTakesFarTimers: a timer due beyond the horizon of
// the view is left to the next round (no round within FullSweepInterval of
// the last), and a round past its deadline, its schedule's firing far away
// in real time, fires it (TestReconcileRoundTakesInFarTimers checks that a
// round takes it in before it is due).
func TestReconcileFullPassTakesFarTimers(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	clock := time.Now()
	cfg := testDispatcherConfig(1, prefix)
	cfg.SweepInterval = -1
	cfg.FullSweepInterval = time.Minute
	var now atomicTime
	now.set(clock)
	cfg.Now = now.get
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q, Reserved: true})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	cond := noeta.TimerWake(clock.Add(3 * time.Hour))
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	mustPass(t, d)
	now.set(clock.Add(30 * time.Second))
	mustPass(t, d)
	if s := d.Stats(); s.FullReconciles != 1 {
		t.Fatalf("%d rounds within FullSweepInterval, want 1", s.FullReconciles)
	}
	// The broker's schedule is three hours of real time away: the full
	// pass past the deadline (by this clock) fires the timer itself.
	now.set(cond.FireAt.Add(time.Minute))
	mustPass(t, d)
	if s := d.Stats(); s.FullReconciles != 2 {
		t.Errorf("%d rounds after FullSweepInterval, want 2", s.FullReconciles)
	}
	if st := mustInspect(t, d, task); st.Status != eventlog.DispatchReady || st.MatchedWake == nil || st.MatchedWake.Kind != noeta.WakeTimerFired {
		t.Errorf("the far timer's task is %s with %+v, want ready on its timer", st.Status, st.MatchedWake)
	}
}

// atomicTime is a clock a test sets.
type atomicTime struct{ ns atomic.Int64 }

func (a *atomicTime) set(t time.Time) { a.ns.Store(t.UnixNano()) }
func (a *atomicTime) get() time.Time  { return time.Unix(0, a.ns.Load()) }
