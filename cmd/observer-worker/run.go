package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/natsconn"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/configured"
	"github.com/noeta-go/noeta/observers/telemetry"
	"github.com/noeta-go/noeta/webui"
)

// Exit codes.
const (
	exitOK    = 0 // stopped on a signal, after finishing the deliveries in hand
	exitFail  = 1 // could not start, or a consumer failed
	exitUsage = 2 // bad flags or config
)

type usageError struct{ error }

// opts are the flags.
type opts struct {
	// lookupEnv reads the environment (webhook headers' env:NAME).
	lookupEnv   func(string) (string, bool)
	conn        natsconn.Options
	prefix      string
	replicas    int
	observers   string
	partitions  string
	groupPrefix string
	instance    string
	maxDeliver  int
	ackWait     time.Duration

	auditFile    string
	auditSync    time.Duration
	auditStdout  bool
	auditSubject string

	httpAddr string
	web      webui.ListenerFlags
	// gate guards /tasks/{id}/events (set by serve, from --config's http:).
	gate *webui.Gate

	otlpEndpoint string
	otlpProtocol string
	otlpInsecure bool

	config    string
	workspace string
	logLevel  string
	logFormat string

	cpuProfile string
	trace      string
}

// knownObservers are those noeta.yaml can configure and child, which hands
// finished subtasks to their parents (listed before hooks).
var knownObservers = slices.Insert(slices.Clone(configured.Names), slices.Index(configured.Names, configured.Hooks), "child")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, stdout, stderr, os.LookupEnv)
}

// connFromEnv fills the connection flags not given on the command line from
// their NOETA_* variables (a flag wins), as every engine verb does.
func connFromEnv(cmd *cobra.Command, lookupEnv func(string) (string, bool)) error {
	for flag, env := range natsconn.EnvVars {
		if cmd.Flags().Changed(flag) {
			continue
		}
		if v, ok := lookupEnv(env); ok && v != "" {
			if err := cmd.Flags().Set(flag, v); err != nil {
				return usageError{fmt.Errorf("%s: %w", env, err)}
			}
		}
	}
	return nil
}

