package telemetry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

// ---- helpers ----

// traceTestExporter keeps what it was given, across Shutdown (the SDK's
// in-memory exporter forgets on Shutdown).
type traceTestExporter struct {
	mu       sync.Mutex
	spans    tracetest.SpanStubs
	fail     error
	shutdown bool
}

func (e *traceTestExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return e.fail
	}
	e.spans = append(e.spans, tracetest.SpanStubsFromReadOnlySpans(spans)...)
	return nil
}

func (e *traceTestExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.shutdown = true
	e.mu.Unlock()
	return nil
}

func (e *traceTestExporter) get() tracetest.SpanStubs {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.spans)
}

type traceLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *traceLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *traceLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// newTestTrace returns a Trace exporting to an in-memory exporter; it is
// shut down at the end of the case.
func newTestTrace(t *testing.T, cfg TraceConfig) (*Trace, *tracetest.InMemoryExporter, *traceLogs) {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	if cfg.Exporter == nil {
		cfg.Exporter = mem
	}
	logs := &traceLogs{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Hour // the cases flush when they want to read
	}
	tr, err := NewTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tr, mem, logs
}

// feed observes envs and flushes.
func feed(t *testing.T, tr *Trace, envs []eventlog.Envelope) {
	t.Helper()
	for _, env := range envs {
		if err := tr.Observe(t.Context(), env); err != nil {
			t.Fatalf("Observe(%s %s seq %d): %v", env.Task, env.Type, env.Seq, err)
		}
	}
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// spanPrint renders everything a span says, to compare spans across runs.
func spanPrint(s tracetest.SpanStub) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s trace=%s span=%s parent=%s kind=%s %s..%s status=%s:%q dropped=%d\n",
		s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), s.SpanKind,
		s.StartTime.Format(time.RFC3339Nano), s.EndTime.Format(time.RFC3339Nano), s.Status.Code, s.Status.Description, s.DroppedEvents)
	for _, a := range s.Attributes {
		fmt.Fprintf(&b, "  %s=%s\n", a.Key, a.Value.Emit())
	}
	for _, e := range s.Events {
		fmt.Fprintf(&b, "  event %s @%s", e.Name, e.Time.Format(time.RFC3339Nano))
		for _, a := range e.Attributes {
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.Emit())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// spansBySpanID renders spans keyed by span id, and fails on a span exported
// twice.
func spansBySpanID(t *testing.T, spans tracetest.SpanStubs) map[trace.SpanID]string {
	t.Helper()
	out := map[trace.SpanID]string{}
	for _, s := range spans {
		id := s.SpanContext.SpanID()
		if _, dup := out[id]; dup {
			t.Errorf("span %s (%s) exported twice", id, s.Name)
		}
		out[id] = spanPrint(s)
	}
	return out
}

func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string, id trace.SpanID) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name && s.SpanContext.SpanID() == id {
			return s
		}
	}
	var got []string
	for _, s := range spans {
		got = append(got, s.Name+"/"+s.SpanContext.SpanID().String())
	}
	t.Fatalf("no span %s with id %s; spans: %v", name, id, got)
	return tracetest.SpanStub{}
}

// record returns the nth (from 0) record of task with type typ.
func (r *telemetryRun) record(t *testing.T, task, typ string, nth int) eventlog.Envelope {
	t.Helper()
	for _, env := range r.records {
		if env.Task == task && env.Type == typ && env.Seq != 0 {
			if nth == 0 {
				return env
			}
			nth--
		}
	}
	t.Fatalf("no %s #%d in task %s", typ, nth, task)
	return eventlog.Envelope{}
}

// only returns the records of task, from seq after on (log records only).
func (r *telemetryRun) only(task string, after uint64) []eventlog.Envelope {
	var out []eventlog.Envelope
	for _, env := range r.records {
		if env.Task == task && env.Seq > after {
			out = append(out, env)
		}
	}
	return out
}

func wantAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[attribute.Key]attribute.Value) {
	t.Helper()
	m := map[attribute.Key]attribute.Value{}
	for _, a := range got {
		m[a.Key] = a.Value
	}
	for k, v := range want {
		g, ok := m[k]
		if !ok {
			t.Errorf("%s: no attribute %s (want %s)", what, k, v.Emit())
			continue
		}
		if g != v {
			t.Errorf("%s: %s = %s (%s), want %s (%s)", what, k, g.Emit(), g.Type(), v.Emit(), v.Type())
		}
	}
}

func noAttr(t *testing.T, what string, got []attribute.KeyValue, keys ...attribute.Key) {
	t.Helper()
	for _, a := range got {
		if slices.Contains(keys, a.Key) {
			t.Errorf("%s: unexpected attribute %s=%s", what, a.Key, a.Value.Emit())
		}
	}
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

// ---- cases ----

func TestTraceIDsAreDerived(t *testing.T) {
	// The documented derivations, spelled out.
	sum := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	if got := DeriveTraceID("r1"); !bytes.Equal(got[:], sum("noeta-trace:r1")[:16]) {
		t.Errorf("trace id %s", got)
	}
	if got := DeriveTaskSpanID("t1"); !bytes.Equal(got[:], sum("task:t1")[:8]) {
		t.Errorf("task span id %s", got)
	}
	if got := DeriveCallSpanID("t1", "call-1-0"); !bytes.Equal(got[:], sum("call:t1:call-1-0")[:8]) {
		t.Errorf("call span id %s", got)
	}
	if DeriveCallSpanID("a", "c") == DeriveCallSpanID("b", "c") || DeriveTaskSpanID("a") == DeriveTaskSpanID("b") {
		t.Error("distinct inputs gave the same id")
	}
}

func TestTraceOfAKnownRun(t *testing.T) {
	run := newTelemetryRun(t)
	tr, mem, _ := newTestTrace(t, TraceConfig{})
	if tr.Name() != "trace" {
		t.Errorf("Name %q", tr.Name())
	}
	feed(t, tr, run.records)
	spans := mem.GetSpans()
	if len(spans) != 5 {
		t.Fatalf("%d spans exported, want 5 (2 tasks, 3 calls):\n%v", len(spans), spansBySpanID(t, spans))
	}
	root, child := run.root, run.child
	traceID := DeriveTraceID(root)
	rootSpanID, childSpanID := DeriveTaskSpanID(root), DeriveTaskSpanID(child)
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("%s: trace id %s, want %s (the root's)", s.Name, s.SpanContext.TraceID(), traceID)
		}
		if s.SpanKind != trace.SpanKindInternal {
			t.Errorf("%s: kind %s", s.Name, s.SpanKind)
		}
		if !s.SpanContext.IsSampled() {
			t.Errorf("%s: not sampled", s.Name)
		}
	}

	// The root's invoke_agent span.
	rs := spanNamed(t, spans, "invoke_agent researcher", rootSpanID)
	if rs.Parent.IsValid() {
		t.Errorf("root span has a parent %s", rs.Parent.SpanID())
	}
	if !rs.StartTime.Equal(run.record(t, root, noeta.TypeTaskCreated, 0).Time) || !rs.EndTime.Equal(run.record(t, root, noeta.TypeTaskCompleted, 0).Time) {
		t.Errorf("root span %s..%s, want TaskCreated..TaskCompleted", rs.StartTime, rs.EndTime)
	}
	if rs.Status.Code != codes.Unset {
		t.Errorf("root span status %v", rs.Status)
	}
	wantAttrs(t, "root span", rs.Attributes, map[attribute.Key]attribute.Value{
		"gen_ai.operation.name":      attribute.StringValue("invoke_agent"),
		"gen_ai.agent.name":          attribute.StringValue("researcher"),
		"gen_ai.agent.id":            attribute.StringValue(root),
		"gen_ai.conversation.id":     attribute.StringValue(root),
		"gen_ai.usage.input_tokens":  attribute.Int64Value(180),
		"gen_ai.usage.output_tokens": attribute.Int64Value(70),
		"noeta.task.id":              attribute.StringValue(root),
		"noeta.root_task.id":         attribute.StringValue(root),
		"noeta.subtask.depth":        attribute.IntValue(0),
		"noeta.turns":                attribute.IntValue(3),
		"noeta.task.status":          attribute.StringValue("completed"),
	})
	noAttr(t, "root span", rs.Attributes, "noeta.parent_task.id", "noeta.trace.partial", "error.type")
	if got, want := eventNames(rs), []string{
		TraceEventGuardVerdict, TraceEventGuardVerdict, TraceEventTaskSuspended, TraceEventTaskWoken, TraceEventApprovalResolve,
		TraceEventSubtaskSpawned, TraceEventTaskSuspended, TraceEventTaskWoken, TraceEventSubtaskResult,
	}; !slices.Equal(got, want) {
		t.Errorf("root span events\n got  %v\n want %v", got, want)
	} else {
		denial := rs.Events[0]
		if !denial.Time.Equal(run.record(t, root, noeta.TypeToolCallDenied, 0).Time) {
			t.Errorf("denial event at %s", denial.Time)
		}
		wantAttrs(t, "budget denial event", denial.Attributes, map[attribute.Key]attribute.Value{
			"noeta.guard.name":    attribute.StringValue("budget"),
			"noeta.guard.verdict": attribute.StringValue("deny"),
			"noeta.guard.reason":  attribute.StringValue("max_tool_calls 1 reached"),
			"noeta.guard.action":  attribute.StringValue("tool_call"),
			"gen_ai.tool.call.id": attribute.StringValue("call-1-1"),
			"gen_ai.tool.name":    attribute.StringValue("echo"),
			"noeta.seq":           attribute.Int64Value(int64(run.record(t, root, noeta.TypeToolCallDenied, 0).Seq)),
		})
		wantAttrs(t, "approval request event", rs.Events[1].Attributes, map[attribute.Key]attribute.Value{
			"noeta.guard.name":      attribute.StringValue("permission"),
			"noeta.guard.verdict":   attribute.StringValue("require_approval"),
			"noeta.guard.reason":    attribute.StringValue("shell is high risk"),
			"noeta.guard.action":    attribute.StringValue("tool_call"),
			"noeta.approval.handle": attribute.StringValue("approval-call-1-2"),
			"gen_ai.tool.call.id":   attribute.StringValue("call-1-2"),
			"gen_ai.tool.name":      attribute.StringValue("shell"),
		})
		wantAttrs(t, "approval resolved event", rs.Events[4].Attributes, map[attribute.Key]attribute.Value{
			"noeta.approval.handle":   attribute.StringValue("approval-call-1-2"),
			"noeta.approval.decision": attribute.StringValue("approve"),
			"noeta.approval.approver": attribute.StringValue("alice@example.com"),
			"noeta.approval.reason":   attribute.StringValue("looks safe"),
			"noeta.guard.action":      attribute.StringValue("tool_call"),
			"gen_ai.tool.call.id":     attribute.StringValue("call-1-2"),
			"gen_ai.tool.name":        attribute.StringValue("shell"),
		})
		wantAttrs(t, "subtask result event", rs.Events[8].Attributes, map[attribute.Key]attribute.Value{
			"noeta.subtask.id":     attribute.StringValue(child),
			"noeta.subtask.status": attribute.StringValue("failed"),
		})
	}

	// The child's: parented by the root's span, failed by a guard.
	cs := spanNamed(t, spans, "invoke_agent helper", childSpanID)
	if cs.Parent.SpanID() != rootSpanID || cs.Parent.TraceID() != traceID {
		t.Errorf("child span parent %s/%s, want the root span %s", cs.Parent.TraceID(), cs.Parent.SpanID(), rootSpanID)
	}
	if cs.Status.Code != codes.Error || cs.Status.Description != "finish denied by rules: the answer quotes a secret" {
		t.Errorf("child span status %+v", cs.Status)
	}
	wantAttrs(t, "child span", cs.Attributes, map[attribute.Key]attribute.Value{
		"gen_ai.agent.name":          attribute.StringValue("helper"),
		"gen_ai.agent.id":            attribute.StringValue(child),
		"noeta.root_task.id":         attribute.StringValue(root),
		"noeta.parent_task.id":       attribute.StringValue(root),
		"noeta.subtask.depth":        attribute.IntValue(1),
		"gen_ai.usage.input_tokens":  attribute.Int64Value(10),
		"gen_ai.usage.output_tokens": attribute.Int64Value(5),
		"noeta.task.status":          attribute.StringValue("failed"),
		"error.type":                 attribute.StringValue("task_failed"),
		"noeta.guard.name":           attribute.StringValue("rules"),
	})
	if got, want := eventNames(cs), []string{TraceEventGuardVerdict, TraceEventGuardVerdict}; !slices.Equal(got, want) {
		t.Errorf("child span events %v, want %v", got, want)
	} else {
		wantAttrs(t, "permission denial event", cs.Events[0].Attributes, map[attribute.Key]attribute.Value{
			"noeta.guard.name": attribute.StringValue("permission"), "noeta.guard.verdict": attribute.StringValue("deny"),
			"gen_ai.tool.call.id": attribute.StringValue("call-1-1"), "gen_ai.tool.name": attribute.StringValue("write_file"),
		})
		wantAttrs(t, "finish denial event", cs.Events[1].Attributes, map[attribute.Key]attribute.Value{
			"noeta.guard.name": attribute.StringValue("rules"), "noeta.guard.verdict": attribute.StringValue("deny"),
			"noeta.guard.action": attribute.StringValue("finish"), "noeta.guard.reason": attribute.StringValue("the answer quotes a secret"),
		})
	}

	// The calls: each a child of its own task's span.
	echo := spanNamed(t, spans, "execute_tool echo", DeriveCallSpanID(root, "call-1-0"))
	shell := spanNamed(t, spans, "execute_tool shell", DeriveCallSpanID(root, "call-1-2"))
	read := spanNamed(t, spans, "execute_tool read_file", DeriveCallSpanID(child, "call-1-0"))
	for _, c := range []struct {
		s      tracetest.SpanStub
		parent trace.SpanID
		task   string
		nth    int
	}{{echo, rootSpanID, root, 0}, {shell, rootSpanID, root, 1}, {read, childSpanID, child, 0}} {
		if c.s.Parent.SpanID() != c.parent {
			t.Errorf("%s: parent %s, want its task's span %s", c.s.Name, c.s.Parent.SpanID(), c.parent)
		}
		if !c.s.StartTime.Equal(run.record(t, c.task, noeta.TypeToolCallStarted, c.nth).Time) ||
			!c.s.EndTime.Equal(run.record(t, c.task, noeta.TypeToolCallFinished, c.nth).Time) {
			t.Errorf("%s: %s..%s, want ToolCallStarted..ToolCallFinished", c.s.Name, c.s.StartTime, c.s.EndTime)
		}
	}
	wantAttrs(t, "echo span", echo.Attributes, map[attribute.Key]attribute.Value{
		"gen_ai.operation.name":  attribute.StringValue("execute_tool"),
		"gen_ai.tool.name":       attribute.StringValue("echo"),
		"gen_ai.tool.call.id":    attribute.StringValue("call-1-0"),
		"noeta.task.id":          attribute.StringValue(root),
		"noeta.turn":             attribute.IntValue(1),
		"noeta.tool.duration_ms": attribute.Int64Value(12),
	})
	if echo.Status.Code != codes.Unset {
		t.Errorf("echo status %+v", echo.Status)
	}
	noAttr(t, "echo span", echo.Attributes, "noeta.approval.approver", "error.type")
	if shell.Status.Code != codes.Error || shell.Status.Description != "exit status 1" {
		t.Errorf("shell status %+v", shell.Status)
	}
	wantAttrs(t, "shell span", shell.Attributes, map[attribute.Key]attribute.Value{
		"error.type":              attribute.StringValue("tool_error"),
		"noeta.approval.handle":   attribute.StringValue("approval-call-1-2"),
		"noeta.approval.approver": attribute.StringValue("alice@example.com"),
	})
	if st := tr.Stats(); st.Exported != 5 || st.OpenTasks != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestTraceReplayGivesIdenticalSpans(t *testing.T) {
	run := newTelemetryRun(t)
	tr1, mem1, _ := newTestTrace(t, TraceConfig{})
	feed(t, tr1, run.records)
	first := spansBySpanID(t, mem1.GetSpans())

	// A new Trace (a restarted worker) with a new exporter, fed the same
	// records, each delivered twice, then all of them again: the same spans,
	// with the same ids, parents and events, and nothing twice.
	tr2, mem2, _ := newTestTrace(t, TraceConfig{})
	var twice []eventlog.Envelope
	for _, env := range run.records {
		twice = append(twice, env, env)
	}
	feed(t, tr2, append(twice, run.records...))
	second := spansBySpanID(t, mem2.GetSpans())
	if len(second) != len(first) || len(mem2.GetSpans()) != 5 {
		t.Fatalf("replay exported %d spans (%d distinct), first run %d", len(mem2.GetSpans()), len(second), len(first))
	}
	for id, s := range first {
		if second[id] != s {
			t.Errorf("span %s differs after replay:\n first  %s\n replay %s", id, s, second[id])
		}
	}
}

