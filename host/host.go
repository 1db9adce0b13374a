package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/backoff"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tools"
	"github.com/noeta-go/noeta/tools/sandbox"
)

// Host is a running noeta: a connection, the log and dispatcher on it, and
// — when it runs tasks — the worker pool, the in-process observers and
// ChildLifecycle. Its methods are safe for concurrent use.
type Host struct {
	opts   Options
	logger *slog.Logger
	gov    *guards.Config

	srv    *embedded.Server // nil on a remote NATS or attached
	lock   *dataLock        // the data directory, held while srv runs
	attach *attachment      // set when a client uses another process's server
	nc     *nats.Conn
	log    *jetstream.Log
	disp   *jetstream.Dispatcher
	// reader and rows serve a read-only host on a remote NATS.
	reader *jetstream.Reader
	rows   *jetstream.RowReader
	tools  *tools.Registry
	// closeTools stops the tool sources the registry started (MCP servers).
	closeTools func()
	// client is the engine of Submit, Approve and Cancel.
	client *engine.Engine
	// policies decide the turns of every engine of the host.
	policies engine.PolicyResolver
	// child is set after the dispatcher opens, whose reconciler may
	// already ask for it (recoverHandoffs), hence atomic.
	child atomic.Pointer[observers.ChildLifecycle]

	subs []*eventlog.Subscription
	obs  *observerSet
	reg  *prometheus.Registry
	ctrs *counters

	mu     sync.Mutex
	taps   map[int]eventlog.Handler
	nextID int
	pools  map[*Pool]struct{}
	// main is the host's own pool, once started.
	main atomic.Pointer[Pool]

	startMu sync.Mutex

	closeOnce sync.Once

	// waiting is the fleet's waiting index (waiting.go); waitingErr says
	// why a read-only host has none.
	waiting    *jetstream.WaitingIndex
	waitingErr error
}

