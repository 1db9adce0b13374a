package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/webui"
)

// ccConfig governs Claude Code's tools by rules: rm -rf is denied, any
// other Bash command and an Edit wait for a person, the rest runs.
const ccConfig = `
agents:
  cc:
    tools: ["claude_code__*"]
    permission_mode: bypassPermissions
    approval_timeout: 1h
rules:
  - match_tool: "claude_code__Bash"
    match_arg: {path: command, regex: "rm -rf"}
    action: deny
    reason: "no recursive deletes"
  - match_tool: "claude_code__Bash"
    action: require_approval
    reason: "shell commands need a person"
  - match_tool: "claude_code__Edit"
    action: require_approval
    reason: "edits need a person"
`

// ccRig is a gateway with its hook endpoint on an HTTP test server.
type ccRig struct {
	gw    *gateway.Gateway
	h     *hostconfig.Host
	url   string
	token string
}

func openCC(t *testing.T, o gateway.Options) *ccRig {
	r, _ := openCCWith(t, o, "", "")
	return r
}

// openCCWith is openCC with more config: agents (under agents:) and a
// second token, bob's, for the given agent ("" for none). It returns bob's
// token.
func openCCWith(t *testing.T, o gateway.Options, agents, bobAgent string) (*ccRig, string) {
	t.Helper()
	return openCCFull(t, o, agents, bobAgent, "", "", nil)
}

// openCCFull is openCCWith with more: lines for agent cc (after its
// approval_timeout), config appended (extra), and a wrapper of the hook
// handler (nil: none). The gateway gets the config's approvals rules.
func openCCFull(t *testing.T, o gateway.Options, agents, bobAgent, ccLines, extra string, wrap func(*hostconfig.Host, http.Handler) http.Handler) (*ccRig, string) {
	t.Helper()
	tok, sum := webui.NewToken()
	bobTok, bobSum := webui.NewToken()
	bob := `    - {name: bob, sha256: "` + bobSum + `"}` + "\n"
	if bobAgent != "" {
		bob = `    - {name: bob, sha256: "` + bobSum + `", agent: ` + bobAgent + `}` + "\n"
	}
	yaml := strings.Replace(strings.Replace(ccConfig, "agents:\n", "agents:\n"+agents, 1), "    approval_timeout: 1h\n", "    approval_timeout: 1h\n"+ccLines, 1) + extra + `
http:
  tokens:
    - {name: alice, sha256: "` + sum + `"}
` + bob
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	o.Agent = "cc"
	o.AgentOf = cfg.HTTP.AgentOf()
	o.Approvals = cfg.Approvals
	gw := gateway.New(o)
	h, err := hostconfig.Open(context.Background(), hostconfig.Options{Config: cfg, DataDir: t.TempDir(), Workers: 2, Workspace: t.TempDir(),
		Policies: gw.Policies, Queue: gw.Queue(), Guards: []guards.Guard{gw.Guard()}, Tools: gw.ClaudeCodeTools(), Name: "gateway",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	gw.Attach(h.Host, nil)
	gate := webui.NewGate(cfg.HTTP, webui.Limits{})
	var hh http.Handler = gw.HookHandler("cc", gateway.GateAuth(gate))
	if wrap != nil {
		hh = wrap(h, hh)
	}
	ts := httptest.NewServer(hh)
	t.Cleanup(func() {
		ts.Close()
		gw.Close()
		h.Close()
	})
	return &ccRig{gw: gw, h: h, url: ts.URL, token: tok}, bobTok
}

// event is a hook event as Claude Code sends it.
func event(name, session, tool, id string, input any) []byte {
	e := map[string]any{"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/home/me/src", "permission_mode": "default", "hook_event_name": name}
	if tool != "" {
		e["tool_name"], e["tool_use_id"], e["tool_input"] = tool, id, input
	}
	b, _ := json.Marshal(e)
	return b
}

// post sends one event as a command hook would (engine hook claude-code):
// its exit code, stdout and stderr.
func (r *ccRig) post(t *testing.T, body []byte, wait time.Duration) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := gateway.HookClient{URL: r.url, Token: r.token, Wait: wait}
	code := c.Forward(context.Background(), bytes.NewReader(body), &out, &errOut)
	return code, out.String(), errOut.String()
}

// decision reads a PreToolUse answer.
func decision(t *testing.T, out string) (string, string) {
	t.Helper()
	var o gateway.PreToolUseOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("the answer %q is not a PreToolUse output: %v", out, err)
	}
	if o.HookSpecificOutput.HookEventName != "PreToolUse" {
		t.Fatalf("hookEventName %q", o.HookSpecificOutput.HookEventName)
	}
	return o.HookSpecificOutput.PermissionDecision, o.HookSpecificOutput.PermissionDecisionReason
}

