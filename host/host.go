package host

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta/policy"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tools"
)

// Host is a running noeta over a [Backend]: the client (Submit, Approve,
// Cancel, Wait, Events) and — when it runs tasks — the worker pool, the
// in-process observers and ChildLifecycle. Its methods are safe for
// concurrent use.
type Host struct {
	opts   Options
	logger *slog.Logger
	gov    *guards.Config

	b       Backend
	log     eventlog.EventLog
	disp    eventlog.Dispatcher
	content eventlog.ContentStore
	waiting eventlog.WaitingIndex
	// ro: the backend only reads; route: answers travel through it.
	ro    bool
	route AnswerRouter
	// fresh is shared by the host's engines: Submit's creates a task, a
	// pool's runs its first segment (ADR 0113).
	fresh engine.FreshTasks

	tools *tools.Registry
	// client is the engine of Submit, Approve and Cancel.
	client *engine.Engine
	// policies decide the turns of every engine of the host.
	policies engine.PolicyResolver
	// child is set before the pool starts; the dispatcher's reconciler
	// may ask for it from its own goroutine (recoverHandoffs), hence
	// atomic.
	child atomic.Pointer[observers.ChildLifecycle]

	subs   []*eventlog.Subscription
	inproc *observers.InProcess
	ctrs   counters

	mu     sync.Mutex
	taps   map[int]eventlog.Handler
	nextID int
	pools  map[*Pool]struct{}
	// main is the host's own pool, once started.
	main atomic.Pointer[Pool]

	startMu sync.Mutex

	// segEnd is closed, and replaced, when a segment of the host's pools
	// ends: a watcher that found the tree's task still in a worker's
	// hands waits on it rather than on its next tick.
	segMu  sync.Mutex
	segEnd chan struct{}

	// rates counts the rate limits' calls (nil: none configured).
	rates guards.RateCounter

	closeOnce sync.Once
}

