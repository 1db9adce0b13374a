package timeline

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

const (
	rootID  = "01JROOTAAAAAAAAAAAAAAAAAAA"
	childID = "01JCHILDBBBBBBBBBBBBBBBBBB"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// rec is a record of the test logs: task, seq (0: an inbox record, keyed
// inbox-N) and payload; its time is t0 plus 10 ms a record.
type rec struct {
	task string
	seq  uint64
	p    noeta.Payload
}

func envelopes(t *testing.T, recs []rec) []eventlog.Envelope {
	t.Helper()
	out := make([]eventlog.Envelope, len(recs))
	for i, r := range recs {
		env, err := eventlog.NewEnvelope(r.task, eventlog.OriginEngine, "test", r.p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.Time = r.seq, t0.Add(time.Duration(i)*10*time.Millisecond)
		if r.seq == 0 {
			env.Key = "inbox-" + r.task[len(r.task)-4:]
			env.Origin = eventlog.OriginSystem
		}
		out[i] = env
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// logs are representative task trees: tool calls that run and fail, a
// budget and a rule denial, an approval asked under a rule and answered
// by a named approver, a quorum, subtasks with their allotment and
// result, a failure by a guard.
func logs() map[string][]rec {
	args := json.RawMessage(`{"command":"ls -l"}`)
	return map[string][]rec{
		"tools": {
			{rootID, 1, &noeta.TaskCreated{TaskID: rootID, Agent: "researcher", Goal: "Summarise the repository", RootTaskID: rootID}},
			{rootID, 2, &noeta.LeaseGranted{LeaseID: "l1", Generation: 1, Worker: "w1"}},
			{rootID, 3, &noeta.TurnStarted{Turn: 1}},
			{rootID, 4, &noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, CostUSD: 0.0123, InputTokens: 1200, OutputTokens: 80}},
			{rootID, 5, &noeta.ToolCallStarted{CallID: "call-1", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`), Turn: 1}},
			{rootID, 6, &noeta.ToolCallFinished{CallID: "call-1", Tool: "read_file", OK: true, Output: json.RawMessage(`"# noeta-go\n\nnoeta-go is a Go runtime that hosts AI-agent tasks and governs them."`), DurationMS: 3}},
			{rootID, 7, &noeta.ToolCallStarted{CallID: "call-2", Tool: "shell", Args: args, Turn: 1}},
			{rootID, 8, &noeta.ToolCallFinished{CallID: "call-2", Tool: "shell", OK: false, Error: "exit status 2: ls: cannot access 'x': No such file or directory", DurationMS: 41}},
			{rootID, 9, &noeta.ToolCallFinished{CallID: "call-3", Tool: "read_file", OK: true, OutputRef: &noeta.ContentRef{Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Size: 1 << 20}, DurationMS: 9}},
			{rootID, 10, &noeta.ToolCallFinished{CallID: "call-4", Tool: "mcp__docs__fetch", OK: true, OutputRef: &noeta.ContentRef{Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Size: 9000},
				Preview: "Here is the page:\n[image image/png, 6000 bytes]\nThe image above is the logo, and the page goes on for a long while after it.", DurationMS: 9}},
			{rootID, 11, &noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)}},
		},
		// A model's turns: its words beside its calls, cut for the line
		// and escaped, words stored by ref, and a turn without words (a
		// script's, or a record written before records had them) as
		// before.
		"model": {
			{rootID, 3, &noeta.TurnStarted{Turn: 1}},
			{rootID, 4, &noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, Version: 2, CostUSD: 0.002, InputTokens: 1500, OutputTokens: 40, Model: "gpt-test", Provider: "openai",
				Text:      "Let me check the file first.\nThen \x1b[31mthe\x1b[0m tests, one by one, until every one of them passes and the README says what the code does.",
				ToolCalls: []noeta.RecordedCall{{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{"path":"go.mod"}`)}}}},
			{rootID, 5, &noeta.TurnStarted{Turn: 2}},
			{rootID, 6, &noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionYieldForHuman, Version: 2, Question: "Which?", TextRef: &noeta.ContentRef{Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Size: 9000}}},
			{rootID, 7, &noeta.TurnStarted{Turn: 3}},
			{rootID, 8, &noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionFinish, CostUSD: 0.001, InputTokens: 900, OutputTokens: 12}},
		},
		"approvals": {
			{rootID, 5, &noeta.ApprovalRequested{Handle: "approval-7Q", Action: noeta.ApprovalToolCall, CallID: "call-2", Tool: "shell", Args: args,
				Guard: "permission", Reason: "shell needs a human", Rules: []string{"sre-on-call"}, Quorum: 2, ExpiresAt: t0.Add(time.Hour)}},
			{rootID, 6, &noeta.TaskSuspended{Reason: "waiting for approval", WakeOn: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-7Q"}}},
			{rootID, 7, &noeta.ApprovalRefused{Handle: "approval-7Q", Decision: noeta.ApprovalApprove, Approver: "mallory", Auth: noeta.AuthNATS, Reason: "not allowed by sre-on-call"}},
			{rootID, 8, &noeta.ApprovalCounted{Handle: "approval-7Q", Approver: "alice", Auth: noeta.AuthNATS, Approvals: 1, Quorum: 2, Reason: "looks fine"}},
			{rootID, 9, &noeta.ApprovalResolved{Handle: "approval-7Q", Decision: noeta.ApprovalApprove, Approver: "bob", Approvers: []string{"alice", "bob"}, Auth: noeta.AuthToken, Reason: "ok"}},
			{rootID, 10, &noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-7Q", Decision: "approve", Approver: "bob"}}},
			{rootID, 11, &noeta.ApprovalRequested{Handle: "approval-8R", Action: noeta.ApprovalFinish, Args: json.RawMessage(`{"answer":"ship it"}`), Guard: "rules", Reason: "finishing needs sign-off"}},
			{rootID, 12, &noeta.ApprovalResolved{Handle: "approval-8R", Decision: noeta.ApprovalApprove, Approver: "cli:ann", Auth: noeta.AuthLocal, Reason: "answered on the terminal"}},
			{rootID, 13, &noeta.ApprovalRequested{Handle: "approval-9S", Action: noeta.ApprovalSpawnSubtask, Agent: "helper", Args: json.RawMessage(`{"goal":"count"}`), Guard: "permission", Reason: "spawn needs a human", ExpiresAt: t0.Add(time.Minute)}},
			{rootID, 14, &noeta.ApprovalResolved{Handle: "approval-9S", Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer, Reason: "no answer before 2026-12-01T12:01:00Z"}},
		},
		"budgets": {
			{rootID, 4, &noeta.ToolCallDenied{Guard: "budget", Tool: "echo", CallID: "call-1-1", Reason: "max_tool_calls 1 reached"}},
			{rootID, 5, &noeta.ToolCallDenied{Guard: "rules", Tool: "shell", CallID: "call-1-2", Reason: "rm -rf is never allowed"}},
			{rootID, 6, &noeta.SubtaskDenied{Guard: "budget", Agent: "helper", Reason: "max_spawned_subtasks 2 reached"}},
			{rootID, 7, &noeta.FinishDenied{Guard: "rules", Reason: "no answer without a source"}},
			{rootID, 8, &noeta.TaskFailed{Guard: "budget", Error: "max_cost_usd 0.5 reached: spent $0.52"}},
		},
		"shadow": {
			{rootID, 4, &noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "call-1-0", Tool: "shell", Guard: "rules", Rule: "rules[0]",
				Verdict: noeta.VerdictDeny, Reason: "new ban on shell", Decided: noeta.VerdictAllow}},
			{rootID, 5, &noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "call-1-0", Tool: "shell", Guard: "trial", Rule: "guards[0].rules[1]",
				Verdict: noeta.VerdictRequireApproval, Reason: "trial approval", Decided: noeta.VerdictAllow}},
			{rootID, 6, &noeta.ToolCallStarted{CallID: "call-1-0", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Turn: 1}},
			{rootID, 7, &noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "call-1-1", Tool: "shell", Guard: "trial",
				Verdict: noeta.VerdictDeny, Reason: "shadow rules of guard \"trial\" panicked", Failed: true, Decided: noeta.VerdictDeny, DecidedBy: "permission"}},
			{rootID, 8, &noeta.ToolCallDenied{Guard: "permission", Tool: "shell", CallID: "call-1-1", Reason: "shell is denied"}},
			{rootID, 9, &noeta.GuardShadowed{Action: noeta.ApprovalSpawnSubtask, Agent: "helper", Guard: "trial", Rule: "guards[0].rules[0]",
				Verdict: noeta.VerdictAllow, Reason: "ok", Decided: noeta.VerdictRequireApproval, DecidedBy: "permission"}},
			{rootID, 10, &noeta.GuardShadowed{Action: noeta.ApprovalFinish, Guard: "trial", Rule: "guards[0].rules[2]",
				Verdict: noeta.VerdictDeny, Reason: "no answer", Decided: noeta.VerdictAllow}},
		},
		"subtasks": {
			{rootID, 5, &noeta.SubtaskSpawned{SubtaskID: childID, Agent: "helper", Goal: "count lines", GroupID: "group-1", Budget: &noeta.BudgetAllotment{CostUSD: ptr(0.25), ToolCalls: ptr(10)}}},
			{childID, 1, &noeta.TaskCreated{TaskID: childID, Agent: "helper", Goal: "count lines", ParentTaskID: rootID, RootTaskID: rootID}},
			{childID, 2, &noeta.TaskFailed{Error: "the model refused"}},
			{rootID, 0, &noeta.SubtaskCompleted{SubtaskID: childID, Status: noeta.SubtaskStatusFailed, Error: "the model refused"}},
			{rootID, 6, &noeta.SubtaskResultRecorded{SubtaskID: childID, Status: noeta.SubtaskStatusFailed, Error: "the model refused", Spend: &noeta.TreeSpend{CostUSD: 0.031, ToolCalls: 3}}},
			{rootID, 7, &noeta.TaskSuspended{Reason: "waiting for the group", WakeOn: noeta.Wake{Kind: noeta.WakeSubtaskGroupCompleted, GroupID: "group-1", SubtaskIDs: []string{childID}}}},
			{rootID, 8, &noeta.TaskCancelled{Reason: "cancelled by cli:ann"}},
		},
	}
}

