package jetstream_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// queueSignals counts the messages the ready stream of prefix holds for
// queue (its signals at the back and ahead of it), as its leader reports.
func queueSignals(t *testing.T, url, prefix, queue string) int {
	t.Helper()
	js, err := natsjs.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), strings.ToUpper(prefix)+"_READY")
	if err != nil {
		t.Fatalf("ready stream of %s: %v", prefix, err)
	}
	info, err := s.Info(t.Context(), natsjs.WithSubjectFilter(prefix+".ready."+queue+".>"))
	if err != nil {
		t.Fatalf("ready stream info: %v", err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

var topologies = []struct {
	name     string
	url      func() string
	replicas int
}{{"single", func() string { return singleURL }, 1}, {"cluster", func() string { return clusterURL }, 3}}

// TestDispatcherTargetedLeaseWithdrawsSignal: leasing tasks by name leaves
// no ready signal behind. Reproduction on the old code: enqueue 20 tasks,
// lease each by name, and the ready stream still holds 20 signals for the
// queue; the next untargeted Lease fetched, checked and dropped all 20
// (StaleSignals 20) before it reached the one task really waiting. A task
// whose expired lease put it ahead of the queue has two signals, and both
// go.
func TestDispatcherTargetedLeaseWithdrawsSignal(t *testing.T) {
	t.Parallel()
	for _, c := range topologies {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url()
			prefix := uniquePrefix(t, url)
			// Each lease by name is released at once, but a loaded machine
			// can take more than dispatcherTestTTL between the two; the
			// expiry the test waits for below is then a few seconds.
			cfg := testDispatcherConfig(c.replicas, prefix)
			cfg.LeaseTTL = 5 * time.Second
			d := openDispatcherConfig(t, url, cfg)
			withdrawn := make(chan string, 1)
			jetstream.WithdrawHooksForTest(d, nil, func(l eventlog.Lease) { withdrawn <- l.Task })
			leaseByName := func(task string) {
				t.Helper()
				l := mustLease(t, d, eventlog.LeaseRequest{Worker: "by-name", Task: task})
				select {
				case got := <-withdrawn:
					if got != task {
						t.Fatalf("withdrawal after leasing %s by name: got one for %s", task, got)
					}
				case <-time.After(time.Minute):
					t.Fatalf("no withdrawal of the ready signal after leasing %s by name", task)
				}
				if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended}); err != nil {
					t.Fatal(err)
				}
			}
			q := testQueue()
			const n = 20
			for range n {
				task := noeta.NewTaskID()
				mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
				leaseByName(task)
			}
			if got := queueSignals(t, url, prefix, q); got != 0 {
				t.Errorf("signals left in the queue after %d leases by name: got %d, want 0", n, got)
			}
			last := noeta.NewTaskID()
			mustEnqueue(t, d, last, eventlog.EnqueueOptions{Queue: q})
			l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Queue: q})
			if l.Task != last {
				t.Fatalf("untargeted lease: got %s, want %s", l.Task, last)
			}
			// Parked, or its short lease expires and it comes back.
			if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended}); err != nil {
				t.Fatal(err)
			}
			st := d.Stats()
			if st.StaleSignals != 0 || st.WithdrawnSignals != n {
				t.Errorf("StaleSignals %d, WithdrawnSignals %d: want 0 and %d", st.StaleSignals, st.WithdrawnSignals, n)
			}

			// Ahead of the queue: an expired lease's task, signalled twice.
			ahead := noeta.NewTaskID()
			mustEnqueue(t, d, ahead, eventlog.EnqueueOptions{Queue: q})
			l = mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Queue: q})
			if l.Task != ahead {
				t.Fatalf("untargeted lease: got %s, want %s", l.Task, ahead)
			}
			waitFor(t, 30*time.Second, "requeue of the expired lease", statusOf(t, d, ahead, eventlog.DispatchReady))
			waitFor(t, 10*time.Second, "both signals of the requeued task", func() error {
				if got := queueSignals(t, url, prefix, q); got != 2 {
					return fmt.Errorf("%d signals in the queue, want 2", got)
				}
				return nil
			})
			leaseByName(ahead)
			if got := queueSignals(t, url, prefix, q); got != 0 {
				t.Errorf("signals left after leasing by name a task ahead of the queue: got %d, want 0", got)
			}
			if got := d.Stats().WithdrawnSignals; got != n+2 {
				t.Errorf("WithdrawnSignals: got %d, want %d", got, n+2)
			}
		})
	}
}

// TestDispatcherTargetedLeaseKeepsLaterSignal: a wake that makes the task
// ready again between its lease by name and the withdrawal of its old
// signal keeps the new signal. Reproduction of the failure this guards
// against: purging the task's ready subject outright (rather than the
// message read there, if its epoch is the lease's) removed the signal the
// wake's ready spell had just published, and the woken task was ready with
// nothing in the queue to lease it by (an untargeted Lease: no ready task).
func TestDispatcherTargetedLeaseKeepsLaterSignal(t *testing.T) {
	t.Parallel()
	for _, c := range topologies {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url()
			prefix := uniquePrefix(t, url)
			d := openDispatcher(t, url, c.replicas, prefix)
			q := testQueue()
			task := noeta.NewTaskID()
			cond := noeta.ExternalWake("ev-" + noeta.NewID())
			var hookErr error
			done := make(chan struct{})
			jetstream.WithdrawHooksForTest(d, func(l eventlog.Lease) {
				if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
					hookErr = err
					return
				}
				_, hookErr = d.Wake(t.Context(), task, cond.Clone())
			}, func(eventlog.Lease) { close(done) })
			mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: q})
			mustLease(t, d, eventlog.LeaseRequest{Worker: "by-name", Task: task})
			<-done
			if hookErr != nil {
				t.Fatalf("suspend and wake between the grant and the withdrawal: %v", hookErr)
			}
			if st := mustInspect(t, d, task); st.Status != eventlog.DispatchReady {
				t.Fatalf("task after the wake: %s, want ready", st.Status)
			}
			l, err := d.Lease(t.Context(), eventlog.LeaseRequest{Worker: "w", Queue: q})
			if err != nil {
				t.Fatalf("untargeted lease of the woken task: %v", err)
			}
			if l.Task != task || l.Wake == nil {
				t.Fatalf("untargeted lease: got task %s wake %v, want %s with its wake", l.Task, l.Wake, task)
			}
		})
	}
}
