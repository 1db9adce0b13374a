package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/hostconfig"
)

// atAnswer keeps what the log held of every task at the moment the hook
// handler wrote its last answer.
type atAnswer struct {
	mu   sync.Mutex
	recs []noeta.Payload
}

func (a *atAnswer) wrap(t *testing.T) func(*hostconfig.Host, http.Handler) http.Handler {
	return func(h *hostconfig.Host, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&snapWriter{ResponseWriter: w, snap: func() {
				var recs []noeta.Payload
				ts, err := h.Tasks(context.Background())
				if err != nil {
					t.Error(err)
				}
				for _, tk := range ts {
					envs, err := h.Events(context.Background(), tk.Task, 0)
					if err != nil {
						t.Error(err)
					}
					for _, e := range envs {
						if p, _, err := e.Decode(); err == nil {
							recs = append(recs, p)
						}
					}
				}
				a.mu.Lock()
				a.recs = recs
				a.mu.Unlock()
			}}, r)
		})
	}
}

// find returns the records held at the last answer that match.
func (a *atAnswer) find(match func(noeta.Payload) bool) []noeta.Payload {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []noeta.Payload
	for _, p := range a.recs {
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

type snapWriter struct {
	http.ResponseWriter
	snap func()
	done bool
}

func (w *snapWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		w.snap()
	}
	w.ResponseWriter.WriteHeader(code)
}

// promptEvent is a hook event of Claude Code in permission mode mode.
func promptEvent(name, session, tool, id, mode string, input any) []byte {
	e := map[string]any{"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/home/me/src", "permission_mode": mode, "hook_event_name": name}
	if tool != "" {
		e["tool_name"], e["tool_use_id"], e["tool_input"] = tool, id, input
	}
	b, _ := json.Marshal(e)
	return b
}

func finishedOf(t *testing.T, r *ccRig, task, id string) *noeta.ToolCallFinished {
	t.Helper()
	for _, p := range r.records(t, task, noeta.TypeToolCallFinished) {
		if f := p.(*noeta.ToolCallFinished); f.CallID == id {
			return f
		}
	}
	return nil
}

// TestClaudeCodePromptAsk: an agent whose approval: is client_prompt has
// the approval of a Claude Code call handed to Claude Code's own prompt:
// the answer is ask, given only once the log holds the approval (the
// principal's, auth client_prompt, saying it was delegated) and the call's
// ToolCallStarted; what Claude Code reports after is the call's result.
func TestClaudeCodePromptAsk(t *testing.T) {
	var at atAnswer
	r, _ := openCCFull(t, gateway.Options{Idle: 200 * time.Millisecond}, "", "", "    approval: client_prompt\n", "", at.wrap(t))

	_, out, errOut := r.post(t, promptEvent("PreToolUse", "s1", "Bash", "toolu_p1", "default", map[string]any{"command": "go test ./..."}), 30*time.Second)
	d, why := decision(t, out)
	if d != "ask" || !strings.Contains(why, "shell commands need a person") || !strings.Contains(why, "alice") {
		t.Fatalf("Bash with approval: client_prompt: %s (%s) %s, want ask naming the rule's reason and the principal", d, why, errOut)
	}
	resolved := at.find(func(p noeta.Payload) bool { _, ok := p.(*noeta.ApprovalResolved); return ok })
	if len(resolved) != 1 {
		t.Fatalf("resolutions in the log when ask was answered: %+v, want one", resolved)
	}
	if ar := resolved[0].(*noeta.ApprovalResolved); ar.Decision != noeta.ApprovalApprove || ar.Auth != noeta.AuthClientPrompt || ar.Approver != "alice" || !strings.Contains(ar.Reason, "delegated to Claude Code's own permission prompt") {
		t.Fatalf("the resolution: %+v", ar)
	}
	if st := at.find(func(p noeta.Payload) bool { s, ok := p.(*noeta.ToolCallStarted); return ok && s.CallID == "toolu_p1" }); len(st) != 1 {
		t.Fatal("ask was answered before the call's ToolCallStarted was in the log")
	}
	task := r.onlyTask(t)

	// Claude Code's user allowed it: it ran, and its result is the call's.
	post, _ := json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "toolu_p1",
		"tool_input": map[string]any{"command": "go test ./..."}, "tool_response": map[string]any{"stdout": "ok", "stderr": ""}})
	if code, _, errOut := r.post(t, post, time.Second); code != 0 {
		t.Fatalf("PostToolUse: exit %d %s", code, errOut)
	}
	eventually(t, "the allowed call's result recorded", func() bool { return finishedOf(t, r, task, "toolu_p1") != nil })
	if f := finishedOf(t, r, task, "toolu_p1"); !f.OK || !strings.Contains(string(f.Output), "ok") {
		t.Fatalf("the call run at the prompt's yes: %+v", f)
	}

	// Refused at Claude Code's end (PermissionDenied): recorded not run.
	_, out, _ = r.post(t, promptEvent("PreToolUse", "s1", "Edit", "toolu_p2", "default", map[string]any{"file_path": "/x", "old_string": "a", "new_string": "b"}), 30*time.Second)
	if d, why := decision(t, out); d != "ask" {
		t.Fatalf("Edit: %s (%s), want ask", d, why)
	}
	den, _ := json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PermissionDenied", "tool_name": "Edit", "tool_use_id": "toolu_p2", "tool_input": map[string]any{}, "reason": "denied"})
	r.post(t, den, time.Second)
	eventually(t, "the refused call recorded", func() bool { return finishedOf(t, r, task, "toolu_p2") != nil })
	if f := finishedOf(t, r, task, "toolu_p2"); f.OK || !strings.Contains(f.Error, "handed to Claude Code's prompt") || !strings.Contains(f.Error, "declined") {
		t.Fatalf("a call refused at the prompt: %+v", f)
	}

	// Declined at the prompt: the turn is interrupted, no Stop comes; the
	// user's next prompt closes the call, recorded not run.
	_, out, _ = r.post(t, promptEvent("PreToolUse", "s1", "Bash", "toolu_p3", "default", map[string]any{"command": "make deploy"}), 30*time.Second)
	if d, _ := decision(t, out); d != "ask" {
		t.Fatalf("make deploy: %s, want ask", d)
	}
	r.post(t, promptEvent("UserPromptSubmit", "s1", "", "", "default", nil), time.Second)
	eventually(t, "the declined call recorded", func() bool { return finishedOf(t, r, task, "toolu_p3") != nil })
	if f := finishedOf(t, r, task, "toolu_p3"); f.OK || !strings.Contains(f.Error, "declined the call there") || !strings.Contains(f.Error, "UserPromptSubmit") {
		t.Fatalf("a call declined at the prompt: %+v", f)
	}

	// A call nobody needs to approve is still plainly allowed.
	_, out, _ = r.post(t, promptEvent("PreToolUse", "s1", "Read", "toolu_p4", "default", map[string]any{"file_path": "/x"}), 30*time.Second)
	if d, _ := decision(t, out); d != "allow" {
		t.Fatalf("Read: %s, want allow", d)
	}
	post, _ = json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_use_id": "toolu_p4", "tool_input": map[string]any{}, "tool_response": "x"})
	r.post(t, post, time.Second)
	// A Stop closes a call handed to the prompt with the words of one.
	_, out, _ = r.post(t, promptEvent("PreToolUse", "s1", "Bash", "toolu_p5", "default", map[string]any{"command": "ls"}), 30*time.Second)
	if d, _ := decision(t, out); d != "ask" {
		t.Fatalf("ls: %s, want ask", d)
	}
	r.post(t, promptEvent("Stop", "s1", "", "", "default", nil), time.Second)
	eventually(t, "the unreported call recorded", func() bool { return finishedOf(t, r, task, "toolu_p5") != nil })
	if f := finishedOf(t, r, task, "toolu_p5"); f.OK || !strings.Contains(f.Error, "before its Stop") || !strings.Contains(f.Error, "handed to Claude Code's prompt") {
		t.Fatalf("a call handed to the prompt, unreported at Stop: %+v", f)
	}
	if f := finishedOf(t, r, task, "toolu_p4"); f == nil || !f.OK {
		t.Fatalf("the allowed Read: %+v", f)
	}
}

