package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// stack is what a verb runs on: one NATS connection — to an embedded
// nats-server with JetStream on a data directory (the default), or to a
// NATS server or cluster (--nats) — the JetStream event log and dispatcher
// on it, the ChildLifecycle observer in process when it is wanted, and the
// engines and worker pools that run on them.
type stack struct {
	srv  *embedded.Server // nil on a remote NATS
	lock *dataLock        // the data directory, held while srv runs
	nc   *nats.Conn
	log  *jetstream.Log
	disp *jetstream.Dispatcher
	// child is the ChildLifecycle observer, nil unless stackConfig.child. It
	// is set after the dispatcher opens, whose reconciler may already ask for
	// it (recoverHandoffs), hence atomic.
	child  atomic.Pointer[observers.ChildLifecycle]
	tools  *tools.Registry
	logger *slog.Logger
	conn   connOpts
	data   string // the embedded server's data directory

	subs []*eventlog.Subscription

	// The configured observers run in process (startObservers); nil when
	// none was started.
	observed *observers.InProcess
	audit    *observers.Audit
	hooks    *observers.Hooks

	mu     sync.Mutex
	taps   map[int]eventlog.Handler
	nextID int
	pools  map[int]*pool

	closeOnce sync.Once
	// closeTimes is how long each step of the last Close took.
	closeTimes []closeStep
}

type closeStep struct {
	what string
	took time.Duration
}

// stackConfig says what to open.
type stackConfig struct {
	// data is the embedded server's data directory (with no NATS URL).
	data string
	conn connOpts
	// child runs the ChildLifecycle observer in process: in the embedded
	// default (nothing else would hand a finished subtask to its parent)
	// and in serve --child. On a cluster, observer-workers may run it
	// instead (--observers child).
	child bool
	// recoverChild redoes, before openStack returns, every child handoff
	// a previous process may have missed (serve does it in the background).
	recoverChild bool
	// name names the NATS connection (the verb).
	name   string
	logger *slog.Logger
	// lock is the data directory, already claimed by the verb; nil:
	// openStack claims it.
	lock *dataLock
}

// openStack connects — starting the embedded server on <data>/nats first
// when no NATS URL is configured — and wires the log, the dispatcher and,
// if asked, the ChildLifecycle observer. On error everything started is
// shut down again.
func openStack(ctx context.Context, cfg stackConfig) (_ *stack, err error) {
	logger := cfg.logger
	s := &stack{logger: logger, conn: cfg.conn, data: cfg.data, taps: map[int]eventlog.Handler{}, pools: map[int]*pool{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	name := "noeta-engine"
	if cfg.name != "" {
		name += " " + cfg.name
	}
	if cfg.conn.embedded() {
		s.lock = cfg.lock
		if s.lock == nil {
			verb, _, _ := strings.Cut(cfg.name, " ")
			if s.lock, err = lockDataDir(cfg.data, verb); err != nil {
				var busy *busyError
				if errors.As(err, &busy) {
					return nil, busyUsage(verb, busy)
				}
				return nil, err
			}
		}
		s.srv, err = embedded.Start(ctx, embedded.Config{
			Dir:  filepath.Join(cfg.data, "nats"),
			User: s.lock.creds.User, Password: s.lock.creds.Password,
		})
		if err != nil {
			return nil, fmt.Errorf("start the embedded NATS server in %s: %w", cfg.data, err)
		}
		s.nc, err = nats.Connect(s.srv.ClientURL(), append(s.srv.ClientOptions(), nats.Name(name))...)
		if err != nil {
			return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
		}
		if err := s.lock.serving(s.srv.ClientURL()); err != nil {
			return nil, err
		}
	} else {
		s.nc, err = cfg.conn.connect(name, logger)
		if err != nil {
			return nil, err
		}
	}
	dc := s.dispatcherConfig()
	if cfg.child {
		// The reconciler nudges the parents that have waited on their
		// subtasks for a pass: their handoffs may have died with another
		// process.
		dc.AwaitingSubtasks = s.recoverHandoffs
	}
	s.disp, err = jetstream.OpenDispatcher(ctx, s.nc, dc)
	if err != nil {
		return nil, fmt.Errorf("open the dispatcher: %w", leaseTTLHint(err))
	}
	s.log, err = jetstream.Open(ctx, s.nc, jetstream.Config{Prefix: cfg.conn.prefix, Replicas: cfg.conn.replicas, Registry: s.disp})
	if err != nil {
		return nil, fmt.Errorf("open the event log: %w", leaseTTLHint(err))
	}
	if !cfg.conn.embedded() {
		// Observer workers write dead letters but may not create their
		// stream (deploy/nats): the engine does.
		if err := jetstream.EnsureDeadLetterStream(ctx, s.nc, cfg.conn.prefix, cfg.conn.replicas); err != nil {
			return nil, fmt.Errorf("create the dead-letter stream: %w", leaseTTLHint(err))
		}
	}
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		return nil, err
	}
	if s.tools, err = tools.NewRegistry(builtins...); err != nil {
		return nil, err
	}
	// The taps come first: a follower sees a child's terminal record before
	// ChildLifecycle hands it to the parent and wakes it.
	s.subs = append(s.subs, s.log.Subscribe(s.deliver))
	if !cfg.child {
		return s, nil
	}
	child, err := observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: s.log, Index: s.log, Waker: s.disp, Logger: logger})
	if err != nil {
		return nil, err
	}
	s.child.Store(child)
	s.subs = append(s.subs, s.log.Subscribe(child.Handle))
	if cfg.recoverChild {
		if _, err := child.Recover(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			logger.Warn("child handoff recovery was incomplete; the next start retries it", "err", err)
		}
	}
	return s, nil
}