func TestTraceRebuildsFromTheLogAfterARestart(t *testing.T) {
	run := newTelemetryRun(t)
	full, mem, _ := newTestTrace(t, TraceConfig{})
	feed(t, full, run.records)
	want := spansBySpanID(t, mem.GetSpans())

	// The restarted worker resumes after the approval request: what came
	// before was handled (and acked) by the previous process.
	req := run.record(t, run.root, noeta.TypeApprovalRequested, 0)
	i := slices.IndexFunc(run.records, func(e eventlog.Envelope) bool { return e.ID == req.ID })
	tr, mem2, _ := newTestTrace(t, TraceConfig{Log: run.store})
	feed(t, tr, run.records[i+1:])
	got := spansBySpanID(t, mem2.GetSpans())
	// The echo call ended before the restart: it is not exported again.
	if _, ok := got[DeriveCallSpanID(run.root, "call-1-0")]; ok {
		t.Error("the call that ended before the restart was exported again")
	}
	if len(got) != 4 {
		t.Errorf("%d spans after the restart, want 4", len(got))
	}
	for id, s := range got {
		if want[id] != s {
			t.Errorf("span %s rebuilt differently:\n full    %s\n rebuilt %s", id, want[id], s)
		}
	}
}

func TestTraceWithoutTheLogIsPartial(t *testing.T) {
	run := newTelemetryRun(t)
	woken := run.record(t, run.root, noeta.TypeTaskWoken, 1)
	tr, mem, _ := newTestTrace(t, TraceConfig{})
	feed(t, tr, run.only(run.root, woken.Seq-1))
	spans := mem.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want the root's", len(spans))
	}
	s := spans[0]
	if s.Name != "invoke_agent" || s.SpanContext.SpanID() != DeriveTaskSpanID(run.root) || s.SpanContext.TraceID() != DeriveTraceID(run.root) {
		t.Errorf("partial span %s %s/%s", s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID())
	}
	if !s.StartTime.Equal(woken.Time) {
		t.Errorf("partial span starts at %s, want its first record's time %s", s.StartTime, woken.Time)
	}
	wantAttrs(t, "partial span", s.Attributes, map[attribute.Key]attribute.Value{
		"noeta.trace.partial": attribute.BoolValue(true),
		"noeta.root_task.id":  attribute.StringValue(run.root),
	})
}