// Open connects and starts what opts ask for; on error everything started
// is shut down again. Errors of the options wrap [ErrBadOptions]; a data
// directory another process holds, for a host that runs tasks, is a
// [*BusyError].
func Open(ctx context.Context, opts Options) (*Host, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	pause := backoff.New(startRetryMin, startRetryMax).Jittered()
	for attempt := 1; ; attempt++ {
		h, err := open(ctx, o)
		if err == nil {
			if attempt > 1 {
				o.Logger.Info("started after retries", "attempts", attempt)
			}
			return h, nil
		}
		if !o.RetryStart || ctx.Err() != nil || o.embedded() || !startupTransient(err) {
			return nil, err
		}
		wait := pause.Take()
		o.Logger.Warn("start-up failed; retrying", "attempt", attempt, "in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last start-up error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func open(ctx context.Context, o Options) (_ *Host, err error) {
	h := &Host{opts: o, logger: o.Logger, taps: map[int]eventlog.Handler{}, pools: map[*Pool]struct{}{}}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if o.Config != nil {
		h.gov = o.Config.Governance
		if h.gov == nil && o.Workers > 0 {
			return nil, badOption("the config has no governance (config.File.Governance)")
		}
	}
	if h.gov == nil {
		if h.gov, err = guards.NewConfig(nil, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := h.connect(ctx); err != nil {
		return nil, err
	}
	if o.ReadOnly && h.srv == nil && h.attach == nil {
		return h, h.openReadOnly(ctx)
	}
	dc := h.dispatcherConfig()
	runsChild := o.Workers > 0 && !o.Skip.ChildLifecycle
	if runsChild {
		// The reconciler nudges the parents that have waited on their
		// subtasks for a pass: their handoffs may have died with another
		// process.
		dc.AwaitingSubtasks = h.recoverHandoffs
	}
	if h.disp, err = jetstream.OpenDispatcher(ctx, h.nc, dc); err != nil {
		return nil, fmt.Errorf("open the dispatcher: %w", settingsHint(err))
	}
	h.log, err = jetstream.Open(ctx, h.nc, jetstream.Config{Prefix: o.Prefix, Replicas: o.Replicas, Registry: h.disp, Batch: o.Batch})
	if err != nil {
		return nil, fmt.Errorf("open the event log: %w", settingsHint(err))
	}
	if err := h.openWaiting(ctx, false); err != nil {
		return nil, err
	}
	if !o.embedded() && !o.ReadOnly {
		// Observer workers write dead letters but may not create their
		// stream (deploy/nats): the engine does.
		if err := jetstream.EnsureDeadLetterStream(ctx, h.nc, o.Prefix, o.Replicas); err != nil {
			return nil, fmt.Errorf("create the dead-letter stream: %w", settingsHint(err))
		}
	}
	// A tool the config names that the registry lacks is a mistake of the
	// config, not a denial to find when a task of the agent runs.
	var sb *sandbox.Scoped
	if o.Workers > 0 {
		sb = confinement(ctx, o.Config, hiddenPaths(o), h.logger, true)
	}
	if h.tools, h.closeTools, err = buildRegistry(ctx, o.Config, o.Tools, o.Workers > 0, o.LookupEnv, h.logger, sb, o.Workspace); err != nil {
		_ = sb.Close()
		return nil, err
	}
	if sb != nil {
		// The sandbox's helper waiting for the next call ends with the
		// tools.
		closeTools := h.closeTools
		h.closeTools = func() {
			closeTools()
			_ = sb.Close()
		}
	}
	h.policies = o.Policies
	if h.policies == nil {
		if h.policies, err = h.defaultPolicies(); err != nil {
			return nil, err
		}
	}
	if h.client, err = h.newEngine(o.Queue, o.Workspace); err != nil {
		return nil, err
	}
	// The taps come first: a watcher sees a child's terminal record before
	// ChildLifecycle hands it to the parent and wakes it.
	h.subs = append(h.subs, h.log.Subscribe(h.deliver))
	h.reg = prometheus.NewRegistry()
	h.ctrs = newCounters(h)
	if o.Workers == 0 {
		return h, nil
	}
	if runsChild {
		child, err := observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: h.log, Index: h.log, Waker: h.disp, Logger: h.logger})
		if err != nil {
			return nil, err
		}
		h.child.Store(child)
		h.subs = append(h.subs, h.log.Subscribe(child.Handle))
	}
	if h.obs, err = h.startObservers(ctx); err != nil {
		return nil, err
	}
	if !o.Deferred {
		if err := h.Start(ctx); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Start starts the host's worker pool, and asks the dispatcher's next
// reconcile pass to redo the subtask handoffs a previous process may have
// missed. Open does it unless Options.Deferred; a second call does nothing.
func (h *Host) Start(ctx context.Context) error {
	if h.opts.Workers == 0 || h.log == nil {
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
		// Handoffs a dead process owed: the dispatcher's next pass redoes
		// those of every parent waiting on ended subtasks, reading only
		// their logs (a start no longer lists every task).
		h.disp.RecoverAwaiting()
	}
	return nil
}

// connect connects — on the embedded default taking the data directory and
// starting its server first, or attaching to the server of the process that
// holds it (a client host only).
func (h *Host) connect(ctx context.Context) error {
	o := h.opts
	name := "noeta-engine " + o.Name
	if !o.embedded() {
		nc, err := o.NATS.Connect(name, h.logger)
		if err != nil {
			return err
		}
		h.nc = nc
		return nil
	}
	var err error
	// The lock names the verb: the first word of the name.
	verb, _, _ := strings.Cut(o.Name, " ")
	if o.Workers > 0 {
		h.lock, err = lockDataDir(o.DataDir, verb)
	} else {
		h.lock, h.attach, err = claimOrAttach(ctx, o.DataDir, verb)
	}
	if err != nil {
		return err
	}
	if h.attach != nil {
		h.nc, err = nats.Connect(h.attach.url, nats.Name(name), nats.UserInfo(h.attach.creds.User, h.attach.creds.Password))
		if err != nil {
			return fmt.Errorf("connect to the server of %v: %w", h.attach.holder, err)
		}
		return nil
	}
	h.srv, err = embedded.Start(ctx, embedded.Config{
		Dir:  filepath.Join(o.DataDir, "nats"),
		User: h.lock.creds.User, Password: h.lock.creds.Password,
	})
	if err != nil {
		return fmt.Errorf("start the embedded NATS server in %s: %w", o.DataDir, err)
	}
	// This process's own connection goes through memory; the TCP listener
	// stays for the clients that attach, the nats CLI and observer-workers
	// (docs/adr/0037).
	if h.nc, err = h.srv.ConnectInProcess(nats.Name(name)); err != nil {
		return fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	return h.lock.serving(h.srv.ClientURL())
}

// openReadOnly opens what a read-only client on a remote NATS needs: the
// task stream and the dispatcher's rows, looked up, never created.
func (h *Host) openReadOnly(ctx context.Context) error {
	var err error
	if h.reader, err = jetstream.OpenReader(ctx, h.nc, jetstream.Config{Prefix: h.opts.Prefix}); err != nil {
		return err
	}
	if h.rows, err = jetstream.OpenRowReader(ctx, h.nc, h.opts.Prefix); err != nil {
		return err
	}
	return h.openWaiting(ctx, true)
}

// dispatcherConfig is the dispatcher of the host's prefix: every process of
// one prefix uses the same prefix, replicas and lease TTL.
//
// An answer on an approval subject is vouched for by the broker (auth
// nats) only on a remote NATS, where deploy/nats lets each approver's user
// publish under its own name alone. The embedded server has one user, the
// data directory's, who may publish on every approver's subject: there
// such an answer proves only that its sender holds the data directory
// (auth local), as an answer through Approve does (docs/adr/0048).
func (h *Host) dispatcherConfig() jetstream.DispatcherConfig {
	auth := noeta.AuthNATS
	if h.opts.embedded() {
		auth = noeta.AuthLocal
	}
	return jetstream.DispatcherConfig{Prefix: h.opts.Prefix, Replicas: h.opts.Replicas, LeaseTTL: h.opts.LeaseTTL, Logger: h.logger, ApproveSubjectAuth: auth}
}

// newEngine is an engine of the host's governance, tools and policies that
// works queue and runs its tools in workspace.
func (h *Host) newEngine(queue, workspace string) (*engine.Engine, error) {
	var appr *approvals.Policy
	if h.opts.Config != nil {
		appr = h.opts.Config.Approvals
	}
	eng, err := engine.New(engine.Config{
		Approvals:  appr,
		Actor:      h.opts.Actor,
		Log:        h.log,
		Dispatcher: h.disp,
		Content:    h.log,
		Governance: h.gov,
		Tools:      h.tools,
		Policies:   h.policies,
		UserGuards: h.opts.Guards,
		Workspace:  workspace,
		Queue:      queue,
		Logger:     h.logger,
		Waiting:    h.waitingSeam(),
		// On a remote NATS any publisher of wakes could send a plain
		// answer: only the approval subjects and the in-process HTTP
		// layer say who answered.
		RequireAuthenticatedApprovals: !h.opts.embedded(),
	})
	if err != nil {
		return nil, badOption("%v", err)
	}
	return eng, nil
}

// recoverHandoffs redoes the handoffs of the subtasks a parent has waited
// on for a reconcile pass (jetstream.DispatcherConfig.AwaitingSubtasks).
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

// Embedded reports whether the host runs on an embedded server (its own or,
// attached, another process's).
func (h *Host) Embedded() bool { return h.opts.embedded() }

// Attached returns the holder whose server a client host uses, and whether
// it uses one.
func (h *Host) Attached() (Holder, bool) {
	if h.attach == nil {
		return Holder{}, false
	}
	return h.attach.holder, true
}

// DataDir is the embedded server's data directory ("" on a remote NATS).
func (h *Host) DataDir() string { return h.opts.DataDir }

// Conn is the host's NATS connection.
func (h *Host) Conn() *nats.Conn { return h.nc }

// Runs reports whether the host runs tasks.
func (h *Host) Runs() bool { return h.main.Load() != nil }

// Governance is the governance the host's engines run under.
func (h *Host) Governance() *guards.Config { return h.gov }

// Tools is the host's tool registry.
func (h *Host) Tools() *tools.Registry { return h.tools }

// ChildLifecycle is the in-process ChildLifecycle observer, nil when the
// host runs none.
func (h *Host) ChildLifecycle() *observers.ChildLifecycle { return h.child.Load() }

// Registry is the host's Prometheus registry: the pool's counters, the
// metrics observer's instruments.
func (h *Host) Registry() *prometheus.Registry { return h.reg }

// Dispatcher is the host's dispatcher (nil read-only on a remote NATS).
func (h *Host) Dispatcher() *jetstream.Dispatcher { return h.disp }

// Log is the host's event log, for tools that append under leases of their
// own (engine bench's fenced-append probe); nil on a read-only host on a
// remote NATS.
func (h *Host) Log() *jetstream.Log { return h.log }

// Close stops everything, in order: the pools (a segment still running
// stops at its next write and leaves its lease to expire; call Drain first
// to let them finish), the subscriptions, the observers (which hand on
// what was committed), the dispatcher, the log, the connection, and the
// embedded server, which flushes and closes its store. On a remote NATS
// that cannot be reached, the closing steps that would wait on it are
// given up after a bound. It is safe to call more than once.
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
		if h.closeTools != nil {
			// After the pools: no call is in flight any more.
			h.closeTools()
		}
		var steps []func()
		for _, sub := range h.subs {
			steps = append(steps, sub.Cancel)
		}
		if h.obs != nil {
			steps = append(steps, func() { h.obs.close(h.logger) })
		}
		for _, c := range []interface{ Close() error }{h.disp, h.log, h.reader} {
			if c != nil && !isNil(c) {
				steps = append(steps, func() { _ = c.Close() })
			}
		}
		if h.nc != nil {
			steps = append(steps, h.nc.Close)
		}
		if h.srv != nil {
			// The embedded server is local: no bound, it must flush.
			for _, s := range steps {
				s()
			}
			h.srv.Shutdown()
		} else {
			runWithin(steps, stopWait, h.logger)
		}
		// Only once the server has flushed and closed its store may another
		// process start one on the directory.
		h.lock.release()
	})
}

func isNil(c interface{ Close() error }) bool {
	switch c := c.(type) {
	case *jetstream.Dispatcher:
		return c == nil
	case *jetstream.Log:
		return c == nil
	case *jetstream.Reader:
		return c == nil
	}
	return false
}

// runWithin runs steps in order, giving up after within: with NATS
// unreachable, closing a dispatcher waits for requests that time out, and
// there is nothing left to flush.
func runWithin(steps []func(), within time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, s := range steps {
			s()
		}
	}()
	select {
	case <-done:
	case <-time.After(within):
		logger.Warn("closing the NATS connection did not finish in time (is NATS reachable?); exiting anyway", "waited", within)
	}
}

// settingsHint adds a hint to the error of a dispatcher or log that found
// its buckets made with another TTL or replica count.
func settingsHint(err error) error {
	if errors.Is(err, jetstream.ErrConfigMismatch) {
		return fmt.Errorf("%w\n(every process of one prefix must use the same --lease-ttl and --replicas)", err)
	}
	return err
}

// taskCheck refuses an id that is not a task id.
func taskCheck(id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return badOption("%v", err)
	}
	return nil
}
