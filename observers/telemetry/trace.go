package telemetry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

// Defaults of [TraceConfig].
const (
	DefaultTraceMaxOpenTasks  = 10000
	DefaultTraceMaxEvents     = 128
	DefaultTraceQueueSize     = 2048
	DefaultTraceBatchSize     = 512
	DefaultTraceFlushInterval = time.Second
	DefaultTraceExportTimeout = 30 * time.Second
)

// traceMaxPerTask bounds each open task's open calls, pending approvals and
// approved calls.
const traceMaxPerTask = 1024

// Span, event and attribute names of [Trace]. The gen_ai.* names follow the
// OpenTelemetry GenAI semantic conventions (Development status, declared here
// rather than imported: semconv v1.42.0 and later no longer carry them); the
// noeta.* names are this project's.
const (
	TraceOperationInvokeAgent = "invoke_agent"
	TraceOperationExecuteTool = "execute_tool"
	TraceOperationChat        = "chat"

	TraceEventGuardVerdict    = "noeta.guard.verdict"
	TraceEventApprovalResolve = "noeta.approval.resolved"
	TraceEventSubtaskSpawned  = "noeta.subtask.spawned"
	TraceEventSubtaskResult   = "noeta.subtask.result"
	TraceEventTaskSuspended   = "noeta.task.suspended"
	TraceEventTaskWoken       = "noeta.task.woken"
	TraceEventStepAbandoned   = "noeta.step.abandoned"
)

const (
	attrOperationName    = attribute.Key("gen_ai.operation.name")
	attrAgentName        = attribute.Key("gen_ai.agent.name")
	attrAgentID          = attribute.Key("gen_ai.agent.id")
	attrConversationID   = attribute.Key("gen_ai.conversation.id")
	attrInputTokens      = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens     = attribute.Key("gen_ai.usage.output_tokens")
	attrToolName         = attribute.Key("gen_ai.tool.name")
	attrToolCallID       = attribute.Key("gen_ai.tool.call.id")
	attrProviderName     = attribute.Key("gen_ai.provider.name")
	attrRequestModel     = attribute.Key("gen_ai.request.model")
	attrErrorType        = attribute.Key("error.type")
	attrTaskID           = attribute.Key("noeta.task.id")
	attrRootTaskID       = attribute.Key("noeta.root_task.id")
	attrParentTaskID     = attribute.Key("noeta.parent_task.id")
	attrDepth            = attribute.Key("noeta.subtask.depth")
	attrGroupID          = attribute.Key("noeta.group.id")
	attrCostUSD          = attribute.Key("noeta.usage.cost_usd")
	attrTurns            = attribute.Key("noeta.turns")
	attrTaskStatus       = attribute.Key("noeta.task.status")
	attrCancelReason     = attribute.Key("noeta.task.cancel_reason")
	attrPartial          = attribute.Key("noeta.trace.partial")
	attrTurn             = attribute.Key("noeta.turn")
	attrToolDurationMS   = attribute.Key("noeta.tool.duration_ms")
	attrUnfinished       = attribute.Key("noeta.tool.unfinished")
	attrSeq              = attribute.Key("noeta.seq")
	attrGuardName        = attribute.Key("noeta.guard.name")
	attrGuardVerdict     = attribute.Key("noeta.guard.verdict")
	attrGuardReason      = attribute.Key("noeta.guard.reason")
	attrGuardAction      = attribute.Key("noeta.guard.action")
	attrApprovalHandle   = attribute.Key("noeta.approval.handle")
	attrApprovalDecision = attribute.Key("noeta.approval.decision")
	attrApprover         = attribute.Key("noeta.approval.approver")
	attrApprovalReason   = attribute.Key("noeta.approval.reason")
	attrSubtaskID        = attribute.Key("noeta.subtask.id")
	attrSubtaskAgent     = attribute.Key("noeta.subtask.agent")
	attrSubtaskStatus    = attribute.Key("noeta.subtask.status")
	attrSubtaskError     = attribute.Key("noeta.subtask.error")
	attrReason           = attribute.Key("noeta.reason")
	attrWakeKind         = attribute.Key("noeta.wake.kind")
	attrAbandonAction    = attribute.Key("noeta.abandon.action")
	attrBaselineSeq      = attribute.Key("noeta.baseline_seq")
)

// errTraceClosed is returned by Observe after Shutdown.
var errTraceClosed = errors.New("observers: trace is shut down")

