package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// The tests of the reconciler lose, on purpose, what a process killed between
// two writes (or a failover) loses: a ready signal, a lease's expiry marker
// seen by nobody, a timer schedule. Each opens its Dispatchers on a prefix of
// its own. A Dispatcher opened with SweepInterval < 0 runs no reconciler: it
// is the process that dies, or the bystander that shows the stall.

// reconcileLimit bounds how long a repair may take in these tests: far below
// the 3.75 minutes after which the old sweep ran first.
const reconcileLimit = 30 * time.Second

var backends = []struct {
	name     string
	url      func() string
	replicas int
}{{"single", func() string { return singleURL }, 1}, {"cluster", func() string { return clusterURL }, 3}}

// openReconciling opens a Dispatcher on prefix with the given SweepInterval
// (0: the default; < 0: no reconciler) on a connection of its own.
func openReconciling(t *testing.T, nc *nats.Conn, replicas int, prefix string, sweep time.Duration) *jetstream.Dispatcher {
	t.Helper()
	cfg := testDispatcherConfig(replicas, prefix)
	cfg.SweepInterval = sweep
	var (
		d   *jetstream.Dispatcher
		err error
	)
	for deadline := time.Now().Add(time.Minute); ; {
		if d, err = jetstream.OpenDispatcher(t.Context(), nc, cfg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OpenDispatcher(%s): %v", prefix, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// dropSignal removes task's ready signal, as a process killed right after
// the write that made the task ready leaves it: never published.
func dropSignal(t *testing.T, nc *nats.Conn, prefix, queue, task string) {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), strings.ToUpper(prefix)+"_READY")
	if err != nil {
		t.Fatal(err)
	}
	subject := prefix + ".ready." + queue + ".*." + task
	// The signal follows the write that made the row ready (a wake applied
	// by the ingress signals just after it): wait for it, so that it is
	// dropped rather than published after the purge.
	deadline := time.Now().Add(reconcileLimit)
	for {
		info, err := s.Info(t.Context(), natsjs.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.State.Subjects) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Purge(t.Context(), natsjs.WithPurgeSubject(subject)); err != nil {
		t.Fatalf("drop the ready signal of %s: %v", task, err)
	}
}

// noSignal checks the stall: the queue offers nothing although the row is
// ready.
func noSignal(t *testing.T, d *jetstream.Dispatcher, queue, task string) {
	t.Helper()
	if st := mustInspect(t, d, task); st.Status != eventlog.DispatchReady {
		t.Fatalf("task %s is %s, want ready", task, st.Status)
	}
	if l, err := d.Lease(t.Context(), eventlog.LeaseRequest{Worker: "w", Queue: queue}); !errors.Is(err, eventlog.ErrNoReadyTask) {
		t.Fatalf("the queue offered %+v (%v) with the signal dropped, want ErrNoReadyTask", l, err)
	}
}

// leasedFromQueue waits until an untargeted lease on queue gets task.
func leasedFromQueue(t *testing.T, d *jetstream.Dispatcher, queue, task string, limit time.Duration) eventlog.Lease {
	t.Helper()
	var got eventlog.Lease
	waitFor(t, limit, "task "+task+" leased from its queue", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Queue: queue, Wait: true})
		if err != nil {
			return err
		}
		if l.Task != task {
			return fmt.Errorf("leased %s, want %s", l.Task, task)
		}
		got = l
		return nil
	})
	return got
}

// TestReconcileLostSignalAtOpen reproduces the stall of a ready row whose
// signal was never published (its process died between the row write and
// the publish): the queue offers nothing, and before the reconciler no
// Dispatcher repaired it until its first sweep, 3.75 to 6.25 minutes after
// it started (never at start). A Dispatcher that opens now repairs it at
// once.
func TestReconcileLostSignalAtOpen(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b.url())
			nc := connect(t, b.url())
			dead := openReconciling(t, nc, b.replicas, prefix, -1)
			q, task := testQueue(), noeta.NewTaskID()
			mustEnqueue(t, dead, task, eventlog.EnqueueOptions{Queue: q})
			dropSignal(t, nc, prefix, q, task)
			noSignal(t, dead, q, task)

			fresh := openReconciling(t, connect(t, b.url()), b.replicas, prefix, time.Hour)
			leasedFromQueue(t, dead, q, task, reconcileLimit)
			if s := fresh.Stats(); s.Resignalled != 1 {
				t.Errorf("the opening Dispatcher re-signalled %d tasks, want 1", s.Resignalled)
			}
		})
	}
}