// dispatcherConfig is the dispatcher of the stack's prefix: every process of
// one prefix uses the same prefix, replicas and lease TTL.
func (s *stack) dispatcherConfig() jetstream.DispatcherConfig {
	return jetstream.DispatcherConfig{Prefix: s.conn.prefix, Replicas: s.conn.replicas, LeaseTTL: s.conn.leaseTTL, Logger: s.logger}
}

// recoverHandoffs redoes the handoffs of the subtasks a parent has waited
// on for a reconcile pass (jetstream.DispatcherConfig.AwaitingSubtasks).
func (s *stack) recoverHandoffs(ctx context.Context, parent string, subtasks []string) {
	c := s.child.Load()
	if c == nil {
		return
	}
	if n, err := c.RecoverTasks(ctx, subtasks); err != nil {
		s.logger.Warn("redoing the handoffs of a waiting parent's subtasks failed; the next reconcile pass tries again", "parent", parent, "err", err)
	} else if n > 0 {
		s.logger.Info("handed a waiting parent subtask results that had not reached it", "parent", parent, "records", n)
	}
}

// deliver hands a committed record to every tap.
func (s *stack) deliver(ctx context.Context, env eventlog.Envelope) error {
	s.mu.Lock()
	taps := make([]eventlog.Handler, 0, len(s.taps))
	for _, h := range s.taps {
		taps = append(taps, h)
	}
	s.mu.Unlock()
	for _, h := range taps {
		_ = h(ctx, env)
	}
	return nil
}

// tap subscribes h to every committed record, ahead of the observers; the
// returned function unsubscribes it. h runs on the writer's goroutine and
// must not block.
func (s *stack) tap(h eventlog.Handler) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	s.taps[id] = h
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.taps, id)
	}
}

// engine returns an engine on the stack that governs by gov, runs file and
// shell tools in workspace, and works the ready queue queue ("" for the
// default queue).
func (s *stack) engine(gov *guards.Config, workspace, queue string) (*engine.Engine, error) {
	return s.engineAs(gov, workspace, queue, "")
}

// engineAs is engine with the actor its records name ("": the engine's
// default, engine@<host>:<pid>).
func (s *stack) engineAs(gov *guards.Config, workspace, queue, actor string) (*engine.Engine, error) {
	return engine.New(engine.Config{
		Actor:      actor,
		Log:        s.log,
		Dispatcher: s.disp,
		Content:    s.log,
		Governance: gov,
		Tools:      s.tools,
		Policies:   engine.ScriptedPolicies(s.log, policy.ParseScripted),
		Workspace:  workspace,
		Queue:      queue,
		Logger:     s.logger,
	})
}

// pool is a running worker pool.
type pool struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startPool runs n workers of eng until the returned stop is called or the
// stack is closed. stop returns once every worker has returned.
func (s *stack) startPool(eng *engine.Engine, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.pools[id] = p
	s.mu.Unlock()
	ws := eng.NewPool("worker", n)
	go func() {
		defer close(p.done)
		ws.Run(ctx)
	}()
	return func() {
		p.cancel()
		<-p.done
		s.mu.Lock()
		delete(s.pools, id)
		s.mu.Unlock()
	}
}

// Close shuts everything down, in order: the worker pools (a worker in the
// middle of a segment stops at its next write and leaves its lease to
// expire), the subscriptions, the dispatcher, the log, the connection, and
// the server, which flushes and closes its store. It is safe to call more
// than once.
func (s *stack) Close() {
	s.closeOnce.Do(func() {
		step := func(what string, f func()) {
			start := time.Now()
			f()
			s.closeTimes = append(s.closeTimes, closeStep{what, time.Since(start)})
		}
		step("pools", func() {
			s.mu.Lock()
			pools := make([]*pool, 0, len(s.pools))
			for _, p := range s.pools {
				pools = append(pools, p)
			}
			s.mu.Unlock()
			for _, p := range pools {
				p.cancel()
			}
			for _, p := range pools {
				<-p.done
			}
		})
		step("subscriptions", func() {
			for _, sub := range s.subs {
				sub.Cancel()
			}
		})
		// The observers hand on what was committed before they stop (the
		// audit's gap filling reads the log, so before the log closes),
		// then the audit sink is flushed and closed and the hooks still
		// queued run.
		if s.observed != nil || s.audit != nil || s.hooks != nil {
			step("observers", s.closeObservers)
		}
		if s.disp != nil {
			step("dispatcher", func() { _ = s.disp.Close() })
		}
		if s.log != nil {
			step("log", func() { _ = s.log.Close() })
		}
		if s.nc != nil {
			step("connection", s.nc.Close)
		}
		if s.srv != nil {
			step("server", s.srv.Shutdown)
		}
		// Only once the server has flushed and closed its store may another
		// process start one on the directory.
		s.lock.release()
	})
}

