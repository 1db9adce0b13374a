package telemetry

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

// otelScopeName names the meter and the tracer of this package. It is the
// path of package observers, where both lived before they moved here: the
// scope is on every exported span, and a collector or backend filtering on it
// keeps working (docs/adr/0025).
const otelScopeName = "github.com/noeta-go/noeta/observers"

// Defaults of [MetricsConfig].
const (
	// DefaultMaxLabelValues bounds the distinct values of each label taken
	// from records.
	DefaultMaxLabelValues = 256
	// DefaultMetricsMaxTasks bounds the tasks whose approvals Metrics
	// remembers.
	DefaultMetricsMaxTasks = 4096
)

// OtherLabelValue replaces a label value once its label has
// MaxLabelValues distinct values.
const OtherLabelValue = "_other"

// UnknownApprovalAction is the action label of an ApprovalResolved whose
// request this process did not see (or forgot).
const UnknownApprovalAction = "unknown"

// UnknownAgent is the agent label of a decision whose task's TaskCreated
// Metrics did not see or has forgotten, and could not read from the log
// (MetricsConfig.Log).
const UnknownAgent = "unknown"

// metricsMaxPerTask bounds each task's remembered approval handles and
// approved call ids.
const metricsMaxPerTask = 64

// errMetricsClosed is returned by Observe after Shutdown.
var errMetricsClosed = errors.New("observers: metrics is shut down")

// MetricsConfig configures [NewMetrics]. Every field is optional.
type MetricsConfig struct {
	// Stats returns every observer's counters by name (InProcess.Stats or
	// Durable.Stats); it is read at each collection. It can also be set
	// later with [Metrics.SetStats], since the runner is built with the
	// observers. Nil: no noeta_observer_* series.
	Stats func() map[string]observers.ObserverStats
	// Registry is the registry /metrics serves; a new private one if nil
	// (never the global default registry). Pass one to add collectors of
	// your own (Go runtime, process).
	Registry *prometheus.Registry
	// Readers are further readers of the same instruments, e.g. an OTLP
	// periodic reader, or a manual reader in tests.
	Readers []sdkmetric.Reader
	// MaxLabelValues bounds the distinct values of each label fed from
	// records (type, origin, guard, action, tool, kind); a value beyond the
	// bound is reported as OtherLabelValue. DefaultMaxLabelValues if 0.
	MaxLabelValues int
	// MaxTasks bounds the tasks whose pending approvals are remembered
	// (DefaultMetricsMaxTasks if 0); the least recently seen is forgotten.
	MaxTasks int
	// Now is the clock lag is measured with (time.Now).
	Now    func() time.Time
	Logger *slog.Logger // slog.Default() if nil
	// Log, when set, is where the agent of a task is read from when its
	// TaskCreated was not observed: a host's in-process observers see only
	// the records committed in their process, and a task submitted by
	// another (engine submit, then serve) or taken over from another
	// reaches them without it. Without Log such a task's decisions count
	// under agent UnknownAgent.
	Log AgentLog
}

// AgentLog reads a task's log (eventlog.Reader's Read).
type AgentLog interface {
	Read(ctx context.Context, task string, afterSeq uint64) ([]eventlog.Envelope, error)
}

// agentReadTimeout bounds the read of a task's log for its agent.
const agentReadTimeout = 5 * time.Second

