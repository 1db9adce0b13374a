package jetstream_test

// Benchmarks of the JetStream Dispatcher, on the package's single node (sync
// always):
//
//   - BenchmarkLeaseRelease: the dispatcher's hot cycle (untargeted Lease,
//     Release suspended on a human_response wake, Enqueue back to ready), with
//     memlog's in-memory Dispatcher as the baseline measured in the same run.
//   - BenchmarkWakeToLease: from just before Wake is called to a worker
//     blocked in Lease(Wait: true) getting the task.
//   - BenchmarkTimerLateness: how late a timer_fired wake reaches a waiting
//     worker, lease time minus fire_at.
//
// Each invocation leases from a queue of its own on the shared prefix
// dispatcherBenchPrefix, so nothing left over from an earlier invocation (or
// -count) is seen. Results are in docs/benchmarks-dispatcher.md.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

const (
	dispatcherBenchPrefix = "dbench"
	dispatcherBenchPool   = 64 // tasks in BenchmarkLeaseRelease's pool
	timerBenchBatch       = 20 // timers armed per op of BenchmarkTimerLateness
	timerBenchDelay       = 2 * time.Second
)

var dispatcherBenchQueues atomic.Int64

// benchQueue returns a queue no other invocation uses.
func benchQueue() string {
	return fmt.Sprintf("bq%d", dispatcherBenchQueues.Add(1))
}

func openBenchDispatcher(b *testing.B) *jetstream.Dispatcher {
	b.Helper()
	return openBenchDispatcherConfig(b, jetstream.DispatcherConfig{Prefix: dispatcherBenchPrefix})
}

// openBenchDispatcherConfig opens cfg's Dispatcher on the single server
// (which syncs every write), with one copy and a 30s lease TTL.
func openBenchDispatcherConfig(b *testing.B, cfg jetstream.DispatcherConfig) *jetstream.Dispatcher {
	b.Helper()
	cfg.Replicas, cfg.LeaseTTL, cfg.Logger = 1, 30*time.Second, slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		d, err := jetstream.OpenDispatcher(ctx, connect(b, singleURL), cfg)
		if err == nil {
			b.Cleanup(func() { _ = d.Close() })
			return d
		}
		if ctx.Err() != nil {
			b.Fatalf("OpenDispatcher(%s): %v", cfg.Prefix, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func openBenchMemlog(b *testing.B) eventlog.Dispatcher {
	b.Helper()
	d, err := memlog.New(memlog.Options{LeaseTTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

// suspendReserved enqueues a new task reserved in queue (so no waiting worker
// takes it), leases it by name and releases it suspended on cond.
func suspendReserved(ctx context.Context, d eventlog.Dispatcher, queue string, cond noeta.Wake) (string, error) {
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: queue, Reserved: true}); err != nil {
		return "", fmt.Errorf("enqueue: %w", err)
	}
	l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "setup", Task: task})
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", task, err)
	}
	if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "bench"}); err != nil {
		return "", fmt.Errorf("release %s: %w", task, err)
	}
	return task, nil
}

// BenchmarkLeaseRelease: workers goroutines share a pool of ready tasks; one
// op is an untargeted Lease (Wait false; ErrNoReadyTask, when every task is in
// some worker's hands or its ready signal is in flight, is retried and not
// counted), a Release suspended on a human_response wake and an Enqueue that
// makes the task ready again, so the pool never drains.
func BenchmarkLeaseRelease(b *testing.B) {
	backends := []struct {
		name string
		open func(*testing.B) eventlog.Dispatcher
	}{
		{"memlog", openBenchMemlog},
		{"jetstream", func(b *testing.B) eventlog.Dispatcher { return openBenchDispatcher(b) }},
		// The embedded default's (ADR 0109).
		{"jetstream-async-liveness", func(b *testing.B) eventlog.Dispatcher {
			return openBenchDispatcherConfig(b, jetstream.DispatcherConfig{Prefix: dispatcherBenchPrefix + "async", AsyncLiveness: true})
		}},
	}
	for _, be := range backends {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", be.name, workers), func(b *testing.B) {
				ctx := context.Background()
				d := be.open(b)
				queue := benchQueue()
				for range dispatcherBenchPool {
					if err := d.Enqueue(ctx, noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: queue}); err != nil {
						b.Fatal(err)
					}
				}
				var (
					left     atomic.Int64
					misses   atomic.Int64
					wg       sync.WaitGroup
					errOnce  sync.Once
					firstErr error
				)
				left.Store(int64(b.N))
				fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
				b.ResetTimer()
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						worker := fmt.Sprintf("w%d", w)
						for left.Add(-1) >= 0 {
							var l eventlog.Lease
							for {
								var err error
								l, err = d.Lease(ctx, eventlog.LeaseRequest{Worker: worker, Queue: queue})
								if err == nil {
									break
								}
								if !errors.Is(err, eventlog.ErrNoReadyTask) {
									fail(fmt.Errorf("lease: %w", err))
									return
								}
								misses.Add(1)
								runtime.Gosched()
							}
							cond := noeta.HumanResponseWake("h-" + l.Task)
							if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "bench"}); err != nil {
								fail(fmt.Errorf("release: %w", err))
								return
							}
							if err := d.Enqueue(ctx, l.Task, eventlog.EnqueueOptions{Queue: queue}); err != nil {
								fail(fmt.Errorf("enqueue: %w", err))
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
				b.ReportMetric(float64(misses.Load())/float64(b.N), "misses/op")
			})
		}
	}
}