// Open starts a host over b as opts ask; on error everything it started is
// stopped again (b is the caller's, and stays open). Errors of the options
// wrap [ErrBadOptions].
func Open(ctx context.Context, b Backend, opts Options) (_ *Host, err error) {
	if b == nil {
		return nil, badOption("no backend")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Host{opts: o, logger: o.Logger, b: b, taps: map[int]eventlog.Handler{}, pools: map[*Pool]struct{}{},
		log: b.Log(), disp: b.Dispatcher(), content: b.Content(), waiting: b.Waiting(),
		ro: o.ReadOnly || readOnly(b), route: router(b), tools: o.Tools, gov: o.Governance}
	if h.log == nil || h.disp == nil || h.content == nil {
		return nil, badOption("the backend has no log, dispatcher or content store")
	}
	if h.ro && o.Workers > 0 {
		return nil, badOption("a read-only host runs no workers")
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if h.gov == nil {
		if h.gov, err = guards.NewConfig(nil, nil, nil); err != nil {
			return nil, err
		}
	}
	h.rates = o.Rates
	if h.rates == nil && o.Workers > 0 && h.gov.HasRateLimits() {
		if h.route != nil {
			// Counted in this process alone, each engine of the fleet
			// would admit the whole limit.
			return nil, badOption("the agents have rate limits and the backend is shared with other processes: Options.Rates must be a counter they share (hostconfig opens the deployment's bucket)")
		}
		h.rates = guards.NewMemRates(nil)
	}
	if h.tools == nil {
		// A client runs no tool: an empty registry.
		if h.tools, err = tools.NewRegistry(); err != nil {
			return nil, err
		}
	}
	if readOnly(b) {
		// Nothing to write with: no engine, and no record is committed
		// here to tap.
		return h, nil
	}
	h.policies = o.Policies
	if h.policies == nil {
		h.policies = h.defaultPolicies()
	}
	if h.client, err = h.newEngine(o.Queue, o.Workspace); err != nil {
		return nil, err
	}
	// The taps come first: a watcher sees a child's terminal record before
	// ChildLifecycle hands it to the parent and wakes it.
	h.subs = append(h.subs, h.log.Subscribe(h.deliver))
	if o.Workers == 0 {
		return h, nil
	}
	if o.Workers > 0 && !o.Skip.ChildLifecycle {
		child, err := observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: h.log, Index: h.log, Waker: h.disp, Logger: h.logger})
		if err != nil {
			return nil, err
		}
		h.child.Store(child)
		h.subs = append(h.subs, h.log.Subscribe(child.Handle))
	}
	if len(o.Observers) > 0 {
		// Before the pool starts: they see every record this process
		// commits.
		h.inproc = observers.NewInProcess(h.log, observers.InProcessConfig{Logger: h.logger}, o.Observers...)
	}
	if !o.Deferred {
		if err := h.Start(ctx); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Start starts the host's worker pool, and asks the backend (when it can,
// [HandoffRecoverer]) to redo soon the subtask handoffs a previous process
// may have missed. Open does it unless Options.Deferred; a second call does
// nothing.
func (h *Host) Start(ctx context.Context) error {
	if h.opts.Workers == 0 || h.ro {
		return ErrNotRunning
	}
	h.startMu.Lock()
	defer h.startMu.Unlock()
	if h.main.Load() != nil {
		return nil
	}
	p, err := h.StartPool(ctx, PoolOptions{Workers: h.opts.Workers, Queue: h.opts.Queue, Workspace: h.opts.Workspace})
	if err != nil {
		return err
	}
	h.main.Store(p)
	if h.child.Load() != nil {
		if r, ok := h.b.(HandoffRecoverer); ok {
			// Handoffs a dead process owed: the dispatcher's next pass
			// redoes those of every parent waiting on ended subtasks,
			// reading only their logs.
			r.RecoverAwaiting(h.recoverHandoffs)
		}
	}
	return nil
}

// newEngine is an engine of the host's governance, tools and policies that
// works queue and runs its tools in workspace.
func (h *Host) newEngine(queue, workspace string) (*engine.Engine, error) {
	return h.newEngineWith(queue, workspace, nil, nil)
}

// newEngineWith is newEngine deciding with policies (nil: the host's) and
// judging with extra guards beside the host's.
func (h *Host) newEngineWith(queue, workspace string, policies engine.PolicyResolver, extra []guards.Guard) (*engine.Engine, error) {
	if policies == nil {
		policies = h.policies
	}
	userGuards := h.opts.Guards
	if len(extra) > 0 {
		userGuards = append(slices.Clip(h.opts.Guards), extra...)
	}
	eng, err := engine.New(engine.Config{
		Approvals:         h.opts.Approvals,
		Actor:             h.opts.Actor,
		SegmentRetries:    h.opts.SegmentRetries,
		SegmentRetryPause: h.opts.SegmentRetryPause,
		Log:               h.log,
		Dispatcher:        h.disp,
		Content:           h.content,
		Governance:        h.gov,
		Rates:             h.rates,
		Tools:             h.tools,
		Policies:          policies,
		UserGuards:        userGuards,
		Workspace:         workspace,
		Queue:             queue,
		Logger:            h.logger,
		Waiting:           h.waiting,
		// On a backend shared with processes that route their answers
		// (a remote NATS) any publisher of wakes could send a plain
		// answer: only the approval subjects and the in-process HTTP
		// layer say who answered.
		RequireAuthenticatedApprovals: h.route != nil,
		Fresh:                         &h.fresh,
	})
	if err != nil {
		return nil, badOption("%v", err)
	}
	return eng, nil
}

// recoverHandoffs redoes the handoffs of the subtasks a parent has waited
// on for a reconcile pass ([HandoffRecoverer]).
func (h *Host) recoverHandoffs(ctx context.Context, parent string, subtasks []string) {
	c := h.child.Load()
	if c == nil {
		return
	}
	if n, err := c.RecoverTasks(ctx, subtasks); err != nil {
		h.logger.Warn("redoing the handoffs of a waiting parent's subtasks failed; the next reconcile pass tries again", "parent", parent, "err", err)
	} else if n > 0 {
		h.logger.Info("handed a waiting parent subtask results that had not reached it", "parent", parent, "records", n)
	}
}

// deliver hands a committed record to every tap.
func (h *Host) deliver(ctx context.Context, env eventlog.Envelope) error {
	h.mu.Lock()
	taps := make([]eventlog.Handler, 0, len(h.taps))
	for _, t := range h.taps {
		taps = append(taps, t)
	}
	h.mu.Unlock()
	for _, t := range taps {
		_ = t(ctx, env)
	}
	return nil
}

// Tap subscribes fn to every record this process commits, ahead of the
// observers; the returned function unsubscribes it. fn runs on the
// writer's goroutine and must not block.
func (h *Host) Tap(fn eventlog.Handler) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.nextID
	h.nextID++
	h.taps[id] = fn
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.taps, id)
	}
}