// TestClaudeCodePromptRefused: where the door is not open to a request —
// the rules refuse the principal's answer or its auth or cannot be
// evaluated, a quorum, Claude
// Code in a mode that may run the call without showing its prompt, an
// agent without the door — the request waits in the inbox exactly as
// without it: no answer recorded, and the hook is denied once its wait
// is over, never answered ask.
func TestClaudeCodePromptRefused(t *testing.T) {
	door := "    approval: client_prompt\n"
	for _, tc := range []struct {
		name, cc, extra, mode string
	}{
		{"self_approval deny", door, "approvals:\n  self_approval: deny\n", "default"},
		{"approvers exclude the auth", door, "approvals:\n  rules:\n    - {name: no-prompt, approvers: 'auth != \"client_prompt\"'}\n", "default"},
		{"approvers fail to evaluate", door, "approvals:\n  rules:\n    - {name: broken, approvers: 'args.nosuch == \"x\"'}\n", "default"},
		{"a quorum of two", door, "approvals:\n  rules:\n    - {name: two, quorum: 2}\n", "default"},
		{"bypassPermissions", door, "", "bypassPermissions"},
		{"acceptEdits, an edit", door, "", "acceptEdits"},
		{"no permission_mode", door, "", ""},
		{"an agent without the door", "", "", "default"},
		{"elicitation only", "    approval: elicitation\n", "", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := openCCFull(t, gateway.Options{Idle: 200 * time.Millisecond}, "", "", tc.cc, tc.extra, nil)
			tool, input := "Bash", map[string]any{"command": "go test ./..."}
			if tc.mode == "acceptEdits" {
				tool, input = "Edit", map[string]any{"file_path": "/x", "old_string": "a", "new_string": "b"}
			}
			_, out, _ := r.post(t, promptEvent("PreToolUse", "s1", tool, "toolu_r1", tc.mode, input), 3*time.Second)
			if d, why := decision(t, out); d != "deny" || !strings.Contains(why, "waits for a person's approval") {
				t.Fatalf("%s (%s), want deny after waiting for the inbox", d, why)
			}
			task := r.onlyTask(t)
			for _, typ := range []string{noeta.TypeApprovalResolved, noeta.TypeApprovalCounted, noeta.TypeApprovalRefused} {
				if recs := r.records(t, task, typ); len(recs) != 0 {
					t.Fatalf("%s in the log: %+v, want the request left open", typ, recs)
				}
			}
			if n := len(r.records(t, task, noeta.TypeApprovalRequested)); n != 1 {
				t.Fatalf("approval requests: %d, want 1 open in the inbox", n)
			}
		})
	}
}