// records are the task's records of type typ, decoded.
func (r *ccRig) records(t *testing.T, task, typ string) []noeta.Payload {
	t.Helper()
	envs, err := r.h.Events(context.Background(), task, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []noeta.Payload
	for _, e := range envs {
		if e.Type == typ {
			p, _, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// eventually polls cond for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

func (r *ccRig) onlyTask(t *testing.T) string {
	t.Helper()
	ts, err := r.h.Tasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 {
		t.Fatalf("tasks: %+v, want one", ts)
	}
	return ts[0].Task
}

func TestClaudeCodeHook(t *testing.T) {
	r := openCC(t, gateway.Options{Idle: 200 * time.Millisecond})
	ctx := context.Background()

	// Read is allowed; its run is Claude Code's, its result the
	// PostToolUse's tool_response, recorded as the call's output.
	code, out, errOut := r.post(t, event("PreToolUse", "s1", "Read", "toolu_01", map[string]any{"file_path": "/home/me/src/main.go"}), 10*time.Second)
	if code != 0 {
		t.Fatalf("PreToolUse Read: exit %d, %s", code, errOut)
	}
	if d, why := decision(t, out); d != "allow" {
		t.Fatalf("Read: %s (%s), want allow", d, why)
	}
	task := r.onlyTask(t)
	post, _ := json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_use_id": "toolu_01",
		"tool_input": map[string]any{"file_path": "/home/me/src/main.go"}, "tool_response": map[string]any{"type": "text", "file": map[string]any{"content": "package main"}}})
	if code, out, errOut := r.post(t, post, time.Second); code != 0 || strings.TrimSpace(out) != "{}" {
		t.Fatalf("PostToolUse: exit %d %q %s", code, out, errOut)
	}
	eventually(t, "the Read's result recorded", func() bool { return len(r.records(t, task, noeta.TypeToolCallFinished)) == 1 })
	fin := r.records(t, task, noeta.TypeToolCallFinished)[0].(*noeta.ToolCallFinished)
	if !fin.OK || fin.CallID != "toolu_01" || fin.Tool != "claude_code__Read" || !strings.Contains(string(fin.Output), "package main") {
		t.Fatalf("recorded result: %+v %s", fin, fin.Output)
	}
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if e.Type == noeta.TypePolicyDecided && (e.Origin != eventlog.OriginClient || e.Actor != "alice") {
			t.Fatalf("a decision not of the client alice: %+v", e)
		}
	}

	// A rule denies: the answer is deny, naming the guard and the reason,
	// and the denial is in the same task.
	_, out, _ = r.post(t, event("PreToolUse", "s1", "Bash", "toolu_02", map[string]any{"command": "rm -rf /"}), 10*time.Second)
	if d, why := decision(t, out); d != "deny" || !strings.Contains(why, "no recursive deletes") {
		t.Fatalf("rm -rf: %s (%s), want deny naming the rule", d, why)
	}
	if den := r.records(t, task, noeta.TypeToolCallDenied); len(den) != 1 || den[0].(*noeta.ToolCallDenied).CallID != "toolu_02" {
		t.Fatalf("denials: %+v", den)
	}

	// Bash needs a person (a rule): the hook waits while
	// the inbox answers, then allows.
	type res struct {
		code     int
		out, err string
	}
	done := make(chan res, 1)
	go func() {
		c, o, e := r.post(t, event("PreToolUse", "s1", "Bash", "toolu_03", map[string]any{"command": "go test ./..."}), 30*time.Second)
		done <- res{c, o, e}
	}()
	var handle string
	eventually(t, "an approval requested", func() bool {
		for _, p := range r.records(t, task, noeta.TypeApprovalRequested) {
			if ar := p.(*noeta.ApprovalRequested); ar.CallID == "toolu_03" {
				handle = ar.Handle
			}
		}
		return handle != ""
	})
	select {
	case a := <-done:
		t.Fatalf("the hook answered before the approval: %+v", a)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.h.Approve(ctx, task, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if d, why := decision(t, a.out); d != "allow" {
		t.Fatalf("approved Bash: %s (%s) %s", d, why, a.err)
	}
	// It failed in Claude Code: recorded as failed, with Claude Code's words.
	fail, _ := json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_use_id": "toolu_03",
		"tool_input": map[string]any{"command": "go test ./..."}, "error": "exit status 1"})
	if code, _, errOut := r.post(t, fail, time.Second); code != 0 {
		t.Fatalf("PostToolUseFailure: exit %d %s", code, errOut)
	}
	eventually(t, "the failure recorded", func() bool { return len(r.records(t, task, noeta.TypeToolCallFinished)) == 2 })
	if f := r.records(t, task, noeta.TypeToolCallFinished)[1].(*noeta.ToolCallFinished); f.OK || !strings.Contains(f.Error, "exit status 1") {
		t.Fatalf("failed call: %+v", f)
	}

	// The same tool_use_id again: a call is judged once.
	_, out, _ = r.post(t, event("PreToolUse", "s1", "Read", "toolu_01", map[string]any{"file_path": "/etc/passwd"}), 10*time.Second)
	if d, why := decision(t, out); d != "deny" || !strings.Contains(why, "judged already") {
		t.Fatalf("a replayed tool_use_id: %s (%s)", d, why)
	}

	// Another Claude Code session is another task.
	_, out, _ = r.post(t, event("PreToolUse", "s2", "Grep", "toolu_10", map[string]any{"pattern": "x"}), 10*time.Second)
	if d, _ := decision(t, out); d != "allow" {
		t.Fatalf("Grep in s2: %s", d)
	}
	if ts, _ := r.h.Tasks(ctx); len(ts) != 2 {
		t.Fatalf("tasks: %d, want one per Claude Code session", len(ts))
	}
	// Its Stop: the call still waiting for a result is recorded as reported
	// by nobody, not left running.
	if code, _, _ := r.post(t, event("Stop", "s2", "", "", nil), time.Second); code != 0 {
		t.Fatalf("Stop: exit %d", code)
	}
	// SessionEnd ends the first session's task.
	if code, _, _ := r.post(t, event("SessionEnd", "s1", "", "", nil), time.Second); code != 0 {
		t.Fatalf("SessionEnd: exit %d", code)
	}
	eventually(t, "s1's task completed", func() bool { return len(r.records(t, task, noeta.TypeTaskCompleted)) == 1 })
	var s2 string
	ts, _ := r.h.Tasks(ctx)
	for _, tk := range ts {
		if tk.Task != task {
			s2 = tk.Task
		}
	}
	eventually(t, "s2's Grep recorded as unreported", func() bool {
		f := r.records(t, s2, noeta.TypeToolCallFinished)
		return len(f) == 1 && !f[0].(*noeta.ToolCallFinished).OK && strings.Contains(f[0].(*noeta.ToolCallFinished).Error, "before its Stop")
	})
}

// TestClaudeCodeHookFailsClosed: whatever is wrong with an event or the
// way to the gateway, a PreToolUse is denied or blocked, never allowed.
func TestClaudeCodeHookFailsClosed(t *testing.T) {
	r := openCC(t, gateway.Options{Idle: 200 * time.Millisecond})
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"no tool_use_id", event("PreToolUse", "s1", "Read", "", map[string]any{"file_path": "x"}), "tool_use_id"},
		{"no tool_name", []byte(`{"session_id":"s1","hook_event_name":"PreToolUse","tool_use_id":"toolu_1","tool_input":{}}`), "tool_name"},
		{"tool_input not an object", event("PreToolUse", "s1", "Bash", "toolu_2", "rm -rf /"), "not a JSON object"},
		{"no tool_input", []byte(`{"session_id":"s1","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_3"}`), "tool_input is missing"},
		{"session_id with a dot", event("PreToolUse", "../s1", "Read", "toolu_4", map[string]any{}), "session_id"},
		{"tool name with a slash", event("PreToolUse", "s1", "Bash/x", "toolu_5", map[string]any{}), "tool_name"},
		{"id of the gateway's own form", event("PreToolUse", "s1", "Read", "c7", map[string]any{}), "own call ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := r.post(t, tc.body, 5*time.Second)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if d, why := decision(t, out); d != "deny" || !strings.Contains(why, tc.want) {
				t.Fatalf("%s (%s), want deny naming %q", d, why, tc.want)
			}
		})
	}
	// Not JSON at all: blocked (exit 2) with the reason.
	if code, out, errOut := r.post(t, []byte("PreToolUse please"), time.Second); code != 2 || out != "" || !strings.Contains(errOut, "not a Claude Code hook event") {
		t.Fatalf("not JSON: exit %d %q %q", code, out, errOut)
	}
	// A wrong token: blocked.
	bad := gateway.HookClient{URL: r.url, Token: "nope", Wait: time.Second}
	var out, errOut bytes.Buffer
	if code := bad.Forward(context.Background(), bytes.NewReader(event("PreToolUse", "s1", "Read", "toolu_9", map[string]any{})), &out, &errOut); code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), "401") {
		t.Fatalf("wrong token: exit %d %q %q", code, out.String(), errOut.String())
	}
	// No gateway there: blocked; but a Stop that cannot be delivered
	// exits 1, which does not keep Claude working.
	gone := gateway.HookClient{URL: "http://127.0.0.1:1", Wait: time.Second}
	if code := gone.Forward(context.Background(), bytes.NewReader(event("PreToolUse", "s1", "Read", "toolu_9", map[string]any{})), io.Discard, io.Discard); code != 2 {
		t.Fatalf("no gateway, PreToolUse: exit %d, want 2", code)
	}
	if code := gone.Forward(context.Background(), bytes.NewReader(event("Stop", "s1", "", "", nil)), io.Discard, io.Discard); code != 1 {
		t.Fatalf("no gateway, Stop: exit %d, want 1", code)
	}
	// Over the size limit: refused before anything is judged.
	huge := event("PreToolUse", "s1", "Write", "toolu_big", map[string]any{"content": strings.Repeat("x", gateway.MaxHookBytes)})
	if code, _, _ := r.post(t, huge, time.Second); code != 2 {
		t.Fatalf("oversized event: exit %d, want 2", code)
	}
	// A GET is no event.
	resp, err := http.Get(r.url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET without a token: %s", resp.Status)
	}
	if ts, _ := r.h.Tasks(context.Background()); len(ts) != 0 {
		t.Fatalf("a malformed event made a task: %+v", ts)
	}
}

