package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/backoff"
)

const (
	// stopWait bounds the wait for workers whose segments were told to stop
	// when the grace period ran out: they stop at their next write.
	stopWait = 10 * time.Second
	// Start-up retries: the pause between attempts grows from startRetryMin
	// to startRetryMax, jittered so hosts restarted together do not retry
	// together.
	startRetryMin = 250 * time.Millisecond
	startRetryMax = 10 * time.Second
)

// PoolOptions say what a worker pool works.
type PoolOptions struct {
	Workers int
	// Queue is the ready queue it leases from ("": the default queue).
	Queue string
	// Workspace is where its file and shell tools work (the host's).
	Workspace string
}

// Pool is a running worker pool: workers that lease with the host's
// dispatcher under a context of the pool's (ended to stop leasing: a Lease
// whose context ends mid-grant gives the task back, so no lease is left to
// expire) and run each segment with a context of their own, ended only when
// a drain's grace period is over.
type Pool struct {
	h     *Host
	eng   *engine.Engine
	queue string
	n     int

	leaseCtx    context.Context
	stopLeasing context.CancelFunc

	segCtx     context.Context
	stopSegs   context.CancelFunc
	wg         sync.WaitGroup
	workerDone chan struct{}
	running    atomic.Bool
	stopOnce   sync.Once

	mu       sync.Mutex
	inFlight map[string]string // task -> worker

	segTotal, segCut atomic.Uint64
}

// StartPool starts a worker pool beside the host's own (the demo runs one
// per example, each on its own queue and workspace). The host's Close
// stops it; Drain drains it.
func (h *Host) StartPool(ctx context.Context, po PoolOptions) (*Pool, error) {
	if h.log == nil {
		return nil, ErrReadOnly
	}
	if h.opts.Workers == 0 {
		// A client may be attached to another process's server: only the
		// holder of the data directory (or a runner on a cluster) runs tasks.
		return nil, ErrNotRunning
	}
	if po.Workers < 1 || po.Workers > MaxWorkers {
		return nil, badOption("workers is %d; it must be from 1 to %d", po.Workers, MaxWorkers)
	}
	if po.Workspace == "" {
		po.Workspace = h.opts.Workspace
	}
	eng, err := h.newEngine(po.Queue, po.Workspace)
	if err != nil {
		return nil, err
	}
	segCtx, cancel := context.WithCancel(context.Background())
	leaseCtx, stopLeasing := context.WithCancel(segCtx)
	p := &Pool{
		h: h, eng: eng, queue: po.Queue, n: po.Workers,
		leaseCtx: leaseCtx, stopLeasing: stopLeasing,
		segCtx: segCtx, stopSegs: cancel, workerDone: make(chan struct{}),
		inFlight: map[string]string{},
	}
	h.mu.Lock()
	h.pools[p] = struct{}{}
	h.mu.Unlock()
	p.running.Store(true)
	for i := range p.n {
		name := fmt.Sprintf("%s/w%d", h.opts.Actor, i+1)
		p.wg.Go(func() { p.work(name) })
	}
	go func() {
		p.wg.Wait()
		close(p.workerDone)
	}()
	return p, nil
}

// Engine is the pool's engine.
func (p *Pool) Engine() *engine.Engine { return p.eng }

// The pause of a worker between lease requests.
const (
	leasePoll     = 100 * time.Millisecond
	leaseRetryMax = 5 * time.Second
)