func TestTraceEvictsTheOldestOpenTask(t *testing.T) {
	run := newTelemetryRun(t)
	full, mem, _ := newTestTrace(t, TraceConfig{})
	feed(t, full, run.records)
	want := spansBySpanID(t, mem.GetSpans())

	// One open task at most: the root and its child evict each other, and
	// each is rebuilt from the log when it records again, to the same spans.
	tr, mem2, logs := newTestTrace(t, TraceConfig{MaxOpenTasks: 1, Log: run.store})
	feed(t, tr, run.records)
	got := spansBySpanID(t, mem2.GetSpans())
	if len(got) != len(want) {
		t.Errorf("%d spans, want %d", len(got), len(want))
	}
	for id, s := range want {
		if got[id] != s {
			t.Errorf("span %s differs after evictions:\n want %s\n got  %s", id, s, got[id])
		}
	}
	if st := tr.Stats(); st.Evicted == 0 || st.OpenTasks != 0 {
		t.Errorf("stats %+v: want evictions, and no task open at the end", st)
	}
	if !strings.Contains(logs.String(), "too many open tasks") {
		t.Errorf("no warning on eviction; logs:\n%s", logs)
	}
}

func TestTraceCatchesUpOnAGap(t *testing.T) {
	run := newTelemetryRun(t)
	fin := run.record(t, run.root, noeta.TypeToolCallFinished, 0)
	var envs []eventlog.Envelope
	for _, env := range run.only(run.root, 0) {
		if env.ID != fin.ID {
			envs = append(envs, env)
		}
	}
	envs = append(envs, fin) // it arrives last, late
	tr, mem, _ := newTestTrace(t, TraceConfig{Log: run.store})
	feed(t, tr, envs)
	spans := mem.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want the root's and its two calls", len(spans))
	}
	echo := spanNamed(t, spans, "execute_tool echo", DeriveCallSpanID(run.root, "call-1-0"))
	if !echo.EndTime.Equal(fin.Time) {
		t.Errorf("the call read from the log ends at %s, want %s", echo.EndTime, fin.Time)
	}
}