// TestReconcileLostSignalPeriodic: a signal lost after every Dispatcher
// started is repaired by the periodic pass of the default configuration
// (DefaultSweepInterval, jittered), not minutes later.
func TestReconcileLostSignalPeriodic(t *testing.T) {
	t.Parallel()
	if jetstream.DefaultSweepInterval > 30*time.Second {
		t.Fatalf("DefaultSweepInterval is %v; a lost signal would stall a task that long", jetstream.DefaultSweepInterval)
	}
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	dead := openReconciling(t, nc, 1, prefix, -1)
	live := openReconciling(t, connect(t, singleURL), 1, prefix, 0)
	waitFor(t, reconcileLimit, "the first pass", func() error {
		if live.Stats().Reconciles == 0 {
			return errors.New("no pass yet")
		}
		return nil
	})
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, dead, task, eventlog.EnqueueOptions{Queue: q})
	dropSignal(t, nc, prefix, q, task)
	noSignal(t, dead, q, task)
	leasedFromQueue(t, dead, q, task, jetstream.DefaultSweepInterval*5/4+reconcileLimit/2)
}

// TestReconcileExpiredLeaseNoWatcher reproduces a lease that expired while
// no Dispatcher watched the leases bucket (every process was down): the
// watchers replay no history, so the row stayed leased to a dead worker
// until a sweep minutes later. A Dispatcher that opens requeues it at once,
// counting the reclaim.
func TestReconcileExpiredLeaseNoWatcher(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b.url())
			nc := connect(t, b.url())
			dead := openReconciling(t, nc, b.replicas, prefix, -1)
			q, task := testQueue(), noeta.NewTaskID()
			mustEnqueue(t, dead, task, eventlog.EnqueueOptions{Queue: q})
			l := mustLease(t, dead, eventlog.LeaseRequest{Worker: "w", Task: task})
			_ = dead.Close() // its watcher goes with it; nobody else watches this prefix
			js, err := natsjs.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(t.Context(), prefix+"_leases")
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, reconcileLimit, "the lease key expired at the server", func() error {
				if _, err := kv.Get(t.Context(), task+"."+l.ID); !errors.Is(err, natsjs.ErrKeyNotFound) {
					return fmt.Errorf("key still there (%v)", err)
				}
				return nil
			})

			fresh := openReconciling(t, connect(t, b.url()), b.replicas, prefix, time.Hour)
			waitFor(t, reconcileLimit, "the expired lease requeued", statusOf(t, fresh, task, eventlog.DispatchReady))
			if st := mustInspect(t, fresh, task); st.ReclaimCount != 1 {
				t.Errorf("reclaims: got %d, want 1", st.ReclaimCount)
			}
			leasedFromQueue(t, fresh, q, task, reconcileLimit)
		})
	}
}

// TestReconcileLostTimerSchedule: a row suspended on a timer whose schedule
// is gone (purged, or a crash between two writes of a re-arm) is re-armed
// or woken by the next pass instead of sleeping forever.
func TestReconcileLostTimerSchedule(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	dead := openReconciling(t, nc, 1, prefix, -1)
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, dead, task, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, dead, eventlog.LeaseRequest{Worker: "w", Task: task})
	cond := noeta.TimerWake(time.Now().Add(2 * time.Second))
	if err := dead.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), strings.ToUpper(prefix)+"_TIMERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context(), natsjs.WithPurgeSubject(prefix+".timer.*."+task+".*")); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close()
	fresh := openReconciling(t, connect(t, singleURL), 1, prefix, time.Hour)
	waitFor(t, reconcileLimit, "the timer fired", statusOf(t, fresh, task, eventlog.DispatchReady))
	if st := mustInspect(t, fresh, task); st.MatchedWake == nil || st.MatchedWake.Kind != noeta.WakeTimerFired {
		t.Errorf("matched wake: got %+v, want the timer", st.MatchedWake)
	}
}