// render is the timeline of recs as the Printer prints it: the root's
// records as root, the child's as child.
func render(t *testing.T, recs []rec) string {
	var b strings.Builder
	for _, env := range envelopes(t, recs) {
		depth := 0
		if env.Task == childID {
			depth = 1
		}
		b.WriteString(Line(env, env.Time.Sub(t0).Seconds(), Role(env.Task == rootID, depth)) + "\n")
	}
	b.WriteString("-- events --\n")
	for _, env := range envelopes(t, recs) {
		b.WriteString(EventLine(env, env.Time.Sub(t0).Seconds()) + "\n")
	}
	return b.String()
}

// TestGolden compares the timeline and the events listing of each
// representative log with testdata/NAME.golden (go test -update rewrites
// them).
func TestGolden(t *testing.T) {
	for name, recs := range logs() {
		t.Run(name, func(t *testing.T) {
			got := render(t, recs)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n%s", name, path, got)
			}
		})
	}
}

// TestDescribeApprovals: the timeline says what each approval record
// means: the request's terms, a count toward a quorum, a refused answer
// and why, a quorum's approvers, an expiry.
func TestDescribeApprovals(t *testing.T) {
	exp := time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		p    noeta.Payload
		want string
	}{
		{&noeta.ApprovalRequested{Handle: "h", Action: noeta.ApprovalToolCall, CallID: "c1", Tool: "shell", Args: []byte(`{"command":"ls"}`), Guard: "g", Reason: "risky",
			Rules: []string{"sre"}, Quorum: 2, ExpiresAt: exp},
			`guard=g  h shell c1 {"command":"ls"}: risky [rules sre; quorum 2; expires 2026-12-01T12:30:00Z]`},
		{&noeta.ApprovalRequested{Handle: "h", Action: noeta.ApprovalFinish, Args: []byte(`{"answer":1}`), Guard: "g", Reason: "r"},
			`guard=g  h finish {"answer":1}: r`},
		{&noeta.ApprovalCounted{Handle: "h", Approver: "alice", Auth: noeta.AuthNATS, Approvals: 1, Quorum: 2},
			"h approved by alice (nats): 1 of 2 approvals"},
		{&noeta.ApprovalRefused{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "mallory", Auth: noeta.AuthNone, Reason: "not allowed"},
			"h approve by mallory (none) REFUSED: not allowed"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "bob", Auth: noeta.AuthToken, Approvers: []string{"alice", "bob"}},
			"h approve by alice, bob (token)"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "cli:ann", Auth: noeta.AuthLocal, Reason: "ok"},
			"h approve by cli:ann: ok"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer, Reason: "no answer before 2026-12-01T12:30:00Z"},
			"h deny: expired: no answer before 2026-12-01T12:30:00Z"},
	}
	for _, tt := range tests {
		if got := Describe(eventlog.Envelope{}, tt.p); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.p.EventType(), got, tt.want)
		}
	}
}