// percentile returns the q-quantile (0..1) of sorted by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// BenchmarkWakeToLease: one task, suspended on a human_response wake; a worker
// goroutine blocks in Lease(Wait: true). One op is a Wake and the worker's
// Lease returning the task (measured from just before Wake is called), then
// the Release that suspends it again on the next handle (timed in ns/op, not
// in the percentiles).
func BenchmarkWakeToLease(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openBenchDispatcher(b)
	queue := benchQueue()
	handle := func(i int) noeta.Wake { return noeta.HumanResponseWake(fmt.Sprintf("h-%d", i)) }
	task, err := suspendReserved(ctx, d, queue, handle(0))
	if err != nil {
		b.Fatal(err)
	}
	leases := make(chan eventlog.Lease)
	errc := make(chan error, 1)
	go func() {
		for {
			l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "waiter", Queue: queue, Wait: true})
			if err != nil {
				if ctx.Err() == nil {
					errc <- err
				}
				return
			}
			select {
			case leases <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	// Let the waiter reach its blocking Lease before the first Wake.
	time.Sleep(100 * time.Millisecond)
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		ev := handle(i)
		start := time.Now()
		if _, err := d.Wake(ctx, task, ev); err != nil {
			b.Fatalf("wake: %v", err)
		}
		var l eventlog.Lease
		select {
		case l = <-leases:
		case err := <-errc:
			b.Fatalf("lease: %v", err)
		case <-time.After(30 * time.Second):
			b.Fatal("no lease 30s after the wake")
		}
		durs = append(durs, time.Since(start))
		if l.Task != task {
			b.Fatalf("leased %s, want %s", l.Task, task)
		}
		next := handle(i + 1)
		if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, ConsumedWake: l.Wake, Reason: "bench"}); err != nil {
			b.Fatalf("release: %v", err)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(percentile(durs, 0.50))/float64(time.Microsecond), "p50-us")
	b.ReportMetric(float64(percentile(durs, 0.99))/float64(time.Microsecond), "p99-us")
}

// BenchmarkTimerLateness: one op arms timerBenchBatch timers, all due
// timerBenchDelay after the op starts (tasks enqueued and leased outside the
// timer), and waits for a worker in Lease(Wait: true) to receive every one;
// lateness is the lease's return time minus fire_at. An op takes about
// timerBenchDelay plus up to the 1s of @at rounding, so b.N stays small.
func BenchmarkTimerLateness(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openBenchDispatcher(b)
	queue := benchQueue()
	type fired struct {
		late time.Duration
		err  error
	}
	got := make(chan fired, timerBenchBatch)
	go func() {
		for {
			l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "timer", Queue: queue, Wait: true})
			now := time.Now()
			if err != nil {
				if ctx.Err() == nil {
					got <- fired{err: err}
				}
				return
			}
			if l.Wake == nil || l.Wake.Kind != noeta.WakeTimerFired {
				got <- fired{err: fmt.Errorf("lease of %s carries wake %+v", l.Task, l.Wake)}
				return
			}
			late := now.Sub(l.Wake.FireAt)
			if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: l.Wake, Reason: "bench"}); err != nil && ctx.Err() == nil {
				got <- fired{err: fmt.Errorf("release: %w", err)}
				return
			}
			select {
			case got <- fired{late: late}:
			case <-ctx.Done():
				return
			}
		}
	}()
	lates := make([]time.Duration, 0, b.N*timerBenchBatch)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		leased := make([]eventlog.Lease, 0, timerBenchBatch)
		for range timerBenchBatch {
			task := noeta.NewTaskID()
			if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: queue, Reserved: true}); err != nil {
				b.Fatal(err)
			}
			l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "setup", Task: task})
			if err != nil {
				b.Fatal(err)
			}
			leased = append(leased, l)
		}
		b.StartTimer()
		cond := noeta.TimerWake(time.Now().Add(timerBenchDelay))
		for _, l := range leased {
			if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "bench_timer"}); err != nil {
				b.Fatalf("release: %v", err)
			}
		}
		for range timerBenchBatch {
			select {
			case f := <-got:
				if f.err != nil {
					b.Fatal(f.err)
				}
				lates = append(lates, f.late)
			case <-time.After(timerBenchDelay + 30*time.Second):
				b.Fatal("a timer did not fire within 30s of its fire_at")
			}
		}
	}
	b.StopTimer()
	slices.Sort(lates)
	b.ReportMetric(float64(percentile(lates, 0.50))/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(percentile(lates, 0.99))/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(float64(lates[len(lates)-1])/float64(time.Millisecond), "max-ms")
}