// DeriveTraceID is the trace id of a task tree: the first 16 bytes of
// sha256("noeta-trace:" + root task id). Every task of a tree shares it.
func DeriveTraceID(root string) trace.TraceID {
	var id trace.TraceID
	h := sha256.Sum256([]byte("noeta-trace:" + root))
	copy(id[:], h[:])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// DeriveTaskSpanID is the span id of a task's invoke_agent span: the first 8
// bytes of sha256("task:" + task id).
func DeriveTaskSpanID(task string) trace.SpanID {
	return traceSpanIDOf("task:" + task)
}

// DeriveCallSpanID is the span id of a tool call's execute_tool span: the
// first 8 bytes of sha256("call:" + task id + ":" + call id).
func DeriveCallSpanID(task, callID string) trace.SpanID {
	return traceSpanIDOf("call:" + task + ":" + callID)
}

// DeriveChatSpanID is the span id of the chat span of the model call that
// decided a turn: the first 8 bytes of sha256("chat:" + task id + ":" +
// turn).
func DeriveChatSpanID(task string, turn int) trace.SpanID {
	return traceSpanIDOf("chat:" + task + ":" + strconv.Itoa(turn))
}

func traceSpanIDOf(s string) trace.SpanID {
	var id trace.SpanID
	h := sha256.Sum256([]byte(s))
	copy(id[:], h[:])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// TraceConfig configures [NewTrace].
type TraceConfig struct {
	// Exporter receives the finished spans (required): [NewOTLPExporter], or
	// tracetest.NewInMemoryExporter in tests. Trace calls it from one
	// goroutine at a time and shuts it down in Shutdown.
	Exporter sdktrace.SpanExporter
	// Log, when set, lets Trace catch up from the log on a task whose earlier
	// records it did not see (it restarted, or evicted the task, or a record
	// arrived before an earlier one), so the span is the same as if it had
	// seen them all. Without it such a task's span is partial (see Trace).
	Log eventlog.Reader
	// Resource describes the exporting service; service.name "noeta" if nil.
	Resource *resource.Resource
	// MaxOpenTasks bounds the tasks whose span is open in memory
	// (DefaultTraceMaxOpenTasks if 0); beyond it the least recently active
	// is forgotten, with a warning.
	MaxOpenTasks int
	// MaxEventsPerSpan bounds each span's events (DefaultTraceMaxEvents if
	// 0); later ones are counted as dropped.
	MaxEventsPerSpan int
	// QueueSize bounds the finished spans waiting for export
	// (DefaultTraceQueueSize if 0); a span that finds it full is dropped
	// and counted. BatchSize spans at most go in one export
	// (DefaultTraceBatchSize if 0), every FlushInterval
	// (DefaultTraceFlushInterval if 0) or as soon as a batch is full, each
	// export bounded by ExportTimeout (DefaultTraceExportTimeout if 0).
	QueueSize     int
	BatchSize     int
	FlushInterval time.Duration
	ExportTimeout time.Duration
	Logger        *slog.Logger // slog.Default() if nil
}

// TraceStats counts what a [Trace] did.
type TraceStats struct {
	OpenTasks    int    // tasks whose span is open in memory
	Exported     uint64 // spans the exporter accepted
	Dropped      uint64 // spans lost: the queue was full, or their export failed
	ExportErrors uint64 // failed exports
	Evicted      uint64 // open tasks forgotten over MaxOpenTasks
}

// Trace rebuilds OpenTelemetry spans from the log, following the GenAI
// semantic conventions, and exports them. It is deterministic: ids, names,
// times and attributes come from records only, so a restarted worker, or
// another one, replaying the same records exports the same spans with the
// same ids, and a backend dedupes them by id.
//
// Spans:
//
//   - "invoke_agent <agent>" per task (kind INTERNAL), from its TaskCreated
//     to its terminal record. Trace id [DeriveTraceID] of the root task,
//     span id [DeriveTaskSpanID]; a child task's parent is its parent task's
//     span. Attributes: gen_ai.operation.name "invoke_agent",
//     gen_ai.agent.name, gen_ai.agent.id (the task id),
//     gen_ai.conversation.id (the root task id), gen_ai.usage.input_tokens
//     and gen_ai.usage.output_tokens (summed over PolicyDecided),
//     noeta.usage.cost_usd (PolicyDecided and ToolCallFinished costs),
//     noeta.task.id, noeta.root_task.id, noeta.parent_task.id,
//     noeta.subtask.depth, noeta.group.id, noeta.turns, noeta.task.status
//     (completed, failed, cancelled), noeta.task.cancel_reason. A failed task
//     has status Error with its error, error.type "task_failed" and
//     noeta.guard.name when a guard caused it; otherwise the status is unset.
//   - "execute_tool <tool>" per call (INTERNAL), child of its task's span,
//     from ToolCallStarted to ToolCallFinished; span id [DeriveCallSpanID].
//     Attributes gen_ai.operation.name "execute_tool", gen_ai.tool.name,
//     gen_ai.tool.call.id, noeta.task.id, noeta.turn, noeta.tool.duration_ms
//     (the tool's own measure), noeta.usage.cost_usd, and
//     noeta.approval.handle and noeta.approval.approver for a call a human
//     approved. A failed call has status Error with its error and error.type
//     "tool_error". A call still open when its task ends ends with it, with
//     status Error, error.type "unfinished" and noeta.tool.unfinished.
//   - "chat <model>" per model call that decided a turn (CLIENT), child of
//     its task's span, ending when its PolicyDecided was recorded and as long
//     as the call's latency; span id [DeriveChatSpanID]. Attributes
//     gen_ai.operation.name "chat", gen_ai.provider.name,
//     gen_ai.request.model, gen_ai.usage.input_tokens,
//     gen_ai.usage.output_tokens, noeta.usage.cost_usd, noeta.task.id,
//     noeta.turn. A scripted decision has no model and no span.
//
// Events on the task span, each with noeta.seq, the record's position:
// noeta.guard.verdict (noeta.guard.name, noeta.guard.verdict "deny" or
// "require_approval", noeta.guard.reason, noeta.guard.action "tool_call",
// "spawn_subtask" or "finish", and gen_ai.tool.call.id, gen_ai.tool.name,
// noeta.subtask.agent, noeta.approval.handle where known) from
// ToolCallDenied, SubtaskDenied, FinishDenied and ApprovalRequested;
// noeta.approval.resolved (noeta.approval.handle, .decision, .approver,
// .reason, and the request's action, call id and tool); noeta.subtask.spawned,
// noeta.subtask.result, noeta.task.suspended, noeta.task.woken and
// noeta.step.abandoned. A verdict is always about a call that has not
// started (a denied call never does), so verdicts go on the task span, with
// the call id as an attribute.
//
// A call span is exported when the call finishes, a task span when the task
// ends; a span still open at Shutdown is not exported (no end time is ever
// invented). Inbox records are ignored (the parent's log records what its
// inbox delivered).
//
// Idempotence: each open task keeps the seq of the last record applied, and
// each ended task (bounded like the open ones) its final seq, so a record
// seen twice adds nothing and exports nothing twice in one process. After a
// restart a span may be exported again, identical.
//
// Memory: at most MaxOpenTasks open tasks; the least recently active one is
// evicted with a warning. When such a task (or one begun before a restart)
// records again, Trace reads its earlier records from Log and rebuilds the
// span without exporting again the call spans that ended before; without a
// Log the span is partial: noeta.trace.partial true, started at the first
// record seen, with no agent name and no parent. The exporter's queue is
// bounded too: spans that find it full are dropped and counted, like the
// SDK's batch processor. Spans queued but not exported when the process dies
// are lost (Shutdown exports them).
//
// It is safe for concurrent use.
type Trace struct {
	exp       sdktrace.SpanExporter
	log       eventlog.Reader
	res       *resource.Resource
	logger    *slog.Logger
	maxEvents int
	batchSize int
	timeout   time.Duration

	mu    sync.Mutex
	open  *otelTaskLRU[*traceTask]
	ended *otelTaskLRU[uint64] // task -> seq of its terminal record

	qmu   sync.Mutex
	queue []sdktrace.ReadOnlySpan
	qmax  int
	kick  chan struct{}
	expMu sync.Mutex // held by a flush: one export at a time

	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	exported, dropped, exportErrors, evicted atomic.Uint64
}

// traceTask is an open task span and what it needs to end.
type traceTask struct {
	task, root, parent, agent, group string
	depth                            int
	created                          bool // its TaskCreated was applied
	start                            time.Time
	lastSeq                          uint64
	inTokens, outTokens              int64
	cost                             float64
	turns                            int
	events                           []sdktrace.Event
	droppedEvents                    int
	calls                            map[string]*traceCall    // open calls by call id
	pending                          map[string]traceApproval // approval requests by handle
	approved                         map[string]traceApproval // calls a human approved, by call id, not started yet
}

type traceCall struct {
	id, tool string
	turn     int
	start    time.Time
	approval *traceApproval
}

type traceApproval struct {
	action                  noeta.ApprovalAction
	handle, callID, tool    string
	approver, reason, agent string
}

// NewTrace checks cfg and starts the exporting goroutine; Shutdown stops it.
func NewTrace(cfg TraceConfig) (*Trace, error) {
	if cfg.Exporter == nil {
		return nil, fmt.Errorf("%w: TraceConfig.Exporter is required", observers.ErrInvalidConfig)
	}
	if cfg.MaxOpenTasks < 0 || cfg.MaxEventsPerSpan < 0 || cfg.QueueSize < 0 || cfg.BatchSize < 0 || cfg.FlushInterval < 0 || cfg.ExportTimeout < 0 {
		return nil, fmt.Errorf("%w: TraceConfig bounds must not be negative", observers.ErrInvalidConfig)
	}
	cfg.MaxOpenTasks = cmp.Or(cfg.MaxOpenTasks, DefaultTraceMaxOpenTasks)
	cfg.MaxEventsPerSpan = cmp.Or(cfg.MaxEventsPerSpan, DefaultTraceMaxEvents)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, DefaultTraceQueueSize)
	cfg.BatchSize = min(cmp.Or(cfg.BatchSize, DefaultTraceBatchSize), cfg.QueueSize)
	cfg.FlushInterval = cmp.Or(cfg.FlushInterval, DefaultTraceFlushInterval)
	cfg.ExportTimeout = cmp.Or(cfg.ExportTimeout, DefaultTraceExportTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resource == nil {
		cfg.Resource = resource.NewSchemaless(attribute.String("service.name", "noeta"))
	}
	t := &Trace{
		exp: cfg.Exporter, log: cfg.Log, res: cfg.Resource, logger: cfg.Logger,
		maxEvents: cfg.MaxEventsPerSpan, batchSize: cfg.BatchSize, timeout: cfg.ExportTimeout,
		qmax: cfg.QueueSize, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	t.open = newOtelTaskLRU(cfg.MaxOpenTasks, func(task string, st *traceTask) {
		t.evicted.Add(1)
		t.logger.Warn("trace: too many open tasks; the least recently active one is forgotten and will be rebuilt from the log (or be partial) when it records again",
			"task", task, "last_seq", st.lastSeq, "max_open_tasks", cfg.MaxOpenTasks)
	})
	t.ended = newOtelTaskLRU[uint64](cfg.MaxOpenTasks, nil)
	go t.run(cfg.FlushInterval)
	return t, nil
}

// Name implements Observer: the consumer group of an observer-worker's Trace
// is obs-trace.
func (t *Trace) Name() string { return "trace" }

// Stats returns what the Trace did so far.
func (t *Trace) Stats() TraceStats {
	t.mu.Lock()
	n := t.open.len()
	t.mu.Unlock()
	return TraceStats{
		OpenTasks: n, Exported: t.exported.Load(), Dropped: t.dropped.Load(),
		ExportErrors: t.exportErrors.Load(), Evicted: t.evicted.Load(),
	}
}

// Observe implements Observer. It fails only when the log could not be read
// to catch up (the record is then delivered again) or after Shutdown.
func (t *Trace) Observe(ctx context.Context, env eventlog.Envelope) error {
	if t.closed.Load() {
		return errTraceClosed
	}
	if env.Seq == 0 {
		return nil // inbox
	}
	t.mu.Lock()
	after, catchUp := t.gap(env)
	t.mu.Unlock()
	var history []eventlog.Envelope
	if catchUp && t.log != nil {
		envs, err := t.log.Read(ctx, env.Task, after)
		if err != nil {
			return fmt.Errorf("observers: trace: catch up on task %s after seq %d: %w", env.Task, after, err)
		}
		history = envs
	}
	t.mu.Lock()
	spans := t.handle(env, history)
	t.mu.Unlock()
	t.enqueue(spans)
	return nil
}

// gap reports whether records before env are missing, and after which seq.
// t.mu is held.
func (t *Trace) gap(env eventlog.Envelope) (after uint64, missing bool) {
	if final, ok := t.ended.get(env.Task); ok && env.Seq <= final {
		return 0, false
	}
	st, ok := t.open.get(env.Task)
	if !ok {
		return 0, env.Seq > 1
	}
	if env.Seq > st.lastSeq+1 {
		return st.lastSeq, true
	}
	return 0, false
}

// handle applies the history before env, then env, and returns the spans
// that ended. t.mu is held.
func (t *Trace) handle(env eventlog.Envelope, history []eventlog.Envelope) []sdktrace.ReadOnlySpan {
	if final, ok := t.ended.get(env.Task); ok && env.Seq <= final {
		return nil // a redelivery of an ended task
	}
	st, ok := t.open.get(env.Task)
	if ok && env.Seq <= st.lastSeq {
		return nil // a redelivery
	}
	// A task this process never saw (or forgot) is rebuilt: what ended
	// before env was exported already, by this process or the one before.
	// Records missing from a task it holds were never applied here: what
	// they end is exported.
	rebuild := !ok
	if !ok {
		st = &traceTask{task: env.Task, calls: map[string]*traceCall{}, pending: map[string]traceApproval{}, approved: map[string]traceApproval{}}
		t.open.put(env.Task, st)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, h := range history {
		if h.Seq > st.lastSeq && h.Seq < env.Seq {
			s := t.apply(st, h)
			if !rebuild {
				spans = append(spans, s...)
			}
		}
	}
	return append(spans, t.apply(st, env)...)
}

// apply folds one record into st and returns the spans it ends. t.mu is
// held.
func (t *Trace) apply(st *traceTask, env eventlog.Envelope) []sdktrace.ReadOnlySpan {
	st.lastSeq = env.Seq
	if st.start.IsZero() {
		st.start = env.Time
	}
	if st.root == "" {
		st.root = env.CorrelationID
	}
	p, ok, err := env.Decode()
	if err != nil {
		t.logger.Warn("trace: undecodable record skipped", "task", env.Task, "seq", env.Seq, "type", env.Type, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	seq := attrSeq.Int64(int64(env.Seq))
	switch p := p.(type) {
	case *noeta.TaskCreated:
		st.created, st.start = true, env.Time
		st.agent, st.parent, st.group, st.depth = p.Agent, p.ParentTaskID, p.GroupID, p.SubtaskDepth
		if p.RootTaskID != "" {
			st.root = p.RootTaskID
		}
	case *noeta.TurnStarted:
		st.turns = max(st.turns, p.Turn)
	case *noeta.PolicyDecided:
		st.inTokens += p.InputTokens
		st.outTokens += p.OutputTokens
		st.cost += p.CostUSD
		if p.Model != "" { // a model's decision; a script names none
			return []sdktrace.ReadOnlySpan{t.chatSpan(st, env, p)}
		}
	case *noeta.ToolCallStarted:
		if _, dup := st.calls[p.CallID]; !dup && len(st.calls) >= traceMaxPerTask {
			t.logger.Warn("trace: too many open calls in one task; this call gets no span", "task", env.Task, "call_id", p.CallID)
			break
		}
		c := &traceCall{id: p.CallID, tool: p.Tool, turn: p.Turn, start: env.Time}
		if a, ok := st.approved[p.CallID]; ok {
			delete(st.approved, p.CallID)
			c.approval = &a
		}
		st.calls[p.CallID] = c
	case *noeta.ToolCallFinished:
		st.cost += p.CostUSD
		c, ok := st.calls[p.CallID]
		if ok {
			delete(st.calls, p.CallID)
		} else {
			// Started before what this process saw, with no log to read.
			c = &traceCall{id: p.CallID, tool: p.Tool, start: env.Time.Add(-time.Duration(p.DurationMS) * time.Millisecond)}
		}
		return []sdktrace.ReadOnlySpan{t.callSpan(st, c, env.Time, p)}
	case *noeta.ToolCallDenied:
		t.event(st, TraceEventGuardVerdict, env.Time, seq, attrGuardName.String(p.Guard), attrGuardVerdict.String("deny"),
			attrGuardReason.String(p.Reason), attrGuardAction.String(string(noeta.ApprovalToolCall)),
			attrToolCallID.String(p.CallID), attrToolName.String(p.Tool))
	case *noeta.SubtaskDenied:
		t.event(st, TraceEventGuardVerdict, env.Time, seq, attrGuardName.String(p.Guard), attrGuardVerdict.String("deny"),
			attrGuardReason.String(p.Reason), attrGuardAction.String(string(noeta.ApprovalSpawnSubtask)),
			attrSubtaskAgent.String(p.Agent))
	case *noeta.FinishDenied:
		t.event(st, TraceEventGuardVerdict, env.Time, seq, attrGuardName.String(p.Guard), attrGuardVerdict.String("deny"),
			attrGuardReason.String(p.Reason), attrGuardAction.String(string(noeta.ApprovalFinish)))
	case *noeta.ApprovalRequested:
		a := traceApproval{action: p.Action, handle: p.Handle, callID: p.CallID, tool: p.Tool, agent: p.Agent}
		if len(st.pending) < traceMaxPerTask {
			st.pending[p.Handle] = a
		}
		kv := []attribute.KeyValue{seq, attrGuardName.String(p.Guard), attrGuardVerdict.String("require_approval"),
			attrGuardReason.String(p.Reason), attrApprovalHandle.String(p.Handle)}
		t.event(st, TraceEventGuardVerdict, env.Time, append(kv, a.attrs()...)...)
	case *noeta.ApprovalResolved:
		a, ok := st.pending[p.Handle]
		delete(st.pending, p.Handle)
		a.handle, a.approver, a.reason = p.Handle, p.Approver, p.Reason
		kv := []attribute.KeyValue{seq, attrApprovalHandle.String(p.Handle), attrApprovalDecision.String(string(p.Decision)),
			attrApprover.String(p.Approver)}
		if p.Reason != "" {
			kv = append(kv, attrApprovalReason.String(p.Reason))
		}
		if ok {
			kv = append(kv, a.attrs()...)
			if p.Decision == noeta.ApprovalApprove && a.action == noeta.ApprovalToolCall && a.callID != "" && len(st.approved) < traceMaxPerTask {
				st.approved[a.callID] = a
			}
		}
		t.event(st, TraceEventApprovalResolve, env.Time, kv...)
	case *noeta.SubtaskSpawned:
		kv := []attribute.KeyValue{seq, attrSubtaskID.String(p.SubtaskID), attrSubtaskAgent.String(p.Agent)}
		if p.GroupID != "" {
			kv = append(kv, attrGroupID.String(p.GroupID))
		}
		t.event(st, TraceEventSubtaskSpawned, env.Time, kv...)
	case *noeta.SubtaskResultRecorded:
		kv := []attribute.KeyValue{seq, attrSubtaskID.String(p.SubtaskID), attrSubtaskStatus.String(string(p.Status))}
		if p.Error != "" {
			kv = append(kv, attrSubtaskError.String(p.Error))
		}
		t.event(st, TraceEventSubtaskResult, env.Time, kv...)
	case *noeta.TaskSuspended:
		t.event(st, TraceEventTaskSuspended, env.Time, seq, attrReason.String(p.Reason), attrWakeKind.String(string(p.WakeOn.Kind)))
	case *noeta.TaskWoken:
		t.event(st, TraceEventTaskWoken, env.Time, seq, attrWakeKind.String(string(p.WakeEvent.Kind)))
	case *noeta.StepAttemptAbandoned:
		t.event(st, TraceEventStepAbandoned, env.Time, seq, attrAbandonAction.String(string(p.Action)),
			attrReason.String(p.Reason), attrBaselineSeq.Int64(int64(p.BaselineSeq)))
	case *noeta.TaskCompleted:
		return t.end(st, env, noeta.SubtaskStatusCompleted, "", "", "")
	case *noeta.TaskFailed:
		return t.end(st, env, noeta.SubtaskStatusFailed, p.Error, p.Guard, "")
	case *noeta.TaskCancelled:
		return t.end(st, env, noeta.SubtaskStatusCancelled, "", "", p.Reason)
	}
	return nil
}

// attrs are what an approval says about the action it is for.
func (a traceApproval) attrs() []attribute.KeyValue {
	kv := []attribute.KeyValue{attrGuardAction.String(string(a.action))}
	if a.callID != "" {
		kv = append(kv, attrToolCallID.String(a.callID))
	}
	if a.tool != "" {
		kv = append(kv, attrToolName.String(a.tool))
	}
	if a.agent != "" {
		kv = append(kv, attrSubtaskAgent.String(a.agent))
	}
	return kv
}

func (t *Trace) event(st *traceTask, name string, at time.Time, kv ...attribute.KeyValue) {
	if len(st.events) >= t.maxEvents {
		st.droppedEvents++
		return
	}
	st.events = append(st.events, sdktrace.Event{Name: name, Time: at, Attributes: kv})
}

// end closes the task span (and any call still open), forgets the task and
// returns the spans. t.mu is held.
func (t *Trace) end(st *traceTask, env eventlog.Envelope, status noeta.SubtaskStatus, errText, guard, cancelReason string) []sdktrace.ReadOnlySpan {
	t.open.remove(st.task)
	t.ended.put(st.task, env.Seq)
	var spans []sdktrace.ReadOnlySpan
	ids := make([]string, 0, len(st.calls))
	for id := range st.calls {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		spans = append(spans, t.callSpan(st, st.calls[id], env.Time, nil))
	}
	attrs := []attribute.KeyValue{
		attrOperationName.String(TraceOperationInvokeAgent),
		attrAgentID.String(st.task),
		attrConversationID.String(st.rootID()),
		attrTaskID.String(st.task),
		attrRootTaskID.String(st.rootID()),
		attrDepth.Int(st.depth),
		attrInputTokens.Int64(st.inTokens),
		attrOutputTokens.Int64(st.outTokens),
		attrCostUSD.Float64(st.cost),
		attrTurns.Int(st.turns),
		attrTaskStatus.String(string(status)),
	}
	name := TraceOperationInvokeAgent
	if st.agent != "" {
		name += " " + st.agent
		attrs = append(attrs, attrAgentName.String(st.agent))
	}
	if st.parent != "" {
		attrs = append(attrs, attrParentTaskID.String(st.parent))
	}
	if st.group != "" {
		attrs = append(attrs, attrGroupID.String(st.group))
	}
	if !st.created {
		attrs = append(attrs, attrPartial.Bool(true))
	}
	var stat sdktrace.Status
	switch status {
	case noeta.SubtaskStatusFailed:
		stat = sdktrace.Status{Code: codes.Error, Description: errText}
		attrs = append(attrs, attrErrorType.String("task_failed"))
		if guard != "" {
			attrs = append(attrs, attrGuardName.String(guard))
		}
	case noeta.SubtaskStatusCancelled:
		if cancelReason != "" {
			attrs = append(attrs, attrCancelReason.String(cancelReason))
		}
	}
	var parent trace.SpanContext
	if st.parent != "" {
		parent = t.spanContext(st, DeriveTaskSpanID(st.parent))
	}
	return append(spans, tracetest.SpanStub{
		Name:                 name,
		SpanContext:          t.spanContext(st, DeriveTaskSpanID(st.task)),
		Parent:               parent,
		SpanKind:             trace.SpanKindInternal,
		StartTime:            st.start,
		EndTime:              env.Time,
		Attributes:           attrs,
		Events:               st.events,
		Status:               stat,
		DroppedEvents:        st.droppedEvents,
		Resource:             t.res,
		InstrumentationScope: instrumentation.Scope{Name: otelScopeName},
	}.Snapshot())
}

// callSpan builds a call's span; fin is nil for a call its task's end
// closed.
func (t *Trace) callSpan(st *traceTask, c *traceCall, end time.Time, fin *noeta.ToolCallFinished) sdktrace.ReadOnlySpan {
	attrs := []attribute.KeyValue{
		attrOperationName.String(TraceOperationExecuteTool),
		attrToolName.String(c.tool),
		attrToolCallID.String(c.id),
		attrTaskID.String(st.task),
		attrTurn.Int(c.turn),
	}
	if c.approval != nil {
		attrs = append(attrs, attrApprovalHandle.String(c.approval.handle), attrApprover.String(c.approval.approver))
	}
	var stat sdktrace.Status
	if fin == nil {
		stat = sdktrace.Status{Code: codes.Error, Description: "the task ended before the call finished"}
		attrs = append(attrs, attrErrorType.String("unfinished"), attrUnfinished.Bool(true))
	} else {
		attrs = append(attrs, attrToolDurationMS.Int64(fin.DurationMS))
		if fin.CostUSD != 0 {
			attrs = append(attrs, attrCostUSD.Float64(fin.CostUSD))
		}
		if !fin.OK {
			desc := fin.Error
			if desc == "" {
				desc = "tool call failed"
			}
			stat = sdktrace.Status{Code: codes.Error, Description: desc}
			attrs = append(attrs, attrErrorType.String("tool_error"))
		}
	}
	if end.Before(c.start) {
		end = c.start
	}
	return tracetest.SpanStub{
		Name:                 TraceOperationExecuteTool + " " + c.tool,
		SpanContext:          t.spanContext(st, DeriveCallSpanID(st.task, c.id)),
		Parent:               t.spanContext(st, DeriveTaskSpanID(st.task)),
		SpanKind:             trace.SpanKindInternal,
		StartTime:            c.start,
		EndTime:              end,
		Attributes:           attrs,
		Status:               stat,
		Resource:             t.res,
		InstrumentationScope: instrumentation.Scope{Name: otelScopeName},
	}.Snapshot()
}

// chatSpan is the span of the model call that decided a turn: it ended
// when its decision was recorded and took the call's latency.
func (t *Trace) chatSpan(st *traceTask, env eventlog.Envelope, p *noeta.PolicyDecided) sdktrace.ReadOnlySpan {
	model, provider, latencyMS := p.Model, p.Provider, p.LatencyMS
	attrs := []attribute.KeyValue{
		attrOperationName.String(TraceOperationChat),
		attrProviderName.String(provider),
		attrRequestModel.String(model),
		attrInputTokens.Int64(p.InputTokens),
		attrOutputTokens.Int64(p.OutputTokens),
		attrTaskID.String(st.task),
		attrTurn.Int(p.Turn),
		attrSeq.Int64(int64(env.Seq)),
	}
	if p.CostUSD != 0 {
		attrs = append(attrs, attrCostUSD.Float64(p.CostUSD))
	}
	return tracetest.SpanStub{
		Name:                 TraceOperationChat + " " + model,
		SpanContext:          t.spanContext(st, DeriveChatSpanID(st.task, p.Turn)),
		Parent:               t.spanContext(st, DeriveTaskSpanID(st.task)),
		SpanKind:             trace.SpanKindClient,
		StartTime:            env.Time.Add(-time.Duration(latencyMS) * time.Millisecond),
		EndTime:              env.Time,
		Attributes:           attrs,
		Resource:             t.res,
		InstrumentationScope: instrumentation.Scope{Name: otelScopeName},
	}.Snapshot()
}

func (st *traceTask) rootID() string {
	if st.root != "" {
		return st.root
	}
	return st.task
}

func (t *Trace) spanContext(st *traceTask, id trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: DeriveTraceID(st.rootID()), SpanID: id, TraceFlags: trace.FlagsSampled,
	})
}

// enqueue hands spans to the exporting goroutine, dropping what does not
// fit.
func (t *Trace) enqueue(spans []sdktrace.ReadOnlySpan) {
	if len(spans) == 0 {
		return
	}
	t.qmu.Lock()
	room := t.qmax - len(t.queue)
	n := min(room, len(spans))
	t.queue = append(t.queue, spans[:n]...)
	full := len(t.queue) >= t.batchSize
	t.qmu.Unlock()
	if lost := len(spans) - n; lost > 0 {
		t.dropped.Add(uint64(lost))
		t.logger.Warn("trace: export queue full; spans dropped", "dropped", lost, "queue_size", t.qmax)
	}
	if full {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

func (t *Trace) run(every time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		case <-t.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
		_ = t.Flush(ctx)
		cancel()
	}
}

// Flush exports every span queued now, in batches, and waits for an export
// in flight; it returns the first export error (the failed batch is dropped
// and counted).
func (t *Trace) Flush(ctx context.Context) error {
	t.expMu.Lock()
	defer t.expMu.Unlock()
	var first error
	for {
		t.qmu.Lock()
		n := min(len(t.queue), t.batchSize)
		batch := slices.Clone(t.queue[:n])
		t.queue = slices.Delete(t.queue, 0, n)
		t.qmu.Unlock()
		if n == 0 {
			return first
		}
		if err := t.export(ctx, batch); err != nil && first == nil {
			first = err
		}
	}
}

// export hands one batch to the exporter; t.expMu is held.
func (t *Trace) export(ctx context.Context, batch []sdktrace.ReadOnlySpan) error {
	if err := t.exp.ExportSpans(ctx, batch); err != nil {
		t.exportErrors.Add(1)
		t.dropped.Add(uint64(len(batch)))
		t.logger.Warn("trace: export failed; spans dropped", "spans", len(batch), "err", err)
		return fmt.Errorf("observers: trace export: %w", err)
	}
	t.exported.Add(uint64(len(batch)))
	return nil
}

// Shutdown stops the exporting goroutine, exports what is queued and shuts
// the exporter down. Spans of tasks still open are not exported. Observe
// fails after it. It is idempotent.
func (t *Trace) Shutdown(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.stop)
	select {
	case <-t.done:
	case <-ctx.Done():
		return fmt.Errorf("observers: trace shutdown: %w", ctx.Err())
	}
	return errors.Join(t.Flush(ctx), t.exp.Shutdown(ctx))
}

// OTLPConfig configures [NewOTLPExporter].
type OTLPConfig struct {
	// Protocol is "grpc" (the default) or "http" (OTLP/HTTP protobuf).
	Protocol string
	// Endpoint is host:port, or a URL (http://, https://; for http, its
	// path replaces /v1/traces). Empty: the exporter's default (the
	// OTEL_EXPORTER_OTLP_* environment, else localhost:4317 or :4318).
	Endpoint string
	// Insecure disables TLS.
	Insecure bool
	// Headers are sent with every export (e.g. an authorization).
	Headers map[string]string
	// Timeout bounds each export (the exporter's default, 10s, if 0).
	Timeout time.Duration
}

// NewOTLPExporter returns an OTLP span exporter over gRPC or HTTP, for
// [TraceConfig.Exporter]. It does not connect until the first export.
func NewOTLPExporter(ctx context.Context, cfg OTLPConfig) (sdktrace.SpanExporter, error) {
	switch strings.ToLower(cfg.Protocol) {
	case "", "grpc":
		exp, err := otlptracegrpc.New(ctx, otlpOptions(cfg, otlptracegrpc.WithEndpointURL, otlptracegrpc.WithEndpoint,
			otlptracegrpc.WithInsecure, otlptracegrpc.WithHeaders, otlptracegrpc.WithTimeout)...)
		if err != nil {
			return nil, fmt.Errorf("observers: OTLP gRPC exporter: %w", err)
		}
		return exp, nil
	case "http", "http/protobuf":
		exp, err := otlptracehttp.New(ctx, otlpOptions(cfg, otlptracehttp.WithEndpointURL, otlptracehttp.WithEndpoint,
			otlptracehttp.WithInsecure, otlptracehttp.WithHeaders, otlptracehttp.WithTimeout)...)
		if err != nil {
			return nil, fmt.Errorf("observers: OTLP HTTP exporter: %w", err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("%w: OTLP protocol %q (want grpc or http)", observers.ErrInvalidConfig, cfg.Protocol)
}

// otlpOptions turns cfg into the options of either OTLP exporter, which
// spell the same settings with types of their own.
func otlpOptions[O any](cfg OTLPConfig, endpointURL, endpoint func(string) O, insecure func() O,
	headers func(map[string]string) O, timeout func(time.Duration) O) []O {
	var opts []O
	switch {
	case strings.Contains(cfg.Endpoint, "://"):
		opts = append(opts, endpointURL(cfg.Endpoint))
	case cfg.Endpoint != "":
		opts = append(opts, endpoint(cfg.Endpoint))
	}
	if cfg.Insecure {
		opts = append(opts, insecure())
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, headers(cfg.Headers))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, timeout(cfg.Timeout))
	}
	return opts
}