// runEnv is run with the environment read through lookupEnv.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	// The logs and errors quote records, hooks' output and servers' errors:
	// nothing in them reaches the terminal raw. stdout is left exact: it
	// carries the audit trail, whose bytes are hash-chained.
	safeErr := termsafe.NewWriter(stderr)
	defer func() { _ = safeErr.Flush() }()
	stderr = safeErr
	o := opts{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "observer-worker --nats URL [--observers audit,metrics,...]",
		Short: "Run observers from JetStream durable consumers",
		Long: `observer-worker consumes the committed records of every task from the
JetStream task stream, through one durable consumer group per observer over
the partitions it is given, and feeds them to its observers: audit (JSON
Lines file, stdout or a NATS subject, hash-chained per task), metrics
(Prometheus /metrics), trace (OpenTelemetry spans over OTLP), fanout
(server-sent events on /tasks/{id}/events, to the principals of --config's
http: section only), child (hands finished subtasks
to their parents and wakes them) and hooks (the config's PostToolUse and
Notification commands).

Run as many as needed: workers of one group share its partitions (each
record is handled once, in each task's order), and a worker that dies hands
its records to the others after --ack-wait. SIGTERM or SIGINT stops it after
the deliveries in hand are handled and acknowledged.

--http (/healthz and /metrics without a login, the fanout's streams with
one) listens on loopback unless --http-tls-cert and --http-tls-key make it
HTTPS or --behind-tls-proxy says a TLS-terminating proxy is in front.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), o, stdout, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetArgs(args)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	o.conn.BindFlags(f, "NATS server URL(s), comma-separated (required)")
	f.StringVar(&o.prefix, "prefix", "noeta", "subject and stream prefix of the deployment")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the dead-letter stream (3 on a cluster)")
	f.StringVar(&o.observers, "observers", "audit", "observers to run: "+strings.Join(knownObservers, ","))
	f.StringVar(&o.partitions, "partitions", "all", `partitions to consume: "all", or ranges like 0-31 or 0-15,32-47`)
	f.StringVar(&o.groupPrefix, "group-prefix", "obs-", "consumer groups are <group-prefix><observer>")
	f.StringVar(&o.instance, "instance", "", "this worker's name (fanout's consumer group is its own); default host-pid")
	f.IntVar(&o.maxDeliver, "max-deliver", eventlog.DefaultMaxDeliver, "deliveries of a record before it is dead-lettered")
	f.DurationVar(&o.ackWait, "ack-wait", eventlog.DefaultAckWait, "how long a delivery may stay unanswered before it goes to another worker")
	f.StringVar(&o.auditFile, "audit-file", "", "audit: JSON Lines file (several workers may share one)")
	f.DurationVar(&o.auditSync, "audit-sync", time.Second, "audit: fsync interval of --audit-file (0: after every record)")
	f.BoolVar(&o.auditStdout, "audit-stdout", false, "audit: write records to stdout")
	f.StringVar(&o.auditSubject, "audit-subject", "", "audit: publish each record on <subject>.<task>")
	f.StringVar(&o.httpAddr, "http", "127.0.0.1:9464", "listen address of /metrics, /tasks/{id}/events and /healthz (empty: none)")
	o.web.Bind(f, "--http")
	f.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "trace: OTLP endpoint (host:port or URL; default: --config's observers.trace, else OTEL_EXPORTER_OTLP_*)")
	f.StringVar(&o.otlpProtocol, "otlp-protocol", "grpc", "trace: grpc or http")
	f.BoolVar(&o.otlpInsecure, "otlp-insecure", false, "trace: no TLS to the OTLP endpoint")
	f.StringVar(&o.config, "config", "", "hooks: the noeta.yaml whose hooks: section to run")
	f.StringVar(&o.workspace, "workspace", ".", "hooks: the directory hooks run in")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	f.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	f.StringVar(&o.trace, "trace", "", "write an execution trace of the whole run to this file (for go tool trace)")
	_ = f.MarkHidden("cpu-profile") // measuring aids, not operating ones
	_ = f.MarkHidden("trace")

	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error { return connFromEnv(cmd, lookupEnv) }
	err := cmd.ExecuteContext(ctx)
	var ue usageError
	// Whatever went wrong, a password never reaches the terminal.
	secrets := o.conn.Secrets()
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "observer-worker: %s\nRun 'observer-worker --help' for usage.\n", natsconn.RedactText(ue.Error(), secrets...))
		return exitUsage
	}
	fmt.Fprintln(stderr, "observer-worker:", natsconn.RedactText(err.Error(), secrets...))
	return exitFail
}

// parsePartitions reads "all" or comma-separated ranges.
func parsePartitions(s string) ([]int, error) {
	if s == "all" || s == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("--partitions: %q is not a number or a range", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("--partitions: %q is not a range", part)
			}
		}
		if a < 0 || b >= noeta.Partitions || a > b {
			return nil, fmt.Errorf("--partitions: %q is outside 0-%d or backwards", part, noeta.Partitions-1)
		}
		for p := a; p <= b; p++ {
			seen[p] = true
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

func (o opts) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format is %q, want text or json", o.logFormat)
}

// worker is everything one observer-worker runs.
type worker struct {
	log      *slog.Logger
	nc       *nats.Conn
	reader   *jetstream.Reader
	feed     *jetstream.Feed
	durables []*observers.Durable
	closers  []func(context.Context) error
	mux      *http.ServeMux
	// reg is what the metrics observer's /metrics serves; the hooks'
	// counters join it.
	reg *prometheus.Registry
}

func serve(ctx context.Context, o opts, stdout, stderr io.Writer) error {
	log, err := o.logger(stderr)
	if err != nil {
		return usageError{err}
	}
	if o.conn.URL == "" {
		return usageError{errors.New("--nats is required (or NOETA_NATS): the URL of the NATS server holding the task stream")}
	}
	if err := o.conn.Check(); err != nil {
		return usageError{err}
	}
	parts, err := parsePartitions(o.partitions)
	if err != nil {
		return usageError{err}
	}
	if err := noeta.ValidateToken("--prefix", o.prefix, 32); err != nil {
		return usageError{err}
	}
	cert, err := o.checkHTTP()
	if err != nil {
		return err
	}
	var names []string
	for n := range strings.SplitSeq(o.observers, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(knownObservers, n) {
			return usageError{fmt.Errorf("--observers: unknown observer %q (known: %s)", n, strings.Join(knownObservers, ", "))}
		}
		if slices.Contains(names, n) {
			return usageError{fmt.Errorf("--observers: %q is named twice", n)}
		}
		names = append(names, n)
	}
	if slices.Contains(names, "fanout") {
		// The live stream sends whole records: only the principals of the
		// config's http: section may read it, as the API's.
		if o.config == "" {
			return usageError{errors.New("fanout needs --config: /tasks/{id}/events is served only to the principals of its http: section (http.tokens or http.trusted_proxy)")}
		}
		gov, err := o.loadConfig(ctx)
		if err != nil {
			return err
		}
		if gov.HTTP.Empty() {
			return usageError{fmt.Errorf("fanout: --config %s has no http.tokens or http.trusted_proxy, so nobody could read /tasks/{id}/events (engine token prints a token)", o.config)}
		}
		o.gate = webui.NewGate(gov.HTTP, o.web.Limits())
	}
	if o.instance == "" {
		host, _ := os.Hostname()
		o.instance = host + "-" + strconv.Itoa(os.Getpid())
	}
	fc := eventlog.FeedConfig{Partitions: parts, MaxDeliver: o.maxDeliver, AckWait: o.ackWait}
	fc.Group = "x"
	if err := fc.Validate(); err != nil {
		return usageError{err}
	}

	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return usageError{fmt.Errorf("--cpu-profile: %w", err)}
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			_ = pf.Close()
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = pf.Close()
		}()
	}
	if o.trace != "" {
		tf, err := os.Create(o.trace)
		if err != nil {
			return usageError{fmt.Errorf("--trace: %w", err)}
		}
		if err := trace.Start(tf); err != nil {
			_ = tf.Close()
			return fmt.Errorf("--trace: %w", err)
		}
		defer func() {
			trace.Stop()
			_ = tf.Close()
		}()
	}
	w := &worker{log: log, mux: http.NewServeMux(), reg: prometheus.NewRegistry()}
	w.reg.MustRegister(telemetry.BuildInfo())
	defer w.close()
	w.nc, err = o.conn.Connect("noeta-observer-worker "+o.instance, log)
	if err != nil {
		return err
	}
	// Read-only: an observer's NATS user may look the task stream up but
	// not create or change it (deploy/nats); an engine creates it.
	if w.reader, err = jetstream.OpenReader(ctx, w.nc, jetstream.Config{Prefix: o.prefix, Replicas: o.replicas}); err != nil {
		return fmt.Errorf("open the task stream: %w", err)
	}
	if w.feed, err = jetstream.OpenFeed(ctx, w.nc, jetstream.FeedOptions{Prefix: o.prefix, Replicas: o.replicas, Logger: log}); err != nil {
		return fmt.Errorf("open the feed: %w", err)
	}
	var metrics *telemetry.Metrics
	for _, name := range names {
		obs, err := w.observer(ctx, name, o, stdout)
		if err != nil {
			return err
		}
		if m, ok := obs.(*telemetry.Metrics); ok {
			metrics = m
		}
		dc := observers.DurableConfig{GroupPrefix: o.groupPrefix, Feed: fc, Logger: log}
		if name == "fanout" {
			// A live view must see every record: its group is this
			// worker's own.
			dc.GroupPrefix = o.groupPrefix + o.instance + "-"
		}
		d, err := observers.NewDurable(w.feed, dc, obs)
		if err != nil {
			return usageError{err}
		}
		w.durables = append(w.durables, d)
	}
	if metrics != nil {
		metrics.SetStats(w.stats)
	}
	w.mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if w.nc.Status() != nats.CONNECTED {
			http.Error(rw, "nats: "+w.nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	if o.httpAddr != "" {
		ln, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		srv := webui.NewHTTPServer(w.mux, webui.Limits{})
		if cert != nil {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
			go func() { _ = srv.ServeTLS(ln, "", "") }()
		} else {
			go func() { _ = srv.Serve(ln) }()
		}
		w.closers = append(w.closers, func(ctx context.Context) error {
			// Server-sent event streams never end by themselves.
			_ = srv.Shutdown(ctx)
			return srv.Close()
		})
		log.Info("http listening", "addr", ln.Addr().String())
	}
	log.Info("observer worker started", "instance", o.instance, "observers", strings.Join(names, ","), "partitions", o.partitions, "prefix", o.prefix)

	errs := make(chan error, len(w.durables))
	for _, d := range w.durables {
		go func() { errs <- d.Run(ctx) }()
	}
	var first error
	for range w.durables {
		if err := <-errs; err != nil {
			if ctx.Err() != nil {
				// Asked to stop: a request cut short by the shutdown (the
				// server may be going away too) is not a failure.
				log.Warn("while stopping", "err", err)
				continue
			}
			if first == nil {
				first = err
			}
		}
	}
	log.Info("observer worker stopped", "stats", fmt.Sprint(w.stats()), "feed", fmt.Sprintf("%+v", w.feed.Stats()))
	return first
}

// observer builds one observer and registers what it serves and how it
// closes. What the flags say wins over --config; the rest is built from
// --config as a host builds it (package observers/configured).
func (w *worker) observer(ctx context.Context, name string, o opts, stdout io.Writer) (observers.Observer, error) {
	co := configured.Options{
		Logger: w.log, Stdout: stdout, Publisher: w.nc, AuditSyncEvery: o.auditSync, Registry: w.reg,
		// Webhooks read their env:NAME headers here, once.
		Workspace: o.workspace, LookupEnv: o.lookupEnv,
	}
	if w.reader != nil {
		// A task whose TaskCreated an observer did not see (or forgot) is
		// named by its log.
		co.Log = w.reader
	}
	var gov *config.File
	switch name {
	case "audit":
		var sinks []observers.AuditSink
		if o.auditFile != "" {
			s, err := observers.NewAuditFileSink(observers.AuditFileConfig{Path: o.auditFile, SyncEvery: o.auditSync, Logger: w.log})
			if err != nil {
				return nil, err
			}
			sinks = append(sinks, s)
		}
		if o.auditStdout {
			sinks = append(sinks, observers.NewAuditWriterSink(stdout))
		}
		if o.auditSubject != "" {
			s, err := observers.NewAuditPublishSink(w.nc, o.auditSubject, true)
			if err != nil {
				return nil, usageError{fmt.Errorf("--audit-subject: %w", err)}
			}
			sinks = append(sinks, s)
		}
		if len(sinks) == 0 && o.config != "" {
			// No sink flag: the config's observers.audit, as serve runs it.
			f, err := o.loadConfig(ctx)
			if err != nil {
				return nil, err
			}
			if configured.In(f, configured.Audit) {
				gov = f
				break
			}
		}
		if len(sinks) != 1 {
			for _, s := range sinks {
				_ = s.Close()
			}
			return nil, usageError{errors.New("audit needs exactly one sink: --audit-file, --audit-stdout or --audit-subject, or an observers.audit section in --config")}
		}
		a, err := observers.NewAudit(observers.AuditConfig{Sink: sinks[0], Logger: w.log, Log: w.reader})
		if err != nil {
			_ = sinks[0].Close()
			return nil, err
		}
		w.closers = append(w.closers, func(context.Context) error { return a.Close() })
		return a, nil
	case "trace":
		co.OTLP = &telemetry.OTLPConfig{Protocol: o.otlpProtocol, Endpoint: o.otlpEndpoint, Insecure: o.otlpInsecure}
		if o.otlpEndpoint == "" && o.config != "" {
			// No endpoint flag: the config's observers.trace, as serve
			// runs it.
			f, err := o.loadConfig(ctx)
			if err != nil {
				return nil, err
			}
			if configured.In(f, configured.Trace) {
				gov, co.OTLP = f, nil
			}
		}
	case "child":
		waker, err := jetstream.NewWakePublisher(w.nc, o.prefix)
		if err != nil {
			return nil, err
		}
		return observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: w.reader, Index: w.reader, Waker: waker, Logger: w.log})
	case "metrics", "fanout":
		// Nothing of --config: the flags and the worker's listener say it all.
	case "hooks":
		if o.config == "" {
			return nil, usageError{errors.New("hooks needs --config: the noeta.yaml whose hooks: section to run")}
		}
		fallthrough
	default:
		if o.config != "" {
			f, err := o.loadConfig(ctx)
			if err != nil {
				return nil, err
			}
			gov = f
		}
	}
	obs, err := configured.New(ctx, gov, name, co)
	if ce, ok := errors.AsType[*configured.Error](err); ok {
		switch name {
		case "audit":
			return nil, usageError{fmt.Errorf("--config: %w", gov.ErrorAt(ce.Field, ce.Err.Error()))}
		case "trace":
			return nil, usageError{fmt.Errorf("trace: %w", ce.Err)}
		}
		return nil, usageError{ce.Err}
	}
	if errors.Is(err, configured.ErrUnknown) {
		return nil, usageError{fmt.Errorf("unknown observer %q", name)}
	}
	if err != nil {
		return nil, err
	}
	switch obs := obs.(type) {
	case *observers.Audit:
		w.closers = append(w.closers, func(context.Context) error { return obs.Close() })
	case *telemetry.Metrics:
		w.mux.Handle("GET /metrics", obs.Handler())
		w.closers = append(w.closers, obs.Shutdown)
	case *telemetry.Trace:
		w.closers = append(w.closers, obs.Shutdown)
	case *observers.Fanout:
		w.mux.Handle("/tasks/{id}/events", o.gate.Streams(obs.SSEHandler(w.reader)))
		w.closers = append(w.closers, func(context.Context) error { return obs.Close() })
	case *observers.Hooks:
		// Served when the metrics observer runs too.
		w.reg.MustRegister(telemetry.HookRuns("noeta_observer_hook_runs_total", obs.Stats)...)
		w.closers = append(w.closers, func(ctx context.Context) error {
			err := obs.Close(ctx)
			w.log.Info("hooks stopped", "stats", fmt.Sprintf("%+v", obs.Stats()))
			return err
		})
	default:
		if c, ok := obs.(interface{ Close(context.Context) error }); ok {
			w.closers = append(w.closers, c.Close)
		}
	}
	return obs, nil
}

// checkHTTP refuses bad --http settings (a plain listener beyond
// loopback among them) and loads the TLS certificate, if any.
func (o *opts) checkHTTP() (*tls.Certificate, error) {
	if err := o.web.Check("--http", o.httpAddr); err != nil {
		return nil, usageError{err}
	}
	return o.web.Cert, nil
}

// loadConfig reads and decodes --config; errors, which name the file, are
// usage errors.
func (o opts) loadConfig(ctx context.Context) (*config.File, error) {
	f, err := config.Load(ctx, o.config)
	if err != nil {
		return nil, usageError{fmt.Errorf("--config: %w", err)}
	}
	return f, nil
}

// stats merges every runner's counters.
func (w *worker) stats() map[string]observers.ObserverStats {
	out := map[string]observers.ObserverStats{}
	for _, d := range w.durables {
		for k, v := range d.Stats() {
			out[k] = v
		}
	}
	return out
}

// close shuts the observers down (flushing sinks and exporters), then the
// connection.
func (w *worker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := len(w.closers) - 1; i >= 0; i-- {
		if err := w.closers[i](ctx); err != nil {
			w.log.Warn("shutdown", "err", err)
		}
	}
	if w.reader != nil {
		_ = w.reader.Close()
	}
	if w.nc != nil {
		_ = w.nc.Drain()
	}
}