var benchPassRuns atomic.Int64

// BenchmarkReconcilePass: one reconcile pass (RequeueStale) over a rows
// bucket of the given size, every row terminal, grown through the
// dispatcher's own path: what each Dispatcher pays every SweepInterval
// however little there is to repair. The pass before the timed ones reads
// every row; the timed ones read the rows written since (none: ADR 0092).
// BenchmarkReconcileIdle measures the round's slices and whole reads beside
// them, to a million.
func BenchmarkReconcilePass(b *testing.B) {
	for _, rows := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			ctx := context.Background()
			cfg := jetstream.DispatcherConfig{
				Prefix:        fmt.Sprintf("benchpass%d_%d", rows, benchPassRuns.Add(1)),
				Replicas:      1,
				LeaseTTL:      30 * time.Second,
				SweepInterval: -1,
				Logger:        slog.New(slog.DiscardHandler),
			}
			d, err := jetstream.OpenDispatcher(ctx, connect(b, singleURL), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			if _, err := d.RequeueStale(ctx); err != nil {
				b.Fatal(err)
			}
			{
				var wg sync.WaitGroup
				work := make(chan int)
				for range 16 {
					wg.Go(func() {
						for range work {
							task := noeta.NewTaskID()
							if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "benchpass"}); err != nil {
								b.Error(err)
								return
							}
							l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
							if err != nil {
								b.Error(err)
								return
							}
							if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				for i := range rows {
					work <- i
				}
				close(work)
				wg.Wait()
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := d.RequeueStale(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLeaseAfterTargeted: one op is an untargeted Lease (Wait false) of
// a queue in which targeted tasks were first enqueued unreserved and leased
// by name, with one task enqueued behind them; only that Lease is timed.
// stale-signals/op counts the signals it fetched and dropped before it
// reached the task (before a lease by name withdrew its task's signal:
// every one of them), withdrawn/op the signals the leases by name removed.
func BenchmarkLeaseAfterTargeted(b *testing.B) {
	const targeted = 100
	ctx := b.Context()
	d := openBenchDispatcher(b)
	withdrawn := make(chan struct{}, 1)
	jetstream.WithdrawHooksForTest(d, nil, func(eventlog.Lease) { withdrawn <- struct{}{} })
	before := d.Stats()
	for b.Loop() {
		b.StopTimer()
		q := benchQueue()
		for range targeted {
			task := noeta.NewTaskID()
			if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: q}); err != nil {
				b.Fatal(err)
			}
			l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "by-name", Task: task})
			if err != nil {
				b.Fatal(err)
			}
			<-withdrawn // in the background; waited for so the count is exact
			if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		want := noeta.NewTaskID()
		if err := d.Enqueue(ctx, want, eventlog.EnqueueOptions{Queue: q}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Queue: q})
		b.StopTimer()
		if err != nil || l.Task != want {
			b.Fatalf("untargeted lease: got %s, %v; want %s", l.Task, err, want)
		}
		if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "bench"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	after := d.Stats()
	b.ReportMetric(float64(after.StaleSignals-before.StaleSignals)/float64(b.N), "stale-signals/op")
	b.ReportMetric(float64(after.WithdrawnSignals-before.WithdrawnSignals)/float64(b.N), "withdrawn/op")
}