// Metrics counts what tasks record, with the OpenTelemetry metrics SDK, and
// serves the counts on /metrics in the Prometheus text format (through the
// OpenTelemetry Prometheus exporter, from a registry of its own). The
// instruments, as Prometheus names them (the names and labels are the
// contract):
//
//   - noeta_events_total{type, origin}: every record, log and inbox.
//   - noeta_guard_decisions_total{guard, verdict}: verdict "deny" from
//     ToolCallDenied, SubtaskDenied and FinishDenied, "require_approval" from
//     ApprovalRequested, each with the guard it names; and verdict "allow"
//     with guard "" for each ToolCallStarted whose call a human did not
//     approve (an allowed call has no record of its own: its start is the
//     allow; a call started after an ApprovalResolved approve for it in the
//     same task was counted as require_approval already).
//   - noeta_guard_shadow_verdicts_total{guard, rule, verdict}: GuardShadowed,
//     what a shadow rule would have decided (it decided nothing): the guard
//     it belongs to, its place in the config (rules[2],
//     guards[0].rules[1]) and its would-be verdict; a shadow rule that
//     failed counts as the deny it would have failed closed to.
//   - noeta_approvals_total{action, decision}: ApprovalResolved; the action
//     (tool_call, spawn_subtask, finish) is the request's, remembered per
//     task by handle, UnknownApprovalAction when this process did not see
//     the request.
//   - noeta_tool_calls_total{tool, outcome}: ToolCallFinished; outcome ok or
//     failed.
//   - noeta_tool_call_duration_seconds{tool}: histogram of ToolCallFinished
//     duration_ms.
//   - noeta_sandbox_egress_connections_total{tool, destination, allowed}:
//     the connections a call's sandboxed processes asked the egress proxy
//     for (ToolCallFinished egress), destination host:port, allowed true or
//     false; noeta_sandbox_egress_bytes_total{tool, destination, direction}:
//     what crossed them, direction out (from the sandbox) or in.
//   - noeta_tasks_total{status}: terminal records; status completed, failed
//     or cancelled.
//   - noeta_leases_total: LeaseGranted (one per lease generation).
//   - noeta_wakes_total{kind}: TaskWoken, by wake kind.
//   - noeta_gen_ai_calls_total{gen_ai_operation_name, gen_ai_agent_name,
//     gen_ai_provider_name, gen_ai_request_model}: turns a model decided
//     (PolicyDecided with a provider or a model; a scripted turn is no model
//     call); noeta_gen_ai_cost_usd_total{same}: their cost in US dollars;
//     and the OpenTelemetry GenAI conventions' histograms under their own
//     names: gen_ai_client_token_usage{same, gen_ai_token_type} (input,
//     output) and gen_ai_client_operation_duration_seconds{same}.
//   - noeta_observer_lag_seconds: histogram of now − commit time, per record
//     this observer handles.
//   - noeta_observer_drops_total{observer}, noeta_observer_failures_total{observer}
//     (failed + panicked) and the gauge noeta_observer_queued{observer}: read
//     from the Stats function at each collection.
//
// Task ids, call ids and handles are never labels. Labels fed from records
// are bounded by MaxLabelValues each.
//
// Metrics are at least once, unlike audit and traces: a record delivered
// again (a durable feed redelivers after a crash or a failed ack) is counted
// again. What Metrics remembers per task (pending approval handles and the
// calls a human approved, for the allow count and the approval action) is
// bounded: when it was forgotten, an approved call's start is counted as an
// allow and its resolution's action as UnknownApprovalAction.
//
// It is safe for concurrent use.
type Metrics struct {
	now      func() time.Time
	log      *slog.Logger
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	stats    atomic.Pointer[func() map[string]observers.ObserverStats]
	callback metric.Registration
	closed   atomic.Bool

	events, guardDecisions, approvals, toolCalls, tasks, leases, wakes metric.Int64Counter
	shadowVerdicts                                                     metric.Int64Counter
	egressConns, egressBytes                                           metric.Int64Counter
	lag, toolDuration                                                  metric.Float64Histogram
	// What the models deciding turns took: calls, tokens, cost and
	// latency, by agent, provider and model.
	modelCalls                 metric.Int64Counter
	modelCost                  metric.Float64Counter
	modelTokens, modelDuration metric.Float64Histogram

	agentLog AgentLog

	mu     sync.Mutex
	labels metricsLabelBounds
	memory *otelTaskLRU[*metricsTask]
}

// metricsTask is what Metrics remembers of one task.
type metricsTask struct {
	agent     string                     // from its TaskCreated (observed, or read from the log)
	agentRead bool                       // the log was read for the agent (once)
	actions   map[string]metricsApproval // handle -> request
	approved  map[string]struct{}        // call ids a human approved, not started yet
}

type metricsApproval struct {
	action noeta.ApprovalAction
	callID string
}