func TestTraceIgnoresInboxAndUnknownTypes(t *testing.T) {
	tr, mem, _ := newTestTrace(t, TraceConfig{})
	in, err := eventlog.NewEnvelope("t1", eventlog.OriginObserver, "x", noeta.SubtaskCompleted{SubtaskID: "c", Status: noeta.SubtaskStatusCompleted})
	if err != nil {
		t.Fatal(err)
	}
	in.Key = "subtask-c"
	unknown := eventlog.Envelope{Task: "t2", Seq: 1, Type: "SomethingNew", Origin: eventlog.OriginEngine, Payload: []byte(`{}`)}
	feed(t, tr, []eventlog.Envelope{in, unknown})
	if st := tr.Stats(); st.OpenTasks != 1 || len(mem.GetSpans()) != 0 {
		t.Errorf("stats %+v, %d spans: want only t2 open, nothing exported", st, len(mem.GetSpans()))
	}
}

func TestTraceBoundsEvents(t *testing.T) {
	run := newTelemetryRun(t)
	tr, mem, _ := newTestTrace(t, TraceConfig{MaxEventsPerSpan: 2})
	feed(t, tr, run.only(run.root, 0))
	rs := spanNamed(t, mem.GetSpans(), "invoke_agent researcher", DeriveTaskSpanID(run.root))
	if len(rs.Events) != 2 || rs.DroppedEvents != 7 {
		t.Errorf("%d events, %d dropped; want 2 and 7", len(rs.Events), rs.DroppedEvents)
	}
}