// TestWakeToReadyRowResignals reproduces a Wake to a task that is ready but
// lost its signal: it used to be buffered and nothing more, so the task
// stayed unleased. The write now publishes the signal again.
func TestWakeToReadyRowResignals(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b.url())
			nc := connect(t, b.url())
			d := openReconciling(t, nc, b.replicas, prefix, -1)
			q, task := testQueue(), noeta.NewTaskID()
			mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
			dropSignal(t, nc, prefix, q, task)
			noSignal(t, d, q, task)
			if matched, err := d.Wake(t.Context(), task, noeta.ExternalWake("early")); err != nil || matched {
				t.Fatalf("Wake to a ready row: %v %v, want buffered", matched, err)
			}
			leasedFromQueue(t, d, q, task, reconcileLimit)
		})
	}
}

// TestStaleSignalInPlaceIsLeased: a ready row whose subject in the queue
// holds a signal of an earlier ready spell (its own was lost, a stale one
// stayed) is leased by the next untargeted Lease, after a reconcile pass.
// The pass takes any message on the subject for the signal and leaves it;
// the Lease fetches the stale one, drops it, signals the spell again and
// takes the task. A stale signal delays a task by a trip through its
// queue; it would stall it only if the broker never delivered it.
func TestStaleSignalInPlaceIsLeased(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d := openReconciling(t, nc, 1, prefix, -1)
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
	dropSignal(t, nc, prefix, q, task)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf("%s.ready.%s.%d.%s", prefix, q, jetstream.Partition(task), task)
	if _, err := js.Publish(t.Context(), subject, []byte("0")); err != nil { // epoch 0: before the row's first spell
		t.Fatalf("publish a stale signal: %v", err)
	}
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	leasedFromQueue(t, d, q, task, reconcileLimit)
}

// TestRedeliveredWakeResignals reproduces a wake applied by a process that
// died before it signalled the task it made ready (and before it acked the
// wake): the redelivery was recognised as applied and acked, nothing more,
// and the task stayed unleased. The redelivery now re-signals a ready row.
func TestRedeliveredWakeResignals(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d := openReconciling(t, nc, 1, prefix, -1)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	cond := noeta.ExternalWake("go")
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), jetstream.WakeSubject(prefix, task), wakeJSON(t, noeta.ExternalWake("go")))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, reconcileLimit, "the wake applied", statusOf(t, d, task, eventlog.DispatchReady))
	dropSignal(t, nc, prefix, q, task)
	noSignal(t, d, q, task)

	// The wake stream is a work queue: the applied message is gone, so the
	// redelivery is handed over as the consumer would, same sequence.
	jetstream.ApplyWakeForTest(d, jetstream.WakeSubject(prefix, task), wakeJSON(t, noeta.ExternalWake("go")), ack.Sequence, time.Now())
	if s := d.Stats(); s.DuplicateWakes != 1 {
		t.Fatalf("duplicates: got %d, want 1", s.DuplicateWakes)
	}
	leasedFromQueue(t, d, q, task, reconcileLimit)
}