// TestClaudeCodeHookApprovalOutwaited: a PreToolUse that gives up waiting
// for an approval (its wait is long enough for the engine to take the call
// and ask on a loaded machine) is denied; approved later, the call is recorded as not
// run — never run behind Claude Code's back, and never allowed by the
// answer to a later call.
func TestClaudeCodeHookApprovalOutwaited(t *testing.T) {
	r := openCC(t, gateway.Options{Idle: 200 * time.Millisecond})
	ctx := context.Background()
	_, out, _ := r.post(t, event("PreToolUse", "s1", "Edit", "toolu_e1", map[string]any{"file_path": "/x", "old_string": "a", "new_string": "b"}), 10*time.Second)
	if d, why := decision(t, out); d != "deny" || !strings.Contains(why, "approval") {
		t.Fatalf("outwaited: %s (%s)", d, why)
	}
	task := r.onlyTask(t)
	ar := r.records(t, task, noeta.TypeApprovalRequested)
	if len(ar) != 1 {
		t.Fatalf("approval requests: %+v", ar)
	}
	if err := r.h.Approve(ctx, task, ar[0].(*noeta.ApprovalRequested).Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the approved call recorded as not run", func() bool {
		f := r.records(t, task, noeta.TypeToolCallFinished)
		return len(f) == 1 && !f[0].(*noeta.ToolCallFinished).OK && strings.Contains(f[0].(*noeta.ToolCallFinished).Error, "not run")
	})
}

