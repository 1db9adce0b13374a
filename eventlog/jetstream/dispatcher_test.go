package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// The tests here run several Dispatchers on one cluster, each on its own
// connection, as separate engine processes would be. Tests that count what
// the Dispatchers did use a prefix of their own (fresh streams, so the
// counters see nothing else); the others share dispatcherTestPrefix.
const (
	dispatcherTestPrefix = "dtest"
	// Two seconds, not the one the server's expiry honours: on two cores
	// under the CI's load a worker has stalled longer than a second between
	// its Lease and its Release (TestDispatcherEarlyWake, the reconcile
	// pass tests' parkIdle).
	dispatcherTestTTL = 2 * time.Second
)

func testDispatcherConfig(replicas int, prefix string) jetstream.DispatcherConfig {
	return jetstream.DispatcherConfig{
		Prefix:   prefix,
		Replicas: replicas,
		LeaseTTL: dispatcherTestTTL,
		Logger:   slog.New(slog.DiscardHandler),
	}
}

func openDispatcher(t *testing.T, url string, replicas int, prefix string) *jetstream.Dispatcher {
	t.Helper()
	return openDispatcherConfig(t, url, testDispatcherConfig(replicas, prefix))
}

func openDispatcherConfig(t *testing.T, url string, cfg jetstream.DispatcherConfig) *jetstream.Dispatcher {
	t.Helper()
	prefix := cfg.Prefix
	precreatePrefix(t, url, cfg)
	d, err := jetstream.OpenDispatcher(t.Context(), connect(t, url), cfg)
	if err != nil {
		t.Fatalf("OpenDispatcher(%s): %v", prefix, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

var precreated sync.Map // url+" "+prefix -> *sync.Once

// precreatePrefix creates a prefix's streams and buckets once, before
// parallel tests race to (creating replicated streams concurrently on a
// loaded cluster can outlast a request timeout), retrying as TestMain does.
func precreatePrefix(t *testing.T, url string, cfg jetstream.DispatcherConfig) {
	t.Helper()
	once, _ := precreated.LoadOrStore(url+" "+cfg.Prefix, new(sync.Once))
	once.(*sync.Once).Do(func() {
		nc := connect(t, url)
		deadline := time.Now().Add(time.Minute)
		for {
			d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
			if err == nil {
				_ = d.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("create the streams and buckets of %s: %v", cfg.Prefix, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// uniquePrefix returns a fresh prefix and removes its streams and buckets
// when the test ends (after its Dispatchers closed).
func uniquePrefix(t *testing.T, url string) string {
	t.Helper()
	prefix := "dt" + strings.ToLower(noeta.NewID()[16:])
	t.Cleanup(func() {
		nc := connect(t, url)
		js, err := natsjs.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		up := strings.ToUpper(prefix)
		for _, s := range []string{up + "_READY", up + "_WAKE", up + "_TIMERS", "KV_" + prefix + "_tasks", "KV_" + prefix + "_leases"} {
			_ = js.DeleteStream(ctx, s)
		}
	})
	return prefix
}

func testQueue() string { return "q-" + noeta.NewID() }

// mustEnqueue enqueues a new task. A cluster that is electing a leader
// under load answers "temporarily unavailable" or not at all (seen in a
// clean-clone CI run beside a CPU-bound job), as it would to any client,
// which tries again: so does this, for up to a minute. Enqueueing a fresh
// task again is harmless: the first attempt, if it landed, left it ready.
func mustEnqueue(t *testing.T, d *jetstream.Dispatcher, task string, opts eventlog.EnqueueOptions) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := d.Enqueue(ctx, task, opts)
		cancel()
		if err == nil {
			return
		}
		if !transientErr(err) || time.Now().After(deadline) || t.Context().Err() != nil {
			t.Fatalf("Enqueue(%s): %v", task, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// transientErr is an error a loaded cluster gives for a while.
func transientErr(err error) bool {
	var apiErr *natsjs.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.ErrorCode == natsjs.JSErrCodeJetStreamNotEnabled
	}
	return strings.Contains(err.Error(), "temporarily unavailable")
}

func mustLease(t *testing.T, d *jetstream.Dispatcher, req eventlog.LeaseRequest) eventlog.Lease {
	t.Helper()
	l, err := d.Lease(t.Context(), req)
	if err != nil {
		t.Fatalf("Lease(%+v): %v", req, err)
	}
	return l
}

func mustInspect(t *testing.T, d *jetstream.Dispatcher, task string) eventlog.DispatchState {
	t.Helper()
	st, err := d.Inspect(t.Context(), task)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", task, err)
	}
	return st
}

// logSink collects what Dispatchers log at Warn and above, to print from
// the test's goroutine (a Dispatcher's goroutines may log after the test).
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	s.mu.Lock()
	s.lines = append(s.lines, line)
	s.mu.Unlock()
	return nil
}
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }

// report logs what was collected (the first few lines).
func (s *logSink) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("dispatcher warnings and errors: %d", len(s.lines))
	for i, l := range s.lines {
		if i == 10 {
			t.Logf("  …")
			break
		}
		t.Logf("  %s", l)
	}
}

// waitFor polls cond until it returns nil or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after %v", what, err, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func statusOf(t *testing.T, d *jetstream.Dispatcher, task string, want eventlog.DispatchStatus) func() error {
	return func() error {
		st, err := d.Inspect(t.Context(), task)
		if err != nil {
			return err
		}
		if st.Status != want {
			return fmt.Errorf("task %s is %s, want %s", task, st.Status, want)
		}
		return nil
	}
}

func wakeJSON(t *testing.T, w noeta.Wake) []byte {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDispatcherTwoHostsLeaseRace: two Dispatchers over one cluster, as two
// hosts, race for the same tasks, untargeted and targeted; no task is ever
// granted twice.
func TestDispatcherTwoHostsLeaseRace(t *testing.T) {
	t.Parallel()
	const n = 50
	// A lease long enough to outlast the checks after the race: on a loaded
	// machine a 1 s lease can expire (and correctly be requeued) before the
	// test inspects it.
	cfg := testDispatcherConfig(3, uniquePrefix(t, clusterURL))
	cfg.LeaseTTL = 30 * time.Second
	precreatePrefix(t, clusterURL, cfg)
	var hosts []*jetstream.Dispatcher
	for range 2 {
		d, err := jetstream.OpenDispatcher(t.Context(), connect(t, clusterURL), cfg)
		if err != nil {
			t.Fatalf("OpenDispatcher: %v", err)
		}
		t.Cleanup(func() { _ = d.Close() })
		hosts = append(hosts, d)
	}
	ctx := t.Context()

	t.Run("Untargeted", func(t *testing.T) {
		q := testQueue()
		for range n {
			mustEnqueue(t, hosts[0], noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: q})
		}
		var (
			mu      sync.Mutex
			granted = map[string][]string{} // task -> workers
			total   atomic.Int64
			wg      sync.WaitGroup
		)
		start := time.Now()
		for h, d := range hosts {
			for w := range 4 {
				worker := fmt.Sprintf("host%d-worker%d", h, w)
				wg.Go(func() {
					deadline := time.Now().Add(30 * time.Second)
					for total.Load() < n && time.Now().Before(deadline) {
						l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: worker, Queue: q})
						if errors.Is(err, eventlog.ErrNoReadyTask) {
							continue // the rest are with other fetchers right now
						}
						if err != nil {
							t.Errorf("%s: Lease: %v", worker, err)
							return
						}
						total.Add(1)
						mu.Lock()
						granted[l.Task] = append(granted[l.Task], worker)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		t.Logf("%d tasks leased by 8 workers on 2 hosts in %v", total.Load(), time.Since(start))
		if len(granted) != n {
			t.Errorf("tasks granted: got %d, want %d", len(granted), n)
		}
		perHost := map[string]int{}
		for task, workers := range granted {
			if len(workers) != 1 {
				t.Errorf("task %s granted %d times, to %v", task, len(workers), workers)
			}
			perHost[workers[0][:5]]++
			if st := mustInspect(t, hosts[1], task); st.Status != eventlog.DispatchLeased || st.Generation != 1 {
				t.Errorf("task %s: got %s generation %d, want leased generation 1", task, st.Status, st.Generation)
			}
		}
		t.Logf("grants per host: %v", perHost)
	})

	t.Run("Targeted", func(t *testing.T) {
		wins := map[int]int{}
		for range n {
			task := noeta.NewTaskID()
			mustEnqueue(t, hosts[0], task, eventlog.EnqueueOptions{})
			var (
				got [2]eventlog.Lease
				err [2]error
				wg  sync.WaitGroup
			)
			for h, d := range hosts {
				wg.Go(func() {
					got[h], err[h] = d.Lease(ctx, eventlog.LeaseRequest{Worker: fmt.Sprintf("host%d", h), Task: task})
				})
			}
			wg.Wait()
			winners := 0
			for h := range hosts {
				switch {
				case err[h] == nil:
					winners++
					wins[h]++
				case !errors.Is(err[h], eventlog.ErrNoReadyTask):
					t.Fatalf("host %d: Lease(%s): %v", h, task, err[h])
				}
			}
			if winners != 1 {
				t.Fatalf("task %s: %d hosts got the lease (%+v), want 1", task, winners, got)
			}
		}
		t.Logf("targeted races won per host: %v", wins)
	})
}

// TestDispatcherTakeover: a worker that stops heartbeating loses its task
// to a worker on another host, blocked on the queue, within about one TTL;
// the old holder is fenced off the log.
func TestDispatcherTakeover(t *testing.T) {
	t.Parallel()
	hostA := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	hostB := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	logA := openLog(t, clusterURL, 3, jetstream.Config{Prefix: dispatcherTestPrefix, Registry: hostA})
	logB := openLog(t, clusterURL, 3, jetstream.Config{Prefix: dispatcherTestPrefix, Registry: hostB})
	ctx := t.Context()

	task := create(t, logA)
	q := testQueue()
	mustEnqueue(t, hostA, task, eventlog.EnqueueOptions{Queue: q})
	lA := mustLease(t, hostA, eventlog.LeaseRequest{Worker: "a", Queue: q})
	if _, err := logA.Emit(ctx, lA, turn(t, task, 1), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("Emit under A's lease: %v", err)
	}
	if _, err := hostA.Heartbeat(ctx, lA); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	lastBeat := time.Now() // A stops heartbeating here

	type result struct {
		l   eventlog.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := hostB.Lease(ctx, eventlog.LeaseRequest{Worker: "b", Queue: q, Wait: true})
		got <- result{l, err, time.Now()}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("B did not get the task within 10s")
	}
	if r.err != nil {
		t.Fatalf("B's Lease: %v", r.err)
	}
	took := r.at.Sub(lastBeat)
	t.Logf("takeover %v after A's last heartbeat (lease TTL %v)", took, dispatcherTestTTL)
	if r.l.Task != task || r.l.Generation != lA.Generation+1 {
		t.Errorf("B's lease: got task %s generation %d, want %s generation %d", r.l.Task, r.l.Generation, task, lA.Generation+1)
	}
	if took < dispatcherTestTTL-100*time.Millisecond {
		t.Errorf("takeover after %v: before A's lease could have expired (TTL %v)", took, dispatcherTestTTL)
	}
	if took > dispatcherTestTTL+2*time.Second {
		t.Errorf("takeover after %v: want within about one TTL (%v)", took, dispatcherTestTTL)
	}
	if st := mustInspect(t, hostA, task); st.ReclaimCount != 1 {
		t.Errorf("ReclaimCount: got %d, want 1", st.ReclaimCount)
	}

	// A is fenced: not valid anywhere, no heartbeat, no write.
	for name, d := range map[string]*jetstream.Dispatcher{"A": hostA, "B": hostB} {
		if ok, err := d.Valid(ctx, lA); ok || err != nil {
			t.Errorf("Valid(A's lease) on host %s: got %v, %v; want false", name, ok, err)
		}
	}
	if _, err := hostA.Heartbeat(ctx, lA); !errors.Is(err, eventlog.ErrInvalidLease) {
		t.Errorf("A's Heartbeat after the takeover: got %v, want %v", err, eventlog.ErrInvalidLease)
	}
	if _, err := logB.Emit(ctx, r.l, turn(t, task, 2), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("Emit under B's lease: %v", err)
	}
	if _, err := logA.Emit(ctx, lA, turn(t, task, 3), eventlog.EmitOptions{}); !errors.Is(err, eventlog.ErrInvalidLease) {
		t.Errorf("Emit under A's lease after the takeover: got %v, want %v", err, eventlog.ErrInvalidLease)
	}
}

// TestDispatcherEarlyWake: a wake that arrives before the suspend, directly
// or through the ingress, on another host, is delivered at the suspend.
func TestDispatcherEarlyWake(t *testing.T) {
	t.Parallel()
	hostA := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	hostB := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	ctx := t.Context()

	for _, via := range []string{"Wake", "ingress"} {
		t.Run(via, func(t *testing.T) {
			task := noeta.NewTaskID()
			mustEnqueue(t, hostA, task, eventlog.EnqueueOptions{})
			l := mustLease(t, hostA, eventlog.LeaseRequest{Worker: "a", Task: task})
			cond := noeta.ExternalWake("deploy-" + noeta.NewID())
			ev := cond.Clone()
			ev.Data = []byte(`"before the suspend"`)

			if via == "Wake" {
				matched, err := hostB.Wake(ctx, task, ev)
				if err != nil || matched {
					t.Fatalf("early Wake: got %v, %v; want false, nil (buffered)", matched, err)
				}
			} else {
				publishWake(t, task, ev)
				waitFor(t, 10*time.Second, "the ingress wake buffered", func() error {
					if st := mustInspect(t, hostA, task); st.PendingWakes != 1 {
						return fmt.Errorf("PendingWakes %d", st.PendingWakes)
					}
					return nil
				})
			}
			if st := mustInspect(t, hostA, task); st.Status != eventlog.DispatchLeased || st.PendingWakes != 1 {
				t.Fatalf("after the early wake: got %s with %d pending, want leased with 1", st.Status, st.PendingWakes)
			}
			if err := hostA.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting"}); err != nil {
				t.Fatalf("Release: %v", err)
			}
			st := mustInspect(t, hostB, task)
			if st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !st.MatchedWake.Equal(ev) || st.PendingWakes != 0 {
				t.Fatalf("after the suspend: got %s matched %v pending %d, want ready with the early wake", st.Status, st.MatchedWake, st.PendingWakes)
			}
			l2 := mustLease(t, hostB, eventlog.LeaseRequest{Worker: "b", Task: task})
			if l2.Wake == nil || !l2.Wake.Equal(ev) {
				t.Errorf("lease after the suspend: got wake %v, want %v", l2.Wake, ev)
			}
		})
	}
}

func publishWake(t *testing.T, task string, ev noeta.Wake) {
	t.Helper()
	js, err := natsjs.New(connect(t, clusterURL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), jetstream.WakeSubject(dispatcherTestPrefix, task), wakeJSON(t, ev)); err != nil {
		t.Fatalf("publish to the ingress: %v", err)
	}
}

// TestDispatcherEarlyAnswerRefused: a human's answer that arrives before
// the task asks is not kept for the ask. Through Wake the sender gets
// ErrNotWaiting; through the ingress, where the sender has gone, the
// dispatcher drops it and counts it. Either way the task, once it asks,
// waits for an answer given after the ask.
//
// Before: both were buffered, and the suspend on the answered handle
// matched the early answer at once (an approval nobody saw the request of).
func TestDispatcherEarlyAnswerRefused(t *testing.T) {
	t.Parallel()
	hostA := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	hostB := openDispatcher(t, clusterURL, 3, dispatcherTestPrefix)
	ctx := t.Context()
	refused := func() uint64 { return hostA.Stats().RefusedWakes + hostB.Stats().RefusedWakes }

	for _, via := range []string{"Wake", "ingress"} {
		t.Run(via, func(t *testing.T) {
			task := noeta.NewTaskID()
			mustEnqueue(t, hostA, task, eventlog.EnqueueOptions{})
			l := mustLease(t, hostA, eventlog.LeaseRequest{Worker: "a", Task: task})
			cond := noeta.HumanResponseWake("approval-call-2-0")
			ev := cond.Clone()
			ev.Decision, ev.Approver = "approve", "mallory"

			if via == "Wake" {
				matched, err := hostB.Wake(ctx, task, ev)
				if !errors.Is(err, eventlog.ErrNotWaiting) || matched {
					t.Fatalf("early answer through Wake: got %v, %v; want false, %v", matched, err, eventlog.ErrNotWaiting)
				}
			} else {
				before := refused()
				publishWake(t, task, ev)
				waitFor(t, 10*time.Second, "the early answer dropped and counted", func() error {
					if n := refused() - before; n != 1 {
						return fmt.Errorf("refused %d", n)
					}
					return nil
				})
			}
			if st := mustInspect(t, hostA, task); st.Status != eventlog.DispatchLeased || st.PendingWakes != 0 {
				t.Fatalf("after the early answer: got %s with %d pending, want leased with none", st.Status, st.PendingWakes)
			}
			if err := hostA.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval"}); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if st := mustInspect(t, hostB, task); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil {
				t.Fatalf("after the ask: got %s matched %v, want suspended with nothing matched", st.Status, st.MatchedWake)
			}
			// The answer given now, through the same path, applies.
			if via == "Wake" {
				if matched, err := hostB.Wake(ctx, task, ev); err != nil || !matched {
					t.Fatalf("answer after the ask: got %v, %v; want true, nil", matched, err)
				}
			} else {
				publishWake(t, task, ev)
				ev.Auth = noeta.AuthNone // a plain wake proves nothing about who answered
			}
			waitFor(t, 10*time.Second, "the answer after the ask applied", func() error {
				if st := mustInspect(t, hostA, task); st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !receivedAs(*st.MatchedWake, ev) {
					return fmt.Errorf("%s matched %v", st.Status, st.MatchedWake)
				}
				return nil
			})
		})
	}
}

// TestDispatcherTimerHeaderOnAnswerRefused: an answer published on the
// ingress with a timer's generation header, exactly the condition the task
// waits on, is dropped as invalid: only timer_fired wakes fire as timers.
//
// Before: it "fired" as the task's timer, matching the human_response
// condition with no answer check.
func TestDispatcherTimerHeaderOnAnswerRefused(t *testing.T) {
	t.Parallel()
	// A prefix of its own: this Dispatcher alone consumes its ingress.
	const prefix = "dforge"
	d := openDispatcher(t, singleURL, 1, prefix)
	ctx := t.Context()
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "a", Task: task})
	cond := noeta.HumanResponseWake("approval-call-1-0-" + strings.ToLower(noeta.NewID()[16:]))
	if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval"}); err != nil {
		t.Fatal(err)
	}
	before := d.Stats().InvalidWakes
	m := nats.NewMsg(jetstream.WakeSubject(prefix, task))
	m.Header.Set("Noeta-Timer-Generation", strconv.FormatUint(l.Generation, 10))
	m.Data = wakeJSON(t, cond)
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the forged timer dropped", func() error {
		if d.Stats().InvalidWakes == before {
			return fmt.Errorf("not dropped (the task is %s)", mustInspect(t, d, task).Status)
		}
		return nil
	})
	if st := mustInspect(t, d, task); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil {
		t.Fatalf("after the forged timer: %s matched %v; want still suspended", st.Status, st.MatchedWake)
	}
}

// TestDispatcherBufferedAnswerDropped: a row written before answers stopped
// being buffered may hold a human_response in its buffer; the next suspend
// on that handle drops it instead of matching it.
func TestDispatcherBufferedAnswerDropped(t *testing.T) {
	t.Parallel()
	d := openDispatcher(t, singleURL, 1, dispatcherTestPrefix)
	ctx := t.Context()
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "a", Task: task})
	cond := noeta.HumanResponseWake("approval-call-2-0")
	early := cond.Clone()
	early.Decision, early.Approver = "approve", "mallory"
	other := noeta.ExternalWake("deploy")
	jetstream.BufferWakeForTest(t, d, task, early)
	jetstream.BufferWakeForTest(t, d, task, other)
	if st := mustInspect(t, d, task); st.PendingWakes != 2 {
		t.Fatalf("the old row: got %d pending, want 2", st.PendingWakes)
	}
	if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval"}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st := mustInspect(t, d, task); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil || st.PendingWakes != 1 {
		t.Fatalf("after the ask: got %s matched %v pending %d, want suspended, nothing matched, the external event still buffered", st.Status, st.MatchedWake, st.PendingWakes)
	}
}