// work leases and runs tasks until the pool stops. A segment runs with
// segCtx, which only the end of the grace period cancels: stopping the pool
// stops the lease requests, never a segment in hand.
func (p *Pool) work(name string) {
	c := p.h.ctrs
	failures := 0
	// Polled every leasePoll while nothing is ready; after a failure the
	// pause doubles, to leaseRetryMax.
	pause := backoff.New(leasePoll, leaseRetryMax)
	for p.running.Load() {
		lease, err := p.h.disp.Lease(p.leaseCtx, eventlog.LeaseRequest{Worker: name, Queue: p.queue, Wait: true})
		if err != nil {
			if errors.Is(err, eventlog.ErrClosed) || !p.running.Load() || p.leaseCtx.Err() != nil {
				return
			}
			if !errors.Is(err, eventlog.ErrNoReadyTask) {
				c.leaseErrors.Inc()
				if failures++; failures&(failures-1) == 0 { // 1, 2, 4, 8 …
					p.h.logger.Warn("lease request failed; retrying", "worker", name, "failures", failures, "err", err)
				}
			}
			if failures == 0 {
				pause.Reset(leasePoll)
			}
			if pause.Wait(p.leaseCtx) != nil {
				return
			}
			continue
		}
		failures = 0
		c.leases.Inc()
		p.mu.Lock()
		p.inFlight[lease.Task] = name
		p.mu.Unlock()
		c.inFlight.Add(1)
		began := time.Now()
		out, err := p.eng.RunLease(p.segCtx, lease)
		took := time.Since(began)
		c.inFlight.Add(-1)
		p.mu.Lock()
		delete(p.inFlight, lease.Task)
		p.mu.Unlock()
		outcome := segmentOutcome(out, err, p.segCtx.Err() != nil)
		c.segments.WithLabelValues(outcome).Inc()
		c.segDuration.Observe(took.Seconds())
		c.segTotal.Add(1)
		p.segTotal.Add(1)
		if outcome == "stopped" {
			p.segCut.Add(1)
		}
		p.h.logger.Debug("segment", "task", lease.Task, "worker", name, "generation", lease.Generation, "outcome", outcome, "took", took, "err", err)
	}
}

func segmentOutcome(out engine.Outcome, err error, stopped bool) string {
	switch {
	case err == nil && out.Status == noeta.StatusTerminal:
		return "terminal"
	case err == nil:
		return "suspended"
	case errors.Is(err, eventlog.ErrInvalidLease):
		return "lease_lost"
	case stopped:
		return "stopped"
	}
	return "failed"
}

// DrainReport is how a drain went.
type DrainReport struct {
	// Finished counts the segments that ended while draining.
	Finished uint64
	// Abandoned are the tasks whose segments were cut, left to expire into
	// another process's hands.
	Abandoned []string
}

// Drain stops the pool: no new leases; the segments in hand run to their
// end until ctx ends (the grace period); then those still running are cut
// at their next write, and their leases are left to expire.
func (p *Pool) Drain(ctx context.Context) DrainReport {
	p.running.Store(false)
	before := p.segTotal.Load()
	// Lease requests waiting for a task return at once; one in the middle
	// of a grant finishes it and gives the task back (ahead of its queue).
	p.stopOnce.Do(p.stopLeasing)
	var rep DrainReport
	select {
	case <-p.workerDone:
		rep.Finished = p.segTotal.Load() - before
		p.forget()
		return rep
	case <-ctx.Done():
	}
	rep.Abandoned = p.Running()
	if len(rep.Abandoned) > 0 {
		why := "stopped"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "grace period over"
		}
		p.h.logger.Warn(why+": stopping the segments still running; their leases expire to another process", "tasks", fmt.Sprint(rep.Abandoned))
	}
	p.stopSegs()
	select {
	case <-p.workerDone:
	case <-time.After(stopWait):
		p.h.logger.Error("workers did not stop in time; going on anyway", "tasks", fmt.Sprint(p.Running()))
	}
	rep.Finished = p.segTotal.Load() - before - p.segCut.Load()
	p.forget()
	return rep
}

// Stop stops the pool at once: a segment still running stops at its next
// write and leaves its lease to expire.
func (p *Pool) Stop() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Drain(ctx)
}

func (p *Pool) forget() {
	p.h.mu.Lock()
	delete(p.h.pools, p)
	p.h.mu.Unlock()
}

// Running lists the tasks whose segments run now.
func (p *Pool) Running() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	tasks := make([]string, 0, len(p.inFlight))
	for t := range p.inFlight {
		tasks = append(tasks, t)
	}
	slices.Sort(tasks)
	return tasks
}

