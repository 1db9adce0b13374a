package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/oklog/ulid/v2"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// idleQueue holds the scale mode's suspended tasks: no worker of the
// pool leases from it, so only the bench's own wakes move them.
const idleQueue = "bench-idle"

// Level is what the scale mode measured at one population.
type Level struct {
	Suspended      int     `json:"suspended"`
	GrowSeconds    float64 `json:"grow_seconds"`
	AppendP50us    float64 `json:"append_p50_us"`
	AppendP99us    float64 `json:"append_p99_us"`
	WakeLeaseP50us float64 `json:"wake_to_lease_p50_us"`
	WakeLeaseP99us float64 `json:"wake_to_lease_p99_us"`
	RSSMiB         float64 `json:"rss_mib"`
	HeapMiB        float64 `json:"go_heap_mib"`
	// HeapIdleMiB is heap memory the runtime holds free and has not yet
	// returned to the OS when RSS was read (part of RSS; the scavenger
	// returns it over time); RSSReturnedMiB is the RSS once it has been
	// returned (debug.FreeOSMemory), what the engine holds. The next level
	// grows from there.
	HeapIdleMiB    float64 `json:"heap_idle_unreturned_mib"`
	RSSReturnedMiB float64 `json:"rss_returned_mib"`
	// DiskBytes is the server's store size: the data directory's
	// (embedded), or --server-dir's (--nats).
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	DiskPerTask float64 `json:"disk_bytes_per_task,omitempty"`
	// ServerRSSMiB is --server-pid's RSS (--nats).
	ServerRSSMiB float64 `json:"server_rss_mib,omitempty"`
	// Load1 is the machine's load average over the last minute, read when
	// the level was measured: the latencies mean little without it.
	Load1 float64 `json:"load1"`
}

// Restart is the restart of the host after the last level.
type Restart struct {
	OpenSeconds float64 `json:"open_seconds"`
	ResumeMs    float64 `json:"first_resume_ms"`
	RSSMiB      float64 `json:"rss_mib"`
	Load1       float64 `json:"load1"`
}

// procRSSMiB reads a process's resident set from /proc.
func procRSSMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, err := strconv.ParseFloat(f[0], 64)
				return kb / 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// load1 is the one-minute load average, 0 where /proc has none.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// idleTasks are the suspended tasks grown so far. Their ids are derived
// from the run's seed and their index, not kept: a million ids held by the
// bench would be 50 MiB of the engine's RSS that no engine has.
type idleTasks struct {
	seed uint64
	base uint64 // the ULID time of the first id, in ms
	n    atomic.Int64
}

func newIdleTasks() *idleTasks {
	return &idleTasks{seed: rand.Uint64(), base: uint64(time.Now().UnixMilli())}
}

// id is the task id of the i-th idle task: a ULID a millisecond after the
// one before it (as if created at 1,000 tasks/s), its entropy drawn from
// the seed and i, so the ids spread over the partitions and the server's
// subject trees as real ones do.
func (t *idleTasks) id(i int64) string {
	var u ulid.ULID
	_ = u.SetTime(t.base + uint64(i))
	r := rand.NewPCG(t.seed, uint64(i))
	var e [10]byte
	binary.BigEndian.PutUint64(e[:8], r.Uint64())
	binary.BigEndian.PutUint16(e[8:], uint16(r.Uint64()))
	_ = u.SetEntropy(e[:])
	return u.String()
}

func (t *idleTasks) pick(r *rand.Rand) string {
	return t.id(r.Int64N(t.n.Load()))
}

// suspendIdle creates one task, leases it and suspends it on the bench's
// external event: TaskCreated, LeaseGranted's lease, TaskSuspended.
func suspendIdle(ctx context.Context, h *hostconfig.Host, id string) error {
	created, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.TaskCreated{TaskID: id, Agent: "bench", Goal: "idle", RootTaskID: id})
	if err != nil {
		return err
	}
	if _, err := h.Log().Create(ctx, created); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	d := h.Dispatcher()
	// Reserved: a task leased by name must leave no ready signal behind,
	// or the first untargeted Lease of the queue wades through one stale
	// signal per task grown (40,000 took over a minute).
	if err := d.Enqueue(ctx, id, eventlog.EnqueueOptions{Queue: idleQueue, Reserved: true}); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "bench-grow", Task: id})
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return suspendAgain(ctx, h, l)
}

// suspendAgain records the suspension under l and releases it.
func suspendAgain(ctx context.Context, h *hostconfig.Host, l eventlog.Lease) error {
	cond := noeta.ExternalWake(EventKind)
	env, err := eventlog.NewEnvelope(l.Task, eventlog.OriginEngine, "bench", noeta.TaskSuspended{Reason: "bench idle", WakeOn: cond})
	if err != nil {
		return err
	}
	if _, err := h.Log().Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
		return fmt.Errorf("suspend: %w", err)
	}
	return h.Dispatcher().Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, ConsumedWake: l.Wake, Reason: "bench idle"})
}

// growers is how many tasks grow at once. Each costs about five durable
// writes spread over three streams, and the server fsyncs each write of a
// stream on its own (sync always, no group commit): the streams' writes
// overlap only with many in flight. On the 2-vCPU VM of
// docs/benchmarks.md, 16 grew 143 tasks/s (loaded), 64 about 830 and 128
// about 940 (load 2-3).
const growers = 128

