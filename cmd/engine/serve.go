package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/observers"
)

type serveOpts struct {
	serveConfig string
	queue       string
	grace       time.Duration
	http        string
	config      string
	workspace   string
	child       bool
	hooks       bool
	audit       bool
	logFormat   string
	logLevel    string
	printConfig bool
}

// Defaults of serve.
const (
	defaultGrace     = 30 * time.Second
	defaultServeHTTP = "127.0.0.1:9465"
	// stopWait bounds the wait for workers whose segments were told to stop
	// when the grace period ran out: they stop at their next write.
	stopWait = 10 * time.Second
)

func newServeCmd(g *globals) *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run tasks with a pool of workers on the configured NATS, until SIGTERM",
		Long: `serve runs a pool of --workers workers on the configured NATS (--nats; the
embedded server on --data without it): each leases a ready task from the
--queue, runs it to its next suspend or end under the governance config
(--config, required: default noeta.yaml in the working directory), releases
it, and leases the next. Run one on every host: the hosts share the tasks, and
a task whose host dies is taken over by another once its lease expires
(--lease-ttl).

If NATS cannot be reached when serve starts (or its streams are between
leaders), serve retries with backoff until it can start; SIGTERM stops it
meanwhile. A refused login or settings that differ from the deployment's
fail at once.

SIGTERM or SIGINT stops it gracefully: it takes no new task, lets the
segments in hand finish and release their tasks, and exits 0. If --grace
runs out first (or a second signal comes), the segments still running stop
at their next write without releasing anything; their leases expire into
another host's hands, which resumes them where their logs end.

--child (default true) runs the ChildLifecycle observer in this process: it
hands a finished subtask's result to its parent and wakes the parent. Turn it
off (--child=false) where observer-workers run it (observer-worker
--observers child); running both is safe, only redundant.

--hooks and --audit (default true) run the config's hooks: section and its
observers.audit section in this process, over the records it commits. Turn
them off where observer-workers run them (--observers hooks, audit): every
serve process runs its own, so on a cluster of several hosts an audit file
should be an observer-worker's, or each host's own file.

--http serves GET /healthz (200 while connected to NATS and the pool runs,
503 otherwise) and GET /metrics (Prometheus: the metrics observer over the
records this process commits, and the process's own counters:
noeta_engine_*, Go and process metrics). Logs are structured (log/slog) on
stderr, --log-format text or json.

Settings come from flags, then the environment, then the --serve-config file
(YAML or JSON), the first that has one winning; --print-config prints the
effective settings, each with its source. The file's keys are the flags'
names, with _ for -:
` + wrapWords(strings.Join(settingKeys(), ", "), 76, "  ") + `
The environment variables are NOETA_ and the key in capitals:
` + envList(true),
		Example: `  engine serve --config noeta.yaml
  engine serve --nats nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222 \
      --user engine --config /etc/noeta/noeta.yaml --replicas 3 --workers 8
  NOETA_PASSWORD=… engine serve --serve-config /etc/noeta/serve.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.printConfig {
				printSettings(g.stdout, cmd, g.sources)
				return nil
			}
			return serve(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.serveConfig, "serve-config", "", "settings file, YAML or JSON (or "+envServeConfig+")")
	f.StringVar(&o.queue, "queue", "", "ready queue to work (default: the default queue)")
	f.DurationVar(&o.grace, "grace", defaultGrace, "on SIGTERM, how long the segments in hand may take to finish")
	f.StringVar(&o.http, "http", defaultServeHTTP, "listen address of /healthz and /metrics (empty: none)")
	f.StringVar(&o.config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.StringVar(&o.workspace, "workspace", ".", "directory the file and shell tools work in")
	f.BoolVar(&o.child, "child", true, "run the ChildLifecycle observer in this process")
	f.BoolVar(&o.hooks, "hooks", true, "run the config's hooks: in this process")
	f.BoolVar(&o.audit, "audit", true, "run the config's observers.audit in this process")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&o.printConfig, "print-config", false, "print the effective settings and where each came from, and exit")
	return cmd
}

// serveConfigFile is the serve config file: --serve-config, else
// NOETA_SERVE_CONFIG.
func serveConfigFile(cmd *cobra.Command, lookupEnv func(string) (string, bool)) string {
	if fl := cmd.Flags().Lookup("serve-config"); fl != nil && fl.Changed {
		return fl.Value.String()
	}
	if v, ok := lookupEnv(envServeConfig); ok {
		return v
	}
	return ""
}

// newLogger is the structured logger of --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level is %q, want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("--log-format is %q, want text or json", format)
}

// engineActor names this process in the records it writes and in its
// workers' leases: engine@<host>:<pid>.
func engineActor() string {
	host, _ := os.Hostname()
	return "engine@" + host + ":" + strconv.Itoa(os.Getpid())
}

func serve(ctx context.Context, g *globals, o serveOpts) error {
	if err := g.check(); err != nil {
		return err
	}
	if o.grace < 0 {
		return usageErr("--grace is %v; it must not be negative", o.grace)
	}
	if o.queue != "" {
		if err := eventlog.ValidateQueue("--queue", o.queue); err != nil {
			return usageErr("%v", err)
		}
	}
	logger, err := newLogger(g.stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	gov, configPath, err := governance(ctx, o.config)
	if err != nil {
		return err
	}
	workspace, err := absDir("--workspace", o.workspace)
	if err != nil {
		return err
	}
	data, err := g.dataDir()
	if err != nil {
		return err
	}
	var ln net.Listener
	if o.http != "" {
		if ln, err = net.Listen("tcp", o.http); err != nil {
			return failErr(fmt.Errorf("--http: %w", err))
		}
		defer ln.Close()
	}

	// A second signal while draining ends the grace period at once.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// What was opened is closed in reverse order: on an early return by the
	// deferred call, at the end within a bound (see closeAll).
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	actor := engineActor()
	st, leaser, err := openServing(ctx, stackConfig{data: data, conn: g.conn, child: o.child, name: "serve " + actor, logger: logger})
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("stopped while starting", "err", err)
			return nil
		}
		return failErr(err)
	}
	closers = append(closers, st.Close, func() { _ = leaser.Close() })
	if err := st.startObservers(observeConfig{gov: gov, configPath: configPath, workspace: workspace, hooks: o.hooks, audit: o.audit, stdout: g.stdout}); err != nil {
		return err
	}
	eng, err := st.engineAs(gov.Governance, workspace, o.queue, actor)
	if err != nil {
		return failErr(err)
	}

	reg := prometheus.NewRegistry()
	metrics, err := observers.NewMetrics(observers.MetricsConfig{Registry: reg, Logger: logger})
	if err != nil {
		return failErr(err)
	}
	inproc := observers.NewInProcess(st.log, observers.InProcessConfig{Logger: logger}, metrics)
	metrics.SetStats(inproc.Stats)
	closers = append(closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = inproc.Close(cctx)
		_ = metrics.Shutdown(cctx)
	})

	sv := newServer(st, leaser, eng, logger, actor, o.queue, g.workers)
	sv.register(reg)

	var srv *http.Server
	httpAddr := ""
	if ln != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", sv.healthz)
		mux.Handle("GET /metrics", metrics.Handler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		httpAddr = ln.Addr().String()
		logger.Info("http listening", "addr", httpAddr)
	}

	// The handoffs a previous process may have missed, in the background: a
	// recovery reads every task.
	bg, stopBG := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	if child := st.child.Load(); child != nil {
		bgWG.Go(func() {
			n, err := child.Recover(bg)
			switch {
			case err != nil && bg.Err() == nil:
				logger.Warn("child handoff recovery was incomplete; the next start retries it", "err", err)
			case err == nil && n > 0:
				logger.Info("child handoffs recovered", "delivered", n)
			}
		})
	}

	sv.start()
	ttl := g.conn.leaseTTL
	if ttl == 0 {
		ttl = jetstream.DefaultLeaseTTL
	}
	logger.Info("serving", "actor", actor, "nats", g.conn.describe(), "prefix", g.conn.prefix, "replicas", g.conn.replicas,
		"queue", queueName(o.queue), "workers", g.workers, "lease_ttl", ttl, "grace", o.grace, "child", o.child,
		"hooks", o.hooks, "audit", o.audit,
		"config", configPath, "workspace", workspace, "http", httpAddr)

	<-ctx.Done()
	start := time.Now()
	hurry := make(chan struct{})
	go func() {
		// The signal that ended ctx is the first; another one hurries.
		n := 0
		for range sigs {
			if n++; n == 2 {
				close(hurry)
				return
			}
		}
	}()
	rep := sv.drain(o.grace, hurry)
	stopBG()
	bgWG.Wait()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	all := closers
	closers = nil
	closeAll(all, stopWait, logger)
	logger.Info("stopped", "took", time.Since(start).Round(time.Millisecond), "finished_while_stopping", rep.finished,
		"left_to_expire", len(rep.abandoned), "segments", sv.segmentCount())
	return nil
}

// Start-up retries: the pause between attempts grows from startRetryMin to
// startRetryMax, jittered so hosts restarted together do not retry together.
const (
	startRetryMin = 250 * time.Millisecond
	startRetryMax = 10 * time.Second
)

// openServing opens the stack and the workers' dispatcher. On a remote NATS
// (--nats) an attempt that fails for a reason that may pass (the servers are
// restarting, electing stream leaders, unreachable) is retried with backoff
// until it succeeds or ctx ends (SIGTERM, SIGINT): a host must not stay down
// because it started during a failover. Anything else (a refused password,
// settings that differ from the deployment's, the embedded server) fails at
// once.
func openServing(ctx context.Context, cfg stackConfig) (*stack, *jetstream.Dispatcher, error) {
	pause := startRetryMin
	for attempt := 1; ; attempt++ {
		st, leaser, err := openServingOnce(ctx, cfg)
		if err == nil {
			if attempt > 1 {
				cfg.logger.Info("started after retries", "attempts", attempt)
			}
			return st, leaser, nil
		}
		if ctx.Err() != nil || cfg.conn.embedded() || !startupTransient(err) {
			return nil, nil, err
		}
		wait := pause/2 + rand.N(pause/2+1)
		cfg.logger.Warn("start-up failed; retrying", "attempt", attempt, "in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("%w (last start-up error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, startRetryMax)
	}
}

func openServingOnce(ctx context.Context, cfg stackConfig) (*stack, *jetstream.Dispatcher, error) {
	st, err := openStack(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	// Workers lease through a dispatcher of their own: closing it stops
	// their lease requests at once, without cutting one that is being
	// granted, while the stack's dispatcher serves the segments in hand
	// (heartbeats, releases) until they end. It does not reconcile: the
	// stack's does.
	lc := st.dispatcherConfig()
	lc.SweepInterval = -1
	leaser, err := jetstream.OpenDispatcher(ctx, st.nc, lc)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("open the dispatcher: %w", leaseTTLHint(err))
	}
	return st, leaser, nil
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

// closeAll runs the closers in reverse order, giving up after within: with
// NATS unreachable, closing a dispatcher waits for requests that time out,
// and there is nothing left to flush.
func closeAll(closers []func(), within time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	select {
	case <-done:
	case <-time.After(within):
		logger.Warn("closing the NATS connection did not finish in time (is NATS reachable?); exiting anyway", "waited", within)
	}
}

func queueName(q string) string {
	if q == "" {
		return eventlog.DefaultQueue
	}
	return q
}

// server is serve's worker pool: workers that lease with one dispatcher (the
// leaser, closed to stop leasing) and run each segment with a context of
// their own (segCtx, ended only when the grace period is over).
type server struct {
	st     *stack
	leaser *jetstream.Dispatcher
	eng    *engine.Engine
	log    *slog.Logger
	actor  string
	queue  string
	n      int

	segCtx     context.Context
	stopSegs   context.CancelFunc
	wg         sync.WaitGroup
	workerDone chan struct{}
	running    atomic.Bool

	mu       sync.Mutex
	inFlight map[string]string // task -> worker

	leases, leaseErrors prometheus.Counter
	segments            *prometheus.CounterVec
	segDuration         prometheus.Histogram
	segTotal, segCut    atomic.Uint64
}

func newServer(st *stack, leaser *jetstream.Dispatcher, eng *engine.Engine, logger *slog.Logger, actor, queue string, n int) *server {
	ctx, cancel := context.WithCancel(context.Background())
	return &server{
		st: st, leaser: leaser, eng: eng, log: logger, actor: actor, queue: queue, n: n,
		segCtx: ctx, stopSegs: cancel, workerDone: make(chan struct{}),
		inFlight: map[string]string{},
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
}

// register adds the process's collectors to reg.
func (sv *server) register(reg *prometheus.Registry) {
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
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		sv.leases, sv.leaseErrors, sv.segments, sv.segDuration,
		gauge("noeta_engine_workers", "Workers in the pool.", func() float64 { return float64(sv.n) }),
		gauge("noeta_engine_segments_in_flight", "Segments running now.", func() float64 {
			sv.mu.Lock()
			defer sv.mu.Unlock()
			return float64(len(sv.inFlight))
		}),
		gauge("noeta_engine_pool_running", "1 while the pool takes new tasks, 0 once it is stopping.", func() float64 { return boolf(sv.running.Load()) }),
		gauge("noeta_engine_nats_connected", "1 while connected to NATS.", func() float64 { return boolf(sv.st.nc.Status() == nats.CONNECTED) }),
		counter("noeta_engine_nats_reconnects_total", "Reconnections to NATS.", func() uint64 { return sv.st.nc.Stats().Reconnects }),
		counter("noeta_engine_dispatcher_wakes_applied_total", "Wake ingress messages this process's dispatcher applied (fired timers included).",
			func() uint64 { return sv.st.disp.Stats().WakesApplied }),
		counter("noeta_engine_damaged_logs_total", "Segments refused because the task's log is damaged (a gap, a corrupt record); each task so refused ends failed.", sv.eng.DamagedLogs),
		counter("noeta_engine_dispatcher_answers_refused_total", "Human answers on the wake ingress that matched no request the task waits on now: dropped, not kept.",
			func() uint64 { return sv.st.disp.Stats().RefusedWakes }),
		counter("noeta_engine_dispatcher_requeued_total", "Expired leases this process's dispatcher requeued or ended.",
			func() uint64 { return sv.st.disp.Stats().Requeued + sv.leaser.Stats().Requeued }),
	)
}

// healthz answers 200 while connected to NATS and the pool runs.
func (sv *server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s := sv.st.nc.Status(); s != nats.CONNECTED {
		http.Error(w, "nats: "+s.String(), http.StatusServiceUnavailable)
		return
	}
	if !sv.running.Load() {
		http.Error(w, "pool: stopping", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (sv *server) start() {
	sv.running.Store(true)
	for i := range sv.n {
		name := fmt.Sprintf("%s/w%d", sv.actor, i+1)
		sv.wg.Go(func() { sv.work(name) })
	}
	go func() {
		sv.wg.Wait()
		close(sv.workerDone)
	}()
}

// work leases and runs tasks until the pool stops. A segment runs with
// segCtx, which only the end of the grace period cancels: stopping the pool
// stops the lease requests, never a segment in hand.
func (sv *server) work(name string) {
	failures := 0
	for sv.running.Load() {
		lease, err := sv.leaser.Lease(sv.segCtx, eventlog.LeaseRequest{Worker: name, Queue: sv.queue, Wait: true})
		if err != nil {
			if errors.Is(err, eventlog.ErrClosed) || !sv.running.Load() || sv.segCtx.Err() != nil {
				return
			}
			if !errors.Is(err, eventlog.ErrNoReadyTask) {
				sv.leaseErrors.Inc()
				if failures++; failures&(failures-1) == 0 { // 1, 2, 4, 8 …
					sv.log.Warn("lease request failed; retrying", "worker", name, "failures", failures, "err", err)
				}
			}
			pause := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
			select {
			case <-sv.segCtx.Done():
				return
			case <-time.After(pause):
			}
			continue
		}
		failures = 0
		sv.leases.Inc()
		sv.mu.Lock()
		sv.inFlight[lease.Task] = name
		sv.mu.Unlock()
		began := time.Now()
		out, err := sv.eng.RunLease(sv.segCtx, lease)
		took := time.Since(began)
		sv.mu.Lock()
		delete(sv.inFlight, lease.Task)
		sv.mu.Unlock()
		outcome := segmentOutcome(out, err, sv.segCtx.Err() != nil)
		sv.segments.WithLabelValues(outcome).Inc()
		sv.segDuration.Observe(took.Seconds())
		sv.segTotal.Add(1)
		if outcome == "stopped" {
			sv.segCut.Add(1)
		}
		sv.log.Debug("segment", "task", lease.Task, "worker", name, "generation", lease.Generation, "outcome", outcome, "took", took, "err", err)
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

func (sv *server) segmentCount() uint64 { return sv.segTotal.Load() }

// drainReport is how a stop went.
type drainReport struct {
	finished  uint64   // segments that ended while stopping
	abandoned []string // tasks whose segments were cut, left to expire
}

// drain stops the pool: no new leases; the segments in hand run to their end
// within grace (or until hurry closes); then those still running are cut at
// their next write, and their leases are left to expire.
func (sv *server) drain(grace time.Duration, hurry <-chan struct{}) drainReport {
	sv.running.Store(false)
	before := sv.segTotal.Load()
	// Lease requests waiting for a task return as soon as Close begins; the
	// rest of it may wait on NATS.
	go func() { _ = sv.leaser.Close() }()
	sv.mu.Lock()
	n := len(sv.inFlight)
	sv.mu.Unlock()
	sv.log.Info("stopping: no new tasks; the segments in hand finish", "in_flight", n, "grace", grace)
	var rep drainReport
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-sv.workerDone:
		rep.finished = sv.segTotal.Load() - before
		return rep
	case <-timer.C:
		sv.log.Warn("grace period over: stopping the segments still running; their leases expire to another host", "tasks", sv.inFlightList())
	case <-hurry:
		sv.log.Warn("second signal: stopping the segments still running; their leases expire to another host", "tasks", sv.inFlightList())
	}
	rep.abandoned = sv.runningTasks()
	sv.stopSegs()
	select {
	case <-sv.workerDone:
	case <-time.After(stopWait):
		sv.log.Error("workers did not stop in time; exiting anyway", "tasks", sv.inFlightList())
	}
	rep.finished = sv.segTotal.Load() - before - sv.segCut.Load()
	return rep
}

func (sv *server) runningTasks() []string {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	tasks := make([]string, 0, len(sv.inFlight))
	for t := range sv.inFlight {
		tasks = append(tasks, t)
	}
	slices.Sort(tasks)
	return tasks
}

// inFlightList is runningTasks for a log attribute.
func (sv *server) inFlightList() string { return fmt.Sprint(sv.runningTasks()) }