// TestDispatcherWakeUnknownTask: a wake for a task the dispatcher does not
// know is refused with ErrNotFound and a message naming the task.
func TestDispatcherWakeUnknownTask(t *testing.T) {
	t.Parallel()
	d := openDispatcher(t, singleURL, 1, dispatcherTestPrefix)
	task := noeta.NewTaskID()
	_, err := d.Wake(t.Context(), task, noeta.HumanResponseWake("h-1"))
	if !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Wake of an unknown task: got %v, want %v", err, eventlog.ErrNotFound)
	}
	if msg := err.Error(); !strings.Contains(msg, task) || !strings.Contains(msg, "does not know the task") {
		t.Errorf("error %q: want it to name the task and say the dispatcher does not know it", msg)
	}
	t.Logf("error: %v", err)
}

// TestDispatcherThreeHosts runs three Dispatchers over one cluster on a
// prefix of their own, and counts what they did between them.
func TestDispatcherThreeHosts(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, clusterURL)
	hosts := []*jetstream.Dispatcher{
		openDispatcher(t, clusterURL, 3, prefix),
		openDispatcher(t, clusterURL, 3, prefix),
		openDispatcher(t, clusterURL, 3, prefix),
	}
	sum := func() jetstream.DispatcherStats {
		var s jetstream.DispatcherStats
		for _, d := range hosts {
			h := d.Stats()
			s.WakesApplied += h.WakesApplied
			s.TimersFired += h.TimersFired
			s.StaleTimers += h.StaleTimers
			s.DuplicateWakes += h.DuplicateWakes
			s.UnknownTaskWakes += h.UnknownTaskWakes
			s.InvalidWakes += h.InvalidWakes
		}
		return s
	}
	ctx := t.Context()
	js, err := natsjs.New(connect(t, clusterURL))
	if err != nil {
		t.Fatal(err)
	}

	// Each timer fires once, though three processes consume the ingress,
	// and delivers the recorded deadline.
	t.Run("TimerFiresOnce", func(t *testing.T) {
		const n = 6
		tasks := make([]string, n)
		conds := make([]noeta.Wake, n)
		for i := range n {
			tasks[i] = noeta.NewTaskID()
			d := hosts[i%3]
			mustEnqueue(t, d, tasks[i], eventlog.EnqueueOptions{})
			l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: tasks[i]})
			conds[i] = noeta.TimerWake(time.Now().Add(1500*time.Millisecond + time.Duration(i)*100*time.Millisecond))
			if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &conds[i], Reason: "waiting_timer"}); err != nil {
				t.Fatalf("Release on a timer: %v", err)
			}
		}
		var lateness []time.Duration
		for i, task := range tasks {
			waitFor(t, 10*time.Second, "timer of "+task, statusOf(t, hosts[0], task, eventlog.DispatchReady))
			late := time.Since(conds[i].FireAt)
			if late < 0 {
				t.Errorf("timer %d fired %v early", i, -late)
			}
			lateness = append(lateness, late.Round(time.Millisecond))
		}
		// @at has whole-second precision and deadlines are rounded up, so
		// up to a second late is by design (plus the 10ms poll here).
		t.Logf("seen ready after the deadline by: %v", lateness)
		time.Sleep(2 * time.Second) // room for a second firing or a redelivery
		s := sum()
		t.Logf("timers fired %d, stale %d, duplicates %d, by host: %+v %+v %+v", s.TimersFired, s.StaleTimers, s.DuplicateWakes, hosts[0].Stats(), hosts[1].Stats(), hosts[2].Stats())
		if s.TimersFired != n || s.StaleTimers != 0 {
			t.Errorf("timers fired %d (stale %d), want %d (0)", s.TimersFired, s.StaleTimers, n)
		}
		for i, task := range tasks {
			l := mustLease(t, hosts[(i+1)%3], eventlog.LeaseRequest{Worker: "w2", Task: task})
			if l.Wake == nil || !l.Wake.Equal(conds[i]) {
				t.Fatalf("lease after timer %d: got wake %v, want the condition %v", i, l.Wake, conds[i])
			}
			next := noeta.HumanResponseWake("h-" + noeta.NewID())
			if err := hosts[i%3].Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, ConsumedWake: l.Wake}); err != nil {
				t.Fatalf("consuming Release: %v", err)
			}
		}
		time.Sleep(time.Second)
		for _, task := range tasks {
			if st := mustInspect(t, hosts[2], task); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil || st.PendingWakes != 0 {
				t.Errorf("task %s after the consumed timer: got %s matched %v pending %d, want suspended with nothing", task, st.Status, st.MatchedWake, st.PendingWakes)
			}
		}
		if s2 := sum(); s2.TimersFired != n {
			t.Errorf("timers fired after the consuming releases: got %d, want %d", s2.TimersFired, n)
		}
	})

	// A wake an external waker publishes to the ingress is applied once,
	// even when a process is handed the same message again.
	t.Run("ExternalWakeAppliedOnce", func(t *testing.T) {
		before := sum()
		task := noeta.NewTaskID()
		mustEnqueue(t, hosts[0], task, eventlog.EnqueueOptions{})
		l := mustLease(t, hosts[0], eventlog.LeaseRequest{Worker: "w", Task: task})
		cond := noeta.ExternalWake("deploy")
		if err := hosts[0].Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
			t.Fatal(err)
		}
		ev := noeta.ExternalWake("deploy")
		ev.Data = json.RawMessage(`{"version":"1.2.3"}`)
		ack, err := js.Publish(ctx, jetstream.WakeSubject(prefix, task), wakeJSON(t, ev))
		if err != nil {
			t.Fatalf("publish to the ingress: %v", err)
		}
		waitFor(t, 10*time.Second, "the external wake", statusOf(t, hosts[1], task, eventlog.DispatchReady))
		time.Sleep(500 * time.Millisecond)
		st := mustInspect(t, hosts[2], task)
		if st.MatchedWake == nil || !st.MatchedWake.Equal(ev) || st.PendingWakes != 0 {
			t.Fatalf("after the external wake: got matched %v pending %d, want the event and nothing buffered", st.MatchedWake, st.PendingWakes)
		}
		if d := sum().WakesApplied - before.WakesApplied; d != 1 {
			t.Errorf("wakes applied: got %d, want 1", d)
		}

		// The same message (same stream sequence), handed over again.
		jetstream.ApplyWakeForTest(hosts[2], jetstream.WakeSubject(prefix, task), wakeJSON(t, ev), ack.Sequence, time.Now())
		st = mustInspect(t, hosts[0], task)
		if st.Status != eventlog.DispatchReady || st.PendingWakes != 0 {
			t.Errorf("after the redelivery: got %s with %d pending, want ready with none", st.Status, st.PendingWakes)
		}
		after := sum()
		if after.WakesApplied-before.WakesApplied != 1 || after.DuplicateWakes-before.DuplicateWakes != 1 {
			t.Errorf("after the redelivery: applied %d, duplicates %d; want 1 and 1",
				after.WakesApplied-before.WakesApplied, after.DuplicateWakes-before.DuplicateWakes)
		}
	})

	// An ingress wake for a task nobody enqueued is acknowledged, dropped
	// and counted, once.
	t.Run("IngressUnknownTask", func(t *testing.T) {
		before := sum()
		if _, err := js.Publish(ctx, jetstream.WakeSubject(prefix, noeta.NewTaskID()), wakeJSON(t, noeta.HumanResponseWake("h-x"))); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, jetstream.WakeSubject(prefix, noeta.NewTaskID()), []byte(`{"kind":"bogus"}`)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the dropped wakes counted", func() error {
			s := sum()
			if s.UnknownTaskWakes-before.UnknownTaskWakes != 1 || s.InvalidWakes-before.InvalidWakes != 1 {
				return fmt.Errorf("unknown-task wakes %d, invalid %d", s.UnknownTaskWakes-before.UnknownTaskWakes, s.InvalidWakes-before.InvalidWakes)
			}
			return nil
		})
	})
}

