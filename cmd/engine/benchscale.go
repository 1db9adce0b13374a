package main

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// benchIdleQueue holds the scale mode's suspended tasks: no worker of the
// pool leases from it, so only the bench's own wakes move them.
const benchIdleQueue = "bench-idle"

// benchLevel is what the scale mode measured at one population.
type benchLevel struct {
	Suspended      int     `json:"suspended"`
	GrowSeconds    float64 `json:"grow_seconds"`
	AppendP50us    float64 `json:"append_p50_us"`
	AppendP99us    float64 `json:"append_p99_us"`
	WakeLeaseP50us float64 `json:"wake_to_lease_p50_us"`
	WakeLeaseP99us float64 `json:"wake_to_lease_p99_us"`
	RSSMiB         float64 `json:"rss_mib"`
	HeapMiB        float64 `json:"go_heap_mib"`
	// DiskBytes is the data directory's size (embedded only).
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	DiskPerTask float64 `json:"disk_bytes_per_task,omitempty"`
}

// benchRestart is the restart of the host after the last level.
type benchRestart struct {
	OpenSeconds float64 `json:"open_seconds"`
	ResumeMs    float64 `json:"first_resume_ms"`
	RSSMiB      float64 `json:"rss_mib"`
}

// idleTasks are the suspended tasks grown so far.
type idleTasks struct {
	mu  sync.Mutex
	ids []string
}

func (t *idleTasks) add(id string) {
	t.mu.Lock()
	t.ids = append(t.ids, id)
	t.mu.Unlock()
}

func (t *idleTasks) pick(r *rand.Rand) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ids[r.IntN(len(t.ids))]
}

var benchIdle idleTasks

// suspendIdle creates one task, leases it and suspends it on the bench's
// external event: TaskCreated, LeaseGranted's lease, TaskSuspended.
func suspendIdle(ctx context.Context, h *host.Host) (string, error) {
	id := noeta.NewTaskID()
	created, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.TaskCreated{TaskID: id, Agent: "bench", Goal: "idle", RootTaskID: id})
	if err != nil {
		return "", err
	}
	if _, err := h.Log().Create(ctx, created); err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	d := h.Dispatcher()
	// Reserved: a task leased by name must leave no ready signal behind,
	// or the first untargeted Lease of the queue wades through one stale
	// signal per task grown (40,000 took over a minute).
	if err := d.Enqueue(ctx, id, eventlog.EnqueueOptions{Queue: benchIdleQueue, Reserved: true}); err != nil {
		return "", fmt.Errorf("enqueue: %w", err)
	}
	l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "bench-grow", Task: id})
	if err != nil {
		return "", fmt.Errorf("lease: %w", err)
	}
	return id, suspendAgain(ctx, h, l)
}

// suspendAgain records the suspension under l and releases it.
func suspendAgain(ctx context.Context, h *host.Host, l eventlog.Lease) error {
	cond := noeta.ExternalWake(benchEventKind)
	env, err := eventlog.NewEnvelope(l.Task, eventlog.OriginEngine, "bench", noeta.TaskSuspended{Reason: "bench idle", WakeOn: cond})
	if err != nil {
		return err
	}
	if _, err := h.Log().Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
		return fmt.Errorf("suspend: %w", err)
	}
	return h.Dispatcher().Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, ConsumedWake: l.Wake, Reason: "bench idle"})
}

// grow adds suspended tasks until there are n.
func grow(ctx context.Context, g *globals, h *host.Host, n int) error {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	next.Store(int64(len(benchIdle.ids)))
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				id, err := suspendIdle(ctx, h)
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				benchIdle.add(id)
				if i%10000 == 0 {
					fmt.Fprintf(g.stderr, "bench: %d suspended tasks after %.0fs\n", i, time.Since(start).Seconds())
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// wakeToLease wakes a random idle task and times until a Lease of the idle
// queue returns it, then suspends it again; n times.
func wakeToLease(ctx context.Context, h *host.Host, n int, lat *samples) error {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	d := h.Dispatcher()
	for range n {
		task := benchIdle.pick(r)
		start := time.Now()
		if _, err := d.Wake(ctx, task, noeta.ExternalWake(benchEventKind)); err != nil {
			return fmt.Errorf("wake %s: %w", task, err)
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := d.Lease(lctx, eventlog.LeaseRequest{Worker: "bench-wake", Queue: benchIdleQueue, Wait: true})
		cancel()
		if err != nil {
			return fmt.Errorf("lease after waking %s: %w", task, err)
		}
		lat.add(time.Since(start))
		if err := suspendAgain(ctx, h, l); err != nil {
			return err
		}
	}
	return nil
}

func runLevels(ctx context.Context, g *globals, h *host.Host, probe *appendProbe, levels []int, o benchOpts, res *benchResult) error {
	for _, n := range levels {
		start := time.Now()
		if err := grow(ctx, g, h, n); err != nil {
			return fmt.Errorf("grow to %d suspended tasks: %w", n, err)
		}
		l := benchLevel{Suspended: n, GrowSeconds: time.Since(start).Seconds()}
		probe.lat = samples{}
		if err := probe.renew(ctx); err != nil {
			return err
		}
		if err := probe.run(ctx, 2*time.Millisecond, o.probes); err != nil {
			return fmt.Errorf("append probe: %w", err)
		}
		_, l.AppendP50us, l.AppendP99us = probe.lat.quantiles()
		var wl samples
		if err := wakeToLease(ctx, h, o.probes, &wl); err != nil {
			return err
		}
		_, l.WakeLeaseP50us, l.WakeLeaseP99us = wl.quantiles()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		l.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
		l.RSSMiB, _ = rssMiB()
		if h.Embedded() {
			l.DiskBytes = dirSize(h.DataDir())
			l.DiskPerTask = float64(l.DiskBytes) / float64(n)
		}
		fmt.Fprintf(g.stderr, "bench: at %d suspended: append p50 %.0f µs, wake→lease p50 %.0f µs, RSS %.0f MiB\n", n, l.AppendP50us, l.WakeLeaseP50us, l.RSSMiB)
		res.Levels = append(res.Levels, l)
	}
	return nil
}

// restartHost closes h and opens the host again on the same data
// directory, timing the open and the first wake of a suspended task to its
// lease.
func restartHost(ctx context.Context, g *globals, h *host.Host, opts host.Options) (*benchRestart, *host.Host, error) {
	opts.DataDir = h.DataDir()
	h.Close()
	start := time.Now()
	h2, err := g.open(ctx, "bench", opts)
	if err != nil {
		return nil, h, err
	}
	r := &benchRestart{OpenSeconds: time.Since(start).Seconds()}
	var lat samples
	if err := wakeToLease(ctx, h2, 1, &lat); err != nil {
		return nil, h2, err
	}
	_, r.ResumeMs, _ = lat.quantiles()
	r.ResumeMs /= 1000
	r.RSSMiB, _ = rssMiB()
	return r, h2, nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