// hostile is text that would act on a terminal: an escape sequence that
// clears the screen, one that rewrites the title, a carriage return that
// overwrites the line, a newline that forges another record, a C1 CSI, a
// bidi override and a zero-width space.
const hostile = "ok\x1b[2J\x1b]0;pwned\x07\rfake\n  0.000s  root  …AAAAAA  #9   TaskCompleted\u009b31m\u202egnp.exe\u200b"

// TestNoControlSequenceReachesTheOutput: every field of a record that came
// from outside (a goal, an agent, arguments, a tool's output and error, a
// guard's reason, an approver, a wake's text, an unknown record's payload)
// is escaped: the output holds no control character, no escape, no bidi
// control, and each record stays on one line.
func TestNoControlSequenceReachesTheOutput(t *testing.T) {
	h := hostile
	hj, _ := json.Marshal(h)
	recs := []rec{
		{rootID, 1, &noeta.TaskCreated{TaskID: rootID, Agent: h, Goal: h, RootTaskID: rootID}},
		{rootID, 2, &noeta.LeaseGranted{Worker: h, Generation: 1}},
		{rootID, 3, &noeta.ToolCallStarted{CallID: h, Tool: h, Args: json.RawMessage(`{"x":` + string(hj) + `}`)}},
		{rootID, 4, &noeta.ToolCallFinished{CallID: "c", Tool: "t", OK: true, Output: hj}},
		{rootID, 5, &noeta.ToolCallFinished{CallID: "c", Tool: "t", Error: h}},
		{rootID, 6, &noeta.ToolCallDenied{Guard: h, Tool: h, CallID: h, Reason: h}},
		{rootID, 6, &noeta.GuardShadowed{Action: noeta.ApprovalToolCall, Guard: h, Rule: h, Tool: h, CallID: h, Reason: h, Verdict: noeta.VerdictDeny, Decided: noeta.VerdictAllow, DecidedBy: h}},
		{rootID, 7, &noeta.ApprovalRequested{Handle: h, Action: noeta.ApprovalToolCall, Tool: h, CallID: h, Guard: h, Reason: h, Rules: []string{h}}},
		{rootID, 8, &noeta.ApprovalResolved{Handle: h, Decision: noeta.ApprovalApprove, Approver: h, Auth: h, Reason: h}},
		{rootID, 9, &noeta.ApprovalRefused{Handle: h, Approver: h, Reason: h}},
		{rootID, 10, &noeta.SubtaskSpawned{SubtaskID: h, Agent: h, Goal: h, GroupID: h}},
		{rootID, 11, &noeta.TaskSuspended{Reason: h, WakeOn: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: h, Text: h}}},
		{rootID, 12, &noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeExternalEvent, EventKind: h}}},
		{rootID, 0, &noeta.SubtaskCompleted{SubtaskID: h, Status: noeta.SubtaskStatusFailed, Error: h}},
		{rootID, 13, &noeta.TaskFailed{Guard: h, Error: h}},
		{rootID, 14, &noeta.TaskCancelled{Reason: h}},
	}
	envs := envelopes(t, recs)
	// A record of a type this build does not know, and one whose payload
	// does not decode: both shown raw, both escaped.
	envs = append(envs,
		eventlog.Envelope{Task: rootID, Seq: 15, Type: "FromTheFuture" + h, Time: t0, Origin: eventlog.OriginEngine, Payload: json.RawMessage(`{"x":` + string(hj) + `}`)},
		eventlog.Envelope{Task: rootID, Seq: 16, Type: noeta.TypeTaskFailed, Time: t0, Origin: eventlog.Origin(h), Payload: json.RawMessage(`{"error":7,"x":` + string(hj) + `}`)},
	)
	for _, env := range envs {
		for _, line := range []string{Line(env, 1, Role(false, 2)), EventLine(env, 1)} {
			if strings.Contains(line, "\n") {
				t.Errorf("%s: a record spans lines: %q", env.Type, line)
			}
			for _, r := range line {
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' || r == '\u200b' {
					t.Errorf("%s: %U reaches the output raw: %q", env.Type, r, line)
					break
				}
			}
		}
	}
	// The escaped text still shows what was there.
	if line := Line(envs[0], 0, "root"); !strings.Contains(line, `\x1b[2J`) && !strings.Contains(line, `\u001b[2J`) {
		t.Errorf("the escape sequence is not shown escaped: %q", line)
	}
}