// closeTook is the total time of the last Close.
func (s *stack) closeTook() time.Duration {
	var d time.Duration
	for _, c := range s.closeTimes {
		d += c.took
	}
	return d
}

// inspect returns the dispatcher's state of task; found is false while the
// dispatcher does not know it yet (it is created before it is enqueued).
func (s *stack) inspect(ctx context.Context, task string) (eventlog.DispatchState, bool, error) {
	ds, err := s.disp.Inspect(ctx, task)
	if errors.Is(err, eventlog.ErrNotFound) {
		return ds, false, nil
	}
	return ds, err == nil, err
}

// observeConfig says which of the config's observers a verb that runs tasks
// runs in process.
type observeConfig struct {
	gov        *config.File
	configPath string // names the file in errors
	workspace  string // the hooks' working directory
	// hooks runs the hooks: section and audit the observers.audit section
	// (serve --hooks, --audit: off where observer-workers run them).
	hooks, audit bool
	stdout       io.Writer // an audit stdout sink's
	// verb names a verb whose own output is on stdout (run, approve,
	// demo), where an audit on stdout would be mixed into it; "" for serve,
	// whose stdout is free.
	verb string
}

// observerCloseWait bounds the observers' part of Close: the records still
// queued, the audit flush, the hooks still queued or running.
const observerCloseWait = 10 * time.Second

// startObservers runs the config's hooks and audit observers in process,
// fed from the log's Subscriber through bounded queues (a slow observer
// never slows a writer). Call it before the pools start, so they see every
// record this process commits. An observer that cannot be built is bad
// config: exit 2, naming the file, line and field.
func (s *stack) startObservers(cfg observeConfig) error {
	var obs []observers.Observer
	// Decoded by package config, not run here yet: refused, never ignored.
	o := cfg.gov.Observers
	for _, s := range []struct {
		name string
		set  bool
	}{{"metrics", o.Metrics != nil}, {"trace", o.Trace != nil}, {"fanout", o.Fanout != nil}} {
		if s.set {
			return usageErr("%s", configErrors(cfg.configPath, cfg.gov.ErrorAt("observers."+s.name, "engine does not run this observer in process yet; run it with observer-worker, and remove it here")))
		}
	}
	if ac := cfg.gov.Observers.Audit; cfg.audit && ac != nil {
		if ac.Stdout && cfg.verb != "" {
			return usageErr("%s", configErrors(cfg.configPath, cfg.gov.ErrorAt("observers.audit.stdout",
				fmt.Sprintf("engine %s prints its own output on stdout, which the audit records would be mixed into; write them to a file or a subject", cfg.verb))))
		}
		a, field, err := observers.NewAuditFromConfig(*ac, observers.AuditDeps{
			Stdout: cfg.stdout, Publisher: s.nc, SyncEvery: time.Second, Log: s.log, Logger: s.logger,
		})
		if err != nil {
			return usageErr("%s", configErrors(cfg.configPath, cfg.gov.ErrorAt(field, err.Error())))
		}
		s.audit = a
		obs = append(obs, a)
	}
	if hc := cfg.gov.Hooks; cfg.hooks && !hc.Empty() {
		h, err := observers.NewHooksFromConfig(hc, observers.HooksObserverConfig{Workspace: cfg.workspace, Logger: s.logger})
		if err != nil {
			return usageErr("%s", configErrors(cfg.configPath, cfg.gov.ErrorAt("hooks", err.Error())))
		}
		s.hooks = h
		obs = append(obs, h)
	}
	if len(obs) > 0 {
		s.observed = observers.NewInProcess(s.log, observers.InProcessConfig{Logger: s.logger}, obs...)
	}
	return nil
}

// closeObservers stops the in-process observers, in order: the feed (which
// hands on what is queued), the audit sink, the hooks.
func (s *stack) closeObservers() {
	ctx, cancel := context.WithTimeout(context.Background(), observerCloseWait)
	defer cancel()
	if s.observed != nil {
		if err := s.observed.Close(ctx); err != nil {
			s.logger.Warn("observers: records still queued at shutdown were not handled", "err", err)
		}
		if st := s.observed.Stats(); len(st) > 0 {
			for name, c := range st {
				if c.Dropped > 0 || c.Failed > 0 || c.Panicked > 0 {
					s.logger.Warn("observer lost records", "observer", name, "dropped", c.Dropped, "failed", c.Failed, "panicked", c.Panicked)
				}
			}
		}
	}
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			s.logger.Error("audit: closing the sink failed; the last records may not be durable", "err", err)
		}
	}
	if s.hooks != nil {
		if err := s.hooks.Close(ctx); err != nil {
			s.logger.Warn("hooks: stopped before every queued hook ran", "err", err)
		}
	}
}