// TestHookAgentOfPrincipal: a principal whose token names an agent has its
// Claude Code sessions run as that agent's tasks, under its guards; the
// others get the gateway's agent.
func TestHookAgentOfPrincipal(t *testing.T) {
	r, bobTok := openCCWith(t, gateway.Options{Idle: 200 * time.Millisecond}, "  reader:\n    tools: [claude_code__Read]\n", "reader")
	_, out, _ := r.post(t, event("PreToolUse", "s1", "Write", "toolu_a1", map[string]any{"file_path": "/x", "content": "y"}), 10*time.Second)
	if d, why := decision(t, out); d != "allow" {
		t.Fatalf("alice's Write (agent cc): %s (%s)", d, why)
	}
	bob := *r
	bob.token = bobTok
	_, out, _ = bob.post(t, event("PreToolUse", "s1", "Write", "toolu_b1", map[string]any{"file_path": "/x", "content": "y"}), 10*time.Second)
	if d, why := decision(t, out); d != "deny" {
		t.Fatalf("bob's Write (agent reader): %s (%s), want deny", d, why)
	}
	ts, err := r.h.Tasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]bool{}
	for _, tk := range ts {
		tc := r.records(t, tk.Task, noeta.TypeTaskCreated)[0].(*noeta.TaskCreated)
		agents[tc.Agent+"/"+tc.SubmittedBy] = true
	}
	if len(ts) != 2 || !agents["cc/alice"] || !agents["reader/bob"] {
		t.Fatalf("tasks: %+v, want one of cc (alice) and one of reader (bob)", ts)
	}
}