func TestTraceShutdownExportsWhatEnded(t *testing.T) {
	run := newTelemetryRun(t)
	exp := &traceTestExporter{}
	tr, err := NewTrace(TraceConfig{Exporter: exp, FlushInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// The child ends; the root is still open at Shutdown.
	for _, env := range run.records {
		if env.Type == noeta.TypeTaskCompleted {
			break
		}
		if err := tr.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	spans := exp.get()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if want := []string{"execute_tool echo", "execute_tool read_file", "execute_tool shell", "invoke_agent helper"}; !slices.Equal(names, want) {
		t.Errorf("exported %v, want %v (no span for the open root)", names, want)
	}
	if !exp.shutdown {
		t.Error("the exporter was not shut down")
	}
	if err := tr.Observe(t.Context(), run.records[len(run.records)-1]); err == nil {
		t.Error("Observe after Shutdown succeeded")
	}
}

func TestTraceExportFailures(t *testing.T) {
	run := newTelemetryRun(t)
	exp := &traceTestExporter{fail: errors.New("collector down")}
	tr, _, logs := newTestTrace(t, TraceConfig{Exporter: exp})
	for _, env := range run.only(run.root, 0) {
		if err := tr.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Flush(t.Context()); err == nil {
		t.Error("Flush hid the export error")
	}
	if st := tr.Stats(); st.Exported != 0 || st.Dropped != 3 || st.ExportErrors != 1 {
		t.Errorf("stats %+v: want the 3 spans dropped by one failed export", st)
	}
	if !strings.Contains(logs.String(), "collector down") {
		t.Errorf("the failure was not logged:\n%s", logs)
	}
}

func TestTraceQueueIsBounded(t *testing.T) {
	exp := &traceTestExporter{}
	tr, _, logs := newTestTrace(t, TraceConfig{Exporter: exp, QueueSize: 2})
	// Three spans offered at once to a queue of two: one is dropped.
	three := make([]sdktrace.ReadOnlySpan, 3)
	for i := range three {
		three[i] = tracetest.SpanStub{Name: fmt.Sprint(i)}.Snapshot()
	}
	tr.enqueue(three)
	if err := tr.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Dropped != 1 || st.Exported != 2 || len(exp.get()) != 2 {
		t.Errorf("stats %+v, %d spans exported: want one dropped and two exported", st, len(exp.get()))
	}
	if !strings.Contains(logs.String(), "export queue full") {
		t.Errorf("the drop was not logged:\n%s", logs)
	}
}

func TestNewTraceConfig(t *testing.T) {
	if _, err := NewTrace(TraceConfig{}); !errors.Is(err, observers.ErrInvalidConfig) {
		t.Errorf("no exporter: %v", err)
	}
	if _, err := NewTrace(TraceConfig{Exporter: tracetest.NewNoopExporter(), QueueSize: -1}); !errors.Is(err, observers.ErrInvalidConfig) {
		t.Errorf("negative queue: %v", err)
	}
}

func TestTraceOTLPExporter(t *testing.T) {
	if _, err := NewOTLPExporter(t.Context(), OTLPConfig{Protocol: "carrier-pigeon"}); !errors.Is(err, observers.ErrInvalidConfig) {
		t.Errorf("unknown protocol: %v", err)
	}
	g, err := NewOTLPExporter(t.Context(), OTLPConfig{Protocol: "grpc", Endpoint: "localhost:4317", Insecure: true, Headers: map[string]string{"x-k": "v"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Shutdown(t.Context()); err != nil {
		t.Errorf("gRPC exporter Shutdown: %v", err)
	}

	// Over HTTP to a stand-in collector: the spans of the run arrive as one
	// OTLP protobuf POST, with the headers.
	var mu sync.Mutex
	var posts []*http.Request
	var bodies [][]byte
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts, bodies = append(posts, r), append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer col.Close()
	h, err := NewOTLPExporter(t.Context(), OTLPConfig{Protocol: "http", Endpoint: col.URL + "/v1/traces", Insecure: true, Headers: map[string]string{"Authorization": "Bearer t"}})
	if err != nil {
		t.Fatal(err)
	}
	run := newTelemetryRun(t)
	tr, err := NewTrace(TraceConfig{Exporter: h, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range run.records {
		if err := tr.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 {
		t.Fatalf("%d POSTs to the collector, want 1", len(posts))
	}
	r := posts[0]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Authorization") != "Bearer t" {
		t.Errorf("POST %s %s, Content-Type %q, Authorization %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"))
	}
	for _, want := range []string{"invoke_agent researcher", "execute_tool shell", "noeta.guard.verdict", "gen_ai.tool.call.id"} {
		if !bytes.Contains(bodies[0], []byte(want)) {
			t.Errorf("the export does not carry %q", want)
		}
	}
}