// TestRepairSignal: RepairSignal publishes a lost signal of a ready row and
// leaves every other row alone; in particular it never forces a leased
// task back to ready (which Enqueue does), so a resumed spawn may call it on
// a child that a worker holds right now.
func TestRepairSignal(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d := openReconciling(t, nc, 1, prefix, -1)
	q, ready, leased := testQueue(), noeta.NewTaskID(), noeta.NewTaskID()
	mustEnqueue(t, d, leased, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: leased})
	mustEnqueue(t, d, ready, eventlog.EnqueueOptions{Queue: q})
	dropSignal(t, nc, prefix, q, ready)
	noSignal(t, d, q, ready)
	for _, task := range []string{ready, leased} {
		if err := d.RepairSignal(t.Context(), task); err != nil {
			t.Fatalf("RepairSignal(%s): %v", task, err)
		}
	}
	if err := d.RepairSignal(t.Context(), "not a task id!"); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("RepairSignal of a malformed id: %v, want ErrInvalidArgument", err)
	}
	if ok, err := d.Valid(t.Context(), l); err != nil || !ok {
		t.Errorf("the leased task's lease after RepairSignal: valid %v, %v; want still valid", ok, err)
	}
	leasedFromQueue(t, d, q, ready, reconcileLimit)
}

// TestDispatcherIngressConsumerRecreated reproduces an ingress consumer that
// goes away under a running Dispatcher (deleted, or lost with a node): its
// iterator stopped, the goroutine applying wakes returned for good, and
// wakes and fired timers waited for another process. It is created again.
func TestDispatcherIngressConsumerRecreated(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d := openReconciling(t, nc, 1, prefix, -1)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	q, task := testQueue(), noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	cond := noeta.ExternalWake("go")
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(t.Context(), strings.ToUpper(prefix)+"_WAKE", "dispatcher-ingress"); err != nil {
		t.Fatalf("delete the ingress consumer: %v", err)
	}
	if _, err := js.Publish(t.Context(), jetstream.WakeSubject(prefix, task), wakeJSON(t, noeta.ExternalWake("go"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reconcileLimit, "the wake applied", statusOf(t, d, task, eventlog.DispatchReady))
}

// TestReconcileAfterNodeRestart runs a three-node cluster of its own and
// restarts the node a Dispatcher is connected to (the ready stream's
// leader): signals lost while it was down are published again by the pass
// the reconnect triggers, long before the periodic one.
func TestReconcileAfterNodeRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cl, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(cl.Shutdown)
	const prefix = "rc"
	nc := connect(t, cl.ClientURL())
	bystander := openReconciling(t, nc, 3, prefix, -1)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "RC_READY")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("ready stream info: %+v %v", info, err)
	}
	victim := cl.Index(info.Cluster.Leader)
	if victim < 0 {
		t.Fatalf("no node named %q", info.Cluster.Leader)
	}
	urls := cl.ClientURLs()
	order := append([]string{urls[victim]}, append(append([]string{}, urls[:victim]...), urls[victim+1:]...)...)
	rnc, err := nats.Connect(strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	rcfg := testDispatcherConfig(3, prefix)
	rcfg.SweepInterval = time.Hour
	rcfg.Logger = slog.New(slog.DiscardHandler)
	rec, err := jetstream.OpenDispatcher(ctx, rnc, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	waitFor(t, reconcileLimit, "the opening pass", func() error {
		if rec.Stats().Reconciles == 0 {
			return errors.New("no pass yet")
		}
		return nil
	})

	q := testQueue()
	tasks := make([]string, 12)
	for i := range tasks {
		tasks[i] = noeta.NewTaskID()
		mustEnqueue(t, bystander, tasks[i], eventlog.EnqueueOptions{Queue: q})
	}
	for _, task := range tasks[:4] {
		dropSignal(t, nc, prefix, q, task)
	}
	if err := cl.RestartNode(ctx, victim); err != nil {
		t.Fatalf("restart %s: %v", info.Cluster.Leader, err)
	}
	want := map[string]bool{}
	for _, task := range tasks {
		want[task] = true
	}
	waitFor(t, 2*reconcileLimit, "every task leased", func() error {
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		defer lcancel()
		l, err := bystander.Lease(lctx, eventlog.LeaseRequest{Worker: "w", Queue: q, Wait: true})
		if err == nil {
			delete(want, l.Task)
		}
		if len(want) > 0 {
			return fmt.Errorf("%d tasks not leased (last: %v)", len(want), err)
		}
		return nil
	})
	if s := rec.Stats(); s.Resignalled < 4 || s.Reconciles < 2 {
		t.Errorf("after the restart: %d passes re-signalled %d tasks, want at least 2 passes and 4 tasks", s.Reconciles, s.Resignalled)
	}
}

// TestWriteUnderLeaseEndsReclaimRun reproduces a child task whose hosts
// were killed under it three times in a row (each after it had written to
// its log): the third reclaim ended it terminal (stale_reclaim_exceeded) in
// the dispatcher, with no terminal record in its log, so its parent never
// heard of it and waited forever. A lease that reaches the log (Valid, the
// check before every append) is progress and ends the run of reclaims; a
// task whose holders die before writing anything is given up at
// ReclaimMax: leased once more to record its end, and when that holder dies
// too, ready for another (ADR 0063), never ended in the dispatcher alone.
func TestWriteUnderLeaseEndsReclaimRun(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	d := openReconciling(t, connect(t, singleURL), 1, prefix, -1)
	for _, c := range []struct {
		name   string
		writes bool
		leases int
		want   eventlog.DispatchStatus
	}{
		{"holders write", true, jetstream.DefaultReclaimMax, eventlog.DispatchReady},
		// At the cap the task is leased once more, to record its end; that
		// holder dies too: ready again, its end still to record.
		{"holders die first", false, jetstream.DefaultReclaimMax + 1, eventlog.DispatchReady},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := noeta.NewTaskID()
			mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: testQueue()})
			for i := range c.leases {
				l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
				if c.writes {
					if ok, err := d.Valid(t.Context(), l); err != nil || !ok {
						t.Fatalf("Valid of a fresh lease: %v %v", ok, err)
					}
					waitFor(t, reconcileLimit, "the reclaim run ended", func() error {
						if st := mustInspect(t, d, task); st.ReclaimCount != 0 {
							return fmt.Errorf("ReclaimCount %d", st.ReclaimCount)
						}
						return nil
					})
				}
				// The holder dies: its lease expires, the watcher requeues.
				waitFor(t, reconcileLimit, fmt.Sprintf("reclaim %d", i+1), func() error {
					st := mustInspect(t, d, task)
					if st.Status == eventlog.DispatchLeased {
						return errors.New("still leased")
					}
					return nil
				})
			}
			st := mustInspect(t, d, task)
			if st.Status != c.want {
				t.Errorf("after %d reclaims: %s (%s), want %s", c.leases, st.Status, st.Reason, c.want)
			}
		})
	}
}