// TestPromptIsEscaped: an approval prompt shows the request's fields
// escaped; a control sequence in the reason or the arguments never reaches
// the terminal it asks on.
func TestPromptIsEscaped(t *testing.T) {
	var msgs syncBuffer
	p := NewPrinter(rootID, io.Discard, &msgs, false, Ask, "cli:test")
	req := host.ApprovalRequest{Task: rootID, Agent: hostile, Handle: hostile, Approval: noeta.PendingApproval{
		Action: noeta.ApprovalToolCall, Tool: hostile, CallID: "c", Args: json.RawMessage(`{}`), Guard: hostile, Reason: hostile}}
	if _, ok := p.ask(t.Context(), req); ok {
		t.Fatal("a prompt without input returned an answer")
	}
	for _, r := range msgs.String() {
		if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
			t.Fatalf("%U reaches the prompt raw: %q", r, msgs.String())
		}
	}
}

// TestModes: the approval modes answer as they say, in the approver's name
// and with the printer's reasons; leave answers nothing.
func TestModes(t *testing.T) {
	tests := []struct {
		mode   Mode
		want   noeta.ApprovalDecision
		reason string
		ok     bool
	}{
		{Approve, noeta.ApprovalApprove, "approved from the command line (--approvals approve)", true},
		{Deny, noeta.ApprovalDeny, "refused from the command line (--approvals deny)", true},
		{Leave, "", "", false},
	}
	for _, tt := range tests {
		p := NewPrinter(rootID, io.Discard, io.Discard, false, tt.mode, "cli:ann")
		a, ok := p.answer(t.Context(), host.ApprovalRequest{Task: rootID, Handle: "h"})
		if ok != tt.ok || a.Decision != tt.want || (ok && (a.Approver != "cli:ann" || a.Reason != tt.reason)) {
			t.Errorf("%s: %+v, %v", tt.mode, a, ok)
		}
	}
	for _, s := range []string{"ask", "approve", "deny", "leave"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("yes"); err == nil || !strings.Contains(err.Error(), "want ask, approve, deny or leave") {
		t.Errorf("ParseMode(yes): %v", err)
	}
}

func TestRoleAndShort(t *testing.T) {
	for _, tt := range []struct {
		root  bool
		depth int
		want  string
	}{{true, 0, "root"}, {false, 1, "child"}, {false, 2, "sub2"}, {false, 5, "sub5"}} {
		if got := Role(tt.root, tt.depth); got != tt.want {
			t.Errorf("Role(%v, %d) = %q, want %q", tt.root, tt.depth, got, tt.want)
		}
	}
	if got := Short(rootID); got != "…AAAAAA" {
		t.Errorf("Short = %q", got)
	}
	if got := Short("abc"); got != "abc" {
		t.Errorf("Short(abc) = %q", got)
	}
	if got := Cut("a  b   c", 80); got != "a b c" {
		t.Errorf("Cut folds spaces: %q", got)
	}
	if got := Cut("αβγδε", 3); got != "αβ…" {
		t.Errorf("Cut by runes: %q", got)
	}
}

// syncBuffer is a bytes buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAskDropsTheLineOfAClosedPrompt: a line typed for a prompt that was
// closed (its request answered elsewhere) is not taken as the answer to the
// next request, which its typist never saw.
func TestAskDropsTheLineOfAClosedPrompt(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var msgs syncBuffer
	p := NewPrinter("01JTASKAAAAAAAAAAAAAAAAAAA", io.Discard, &msgs, false, Ask, "cli:test")
	p.Answers = bufio.NewReader(pr)
	req := host.ApprovalRequest{Task: "01JTASKAAAAAAAAAAAAAAAAAAA", Handle: "approval-1"}

	closed, cancel := context.WithCancelCause(t.Context())
	cancel(host.ErrRequestClosed)
	if _, ok := p.ask(closed, req); ok {
		t.Fatal("a prompt whose request is closed returned an answer")
	}
	type result struct {
		d  noeta.ApprovalDecision
		ok bool
	}
	next := make(chan result, 1)
	go func() {
		d, ok := p.ask(t.Context(), host.ApprovalRequest{Task: req.Task, Handle: "approval-2"})
		next <- result{d, ok}
	}()
	// The "y" meant for approval-1 completes the read the closed prompt
	// began; approval-2's answer is the next line.
	if _, err := io.WriteString(pw, "y\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, "n\n"); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if !r.ok || r.d != noeta.ApprovalDeny {
		t.Fatalf("approval-2 answered %q (ok %v), want deny: the line typed for approval-1 was taken\n%s", r.d, r.ok, msgs.String())
	}
	if !strings.Contains(msgs.String(), "answered an earlier request") {
		t.Errorf("the dropped line is not said:\n%s", msgs.String())
	}
}

// TestWriteOutcome: each way a tree comes to rest is said, a waiting one
// with the command that answers it; the fields of the records escaped.
func TestWriteOutcome(t *testing.T) {
	waiting := host.Rest{Status: host.RestWaiting, Waiting: []host.Waiting{{Task: rootID, Handle: "approval-1",
		Approval: &noeta.PendingApproval{Action: noeta.ApprovalToolCall, Tool: "shell", CallID: "c1", Args: json.RawMessage(`{}`), Guard: "permission", Reason: hostile}}}}
	question := host.Rest{Status: host.RestWaiting, Waiting: []host.Waiting{{Task: rootID, Handle: "question-1", Reason: "waiting_human: which file?"}}}
	tests := []struct {
		rest  host.Rest
		where string
		want  []string
	}{
		{host.Rest{Status: host.RestCompleted, Detail: `"42"`}, "", []string{`completed: task ` + rootID + ` answered "42"`}},
		{host.Rest{Status: host.RestFailed, Detail: "over budget", Guard: "budget"}, "", []string{"failed: task " + rootID + ": over budget (guard budget)"}},
		{waiting, "--data /d", []string{"waiting for approval: task " + rootID + " handle approval-1", "shell c1 {}", "engine approve " + rootID + " approval-1 --data /d"}},
		{waiting, "", []string{"to answer: through the host that holds the task"}},
		{question, "--data /d", []string{"waiting for a human: task " + rootID + " handle question-1", "engine answer " + rootID + " question-1 TEXT --data /d"}},
		{host.Rest{Status: host.RestInterrupted, Detail: "signal"}, "--data /d", []string{"interrupted: task " + rootID + " is left as it is (signal; --data /d)"}},
	}
	for _, tt := range tests {
		var b strings.Builder
		WriteOutcome(&b, rootID, tt.where, tt.rest)
		for _, r := range b.String() {
			if (r < 0x20 && r != '\n') || r == '\u202e' || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("%s: %U reaches the output raw: %q", tt.rest.Status, r, b.String())
			}
		}
		for _, w := range tt.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: no %q in:\n%s", tt.rest.Status, w, b.String())
			}
		}
	}
}
