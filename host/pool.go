package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/backoff"
)

const (
	// stopWait bounds the wait for workers whose segments were told to stop
	// when the grace period ran out: they stop at their next write.
	stopWait = 10 * time.Second
)

// PoolOptions say what a worker pool works.
type PoolOptions struct {
	Workers int
	// Queue is the ready queue it leases from ("": the default queue).
	Queue string
	// Workspace is where its file and shell tools work (the host's).
	Workspace string
	// Policies decide its tasks' turns (the host's): a pool of a queue
	// that another part feeds, as a gateway's sessions.
	Policies engine.PolicyResolver
	// Guards are added to the host's guards for its tasks only.
	Guards []guards.Guard
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
	// ownPolicies: PoolOptions.Policies decide its tasks.
	ownPolicies bool

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
	if h.ro {
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
	eng, err := h.newEngineWith(po.Queue, po.Workspace, po.Policies, po.Guards)
	if err != nil {
		return nil, err
	}
	segCtx, cancel := context.WithCancel(context.Background())
	leaseCtx, stopLeasing := context.WithCancel(segCtx)
	p := &Pool{
		h: h, eng: eng, queue: po.Queue, n: po.Workers, ownPolicies: po.Policies != nil,
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
	c := &p.h.ctrs
	m := p.h.opts.Meter
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
				if m != nil {
					m.LeaseFailed()
				}
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
		if m != nil {
			m.Leased()
		}
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
		// A watcher that saw the task's last record while this worker
		// was still in the segment looks again now.
		p.h.segmentEnded()
		outcome := segmentOutcome(out, err, p.segCtx.Err() != nil)
		if m != nil {
			m.Segment(outcome, took)
		}
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

// Drain drains the host's pools (see [Pool.Drain]), its own and those
// beside it, within ctx; the host keeps its connection, log and observers
// until Close.
func (h *Host) Drain(ctx context.Context) DrainReport {
	m := h.main.Load()
	if m == nil {
		return DrainReport{}
	}
	h.ctrs.draining.Store(true)
	h.mu.Lock()
	var others []*Pool
	for p := range h.pools {
		if p != m {
			others = append(others, p)
		}
	}
	h.mu.Unlock()
	// The pools beside the host's own (a mounted gateway's) drain within
	// the same grace period, not after it.
	reps := make([]DrainReport, len(others))
	var wg sync.WaitGroup
	for i, p := range others {
		wg.Go(func() { reps[i] = p.Drain(ctx) })
	}
	rep := m.Drain(ctx)
	wg.Wait()
	for _, r := range reps {
		rep.Finished += r.Finished
		rep.Abandoned = append(rep.Abandoned, r.Abandoned...)
	}
	return rep
}

// InFlight counts the segments the host's pools run now.
func (h *Host) InFlight() int { return int(h.ctrs.inFlight.Load()) }

// Segments counts the segments the host's pools have run.
func (h *Host) Segments() uint64 { return h.ctrs.segTotal.Load() }

// Healthy reports why the host cannot do its work, or nil: its backend
// can serve ([HealthChecker]) and, if it runs tasks, its pool is not
// draining.
func (h *Host) Healthy() error {
	if c, ok := h.b.(HealthChecker); ok {
		if err := c.Healthy(); err != nil {
			return err
		}
	}
	if h.Draining() {
		return errors.New("pool: stopping")
	}
	return nil
}

// Draining reports whether the host's own pool runs and has been told to
// drain.
func (h *Host) Draining() bool { return h.main.Load() != nil && h.ctrs.draining.Load() }

// Workers is the size of the host's own pool (Options.Workers).
func (h *Host) Workers() int { return h.opts.Workers }

// DamagedLogs counts the segments the host's pool refused because the
// task's log is damaged (a gap, a corrupt record); each task so refused
// ends failed.
func (h *Host) DamagedLogs() uint64 {
	if m := h.main.Load(); m != nil {
		return m.eng.DamagedLogs()
	}
	return 0
}

// counters are what the host keeps of its pools itself.
type counters struct {
	segTotal atomic.Uint64
	inFlight atomic.Int64
	draining atomic.Bool
}