// TestTimerBackstop reproduces a timer whose schedule the broker never
// fires (lost in a failover; here purged): the task slept until a sweep,
// minutes later. The process that armed it fires it itself, a moment after
// its deadline; no reconciler runs here.
func TestTimerBackstop(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d := openReconciling(t, nc, 1, prefix, -1)
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: testQueue()})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	// Far enough ahead that the purge below lands before the broker fires it,
	// even on a loaded machine.
	cond := noeta.TimerWake(time.Now().Add(3 * time.Second))
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), strings.ToUpper(prefix)+"_TIMERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context(), natsjs.WithPurgeSubject(prefix+".timer.*."+task+".*")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reconcileLimit, "the timer fired", statusOf(t, d, task, eventlog.DispatchReady))
	if st := mustInspect(t, d, task); st.MatchedWake == nil || !st.MatchedWake.Equal(cond) {
		t.Errorf("matched wake: got %+v, want the timer's condition", st.MatchedWake)
	}
	// The count follows the write that made the row ready.
	waitFor(t, reconcileLimit, "the backstop counted", func() error {
		if n := d.Stats().TimersBackstopped; n != 1 {
			return fmt.Errorf("timers backstopped: %d, want 1", n)
		}
		return nil
	})
}

// TestReconcileNudgesWaitingParents: a parent that has waited for a whole
// reconcile pass on subtasks that have all ended is named to
// AwaitingSubtasks with them. Reproduction (issue 12, the chaos run): a child's result reaches its
// parent through the ChildLifecycle observer of the process that committed
// the child's last record; a process killed in between took the handoff with
// it, and the parent waited until some process restarted and recovered every
// handoff, forever if none did.
func TestReconcileNudgesWaitingParents(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	calls := make(chan nudge, 16)
	d, want := seedWaitingParents(t, prefix, calls)
	// The first pass sees them suspend: their handoffs may be on the way.
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Fatalf("a parent that just suspended was nudged: %+v", <-calls)
	}
	// The second pass finds them still waiting, in the same suspend.
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkNudged(t, calls, want)
}