// metricsLagBuckets are the boundaries, in seconds, of the lag histogram: from a
// millisecond (in process) to an hour (a durable consumer catching up).
var metricsLagBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// genAITokenBuckets and genAIDurationBuckets are the bucket boundaries the
// OpenTelemetry GenAI semantic conventions advise for
// gen_ai.client.token.usage and gen_ai.client.operation.duration.
var (
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

// metricsToolDurationBuckets are the boundaries, in seconds, of the tool duration
// histogram.
var metricsToolDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics builds the instruments, their meter provider and the Prometheus
// exporter; Shutdown releases them.
func NewMetrics(cfg MetricsConfig) (*Metrics, error) {
	if cfg.MaxLabelValues < 0 || cfg.MaxTasks < 0 {
		return nil, fmt.Errorf("%w: MaxLabelValues %d and MaxTasks %d must not be negative", observers.ErrInvalidConfig, cfg.MaxLabelValues, cfg.MaxTasks)
	}
	if cfg.MaxLabelValues == 0 {
		cfg.MaxLabelValues = DefaultMaxLabelValues
	}
	if cfg.MaxTasks == 0 {
		cfg.MaxTasks = DefaultMetricsMaxTasks
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	exp, err := otelprom.New(
		otelprom.WithRegisterer(cfg.Registry),
		// Explicit, so the names above stay what they are whatever the
		// exporter's default becomes.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("observers: prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	for _, r := range cfg.Readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	m := &Metrics{
		now:      cfg.Now,
		log:      cfg.Logger,
		agentLog: cfg.Log,
		provider: sdkmetric.NewMeterProvider(opts...),
		labels:   metricsLabelBounds{max: cfg.MaxLabelValues, seen: map[string]map[string]struct{}{}},
		memory:   newOtelTaskLRU[*metricsTask](cfg.MaxTasks, nil),
	}
	if cfg.Stats != nil {
		m.SetStats(cfg.Stats)
	}
	if err := m.instruments(); err != nil {
		_ = m.provider.Shutdown(context.Background())
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	m.handler = mux
	return m, nil
}

func (m *Metrics) instruments() error {
	meter := m.provider.Meter(otelScopeName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.events = counter("noeta.events", "{event}", "Records committed, log and inbox, by type and origin.")
	m.guardDecisions = counter("noeta.guard.decisions", "{decision}", "Guard verdicts: deny and require_approval by guard; allow (guard \"\") per tool call started without a human approval.")
	m.shadowVerdicts = counter("noeta.guard.shadow_verdicts", "{verdict}", "What shadow rules would have decided (GuardShadowed records), by guard, rule and verdict; they decide nothing.")
	m.approvals = counter("noeta.approvals", "{approval}", "Approvals resolved, by action and decision.")
	m.toolCalls = counter("noeta.tool.calls", "{call}", "Tool calls finished, by tool and outcome (ok, failed).")
	m.tasks = counter("noeta.tasks", "{task}", "Tasks ended, by status (completed, failed, cancelled).")
	m.egressConns = counter("noeta.sandbox.egress.connections", "{connection}", "Connections a call's sandboxed processes asked the egress proxy for, by tool, destination and whether they were allowed.")
	m.egressBytes = counter("noeta.sandbox.egress.bytes", "By", "Bytes through the egress proxy, by tool, destination and direction (out of the sandbox, in).")
	m.leases = counter("noeta.leases", "{lease}", "Lease generations granted (LeaseGranted records).")
	m.wakes = counter("noeta.wakes", "{wake}", "Wakes consumed (TaskWoken records), by kind.")
	m.modelCalls = counter("noeta.gen_ai.calls", "{call}", "Turns a model decided (scripted turns are not model calls), by agent, provider and model.")
	var err error
	// The currency is the unit; in braces, so the Prometheus name carries
	// it in lower case, as the exporter appends no annotation.
	m.modelCost, err = meter.Float64Counter("noeta.gen_ai.cost.usd", metric.WithUnit("{USD}"),
		metric.WithDescription("What the models deciding turns cost, in US dollars (their usage at the configured price), by agent, provider and model."))
	errs = append(errs, err)
	// The two histograms of the OpenTelemetry GenAI semantic conventions,
	// under their names, units, attributes and advised buckets.
	m.modelTokens, err = meter.Float64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens a model call that decided a turn used, by type (input, output), agent, provider and model."),
		metric.WithExplicitBucketBoundaries(genAITokenBuckets...))
	errs = append(errs, err)
	m.modelDuration, err = meter.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a model call that decided a turn took, retries included, by agent, provider and model."),
		metric.WithExplicitBucketBoundaries(genAIDurationBuckets...))
	errs = append(errs, err)
	m.lag, err = meter.Float64Histogram("noeta.observer.lag", metric.WithUnit("s"),
		metric.WithDescription("Time from a record's commit to its handling by the metrics observer."),
		metric.WithExplicitBucketBoundaries(metricsLagBuckets...))
	errs = append(errs, err)
	m.toolDuration, err = meter.Float64Histogram("noeta.tool.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Tool call duration as the tool reported it, by tool."),
		metric.WithExplicitBucketBoundaries(metricsToolDurationBuckets...))
	errs = append(errs, err)
	drops, err := meter.Int64ObservableCounter("noeta.observer.drops", metric.WithUnit("{record}"),
		metric.WithDescription("Records an in-process observer dropped because its queue was full."))
	errs = append(errs, err)
	failures, err := meter.Int64ObservableCounter("noeta.observer.failures", metric.WithUnit("{record}"),
		metric.WithDescription("Records an observer failed on (an error or a panic)."))
	errs = append(errs, err)
	queued, err := meter.Int64ObservableGauge("noeta.observer.queued", metric.WithUnit("{record}"),
		metric.WithDescription("Records waiting in an in-process observer's queue."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("observers: metrics instruments: %w", err)
	}
	m.callback, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := m.stats.Load()
		if f == nil || *f == nil {
			return nil
		}
		for name, s := range (*f)() {
			a := metric.WithAttributeSet(attribute.NewSet(attribute.String("observer", name)))
			o.ObserveInt64(drops, metricsClampInt64(s.Dropped), a)
			o.ObserveInt64(failures, metricsClampInt64(s.Failed+s.Panicked), a)
			o.ObserveInt64(queued, int64(s.Queued), a)
		}
		return nil
	}, drops, failures, queued)
	if err != nil {
		return fmt.Errorf("observers: metrics callback: %w", err)
	}
	return nil
}

func metricsClampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// SetStats sets (or replaces) the function the noeta_observer_* series are
// read from.
func (m *Metrics) SetStats(f func() map[string]observers.ObserverStats) { m.stats.Store(&f) }

// Name implements Observer: the consumer group of an observer-worker's
// Metrics is obs-metrics.
func (m *Metrics) Name() string { return "metrics" }

// Handler serves GET /metrics in the Prometheus text format (404 on any other
// path), for an http.Server or a mux of the caller's.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Shutdown stops the meter provider; the instruments record nothing after
// it, and Observe fails. It is idempotent.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m.closed.Swap(true) {
		return nil
	}
	var errs []error
	if m.callback != nil {
		errs = append(errs, m.callback.Unregister())
	}
	errs = append(errs, m.provider.Shutdown(ctx))
	return errors.Join(errs...)
}

// Observe implements Observer: it counts env.
func (m *Metrics) Observe(ctx context.Context, env eventlog.Envelope) error {
	if m.closed.Load() {
		return errMetricsClosed
	}
	ctx = context.WithoutCancel(ctx) // the record is durable: count it whatever the caller's deadline
	if !env.Time.IsZero() {
		m.lag.Record(ctx, max(m.now().Sub(env.Time).Seconds(), 0))
	}
	if env.Type == noeta.TypePolicyDecided && env.Seq > 0 {
		m.learnAgent(ctx, env.Task)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events.Add(ctx, 1, m.attrs("type", env.Type, "origin", string(env.Origin)))
	if env.Seq == 0 {
		return nil // an inbox record: counted, and its parent's log records what it delivered
	}
	p, ok, err := env.Decode()
	if err != nil {
		// Delivering it again would not make it decodable, and would count
		// it twice.
		m.log.Warn("metrics: undecodable record, counted by type only", "task", env.Task, "seq", env.Seq, "type", env.Type, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	switch p := p.(type) {
	case *noeta.TaskCreated:
		m.task(env.Task).agent = p.Agent
	case *noeta.PolicyDecided:
		m.decided(ctx, env, p)
	case *noeta.LeaseGranted:
		m.leases.Add(ctx, 1)
	case *noeta.TaskWoken:
		m.wakes.Add(ctx, 1, m.attrs("kind", string(p.WakeEvent.Kind)))
	case *noeta.ToolCallDenied:
		m.verdict(ctx, p.Guard, "deny")
	case *noeta.SubtaskDenied:
		m.verdict(ctx, p.Guard, "deny")
	case *noeta.FinishDenied:
		m.verdict(ctx, p.Guard, "deny")
	case *noeta.GuardShadowed:
		m.shadowVerdicts.Add(ctx, 1, m.attrs("guard", p.Guard, "rule", p.Rule, "verdict", p.Verdict.String()))
	case *noeta.ApprovalRequested:
		m.verdict(ctx, p.Guard, "require_approval")
		mt := m.task(env.Task)
		if len(mt.actions) < metricsMaxPerTask {
			mt.actions[p.Handle] = metricsApproval{action: p.Action, callID: p.CallID}
		}
	case *noeta.ApprovalResolved:
		action := UnknownApprovalAction
		if mt, ok := m.memory.get(env.Task); ok {
			if req, ok := mt.actions[p.Handle]; ok {
				delete(mt.actions, p.Handle)
				action = string(req.action)
				if p.Decision == noeta.ApprovalApprove && req.action == noeta.ApprovalToolCall && req.callID != "" &&
					len(mt.approved) < metricsMaxPerTask {
					mt.approved[req.callID] = struct{}{}
				}
			}
		}
		m.approvals.Add(ctx, 1, m.attrs("action", action, "decision", string(p.Decision)))
	case *noeta.ToolCallStarted:
		if mt, ok := m.memory.get(env.Task); ok {
			if _, approved := mt.approved[p.CallID]; approved {
				delete(mt.approved, p.CallID)
				return nil
			}
		}
		m.verdict(ctx, "", "allow")
	case *noeta.ToolCallFinished:
		outcome := "ok"
		if !p.OK {
			outcome = "failed"
		}
		m.toolCalls.Add(ctx, 1, m.attrs("tool", p.Tool, "outcome", outcome))
		m.toolDuration.Record(ctx, float64(p.DurationMS)/1000, m.attrs("tool", p.Tool))
		for _, e := range p.Egress {
			dest := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
			m.egressConns.Add(ctx, int64(e.Connections), m.attrs("tool", p.Tool, "destination", dest, "allowed", strconv.FormatBool(e.Allowed)))
			m.egressBytes.Add(ctx, e.BytesOut, m.attrs("tool", p.Tool, "destination", dest, "direction", "out"))
			m.egressBytes.Add(ctx, e.BytesIn, m.attrs("tool", p.Tool, "destination", dest, "direction", "in"))
		}
	case *noeta.TaskCompleted:
		m.ended(ctx, env.Task, noeta.SubtaskStatusCompleted)
	case *noeta.TaskFailed:
		m.ended(ctx, env.Task, noeta.SubtaskStatusFailed)
	case *noeta.TaskCancelled:
		m.ended(ctx, env.Task, noeta.SubtaskStatusCancelled)
	}
	return nil
}

// decided counts a model's decision of a turn: the call, its tokens, its
// cost and its latency, under the GenAI conventions' attribute names (the
// agent as gen_ai.agent.name; the model as gen_ai.request.model). A
// scripted turn (no provider, no model) called no model and counts
// nowhere here: noeta_events_total{type="PolicyDecided"} counts every
// turn. The agent is what the task's TaskCreated said (observed, or read
// from the log), or UnknownAgent when neither could be.
func (m *Metrics) decided(ctx context.Context, env eventlog.Envelope, p *noeta.PolicyDecided) {
	if p.Provider == "" && p.Model == "" {
		return
	}
	agent := UnknownAgent
	if mt, ok := m.memory.get(env.Task); ok && mt.agent != "" {
		agent = mt.agent
	}
	who := []string{"gen_ai.operation.name", "chat", "gen_ai.agent.name", agent, "gen_ai.provider.name", p.Provider, "gen_ai.request.model", p.Model}
	m.modelCalls.Add(ctx, 1, m.attrs(who...))
	if p.InputTokens > 0 {
		m.modelTokens.Record(ctx, float64(p.InputTokens), m.attrs(append(who, "gen_ai.token.type", "input")...))
	}
	if p.OutputTokens > 0 {
		m.modelTokens.Record(ctx, float64(p.OutputTokens), m.attrs(append(who, "gen_ai.token.type", "output")...))
	}
	if p.CostUSD > 0 {
		m.modelCost.Add(ctx, p.CostUSD, m.attrs(who...))
	}
	if p.LatencyMS > 0 {
		m.modelDuration.Record(ctx, float64(p.LatencyMS)/1000, m.attrs(who...))
	}
}

func (m *Metrics) verdict(ctx context.Context, guard, verdict string) {
	m.guardDecisions.Add(ctx, 1, m.attrs("guard", guard, "verdict", verdict))
}

func (m *Metrics) ended(ctx context.Context, task string, status noeta.SubtaskStatus) {
	m.memory.remove(task)
	m.tasks.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("status", string(status)))))
}