// TestDispatcherQueueConsumerRecreated: a queue's consumer the server
// removed (for inactivity, or an operator) is created again by the next
// Lease, and the signals waiting in the stream are not lost.
func TestDispatcherQueueConsumerRecreated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		url      func() string
		replicas int
	}{{"single", func() string { return singleURL }, 1}, {"cluster", func() string { return clusterURL }, 3}} {
		t.Run(c.name, func(t *testing.T) {
			d := openDispatcher(t, c.url(), c.replicas, dispatcherTestPrefix)
			q := testQueue()
			first, second := noeta.NewTaskID(), noeta.NewTaskID()
			mustEnqueue(t, d, first, eventlog.EnqueueOptions{Queue: q})
			mustEnqueue(t, d, second, eventlog.EnqueueOptions{Queue: q})
			l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Queue: q})
			if l.Task != first {
				t.Fatalf("first lease: got %s, want %s", l.Task, first)
			}
			// Parked: on a loaded machine the short lease could expire, and
			// an expired task is leased again ahead of the queue.
			if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended}); err != nil {
				t.Fatal(err)
			}
			js, err := natsjs.New(connect(t, c.url()))
			if err != nil {
				t.Fatal(err)
			}
			if err := js.DeleteConsumer(t.Context(), strings.ToUpper(dispatcherTestPrefix)+"_READY", "ready-"+q); err != nil {
				t.Fatalf("delete the queue's consumer: %v", err)
			}
			if l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Queue: q}); l.Task != second {
				t.Fatalf("lease after the consumer was removed: got %s, want %s", l.Task, second)
			}
		})
	}
}