// TestRecoverAwaitingNudgesAtOnce: after RecoverAwaiting (a process
// starting its child-lifecycle observer), the very next pass nudges every
// parent waiting on ended subtasks, and the pass after it is back to the
// rule of two passes. Reproduction: the start-up recovery listed every task
// and read its log, and at a million tasks never finished.
func TestRecoverAwaitingNudgesAtOnce(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	calls := make(chan nudge, 16)
	d, want := seedWaitingParents(t, prefix, calls)
	d.RecoverAwaiting()
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkNudged(t, calls, want)
	// A parent that suspends after the recovery waits its two passes.
	late := noeta.NewTaskID()
	q := testQueue()
	mustEnqueue(t, d, late, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: late})
	cond := noeta.SubtaskCompletedWake(want.single[0])
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	for len(calls) > 0 {
		if c := <-calls; c.parent == late {
			t.Fatalf("a parent that suspended after the recovery was nudged in its first pass: %+v", c)
		}
	}
}

type nudge struct {
	parent   string
	subtasks []string
}

// waitingParents names the parents seedWaitingParents leaves due a nudge.
type waitingParents struct {
	singleParent, groupParent string
	single, group             []string
}

// seedWaitingParents opens a Dispatcher whose passes run only when the test
// asks, and leaves in it a parent waiting on an ended subtask, one waiting
// on an ended group, one on a timer and one on a group with a member still
// running: only the first two are due a nudge.
func seedWaitingParents(t *testing.T, prefix string, calls chan<- nudge) (*jetstream.Dispatcher, waitingParents) {
	t.Helper()
	cfg := testDispatcherConfig(1, prefix)
	cfg.SweepInterval = -1 // passes only when the test asks
	cfg.AwaitingSubtasks = func(_ context.Context, parent string, subtasks []string) {
		calls <- nudge{parent, subtasks}
	}
	d, err := jetstream.OpenDispatcher(t.Context(), connect(t, singleURL), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	q := testQueue()
	single, group, timer, running := noeta.NewTaskID(), noeta.NewTaskID(), noeta.NewTaskID(), noeta.NewTaskID()
	kids := []string{noeta.NewTaskID(), noeta.NewTaskID()}
	busy := noeta.NewTaskID() // still running: its parent's handoff is not due
	for _, kid := range kids {
		mustEnqueue(t, d, kid, eventlog.EnqueueOptions{Queue: q})
		l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: kid})
		if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
			t.Fatal(err)
		}
	}
	mustEnqueue(t, d, busy, eventlog.EnqueueOptions{Queue: q})
	for task, cond := range map[string]noeta.Wake{
		single:  noeta.SubtaskCompletedWake(kids[0]),
		group:   noeta.GroupCompletedWake("g1", kids),
		timer:   noeta.TimerWake(time.Now().Add(time.Hour)),
		running: noeta.GroupCompletedWake("g2", []string{kids[1], busy}),
	} {
		mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
		l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
		if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
			t.Fatal(err)
		}
	}
	return d, waitingParents{singleParent: single, groupParent: group, single: kids[:1], group: kids}
}

// checkNudged drains calls and wants exactly the two parents due a nudge.
func checkNudged(t *testing.T, calls <-chan nudge, want waitingParents) {
	t.Helper()
	got := map[string][]string{}
	for len(calls) > 0 {
		c := <-calls
		got[c.parent] = c.subtasks
	}
	if fmt.Sprint(got[want.singleParent]) != fmt.Sprint(want.single) || fmt.Sprint(got[want.groupParent]) != fmt.Sprint(want.group) || len(got) != 2 {
		t.Fatalf("nudged %v, want %s %v and %s %v (the timer's task waits on no subtask, and a group with a member still running is not due)",
			got, want.singleParent, want.single, want.groupParent, want.group)
	}
}

