package taskview

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// hostile is text that would act on a terminal: a screen clear, a title
// rewrite, a carriage return, a newline that forges a line, a C1 CSI and a
// bidi override.
const hostile = "x\x1b[2J\x1b]0;t\x07\rfake\nline\u009b1m\u202eexe"

// assertSafe fails when s holds a character a terminal would act on, other
// than the newlines that end lines.
func assertSafe(t *testing.T, what, s string) {
	t.Helper()
	for _, r := range s {
		if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
			t.Fatalf("%s: %U reaches the output raw:\n%q", what, r, s)
		}
	}
}

// runTask opens a host on an embedded server, runs a scripted task to its
// end and returns the host and the task's id.
func runTask(t *testing.T, ctx context.Context) (*hostconfig.Host, string) {
	t.Helper()
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  a:\n    tools: [echo]\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hostconfig.Open(ctx, hostconfig.Options{DataDir: t.TempDir(), Config: cfg, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	id, err := h.Submit(ctx, host.Submission{Agent: "a", Goal: "say " + hostile,
		Script: json.RawMessage(`[{"tool_calls":[{"tool":"echo","args":{"text":"hi"}}]},{"finish":{"answer":"done"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	return h, id
}

// TestEventsAndState reads a task that ran back: its records as lines and
// as CloudEvents JSON, its state, its dispatcher row; an unknown task is
// said to be unknown.
func TestEventsAndState(t *testing.T) {
	ctx := t.Context()
	h, id := runTask(t, ctx)

	var b strings.Builder
	if err := Events(ctx, h, id, false, false, &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	assertSafe(t, "events", out)
	for _, want := range []string{"#1    TaskCreated", "ToolCallStarted       engine   echo", "TaskCompleted         engine   answer \"done\"", `\u001b[2J`} {
		if !strings.Contains(out, want) {
			t.Errorf("events lack %q:\n%s", want, out)
		}
	}

	b.Reset()
	if err := Events(ctx, h, id, true, true, &b); err != nil { // follow: the task has ended
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var ce struct {
			Type    string `json:"type"`
			Subject string `json:"subject"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ce); err != nil || ce.Type == "" {
			t.Fatalf("line %d is no CloudEvent (%v): %s", n+1, err, sc.Text())
		}
		n++
	}
	if n < 5 {
		t.Errorf("%d JSON lines, want every record:\n%s", n, b.String())
	}

	ds, known, err := DispatchState(ctx, h, id)
	if err != nil || !known || ds.Status != eventlog.DispatchTerminal {
		t.Fatalf("dispatcher row: %+v, %v, %v", ds, known, err)
	}
	state, _, err := h.Fold(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := TailCheck(ctx, h, state, ds, known); err != nil {
		t.Errorf("a whole log fails the tail check: %v", err)
	}
	b.Reset()
	WriteState(&b, state, ds, known)
	assertSafe(t, "state", b.String())
	for _, want := range []string{"task      " + id, "status    terminal", "dispatch  terminal", "iterations 2, tool calls 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("state lacks %q:\n%s", want, b.String())
		}
	}

	unknown := noeta.NewTaskID()
	if err := Events(ctx, h, unknown, false, false, &b); err == nil || !strings.Contains(err.Error(), "no task "+unknown+" in this deployment") {
		t.Errorf("an unknown task: %v", err)
	}
	if _, known, err := DispatchState(ctx, h, unknown); known || err != nil {
		t.Errorf("an unknown task has a row: %v, %v", known, err)
	}
}

// TestWriteStateEscapes: every field of a folded state that came from
// outside is escaped, pending approvals and denials included.
func TestWriteStateEscapes(t *testing.T) {
	s := &engine.State{Task: "01JTASKAAAAAAAAAAAAAAAAAAA", Agent: hostile, Goal: hostile, Status: noeta.StatusTerminal,
		Reason: hostile, Guard: hostile, Answer: json.RawMessage(`"` + strings.ReplaceAll(hostile, "\n", `\n`) + `"`)}
	s.Governance.Denials = []noeta.Denial{{Type: noeta.TypeToolCallDenied, Guard: hostile, Reason: hostile, Tool: hostile}}
	s.Governance.Approvals = []noeta.ApprovalRecord{{Handle: hostile, Approver: hostile, Reason: hostile}}
	s.Governance.PendingApprovals = map[string]noeta.PendingApproval{
		"approval-1": {Action: noeta.ApprovalToolCall, Tool: hostile, Guard: hostile, Reason: hostile, Rules: []string{hostile}, Quorum: 2},
	}
	var b strings.Builder
	WriteState(&b, s, eventlog.DispatchState{Status: eventlog.DispatchSuspended, Worker: hostile}, true)
	assertSafe(t, "state", b.String())
	if !strings.Contains(b.String(), "PENDING  approval-1") || !strings.Contains(b.String(), "(0 of 2)") {
		t.Errorf("the pending approval is not shown:\n%s", b.String())
	}
}

// TestWriteDoctor: each problem on its line, escaped; the summary counts.
func TestWriteDoctor(t *testing.T) {
	tests := []struct {
		rep  jshost.DoctorReport
		want []string
	}{
		{jshost.DoctorReport{Clean: true, Tasks: 2, Records: 9, Rows: 2}, []string{"clean: 2 tasks, 9 records, 2 dispatcher rows"}},
		{jshost.DoctorReport{Tasks: 1, Records: 3, Rows: 1, Problems: []jshost.Finding{
			{Kind: "gap", Task: "01JTASK", Seqs: "4-6", Detail: "missing"},
			{Kind: "corrupt", Task: "01JTASK", StreamSeq: 17, Detail: hostile},
		}}, []string{"gap task 01JTASK seq 4-6: missing", "corrupt task 01JTASK stream seq 17: x\\u001b[2J", "2 problem(s) in 1 tasks, 3 records, 1 dispatcher rows"}},
		{jshost.DoctorReport{Clean: true, Sandbox: &jshost.SandboxReport{Enabled: false, Disabled: []string{"sandbox.enabled: false"}}},
			[]string{"sandbox: disabled by the config (sandbox.enabled: false): tools run unconfined"}},
	}
	for _, tt := range tests {
		var b strings.Builder
		WriteDoctor(&b, &tt.rep)
		assertSafe(t, "doctor", b.String())
		for _, w := range tt.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("no %q in:\n%s", w, b.String())
			}
		}
	}
}

// TestDamagedHint: a damaged store's error points at engine doctor and
// keeps its sentinel; any other error is left alone.
func TestDamagedHint(t *testing.T) {
	gap := DamagedHint(eventlog.ErrGap)
	if !errors.Is(gap, eventlog.ErrGap) || !strings.Contains(gap.Error(), "'engine doctor' lists everything it lost") {
		t.Errorf("a gap: %v", gap)
	}
	other := errors.New("timeout")
	if DamagedHint(other) != other {
		t.Error("an error that is no damage was changed")
	}
}

// TestShortDuration: an age or a time left in its largest unit.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 45 * time.Second: "45s", 12 * time.Minute: "12m", 3 * time.Hour: "3h", 72 * time.Hour: "3d"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestWriteWaitingTerminalSafe: a question or reason that carries an
// escape sequence or a bidi override (a model writes the question; a tool's
// arguments end up in the reason) is shown escaped, so it cannot clear the
// screen or reorder what the person deciding reads. Before, the bytes went
// to the terminal as they were.
func TestWriteWaitingTerminalSafe(t *testing.T) {
	var b strings.Builder
	WriteWaiting(&b, []eventlog.Waiting{
		{Task: "01JTASKQUESTIONBBBBBBBBBBBB", Handle: "question-1", Kind: eventlog.WaitingQuestion, Agent: "w\x1b[31m",
			Question: "\x1b[2J\x1b[Happrove me?", RequestedAt: time.Now()},
		{Task: "01JTASKAPPROVALAAAAAAAAAAAA", Handle: "approval-1", Kind: eventlog.WaitingApproval, Agent: "ops",
			Action: "tool_call", Tool: "shell", Guard: "g", Reason: "rm \u202eexe.ls\x07", RequestedAt: time.Now()},
	}, time.Now())
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Fatalf("control or bidi characters reached the output: %q", out)
	}
	for _, want := range []string{`\u001b[2J`, `\u202eexe.ls\u0007`, `w\u001b[31m`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestJSONShapes: inspect --json is {"state", "dispatcher"} with the row
// left out while the dispatcher has none; approvals --json is an array,
// [] when nothing waits.
func TestJSONShapes(t *testing.T) {
	s := &engine.State{Task: "01JTASKAAAAAAAAAAAAAAAAAAA", Status: noeta.StatusTerminal}
	for _, known := range []bool{true, false} {
		b, err := StateJSON(s, eventlog.DispatchState{Status: eventlog.DispatchTerminal}, known)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if _, ok := got["state"]; !ok {
			t.Errorf("no state in %s", b)
		}
		if _, ok := got["dispatcher"]; ok != known {
			t.Errorf("known %v, dispatcher in %s: %v", known, b, ok)
		}
	}
	var none, two bytes.Buffer
	if err := WriteWaitingJSON(&none, nil); err != nil || none.Len() != 0 {
		t.Errorf("nothing waits: %q, %v", none.String(), err)
	}
	err := WriteWaitingJSON(&two, []eventlog.Waiting{{Task: "t", Handle: "h"}, {Task: "u", Handle: "i"}})
	lines := strings.Split(strings.TrimSuffix(two.String(), "\n"), "\n")
	var back eventlog.Waiting
	if err != nil || len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &back) != nil || back.Handle != "i" {
		t.Errorf("two wait: %q, %v", two.String(), err)
	}
}

// TestWriteTools: a tool's name and description come from its MCP server
// and are escaped, a tab included, so they cannot shift the columns; the
// JSON lines decode to the entries.
func TestWriteTools(t *testing.T) {
	entries := []hostconfig.AgentTool{
		{Agent: "a", Tool: "echo", Risk: "low", Source: "built-in", Description: "says it back", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Agent: "a", Tool: "mcp__x__t\tab", Risk: "high", Source: "mcp:x", Description: hostile, InputSchema: json.RawMessage(`{}`)},
	}
	var b strings.Builder
	if err := WriteTools(&b, entries, false); err != nil {
		t.Fatal(err)
	}
	assertSafe(t, "tools", b.String())
	if n := strings.Count(b.String(), "\n"); n != 3 {
		t.Errorf("%d lines, want a header and a line per tool:\n%s", n, b.String())
	}
	b.Reset()
	if err := WriteTools(&b, entries, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d JSON lines, want 2:\n%s", len(lines), b.String())
	}
	var e ToolEntry
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Description != hostile || e.Source != "mcp:x" {
		t.Errorf("line %s decodes to %+v (%v)", lines[1], e, err)
	}
}