// runsNow reports whether a worker of one of the host's pools is in a
// segment of task.
func (h *Host) runsNow(task string) bool {
	h.mu.Lock()
	pools := make([]*Pool, 0, len(h.pools))
	for p := range h.pools {
		pools = append(pools, p)
	}
	h.mu.Unlock()
	for _, p := range pools {
		p.mu.Lock()
		_, ok := p.inFlight[task]
		p.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// Drain drains the host's own pool (see [Pool.Drain]) and stops every
// other; the host keeps its connection, log and observers until Close.
func (h *Host) Drain(ctx context.Context) DrainReport {
	m := h.main.Load()
	if m == nil {
		return DrainReport{}
	}
	h.ctrs.draining.Store(true)
	rep := m.Drain(ctx)
	h.mu.Lock()
	var others []*Pool
	for p := range h.pools {
		others = append(others, p)
	}
	h.mu.Unlock()
	for _, p := range others {
		p.Stop()
	}
	return rep
}

// InFlight counts the segments the host's pools run now.
func (h *Host) InFlight() int { return int(h.ctrs.inFlight.Load()) }

// Segments counts the segments the host's pools have run.
func (h *Host) Segments() uint64 { return h.ctrs.segTotal.Load() }

// Healthy reports why the host cannot do its work, or nil: it is connected
// and, if it runs tasks, its pool is not draining.
func (h *Host) Healthy() error {
	if s := h.nc.Status(); s != nats.CONNECTED {
		return errors.New("nats: " + s.String())
	}
	if h.main.Load() != nil && h.ctrs.draining.Load() {
		return errors.New("pool: stopping")
	}
	return nil
}

// counters are the host's process metrics.
type counters struct {
	leases, leaseErrors prometheus.Counter
	segments            *prometheus.CounterVec
	segDuration         prometheus.Histogram
	segTotal            atomic.Uint64
	inFlight            atomic.Int64
	draining            atomic.Bool
}

func newCounters(h *Host) *counters {
	c := &counters{
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "noeta_engine_leases_taken_total", Help: "Leases this process's workers took."}),
		leaseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "noeta_engine_lease_errors_total", Help: "Lease requests that failed (retried)."}),
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "noeta_engine_segments_total",
			Help: "Segments this process ran, by outcome: suspended, terminal (released), lease_lost, failed (handed back for a retry), stopped (cut at shutdown, left to expire)."},
			[]string{"outcome"}),
		segDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "noeta_engine_segment_duration_seconds", Help: "How long segments ran, lease to release.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	boolf := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	h.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		c.leases, c.leaseErrors, c.segments, c.segDuration,
		gauge("noeta_engine_workers", "Workers in the pool.", func() float64 { return float64(h.opts.Workers) }),
		gauge("noeta_engine_segments_in_flight", "Segments running now.", func() float64 { return float64(c.inFlight.Load()) }),
		gauge("noeta_engine_pool_running", "1 while the pool takes new tasks, 0 once it is stopping.", func() float64 {
			return boolf(h.main.Load() != nil && !c.draining.Load())
		}),
		gauge("noeta_engine_nats_connected", "1 while connected to NATS.", func() float64 { return boolf(h.nc.Status() == nats.CONNECTED) }),
		counter("noeta_engine_nats_reconnects_total", "Reconnections to NATS.", func() uint64 { return h.nc.Stats().Reconnects }),
		counter("noeta_engine_dispatcher_wakes_applied_total", "Wake ingress messages this process's dispatcher applied (fired timers included).",
			func() uint64 { return h.disp.Stats().WakesApplied }),
		counter("noeta_engine_damaged_logs_total", "Segments refused because the task's log is damaged (a gap, a corrupt record); each task so refused ends failed.", func() uint64 {
			if m := h.main.Load(); m != nil {
				return m.eng.DamagedLogs()
			}
			return 0
		}),
		counter("noeta_engine_dispatcher_answers_refused_total", "Human answers on the wake ingress that matched no request the task waits on now: dropped, not kept.",
			func() uint64 { return h.disp.Stats().RefusedWakes }),
		counter("noeta_engine_dispatcher_wakes_held_total", "Wake ingress messages held back because their task already buffers MaxPendingWakes wakes; past the cap the broker refuses the sender.",
			func() uint64 { return h.disp.Stats().HeldWakes }),
		counter("noeta_engine_dispatcher_requeued_total", "Expired leases this process's dispatcher requeued or ended.",
			func() uint64 {
				return h.disp.Stats().Requeued
			}),
	)
	return c
}

// startupTransient reports a start-up error that may pass on its own: no
// server answered, a request timed out, or JetStream said it is between
// leaders or short of peers.
func startupTransient(err error) bool {
	for _, e := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoServers, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrDisconnected,
		natsjs.ErrNoHeartbeat, syscall.ECONNREFUSED, syscall.ECONNRESET, io.EOF, io.ErrUnexpectedEOF,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10004, // incomplete results
			10005, // no suitable peers for placement (a node is down)
			10007, // cluster not assigned to this server
			10008, // JetStream system temporarily unavailable
			10009, // cluster can not handle the request (no leader)
			10202: // cluster member change in progress
			return true
		}
	}
	return false
}