// TestReconcileOnADamagedRow: a row whose message the server can no longer
// load (flipped bytes in the bucket's block) does not stop the passes.
// Reproduction: the bulk read of the rows waited for that message for ever,
// so every pass ran into its deadline and repaired nothing on the store.
func TestReconcileOnADamagedRow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testDispatcherConfig(1, "dmg")
	cfg.SweepInterval = -1
	nc := connect(t, srv.ClientURL())
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue()
	good, bad := noeta.NewTaskID(), noeta.NewTaskID()
	mustEnqueue(t, d, good, eventlog.EnqueueOptions{Queue: q})
	mustEnqueue(t, d, bad, eventlog.EnqueueOptions{Queue: q})
	_ = d.Close()
	nc.Close()
	srv.Shutdown()

	blks, err := filepath.Glob(filepath.Join(dir, "jetstream", "$G", "streams", "KV_dmg_tasks", "msgs", "*.blk"))
	if err != nil || len(blks) != 1 {
		t.Fatalf("row blocks %v (%v), want one", blks, err)
	}
	buf, err := os.ReadFile(blks[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.LastIndex(buf, []byte(bad))
	if at < 0 {
		t.Fatalf("no row of %s in %s", bad, blks[0])
	}
	for i := at; i < at+len(bad); i++ {
		buf[i] ^= 0xff
	}
	if err := os.WriteFile(blks[0], buf, 0o600); err != nil {
		t.Fatal(err)
	}

	srv, err = embedded.Start(t.Context(), embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc = connect(t, srv.ClientURL())
	d, err = jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	dropSignal(t, nc, "dmg", q, good)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := d.RequeueStale(ctx); err != nil {
		t.Fatalf("a pass on the damaged store: %v", err)
	}
	// The pass did its work on the rows it could read: the lost signal of
	// the sound task is back.
	leasedFromQueue(t, d, q, good, reconcileLimit)
}

// TestReconcileRepairsWithinTwoLeaseTTLs: with the default sweep interval,
// a parent whose group handoff was lost (the child-lifecycle observer that
// owed it paused or cut off) is named to AwaitingSubtasks within two lease
// TTLs of suspending, as a lease is reclaimed within one. Reproduction (the
// partition run, TestPartition in deploy/nats, 3s TTL): the interval was a
// fixed 15s whatever the TTL, and such a parent waited for two passes, up
// to 37s, for its wake.
func TestReconcileRepairsWithinTwoLeaseTTLs(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	cfg := testDispatcherConfig(1, uniquePrefix(t, singleURL))
	cfg.LeaseTTL = ttl
	calls := make(chan nudge, 4)
	cfg.AwaitingSubtasks = func(_ context.Context, parent string, subtasks []string) {
		calls <- nudge{parent, subtasks}
	}
	d, err := jetstream.OpenDispatcher(t.Context(), connect(t, singleURL), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	q, parent, kid := testQueue(), noeta.NewTaskID(), noeta.NewTaskID()
	mustEnqueue(t, d, kid, eventlog.EnqueueOptions{Queue: q})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: kid})
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, d, parent, eventlog.EnqueueOptions{Queue: q})
	l = mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: parent})
	cond := noeta.GroupCompletedWake("g", []string{kid})
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	suspended := time.Now()
	select {
	case c := <-calls:
		if c.parent != parent || fmt.Sprint(c.subtasks) != fmt.Sprint([]string{kid}) {
			t.Fatalf("nudged %+v, want %s on %s", c, parent, kid)
		}
		t.Logf("nudged %v after the suspend", time.Since(suspended).Round(time.Millisecond))
	case <-time.After(2 * ttl):
		t.Fatalf("the parent waiting on its ended subtask was not nudged within 2 lease TTLs (%v)", 2*ttl)
	}
}

