package timeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// waitingTask submits, on a host of its own over b, a task that asks for
// an approval before its shell call, runs it to that rest and returns its
// id and the request's handle. The host is closed: the task waits in b.
func waitingTask(t *testing.T, b *memlog.Backend, cfg *config.File) (string, string) {
	t.Helper()
	h := openOn(t, b, cfg, host.Options{Workers: 2})
	defer h.Close()
	tf, err := policy.ParseTaskFile("task.yaml", []byte("agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(t.Context(), id)
	if err != nil || rest.Status != host.RestWaiting || len(rest.Waiting) != 1 {
		t.Fatalf("the task's rest: %+v, %v", rest, err)
	}
	return id, rest.Waiting[0].Handle
}

// openOn opens a host of cfg over b with the built-in tools.
func openOn(t *testing.T, b *memlog.Backend, cfg *config.File, o host.Options) *host.Host {
	t.Helper()
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Tools, err = tools.NewRegistry(builtins...); err != nil {
		t.Fatal(err)
	}
	o.Governance, o.Approvals, o.Workspace = cfg.Governance, cfg.Approvals, t.TempDir()
	h, err := host.Open(t.Context(), b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestAnswerRequest: an answer to the open request is applied and, when
// the host runs the tree, the tree is followed to its rest and its outcome
// written; a handle the task has not asked under, a task that does not
// exist and a request already answered are refused with what happened,
// and nothing is run.
func TestAnswerRequest(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		runs     bool
		decision noeta.ApprovalDecision
		// task and handle replace the waiting task's, when set.
		task, handle string
		// answered answers the request first, elsewhere.
		answered  bool
		onSubject bool
		wantRest  host.RestStatus
		wantOut   []string
		wantErr   error
		errText   string
	}{
		{name: "approve and run", runs: true, decision: noeta.ApprovalApprove, wantRest: host.RestCompleted,
			wantOut: []string{"approved: task ", "it is ready to run again (answer by cli:tester)", "ToolCallFinished", "completed: task "}},
		{name: "deny and run", runs: true, decision: noeta.ApprovalDeny, wantRest: host.RestCompleted,
			wantOut: []string{"refused: task ", "ApprovalResolved", "deny by cli:tester: test", "completed: task "}},
		{name: "answer only", decision: noeta.ApprovalApprove,
			wantOut: []string{"approved: task ", "it is ready to run again"}},
		{name: "on the approval subject", decision: noeta.ApprovalApprove, onSubject: true,
			wantOut: []string{"approved: the answer to ", "is on cli:tester's approval subject"}},
		{name: "on the approval subject, an unknown task", decision: noeta.ApprovalApprove, onSubject: true, task: noeta.NewTaskID(),
			errText: "in this deployment (data test)"},
		{name: "unknown handle", runs: true, decision: noeta.ApprovalApprove, handle: "approval-call-9-9-zzzzzzzzzz",
			wantErr: eventlog.ErrNotWaiting, errText: "has no open request approval-call-9-9-zzzzzzzzzz; nothing was answered or kept"},
		{name: "unknown handle, answer only", decision: noeta.ApprovalApprove, handle: "approval-call-9-9-zzzzzzzzzz",
			wantErr: eventlog.ErrNotWaiting, errText: "nothing was answered or kept"},
		{name: "unknown task", runs: true, decision: noeta.ApprovalApprove, task: noeta.NewTaskID(),
			errText: "in this deployment (data test)"},
		{name: "answered already", runs: true, decision: noeta.ApprovalApprove, answered: true,
			wantErr: eventlog.ErrAlreadyAnswered, errText: "another answer to "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := memlog.NewBackend(memlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			task, handle := waitingTask(t, b, cfg)
			h := openOn(t, b, cfg, host.Options{Workers: 2, Deferred: true})
			if tt.answered {
				if err := h.Approve(t.Context(), task, handle, host.Answer{Decision: noeta.ApprovalDeny, Approver: "cli:other"}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.task != "" {
				task = tt.task
			}
			if tt.handle != "" {
				handle = tt.handle
			}
			var out, msgs syncBuffer
			rest, err := AnswerRequest(t.Context(), h, AnswerOptions{
				Task: task, Handle: handle, Answer: host.Answer{Decision: tt.decision, Approver: "cli:tester", Reason: "test"},
				Verb: map[noeta.ApprovalDecision]string{noeta.ApprovalApprove: "approved", noeta.ApprovalDeny: "refused"}[tt.decision],
				Runs: tt.runs, OnSubject: tt.onSubject, Out: &out, Msgs: &msgs, Approver: "cli:tester", Where: "data test", Flags: "--data test",
			})
			if tt.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errText) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err = %v, want %q (%v)", err, tt.errText, tt.wantErr)
				}
				// An answer the dispatcher holds but no engine has applied
				// shows only to the answer itself, after the pool started.
				if h.Runs() && !tt.answered {
					t.Error("the pool started for a refused answer")
				}
				return
			}
			if err != nil {
				t.Fatalf("AnswerRequest: %v\n%s", err, out.String())
			}
			switch {
			case !tt.runs && rest != nil:
				t.Errorf("answer only returned a rest: %+v", rest)
			case tt.runs && (rest == nil || rest.Status != tt.wantRest):
				t.Errorf("rest = %+v, want %s", rest, tt.wantRest)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestAnswerRequestEnded: a task that has ended is refused as such; if the
// request was answered before it ended (refused, and the task went on to
// finish), the loser is told another answer came first.
func TestAnswerRequestEnded(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	task, handle := waitingTask(t, b, cfg)
	h := openOn(t, b, cfg, host.Options{Workers: 2})
	if err := h.Approve(t.Context(), task, handle, host.Answer{Decision: noeta.ApprovalDeny, Approver: "cli:other"}); err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(t.Context(), task); err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("rest: %+v, %v", rest, err)
	}
	for _, tt := range []struct{ handle, want string }{
		{handle, "another answer to " + handle},
		{"approval-call-9-9-zzzzzzzzzz", "has ended ("},
	} {
		var out syncBuffer
		_, err := AnswerRequest(t.Context(), h, AnswerOptions{Task: task, Handle: tt.handle, Answer: host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:tester"}, Out: &out, Msgs: &out})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.handle, err, tt.want)
		}
	}
}

func TestAnswerError(t *testing.T) {
	t.Parallel()
	other := errors.New("the wire broke")
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", eventlog.ErrNotFound), "no task T in this deployment (data D)"},
		{fmt.Errorf("x: %w", eventlog.ErrAlreadyAnswered), "not applied: another answer to H of task T came first; yours was not applied: x: "},
		{fmt.Errorf("x: %w", eventlog.ErrNotWaiting), "refused: task T has no open request H; nothing was answered or kept: x: "},
		{fmt.Errorf("x: %w", engine.ErrRequestExpired), "too late: H of task T expired before this answer; it was not applied: x: "},
		{fmt.Errorf("x: %w", engine.ErrApproverNotAllowed), "refused by the approvals rules; the answer was not taken: x: "},
		{context.DeadlineExceeded, "answer H of task T: stopped before it was applied: "},
		{context.Canceled, "answer H of task T: stopped before it was applied: "},
		{other, "answer H of task T: the wire broke"},
	}
	for _, tt := range tests {
		got := AnswerError(tt.err, "T", "H", "data D")
		if !strings.HasPrefix(got.Error(), tt.want) {
			t.Errorf("AnswerError(%v) = %q, want it to start %q", tt.err, got, tt.want)
		}
		if !errors.Is(tt.err, eventlog.ErrNotFound) && !errors.Is(got, tt.err) {
			t.Errorf("AnswerError(%v) does not wrap it", tt.err)
		}
	}
}

// TestWaitResolved: the wait ends at once for a request that is not open,
// and at its limit for one that stays open.
func TestWaitResolved(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	task, handle := waitingTask(t, b, cfg)
	h := openOn(t, b, cfg, host.Options{Workers: 2, Deferred: true})
	tests := []struct {
		handle   string
		min, max time.Duration
	}{
		{"approval-call-9-9-zzzzzzzzzz", 0, 5 * time.Second},
		{handle, 300 * time.Millisecond, 10 * time.Second},
	}
	for _, tt := range tests {
		start := time.Now()
		waitResolved(t.Context(), h, task, tt.handle, 300*time.Millisecond)
		if took := time.Since(start); took < tt.min || took > tt.max {
			t.Errorf("%s: waited %v, want from %v to %v", tt.handle, took, tt.min, tt.max)
		}
	}
}

// TestPrinterRun: Run submits the task as the printer's root, prints its
// tree, answers as the mode says and writes the outcome: after the header
// and the timeline, or, with JSON lines, to the messages, so the output
// holds nothing but CloudEvents.
func TestPrinterRun(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tf, err := policy.ParseTaskFile("task.yaml", []byte("agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		json          bool
		mode          Mode
		rest          host.RestStatus
		wantOut       []string
		wantMsgs      []string
		jsonLinesOnly bool
	}{
		{name: "approve", mode: Approve, rest: host.RestCompleted,
			wantOut: []string{"HEADER\n", "ApprovalResolved", "completed: task "}},
		{name: "leave", mode: Leave, rest: host.RestWaiting,
			wantOut: []string{"HEADER\n", "waiting for approval: task ", "engine approve ", " --data test"}},
		{name: "json", json: true, mode: Deny, rest: host.RestCompleted,
			wantMsgs: []string{"completed: task "}, jsonLinesOnly: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := memlog.NewBackend(memlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			h := openOn(t, b, cfg, host.Options{Workers: 2})
			var out, msgs syncBuffer
			id := noeta.NewTaskID()
			p := NewPrinter(id, &out, &msgs, tt.json, tt.mode, "cli:tester")
			rest, err := p.Run(t.Context(), h, sub, RunOptions{Header: "HEADER\n", Source: "task.yaml", Flags: "--data test"})
			if err != nil || rest.Status != tt.rest {
				t.Fatalf("Run: %+v, %v\n%s", rest, err, out.String())
			}
			if evs, err := h.Events(t.Context(), id, 0); err != nil || len(evs) == 0 {
				t.Errorf("the task did not run as the printer's root: %v", err)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, want := range tt.wantMsgs {
				if !strings.Contains(msgs.String(), want) {
					t.Errorf("messages lack %q:\n%s", want, msgs.String())
				}
			}
			if tt.jsonLinesOnly {
				for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					if !json.Valid([]byte(line)) {
						t.Errorf("not a JSON line: %q", line)
					}
				}
			}
		})
	}
	t.Run("a submission refused", func(t *testing.T) {
		t.Parallel()
		b, err := memlog.NewBackend(memlog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		h := openOn(t, b, cfg, host.Options{Workers: 2})
		bad := sub
		bad.Agent = "nobody"
		var out syncBuffer
		_, err = NewPrinter(noeta.NewTaskID(), &out, &out, false, Leave, "cli:tester").Run(t.Context(), h, bad, RunOptions{Source: "task.yaml"})
		if err == nil || !strings.HasPrefix(err.Error(), "submit task.yaml: ") {
			t.Errorf("err = %v, want the submission's, naming task.yaml", err)
		}
	})
}