// task returns what is remembered of task, creating it.
// learnAgent reads the agent of task from its log's TaskCreated when the
// record was not observed, once per task remembered. The read is made
// without m.mu held: it may wait on the store.
func (m *Metrics) learnAgent(ctx context.Context, task string) {
	if m.agentLog == nil {
		return
	}
	m.mu.Lock()
	mt := m.task(task)
	known := mt.agent != "" || mt.agentRead
	mt.agentRead = true
	m.mu.Unlock()
	if known {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, agentReadTimeout)
	defer cancel()
	envs, err := m.agentLog.Read(rctx, task, 0)
	if err != nil || len(envs) == 0 || envs[0].Type != noeta.TypeTaskCreated {
		m.log.Debug("metrics: the agent of a task could not be read from its log", "task", task, "err", err)
		return
	}
	p, ok, err := envs[0].Decode()
	tc, isCreated := p.(*noeta.TaskCreated)
	if err != nil || !ok || !isCreated {
		return
	}
	m.mu.Lock()
	if mt := m.task(task); mt.agent == "" {
		mt.agent = tc.Agent
	}
	m.mu.Unlock()
}

func (m *Metrics) task(task string) *metricsTask {
	if mt, ok := m.memory.get(task); ok {
		return mt
	}
	mt := &metricsTask{actions: map[string]metricsApproval{}, approved: map[string]struct{}{}}
	m.memory.put(task, mt)
	return mt
}