// TestStrandedSignalRepublished reproduces the stall the partition run and
// TestChaos saw: a ready row whose signal the stream holds at the row's own
// epoch while the queue's consumer has moved past it, so nothing delivers
// it. A pass saw a signal and repaired nothing; the task was never leased.
// Here the consumer moves past the signal while its filter leaves the
// signal's subject out (a signal of another partition delivered after it),
// then takes the whole queue again. Seen stranded on passes far enough apart
// with the consumer idle, the signal is purged and published again, and
// the task leased.
func TestStrandedSignalRepublished(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d, clock := openClocked(t, nc, prefix)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue()
	// A first task makes the queue's consumer.
	first := noeta.NewTaskID()
	mustEnqueue(t, d, first, eventlog.EnqueueOptions{Queue: q})
	end := func(l eventlog.Lease) {
		t.Helper()
		if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
			t.Fatal(err)
		}
	}
	end(leasedFromQueue(t, d, q, first, reconcileLimit))

	task, other := noeta.NewTaskID(), noeta.NewTaskID()
	for jetstream.Partition(other) == jetstream.Partition(task) {
		other = noeta.NewTaskID()
	}
	name := "ready-" + q
	consumer := func(filter string) {
		t.Helper()
		if _, err := js.UpdateConsumer(t.Context(), strings.ToUpper(prefix)+"_READY", natsjs.ConsumerConfig{
			Durable: name, Description: "noeta ready queue " + q, FilterSubject: filter,
			DeliverPolicy: natsjs.DeliverAllPolicy, AckPolicy: natsjs.AckExplicitPolicy,
			AckWait: 10 * time.Second, MaxDeliver: -1, InactiveThreshold: time.Hour,
		}); err != nil {
			t.Fatalf("update the queue's consumer: %v", err)
		}
	}
	consumer(fmt.Sprintf("%s.ready.%s.%d.*", prefix, q, jetstream.Partition(other)))
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
	mustEnqueue(t, d, other, eventlog.EnqueueOptions{Queue: q})
	end(leasedFromQueue(t, d, q, other, reconcileLimit)) // delivered after the task's signal
	consumer(prefix + ".ready." + q + ".*.*")
	if l, err := d.Lease(t.Context(), eventlog.LeaseRequest{Worker: "w", Queue: q}); !errors.Is(err, eventlog.ErrNoReadyTask) {
		t.Fatalf("the queue offered %+v (%v) with its signal stranded, want ErrNoReadyTask", l, err)
	}
	for range 2 {
		if _, err := d.RequeueStale(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Add(int64(time.Minute))
	}
	if _, err := d.RequeueStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := d.Stats().Republished; n != 1 {
		t.Errorf("republished %d signals, want 1", n)
	}
	leasedFromQueue(t, d, q, task, reconcileLimit)
}

// A backlog is not stranded: signals waiting for a worker are pending at
// the consumer, and passes however far apart leave them where they are.
func TestBacklogNotRepublished(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d, clock := openClocked(t, nc, prefix)
	q := testQueue()
	first := noeta.NewTaskID()
	mustEnqueue(t, d, first, eventlog.EnqueueOptions{Queue: q})
	l := leasedFromQueue(t, d, q, first, reconcileLimit) // the consumer exists
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mustEnqueue(t, d, noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: q})
	}
	for range 3 {
		if _, err := d.RequeueStale(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Add(int64(time.Minute))
	}
	if n := d.Stats().Republished; n != 0 {
		t.Errorf("republished %d signals of a backlog, want 0", n)
	}
}

// openClocked opens a Dispatcher that reconciles only when asked, on a
// clock the test moves.
func openClocked(t *testing.T, nc *nats.Conn, prefix string) (*jetstream.Dispatcher, *atomic.Int64) {
	t.Helper()
	clock := new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	cfg := testDispatcherConfig(1, prefix)
	cfg.SweepInterval = -1
	cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, clock
}