// TestDispatcherManyTasksThreeHosts is the multi-host acceptance case: three
// Dispatchers over one cluster, workers on each, many tasks woken in random
// order through all three hosts and the ingress, so wakes arrive both before
// the suspend (buffered) and after it (matched). Every task must be leased
// exactly once before its wake and once with it, and every wake delivered
// exactly once.
func TestDispatcherManyTasksThreeHosts(t *testing.T) {
	t.Parallel()
	n := 1000
	if testing.Short() {
		n = 100
	}
	prefix := uniquePrefix(t, clusterURL)
	// A longer lease than the other tests: a worker here may wait its turn
	// for the CPU, and an expiry would (correctly) lease a task twice.
	cfg := testDispatcherConfig(3, prefix)
	cfg.LeaseTTL = 10 * time.Second
	precreatePrefix(t, clusterURL, cfg)
	sink := &logSink{}
	cfg.Logger = slog.New(sink)
	defer sink.report(t)
	var hosts []*jetstream.Dispatcher
	for range 3 {
		d, err := jetstream.OpenDispatcher(t.Context(), connect(t, clusterURL), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		hosts = append(hosts, d)
	}
	js, err := natsjs.New(connect(t, clusterURL))
	if err != nil {
		t.Fatal(err)
	}
	// The run is bounded by the test binary's deadline, not by a rate: at
	// 150ms a task (the old bound) it ran out under a load of 20 on two
	// cores while every task was still moving, and the test is about the
	// counts, not the speed.
	deadline := time.Now().Add(10 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()

	q := testQueue()
	tasks := make([]string, n)
	index := map[string]int{}
	for i := range tasks {
		tasks[i] = noeta.NewTaskID()
		index[tasks[i]] = i
		mustEnqueue(t, hosts[i%3], tasks[i], eventlog.EnqueueOptions{Queue: q})
	}
	// External events, which may arrive before their suspend and are then
	// buffered (a human's answer never is).
	cond := func(i int) noeta.Wake { return noeta.ExternalWake("e-" + tasks[i]) }
	event := func(i int) noeta.Wake {
		ev := cond(i)
		ev.Data = []byte(fmt.Sprint(i))
		return ev
	}

	var (
		plainLeases, wokenLeases = make([]atomic.Int32, n), make([]atomic.Int32, n)
		done, transient          atomic.Int32
		wg                       sync.WaitGroup
	)
	// retry rides out an error of a loaded cluster (a timeout, "temporarily
	// unavailable"); the counts at the end still have to be exact.
	retry := func() bool {
		transient.Add(1)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
			return true
		}
	}
	start := time.Now()
	for h, d := range hosts {
		for w := range 4 {
			worker := fmt.Sprintf("host%d-worker%d", h, w)
			wg.Go(func() {
				for done.Load() < int32(n) && ctx.Err() == nil {
					lctx, lcancel := context.WithTimeout(ctx, time.Second)
					l, err := d.Lease(lctx, eventlog.LeaseRequest{Worker: worker, Queue: q, Wait: true})
					lcancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) && !retry() {
							return
						}
						continue
					}
					i := index[l.Task]
					rel := eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done", ConsumedWake: l.Wake}
					if l.Wake == nil {
						plainLeases[i].Add(1)
						c := cond(i)
						rel = eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &c, Reason: "waiting"}
					} else {
						wokenLeases[i].Add(1)
						if !l.Wake.Equal(event(i)) {
							t.Errorf("task %d: delivered wake %+v, want %+v", i, *l.Wake, event(i))
						}
					}
					for {
						err := d.Release(ctx, l, rel)
						if err == nil {
							break
						}
						if errors.Is(err, eventlog.ErrInvalidLease) {
							t.Errorf("%s: Release of task %d: %v", worker, i, err)
							break
						}
						if !retry() {
							return
						}
					}
					if l.Wake != nil {
						done.Add(1)
					}
				}
			})
		}
	}

	// The waker: every task once, in random order, through a random host or
	// the ingress, while the workers run.
	var matched, buffered, viaIngress atomic.Int32
	wg.Go(func() {
		for _, i := range rand.Perm(n) {
			for {
				var err error
				if i%4 == 3 {
					// A retried publish carries a message id, so the stream
					// keeps one copy.
					_, err = js.Publish(ctx, jetstream.WakeSubject(prefix, tasks[i]), wakeJSON(t, event(i)), natsjs.WithMsgID("wake-"+tasks[i]))
					if err == nil {
						viaIngress.Add(1)
					}
				} else {
					// A retried Wake after an ambiguous failure could buffer
					// the event twice; only the direct errors of a loaded
					// cluster are retried here, and the counts would show it.
					var m bool
					if m, err = hosts[i%3].Wake(ctx, tasks[i], event(i)); err == nil {
						if m {
							matched.Add(1)
						} else {
							buffered.Add(1)
						}
					}
				}
				if err == nil {
					break
				}
				if !retry() {
					return
				}
			}
		}
	})
	wg.Wait()
	took := time.Since(start)
	if ctx.Err() != nil {
		for i := range n {
			if wokenLeases[i].Load() == 0 {
				st, err := hosts[0].Inspect(context.Background(), tasks[i])
				t.Logf("unfinished task %d (%s): leased %d before its wake; %+v %v", i, tasks[i], plainLeases[i].Load(), st, err)
			}
		}
		t.Fatalf("gave up after %v with %d of %d tasks done", took, done.Load(), n)
	}

	var leases, twice, lost int
	for i := range n {
		p, w := plainLeases[i].Load(), wokenLeases[i].Load()
		leases += int(p + w)
		if p != 1 || w != 1 {
			twice++
			if twice <= 5 {
				t.Errorf("task %d: leased %d times before its wake and %d times with it, want 1 and 1", i, p, w)
			}
		}
		st := mustInspect(t, hosts[i%3], tasks[i])
		if st.Status != eventlog.DispatchTerminal || st.MatchedWake != nil || st.PendingWakes != 0 {
			lost++
			if lost <= 5 {
				t.Errorf("task %d at the end: %s, matched %v, %d pending; want terminal with the wake consumed", i, st.Status, st.MatchedWake, st.PendingWakes)
			}
		}
	}
	var applied, dups uint64
	for _, d := range hosts {
		applied += d.Stats().WakesApplied
		dups += d.Stats().DuplicateWakes
	}
	t.Logf("%d tasks, 3 hosts x 4 workers, in %v: %d leases; wakes: %d matched at once, %d buffered (early), %d via the ingress (applied %d, duplicates seen %d); %d tasks leased other than once per wake, %d wakes lost or unconsumed; %d transient errors retried",
		n, took.Round(time.Millisecond), leases, matched.Load(), buffered.Load(), viaIngress.Load(), applied, dups, twice, lost, transient.Load())
	if applied != uint64(viaIngress.Load()) {
		t.Errorf("ingress wakes applied: got %d, want %d", applied, viaIngress.Load())
	}
}

// receivedAs reports whether got is the answer want as a dispatcher applies
// it: stamped with when it was received (the broker's timestamp, or the
// in-process dispatcher's clock), and otherwise the same.
func receivedAs(got, want noeta.Wake) bool {
	if got.ReceivedAt.IsZero() {
		return false
	}
	got.ReceivedAt = want.ReceivedAt
	return got.Equal(want)
}
