package observers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// recorder is an observer that keeps what it saw, and can be told to fail,
// panic or block.
type recorder struct {
	name  string
	mu    sync.Mutex
	seen  []eventlog.Envelope
	fail  error
	panic bool
	block chan struct{}
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Observe(_ context.Context, env eventlog.Envelope) error {
	if r.block != nil {
		<-r.block
	}
	if r.panic {
		panic("recorder told to panic")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, env)
	return r.fail
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// writeTurns writes n records to one new task of s, returning the task.
func writeTurns(t *testing.T, s *memlog.Store, n int) string {
	t.Helper()
	ctx := context.Background()
	task := noeta.NewTaskID()
	env, _ := eventlog.NewEnvelope(task, eventlog.OriginSystem, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if _, err := s.Create(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, task, eventlog.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		env, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "w", noeta.TurnStarted{Turn: i + 1})
		if _, err := s.Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return task
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInProcess: every observer gets every record in order; one that
// fails, panics or blocks costs only itself, and its losses are counted.
func TestInProcess(t *testing.T) {
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	good := &recorder{name: "good"}
	failing := &recorder{name: "failing", fail: errors.New("sink down")}
	panicking := &recorder{name: "panicking", panic: true}
	blocked := &recorder{name: "blocked", block: make(chan struct{})}
	const queue, records = 64, 42 // TaskCreated, LeaseGranted, 40 turns
	r := NewInProcess(s, InProcessConfig{QueueSize: queue, Logger: slog.New(slog.DiscardHandler)}, good, failing, panicking, blocked)
	task := writeTurns(t, s, records-2)
	waitUntil(t, "the good observer", func() bool { return good.count() == records })
	for i, env := range good.seen {
		if env.Task != task || env.Seq != uint64(i+1) {
			t.Fatalf("record %d: %s seq %d", i, env.Task, env.Seq)
		}
	}
	waitUntil(t, "the failing observer", func() bool { return r.Stats()["failing"].Failed == records })
	waitUntil(t, "the panicking observer", func() bool { return r.Stats()["panicking"].Panicked == records })
	st := r.Stats()
	if g := st["good"]; g.Observed != records || g.Dropped != 0 || g.Failed != 0 {
		t.Errorf("good: %+v", g)
	}
	// The blocked observer holds one record; the rest wait in its queue.
	waitUntil(t, "the blocked observer's queue", func() bool { return r.Stats()["blocked"].Queued == records-1 })
	writeTurns(t, s, queue) // queue+2 more records
	// One record is inside Observe, queue records wait, the rest were
	// dropped at the writer.
	offered := uint64(records + queue + 2)
	if b := r.Stats()["blocked"]; b.Observed != 0 || b.Queued != queue || b.Dropped != offered-1-queue {
		t.Errorf("blocked: %+v, want %d queued and %d dropped", b, queue, offered-1-queue)
	}
	close(blocked.block)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// After Close nothing is delivered.
	before := good.count()
	writeTurns(t, s, 1)
	time.Sleep(10 * time.Millisecond)
	if n := good.count(); n != before {
		t.Errorf("%d records delivered after Close", n-before)
	}
}

// TestInProcessCloseGivesUpOnAStuckObserver: Close returns when its ctx
// ends even if an observer never returns.
func TestInProcessCloseGivesUpOnAStuckObserver(t *testing.T) {
	s, _ := memlog.New(memlog.Options{LeaseTTL: time.Minute})
	defer s.Close()
	stuck := &recorder{name: "stuck", block: make(chan struct{})}
	defer close(stuck.block)
	r := NewInProcess(s, InProcessConfig{Logger: slog.New(slog.DiscardHandler)}, stuck)
	writeTurns(t, s, 1) // three records: one reaches the observer, two wait
	waitUntil(t, "the record to reach the observer", func() bool { return r.Stats()["stuck"].Queued == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the deadline", err)
	}
}

// BenchmarkInProcessLatency measures commit → in-process observer: records
// appended to memlog at 5,000 a second (and as fast as one writer can) reach
// an observer behind its queue; the latency of each is the time of its
// handling minus its commit time. Reported: p50 and p99 in microseconds.
func BenchmarkInProcessLatency(b *testing.B) {
	for _, rate := range []int{5000, 0} {
		name := "rate=max"
		if rate > 0 {
			name = fmt.Sprintf("rate=%d", rate)
		}
		b.Run(name, func(b *testing.B) {
			s, err := memlog.New(memlog.Options{LeaseTTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lat := &latencyObserver{}
			r := NewInProcess(s, InProcessConfig{QueueSize: 1 << 16, Logger: slog.New(slog.DiscardHandler)}, lat)
			defer r.Close(context.Background())
			ctx := context.Background()
			task := noeta.NewTaskID()
			env, _ := eventlog.NewEnvelope(task, eventlog.OriginSystem, "b", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
			if _, err := s.Create(ctx, env); err != nil {
				b.Fatal(err)
			}
			_ = s.Enqueue(ctx, task, eventlog.EnqueueOptions{})
			l, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
			if err != nil {
				b.Fatal(err)
			}
			turn, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "w", noeta.TurnStarted{Turn: 1})
			var interval time.Duration
			if rate > 0 {
				interval = time.Second / time.Duration(rate)
			}
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				if interval > 0 {
					if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				if _, err := s.Emit(ctx, l, turn, eventlog.EmitOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			want := b.N + 2
			for lat.count() < want && r.Stats()["latency"].Dropped == 0 {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			p50, p99 := lat.percentiles()
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			b.ReportMetric(float64(r.Stats()["latency"].Dropped), "dropped")
		})
	}
}

type latencyObserver struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (o *latencyObserver) Name() string { return "latency" }

func (o *latencyObserver) Observe(_ context.Context, env eventlog.Envelope) error {
	d := time.Since(env.Time)
	o.mu.Lock()
	o.lat = append(o.lat, d)
	o.mu.Unlock()
	return nil
}

func (o *latencyObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.lat)
}

func (o *latencyObserver) percentiles() (p50, p99 time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := slices.Clone(o.lat)
	slices.Sort(l)
	if len(l) == 0 {
		return 0, 0
	}
	return l[len(l)/2], l[len(l)*99/100]
}

// TestInProcessCloseHandlesTheQueue: Close hands an observer the records
// still in its queue before it stops it. Reproduction of the defect it
// fixes: an audit observer behind a slow sink, a run that ends and closes —
// the records queued at Close were dropped, so the trail lacked the run's
// last records (its terminal record among them).
func TestInProcessCloseHandlesTheQueue(t *testing.T) {
	s, _ := memlog.New(memlog.Options{LeaseTTL: time.Minute})
	defer s.Close()
	slow := &recorder{name: "slow", block: make(chan struct{})}
	r := NewInProcess(s, InProcessConfig{Logger: slog.New(slog.DiscardHandler)}, slow)
	const records = 42
	writeTurns(t, s, records-2)
	waitUntil(t, "the records to queue", func() bool { return r.Stats()["slow"].Queued == records-1 })
	closed := make(chan error, 1)
	go func() { closed <- r.Close(context.Background()) }()
	// Close has unsubscribed once a new record is no longer offered.
	waitUntil(t, "Close to unsubscribe", func() bool {
		before := r.Stats()["slow"]
		writeTurns(t, s, 0)
		after := r.Stats()["slow"]
		return after.Queued+int(after.Dropped) == before.Queued+int(before.Dropped)
	})
	close(slow.block)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := slow.count(); n < records {
		t.Errorf("the observer handled %d records before Close returned, want the %d queued before it", n, records)
	}
}