// grow adds suspended tasks until there are n, through the engine's own
// path: Create, Enqueue, Lease, the fenced TaskSuspended (after its
// LeaseGranted) and Release.
func grow(ctx context.Context, progress io.Writer, h *hostconfig.Host, idle *idleTasks, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next    atomic.Int64
		done    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	from := idle.n.Load()
	next.Store(from)
	start := time.Now()
	for range growers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if err := suspendIdle(ctx, h, idle.id(i)); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("task %d (%s): %w", i, idle.id(i), err); cancel() })
					return
				}
				if d := done.Add(1); d%10000 == 0 {
					secs := time.Since(start).Seconds()
					report(progress, "bench: %d suspended tasks, %.0f s, %.0f tasks/s\n", from+d, secs, float64(d)/secs)
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	idle.n.Store(int64(n))
	return nil
}

// wakeToLease wakes a random idle task and times until a Lease of the idle
// queue returns it, then suspends it again; n times.
func wakeToLease(ctx context.Context, h *hostconfig.Host, idle *idleTasks, n int, lat *samples) error {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	d := h.Dispatcher()
	for range n {
		task := idle.pick(r)
		start := time.Now()
		if _, err := d.Wake(ctx, task, noeta.ExternalWake(EventKind)); err != nil {
			return fmt.Errorf("wake %s: %w", task, err)
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := d.Lease(lctx, eventlog.LeaseRequest{Worker: "bench-wake", Queue: idleQueue, Wait: true})
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

// runLevels grows the population to each level in turn and measures
// there; it returns the population for a restart to wake.
func runLevels(ctx context.Context, h *hostconfig.Host, probe *appendProbe, o Options, res *Result) (*idleTasks, error) {
	idle := newIdleTasks()
	for _, n := range o.Levels {
		start := time.Now()
		if err := grow(ctx, o.Progress, h, idle, n); err != nil {
			return nil, fmt.Errorf("grow to %d suspended tasks: %w", n, err)
		}
		l := Level{Suspended: n, GrowSeconds: time.Since(start).Seconds()}
		probe.lat = samples{}
		if err := probe.renew(ctx); err != nil {
			return nil, err
		}
		stopCPU, err := startCPUProfile(o.Profile, n)
		if err != nil {
			return nil, err
		}
		err = probe.run(ctx, 2*time.Millisecond, o.Probes)
		stopCPU()
		if err != nil {
			return nil, fmt.Errorf("append probe: %w", err)
		}
		_, l.AppendP50us, l.AppendP99us = probe.lat.quantiles()
		var wl samples
		if err := wakeToLease(ctx, h, idle, o.Probes, &wl); err != nil {
			return nil, err
		}
		_, l.WakeLeaseP50us, l.WakeLeaseP99us = wl.quantiles()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		l.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
		l.HeapIdleMiB = float64(ms.HeapIdle-ms.HeapReleased) / (1 << 20)
		l.RSSMiB, _ = rssMiB()
		debug.FreeOSMemory()
		l.RSSReturnedMiB, _ = rssMiB()
		l.Load1 = load1()
		store := o.ServerDir
		if h.Embedded() {
			store = h.DataDir()
		}
		if store != "" {
			l.DiskBytes = dirSize(store)
			l.DiskPerTask = float64(l.DiskBytes) / float64(n)
		}
		if o.ServerPID > 0 {
			if l.ServerRSSMiB, err = procRSSMiB(o.ServerPID); err != nil {
				return nil, fmt.Errorf("the server's RSS: %w", err)
			}
		}
		if err := writeHeapProfile(o.Profile, n); err != nil {
			return nil, err
		}
		report(o.Progress, "bench: at %d suspended: append p50/p99 %.0f/%.0f µs, wake→lease p50/p99 %.0f/%.0f µs, RSS %.0f MiB (heap %.1f MiB, free %.1f MiB; %.0f MiB once returned; server %.0f MiB), store %d B (%.0f B/task), grown in %.0f s, load %.1f\n",
			n, l.AppendP50us, l.AppendP99us, l.WakeLeaseP50us, l.WakeLeaseP99us, l.RSSMiB, l.HeapMiB, l.HeapIdleMiB, l.RSSReturnedMiB, l.ServerRSSMiB, l.DiskBytes, l.DiskPerTask, l.GrowSeconds, l.Load1)
		res.Levels = append(res.Levels, l)
	}
	return idle, nil
}

// restartHost closes h and opens the host again on the same data
// directory (embedded: the server restarts with it; --nats: the engine
// alone) through o.Reopen, timing the open and the first wake of a suspended task to its
// lease.
func restartHost(ctx context.Context, h *hostconfig.Host, idle *idleTasks, o Options) (*Restart, *hostconfig.Host, error) {
	if o.Reopen == nil {
		return nil, h, errors.New("a restart needs Options.Reopen")
	}
	dir := h.DataDir()
	h.Close()
	start := time.Now()
	h2, err := o.Reopen(ctx, dir)
	if err != nil {
		return nil, h, err
	}
	r := &Restart{OpenSeconds: time.Since(start).Seconds()}
	var lat samples
	if err := wakeToLease(ctx, h2, idle, 1, &lat); err != nil {
		return nil, h2, err
	}
	_, r.ResumeMs, _ = lat.quantiles()
	r.ResumeMs /= 1000
	r.RSSMiB, _ = rssMiB()
	r.Load1 = load1()
	report(o.Progress, "bench: restart: open %.2f s, first resume %.0f ms, RSS %.0f MiB, load %.1f\n", r.OpenSeconds, r.ResumeMs, r.RSSMiB, r.Load1)
	return r, h2, nil
}

// startCPUProfile profiles the CPU into dir/cpu-<n>.pprof until the
// returned stop; nothing without dir.
func startCPUProfile(dir string, n int) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", n)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes dir/heap-<n>.pprof; nothing without dir.
func writeHeapProfile(dir string, n int) error {
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", n)))
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