// segmentEnd is the channel the next end of a segment closes.
func (h *Host) segmentEnd() <-chan struct{} {
	h.segMu.Lock()
	defer h.segMu.Unlock()
	if h.segEnd == nil {
		h.segEnd = make(chan struct{})
	}
	return h.segEnd
}

// segmentEnded wakes every watcher waiting on segmentEnd.
func (h *Host) segmentEnded() {
	h.segMu.Lock()
	defer h.segMu.Unlock()
	if h.segEnd != nil {
		close(h.segEnd)
		h.segEnd = nil
	}
}

// Backend is the backend the host runs over.
func (h *Host) Backend() Backend { return h.b }

// Runs reports whether the host runs tasks.
func (h *Host) Runs() bool { return h.main.Load() != nil }

// ReadOnly reports whether the host only reads (its backend does).
func (h *Host) ReadOnly() bool { return h.ro }

// Governance is the governance the host's engines run under.
func (h *Host) Governance() *guards.Config { return h.gov }

// Tools is the host's tool registry.
func (h *Host) Tools() *tools.Registry { return h.tools }

// ChildLifecycle is the in-process ChildLifecycle observer, nil when the
// host runs none.
func (h *Host) ChildLifecycle() *observers.ChildLifecycle { return h.child.Load() }

// Close stops everything the host started, in order: the pools (a segment
// still running stops at its next write and leaves its lease to expire;
// call Drain first to let them finish), the subscriptions, and the
// in-process observers, which hand on what is queued (bounded by
// observerCloseWait). The backend, the tools and what the observers hold
// are the caller's, to close after. It is safe to call more than once.
func (h *Host) Close() {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		pools := make([]*Pool, 0, len(h.pools))
		for p := range h.pools {
			pools = append(pools, p)
		}
		h.mu.Unlock()
		for _, p := range pools {
			p.Stop()
		}
		for _, sub := range h.subs {
			sub.Cancel()
		}
		if h.inproc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), observerCloseWait)
			defer cancel()
			if err := h.inproc.Close(ctx); err != nil {
				h.logger.Warn("observers: records still queued at shutdown were not handled", "err", err)
			}
			for name, c := range h.inproc.Stats() {
				if c.Dropped > 0 || c.Failed > 0 || c.Panicked > 0 {
					h.logger.Warn("observer lost records", "observer", name, "dropped", c.Dropped, "failed", c.Failed, "panicked", c.Panicked)
				}
			}
		}
	})
}

// observerCloseWait bounds the observers' part of Close: the records still
// queued.
const observerCloseWait = 10 * time.Second

// Stats are the in-process observers' counters, by observer name.
func (h *Host) Stats() map[string]observers.ObserverStats {
	if h.inproc == nil {
		return nil
	}
	return h.inproc.Stats()
}

// taskCheck refuses an id that is not a task id.
func taskCheck(id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return badOption("%v", err)
	}
	return nil
}

// defaultPolicies is the host's policy resolver when Options.Policies is
// nil: a task with a script is decided by it; a task without one by its
// agent's model of Options.Models.
func (h *Host) defaultPolicies() engine.PolicyResolver {
	scripted := engine.ScriptedPolicies(h.content, policy.ParseScripted)
	byAgent := h.opts.Models
	return func(ctx context.Context, st *engine.State) (engine.Policy, error) {
		if st.ScriptRef != nil {
			return scripted(ctx, st)
		}
		if p, ok := byAgent[st.Agent]; ok && p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("task %s has no script and agent %q has no model (give the task a script:, or the agent a model: of models:)", st.Task, st.Agent)
	}
}

// HasModel reports whether agent has a model that decides the tasks
// submitted to it without a script.
func (h *Host) HasModel(agent string) bool {
	_, ok := h.opts.Models[agent]
	return ok
}