// attrs builds an attribute set from label, value pairs, each value bounded.
// m.mu is held.
func (m *Metrics) attrs(kv ...string) metric.MeasurementOption {
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], m.labels.value(kv[i], kv[i+1])))
	}
	return metric.WithAttributeSet(attribute.NewSet(a...))
}

// metricsLabelBounds keeps each label's distinct values under a bound. Not safe for
// concurrent use.
type metricsLabelBounds struct {
	max  int
	seen map[string]map[string]struct{}
}

func (b *metricsLabelBounds) value(label, v string) string {
	s := b.seen[label]
	if s == nil {
		s = map[string]struct{}{}
		b.seen[label] = s
	}
	if _, ok := s[v]; ok {
		return v
	}
	if len(s) >= b.max {
		return OtherLabelValue
	}
	s[v] = struct{}{}
	return v
}

// otelTaskLRU is a map by task id holding at most max entries: adding one more
// evicts the least recently used, handing it to evicted (if set). Not safe
// for concurrent use.
type otelTaskLRU[V any] struct {
	max     int
	ll      *list.List
	m       map[string]*list.Element
	evicted func(key string, v V)
}

type otelTaskLRUEntry[V any] struct {
	key string
	val V
}

func newOtelTaskLRU[V any](max int, evicted func(string, V)) *otelTaskLRU[V] {
	return &otelTaskLRU[V]{max: max, ll: list.New(), m: map[string]*list.Element{}, evicted: evicted}
}

// get returns key's value and marks it used.
func (c *otelTaskLRU[V]) get(key string) (V, bool) {
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(*otelTaskLRUEntry[V]).val, true
}

// put sets key to v, marks it used and evicts past the bound.
func (c *otelTaskLRU[V]) put(key string, v V) {
	if el, ok := c.m[key]; ok {
		el.Value.(*otelTaskLRUEntry[V]).val = v
		c.ll.MoveToFront(el)
		return
	}
	c.m[key] = c.ll.PushFront(&otelTaskLRUEntry[V]{key: key, val: v})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		e := old.Value.(*otelTaskLRUEntry[V])
		delete(c.m, e.key)
		if c.evicted != nil {
			c.evicted(e.key, e.val)
		}
	}
}

// remove deletes key, without calling evicted.
func (c *otelTaskLRU[V]) remove(key string) (V, bool) {
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.Remove(el)
	delete(c.m, key)
	return el.Value.(*otelTaskLRUEntry[V]).val, true
}

func (c *otelTaskLRU[V]) len() int { return c.ll.Len() }