// TestClaudeCodeHookSubagent: a Task call (a subagent) ends its run when it
// starts, so the subagent's own calls, the session task's next decisions,
// are judged at once; before, they queued behind the Task's result, which
// could not come until they ran, and were denied after the wait.
func TestClaudeCodeHookSubagent(t *testing.T) {
	r := openCC(t, gateway.Options{Idle: 200 * time.Millisecond})
	_, out, _ := r.post(t, event("PreToolUse", "s1", "Task", "toolu_t1", map[string]any{"description": "look", "prompt": "find x"}), 10*time.Second)
	if d, why := decision(t, out); d != "allow" {
		t.Fatalf("Task: %s (%s)", d, why)
	}
	_, out, _ = r.post(t, event("PreToolUse", "s1", "Read", "toolu_t2", map[string]any{"file_path": "/x"}), 30*time.Second)
	if d, why := decision(t, out); d != "allow" {
		t.Fatalf("the subagent's Read: %s (%s)", d, why)
	}
	post, _ := json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_use_id": "toolu_t2", "tool_input": map[string]any{}, "tool_response": "contents"})
	r.post(t, post, time.Second)
	post, _ = json.Marshal(map[string]any{"session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Task", "tool_use_id": "toolu_t1", "tool_input": map[string]any{}, "tool_response": "found x"})
	if _, out, _ := r.post(t, post, time.Second); strings.TrimSpace(out) != "{}" {
		t.Fatalf("the Task's PostToolUse: %q, want no message", out)
	}
	task := r.onlyTask(t)
	eventually(t, "both calls recorded", func() bool { return len(r.records(t, task, noeta.TypeToolCallFinished)) == 2 })
	fins := r.records(t, task, noeta.TypeToolCallFinished)
	if f := fins[0].(*noeta.ToolCallFinished); f.CallID != "toolu_t1" || !f.OK || !strings.Contains(string(f.Output), "handed_to") {
		t.Fatalf("the Task's record: %+v", f)
	}
	if f := fins[1].(*noeta.ToolCallFinished); f.CallID != "toolu_t2" || !strings.Contains(string(f.Output), "contents") {
		t.Fatalf("the Read's record: %+v", f)
	}
}
