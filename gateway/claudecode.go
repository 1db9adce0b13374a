package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/tools"
)

// Claude Code's hooks (https://code.claude.com/docs/en/hooks): Claude Code
// posts each hook event, as JSON, to the gateway (an http hook, or the
// command engine hook claude-code that forwards stdin). A Claude Code
// session is a task of the gateway's agent, as an MCP session is; a
// PreToolUse is the task's next decision, judged by the guard stack; the
// tool runs in Claude Code, not here, so the call's run is the wait for
// its PostToolUse (or PostToolUseFailure), whose result is recorded as the
// call's (docs/adr/0099). An agent whose approval: names client_prompt has
// a call's approval handed to Claude Code's own prompt: answered ask, once
// the log holds that answer and the call's start (docs/adr/0106).

// Bounds and defaults of the Claude Code hook.
const (
	// HookPath is where an HTTP gateway takes Claude Code's hook events.
	HookPath = "/hooks/claude-code"

	// MaxHookBytes bounds one hook event's body: a PostToolUse carries the
	// tool's whole response.
	MaxHookBytes = 8 << 20
	// MaxHookResultBytes bounds the response recorded for a call; a
	// longer one is recorded as its head and its size.
	MaxHookResultBytes = 1 << 20
	// DefaultHookWait is how long a PreToolUse waits for its decision (an
	// approval, or a call of the same session ahead of it) when the
	// request does not say (?wait=); the hook's own timeout in Claude Code
	// must be longer.
	DefaultHookWait = 50 * time.Second
	// MaxHookWait bounds ?wait=.
	MaxHookWait = time.Hour
	// DefaultHookResultWait is how long an allowed call waits for Claude
	// Code to report its result before it is recorded as reported by
	// nobody. A Stop, a PermissionDenied or the session's end ends the
	// wait sooner.
	DefaultHookResultWait = 30 * time.Minute
	// MaxHookSessions bounds the Claude Code sessions a gateway holds.
	MaxHookSessions = 1024
	// hookSessionIdle ends a Claude Code session nothing was heard of for
	// that long (a SessionEnd that never came).
	hookSessionIdle = 2 * time.Hour
	// maxSeenIDs bounds the tool_use_ids a session remembers.
	maxSeenIDs = 4096
)

// The hook events the gateway acts on.
const (
	hookPreToolUse         = "PreToolUse"
	hookPostToolUse        = "PostToolUse"
	hookPostToolUseFailure = "PostToolUseFailure"
	hookPermissionDenied   = "PermissionDenied"
	hookStop               = "Stop"
	hookSessionEnd         = "SessionEnd"
	hookUserPromptSubmit   = "UserPromptSubmit"
)

// hookInput is the part of a hook event the gateway reads.
type hookInput struct {
	SessionID     string          `json:"session_id"`
	Cwd           string          `json:"cwd"`
	Event         string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
	ToolUseID     string          `json:"tool_use_id"`
	ToolResponse  json.RawMessage `json:"tool_response"`
	Error         string          `json:"error"`
	IsInterrupt   bool            `json:"is_interrupt"`
	Reason        string          `json:"reason"`
	PermissionMod string          `json:"permission_mode"`
}

// PreToolUseOutput is the answer to a PreToolUse, as Claude Code reads it.
type PreToolUseOutput struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

// Deny is the PreToolUse answer that blocks the call, reason shown to
// Claude.
func Deny(reason string) PreToolUseOutput { return preToolUse("deny", reason) }

func preToolUse(decision, reason string) PreToolUseOutput {
	var o PreToolUseOutput
	o.HookSpecificOutput.HookEventName = hookPreToolUse
	o.HookSpecificOutput.PermissionDecision = decision
	o.HookSpecificOutput.PermissionDecisionReason = reason
	return o
}

// hookCall is a PreToolUse on its way: started is closed when the engine
// runs the call (it was allowed, its ToolCallStarted is in the log); the
// run then waits for result.
type hookCall struct {
	c       *call
	s       *session
	started chan struct{}
	result  chan tools.Result // cap 1

	mu        sync.Mutex
	running   bool // started is closed
	abandoned bool // the PreToolUse stopped waiting before the run
	reported  bool // a result was sent
	detached  bool // a subagent's call: its run ended when it started
	// prompted is the approval request handed to Claude Code's prompt
	// (approval: client_prompt), once the gateway answered it so;
	// resolved is the resolution of that request the log holds, seen as
	// it was committed (nil until then).
	prompted *noeta.ApprovalRequested
	resolved *noeta.ApprovalResolved
}

// delegated reports whether the call runs on an approval handed to Claude
// Code's prompt (hc.mu held): its answer is ask, not allow, and a call
// not reported was declined there or never reported. A request handed
// over whose resolution was not seen counts as handed over: the answer
// is then ask, which asks Claude Code's user more, never less.
func (hc *hookCall) delegatedLocked() bool {
	if hc.prompted == nil {
		return false
	}
	return hc.resolved == nil || hc.resolved.Auth == noeta.AuthClientPrompt
}

func (hc *hookCall) report(r tools.Result) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if !hc.running || hc.reported {
		return false
	}
	hc.reported = true
	hc.result <- r
	return true
}

// hookSession is one Claude Code session of a principal.
type hookSession struct {
	s    *session
	last time.Time
	seen map[string]bool // tool_use_ids judged
	ids  []string        // seen, oldest first
}

// hooks are the gateway's Claude Code sessions and the calls in flight.
type hooks struct {
	mu       sync.Mutex
	sessions map[string]*hookSession // principal NUL session_id
	calls    map[string]*hookCall    // by call id (the tool_use_id)
	tools    map[string]tools.Tool   // claude_code__ tools in the registry
}

// claudeCodeRisk is the risk of Claude Code's tools by name: a tool not
// named here (a new one, an MCP tool of Claude Code's) is high.
var claudeCodeRisk = map[string]tools.RiskLevel{
	"Read": tools.RiskLow, "Glob": tools.RiskLow, "Grep": tools.RiskLow, "LS": tools.RiskLow,
	"NotebookRead": tools.RiskLow, "TodoWrite": tools.RiskLow, "ExitPlanMode": tools.RiskLow, "BashOutput": tools.RiskLow,
	"Edit": tools.RiskMedium, "MultiEdit": tools.RiskMedium, "Write": tools.RiskMedium, "NotebookEdit": tools.RiskMedium,
	"WebFetch": tools.RiskMedium, "WebSearch": tools.RiskMedium, "Task": tools.RiskMedium, "Skill": tools.RiskMedium,
	"SlashCommand": tools.RiskMedium, "KillShell": tools.RiskMedium,
	"Bash": tools.RiskHigh,
}

// claudeCodeNests are the tools whose run makes calls of its own in the
// same Claude Code session (a subagent): their run cannot wait for their
// result, since the calls it makes are the session task's next decisions.
// Their run ends when it starts, recorded as handed to Claude Code; the
// subagent's calls are judged and recorded one by one as they come.
var claudeCodeNests = map[string]bool{"Task": true, "Agent": true}

// claudeCodeEdits are the tools whose only effect is editing files, which
// permission mode acceptEdits runs without asking (as Claude Code's own
// acceptEdits does).
var claudeCodeEdits = map[string]bool{"Edit": true, "MultiEdit": true, "Write": true, "NotebookEdit": true}

// ClaudeCodeTools are the registry's tools for Claude Code's known tools,
// for the host the gateway runs on (hostconfig.Options.Tools): each runs
// by waiting for Claude Code's report of its run. Tools Claude Code names
// later are added as they come, at high risk.
func (g *Gateway) ClaudeCodeTools() []tools.Tool {
	g.hooks.mu.Lock()
	defer g.hooks.mu.Unlock()
	for name := range claudeCodeRisk {
		g.claudeCodeTool(name)
	}
	return g.hookToolsLocked()
}

func (g *Gateway) hookToolsLocked() []tools.Tool {
	out := make([]tools.Tool, 0, len(g.hooks.tools))
	for _, name := range slices.Sorted(mapKeys(g.hooks.tools)) {
		out = append(out, g.hooks.tools[name])
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// claudeCodeTool returns the registry tool of Claude Code's tool name,
// making it if new (g.hooks.mu held).
func (g *Gateway) claudeCodeTool(name string) (tools.Tool, bool) {
	full := config.ClaudeCodeToolPrefix + name
	if t, ok := g.hooks.tools[full]; ok {
		return t, false
	}
	risk, known := claudeCodeRisk[name]
	if !known {
		risk = tools.RiskHigh
	}
	t := tools.Define(tools.Def{
		Name: full, Risk: risk, Edits: claudeCodeEdits[name],
		Description: "Claude Code's " + name + " tool: judged here, run by Claude Code, its result reported by the hook",
		Run:         g.runHooked,
	})
	g.hooks.tools[full] = t
	return t, true
}

// ensureTool puts Claude Code's tool name in the registry.
func (g *Gateway) ensureTool(name string) error {
	g.hooks.mu.Lock()
	defer g.hooks.mu.Unlock()
	if _, added := g.claudeCodeTool(name); !added {
		return nil
	}
	h, err := g.host()
	if err != nil {
		return err
	}
	if err := h.Tools().Replace(config.ClaudeCodeToolPrefix, g.hookToolsLocked()); err != nil {
		delete(g.hooks.tools, config.ClaudeCodeToolPrefix+name)
		return err
	}
	return nil
}

// runHooked is the run of a Claude Code tool: the call was allowed and its
// ToolCallStarted is in the log; the PreToolUse waiting on it answers
// allow, and the run waits for the result Claude Code reports.
func (g *Gateway) runHooked(ctx context.Context, c tools.Call) (tools.Result, error) {
	g.hooks.mu.Lock()
	hc := g.hooks.calls[c.ID]
	g.hooks.mu.Unlock()
	if hc == nil || c.Task == "" || c.Task != hc.s.taskID() {
		// A call id is the client's (Claude Code's tool_use_id): another
		// task's call of the same id, in a host whose registry this tool
		// shares (serve --gateway), must not answer the hook's allow.
		return tools.Result{Output: json.RawMessage("null"), Error: "not run: no Claude Code hook waits for this call (the gateway restarted, or the call was made outside a hook)"}, nil
	}
	hc.mu.Lock()
	if hc.abandoned {
		hc.mu.Unlock()
		g.dropCall(c.ID)
		return tools.Result{Output: json.RawMessage("null"), Error: "not run: Claude Code stopped waiting for the decision before it came"}, nil
	}
	hc.running = true
	close(hc.started)
	if claudeCodeNests[strings.TrimPrefix(hc.c.tool, config.ClaudeCodeToolPrefix)] {
		// Kept until its PostToolUse, which then records nothing more.
		hc.detached = true
		hc.mu.Unlock()
		return tools.Result{OK: true, Output: json.RawMessage(`{"handed_to":"claude_code","note":"a subagent: Claude Code runs it, and each call it makes is judged and recorded in this task; its final answer is not recorded here"}`)}, nil
	}
	hc.mu.Unlock()
	defer g.dropCall(c.ID)
	t := time.NewTimer(g.opts.HookResultWait)
	defer t.Stop()
	select {
	case r := <-hc.result:
		return r, nil
	case <-ctx.Done():
		return tools.Result{}, context.Cause(ctx)
	case <-t.C:
		return tools.Result{Output: json.RawMessage("null"), Error: fmt.Sprintf("Claude Code reported no result within %v", g.opts.HookResultWait)}, nil
	}
}

func (g *Gateway) dropCall(id string) {
	g.hooks.mu.Lock()
	delete(g.hooks.calls, id)
	g.hooks.mu.Unlock()
}

// HookHandler serves Claude Code's hook events (POST, JSON body) for
// principals auth admits, their sessions tasks of agent.
func (g *Gateway) HookHandler(agent string, auth Authenticate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := auth(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="noeta"`)
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a Claude Code hook event", http.StatusMethodNotAllowed)
			return
		}
		wait := DefaultHookWait
		if v := r.URL.Query().Get("wait"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > MaxHookWait {
				http.Error(w, fmt.Sprintf("wait=%q: want a duration above 0 and at most %v", v, MaxHookWait), http.StatusBadRequest)
				return
			}
			wait = d
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxHookBytes))
		if err != nil {
			http.Error(w, fmt.Sprintf("the hook event could not be read (at most %d bytes): %v", MaxHookBytes, err), http.StatusRequestEntityTooLarge)
			return
		}
		out, status := g.Hook(r.Context(), Principal{Agent: g.agentFor(name, agent), SubmittedBy: name}, body, wait)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(out)
	})
}

// Hook answers one hook event of who: what Claude Code reads back, and the
// HTTP status (200 unless the body is no hook event at all). A PreToolUse
// it cannot judge is denied: the gateway fails closed.
func (g *Gateway) Hook(ctx context.Context, who Principal, body []byte, wait time.Duration) (any, int) {
	var in hookInput
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil {
		return map[string]string{"error": "the body is not a Claude Code hook event (a JSON object): " + err.Error()}, http.StatusBadRequest
	}
	switch in.Event {
	case hookPreToolUse:
		return g.preToolUse(ctx, who, in, wait), http.StatusOK
	case hookPostToolUse, hookPostToolUseFailure, hookPermissionDenied:
		return g.reported(who, in), http.StatusOK
	case hookStop, hookSessionEnd, hookUserPromptSubmit:
		g.quiet(who, in)
		return struct{}{}, http.StatusOK
	case "":
		return map[string]string{"error": "hook_event_name is missing"}, http.StatusBadRequest
	}
	// An event the gateway has nothing to say about (SessionStart,
	// Notification…): no decision.
	return struct{}{}, http.StatusOK
}

// toolUseID is what a tool_use_id may be: a call id of the log (the
// turn's own ids, c<N>, are refused so that the two never meet).
var turnCallID = regexp.MustCompile(`^c[0-9]+$`)

// checkPreToolUse says what is wrong with a PreToolUse, or "".
func checkPreToolUse(in hookInput) string {
	if err := noeta.ValidateToken("session_id", in.SessionID, 128); err != nil {
		return err.Error()
	}
	if err := noeta.ValidateToken("tool_use_id", in.ToolUseID, 128); err != nil {
		return err.Error()
	}
	if turnCallID.MatchString(in.ToolUseID) {
		return fmt.Sprintf("tool_use_id %q has the form of the gateway's own call ids", in.ToolUseID)
	}
	if in.ToolName == "" {
		return "tool_name is missing"
	}
	if len(config.ClaudeCodeToolPrefix+in.ToolName) > tools.MaxNameLen {
		return fmt.Sprintf("tool_name %q is too long", truncateText(in.ToolName, 80))
	}
	for _, r := range in.ToolName {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Sprintf("tool_name %q has %q (want letters, digits, '_', '-' or '.')", truncateText(in.ToolName, 80), r)
		}
	}
	args := bytes.TrimSpace(in.ToolInput)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return "tool_input is missing"
	}
	if args[0] != '{' {
		return "tool_input is not a JSON object"
	}
	return ""
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// preToolUse judges a call: it becomes the next decision of the session's
// task, and the answer is allow once the engine runs it, deny with the
// guard's words otherwise, or deny when the decision did not come within
// wait (an approval still open: the request stays answerable, the call is
// then recorded as not run).
func (g *Gateway) preToolUse(ctx context.Context, who Principal, in hookInput, wait time.Duration) PreToolUseOutput {
	if why := checkPreToolUse(in); why != "" {
		return Deny("noeta: the hook event is malformed, so the call is denied: " + why)
	}
	if len(in.ToolInput) > g.opts.MaxArgsBytes {
		return Deny(fmt.Sprintf("noeta: tool_input is %d bytes, over the gateway's limit of %d; the call is denied", len(in.ToolInput), g.opts.MaxArgsBytes))
	}
	if err := g.ensureTool(in.ToolName); err != nil {
		return Deny("noeta: the tool cannot be judged: " + err.Error())
	}
	hs, err := g.hookSession(who, in)
	if err != nil {
		return Deny("noeta: " + err.Error())
	}
	tool := config.ClaudeCodeToolPrefix + in.ToolName
	c := &call{tool: tool, args: in.ToolInput, id: in.ToolUseID, out: make(chan outcome, 1)}
	if g.opts.Approvals.PromptsClient(who.Agent) && promptShown(in.PermissionMod, in.ToolName) {
		c.requested = make(chan *noeta.ApprovalRequested, 1)
	}
	hc := &hookCall{c: c, s: hs.s, started: make(chan struct{}), result: make(chan tools.Result, 1)}
	g.hooks.mu.Lock()
	if g.hooks.calls[c.id] != nil || hs.seen[c.id] {
		g.hooks.mu.Unlock()
		return Deny("noeta: tool_use_id " + c.id + " was judged already; a call is judged once")
	}
	hs.remember(c.id)
	g.hooks.calls[c.id] = hc
	g.hooks.mu.Unlock()
	if err := hs.s.submit(ctx, c, "Claude Code"); err != nil {
		g.dropCall(c.id)
		return Deny("noeta: the call could not be judged: " + err.Error())
	}
	deadline := time.Now().Add(wait)
	t := time.NewTimer(wait)
	defer t.Stop()
	requested := c.requested
	for {
		select {
		case <-hc.started:
			return g.runAnswer(hc)
		case ar := <-requested:
			requested = nil
			g.handToPrompt(ctx, hc, ar, in.PermissionMod, deadline)
		case o := <-c.out:
			g.dropCall(c.id)
			return Deny("noeta: " + o.text)
		case <-ctx.Done():
			g.abandon(hc)
			return Deny("noeta: the hook went away before the decision")
		case <-t.C:
			if g.abandon(hc) {
				return g.runAnswer(hc)
			}
			c.mu.Lock()
			handle := c.approval
			c.mu.Unlock()
			if handle != "" {
				return Deny(fmt.Sprintf("noeta: this call waits for a person's approval (%s of task %s) and no answer came within %v; the call was not made. Once it is approved the same call is not run: ask again after it is answered.", handle, hs.s.taskID(), wait))
			}
			return Deny(fmt.Sprintf("noeta: no decision within %v (a call of this session ahead of it is still waiting); the call was not made", wait))
		}
	}
}

// runAnswer is the answer to a PreToolUse whose call runs (its
// ToolCallStarted is in the log): allow, or ask when its approval was
// handed to Claude Code's prompt (the log holds that answer too).
func (g *Gateway) runAnswer(hc *hookCall) PreToolUseOutput {
	hc.mu.Lock()
	delegated, ar := hc.delegatedLocked(), hc.prompted
	hc.mu.Unlock()
	task := hc.s.taskID()
	if !delegated {
		return preToolUse("allow", fmt.Sprintf("noeta: allowed (task %s, call %s)", task, hc.c.id))
	}
	return preToolUse("ask", fmt.Sprintf("noeta: this call needs an approval (%s: %s); noeta hands it to you here: allow it to run it, recorded as approved by %s at Claude Code's prompt (%s of task %s, call %s)",
		ar.Guard, truncateText(ar.Reason, 300), hc.s.who.SubmittedBy, ar.Handle, task, hc.c.id))
}

// promptShown reports whether Claude Code, in permission mode mode, shows
// its user its permission prompt for a PreToolUse answered ask on tool
// (Claude Code's tool name). Only then may the approval be handed to it:
// in the modes that run calls without asking (bypassPermissions, auto,
// dontAsk, acceptEdits for an edit, plan, a mode not known, none said)
// the prompt may never be shown, and the call would run approved by
// nobody.
func promptShown(mode, tool string) bool {
	if claudeCodeNests[tool] {
		// A subagent's run ends when it starts (recorded as handed to
		// Claude Code): whether its user allowed it would not be recorded.
		return false
	}
	switch mode {
	case "default":
		return true
	case "acceptEdits":
		return !claudeCodeEdits[tool]
	}
	return false
}

// handToPrompt answers the approval request ar of a call, as its session's
// principal with auth client_prompt, so that Claude Code's own prompt asks
// its user: only if the approvals rules admit that answer (engine approve
// judges it before it is sent, the task again when it records it) and
// resolve the request with it alone. Anything else leaves the request to
// the inbox, as without the door. The call's answer is ask only once the
// resolution is in the log (hookCall.resolved, from the tap) and the call
// started.
func (g *Gateway) handToPrompt(ctx context.Context, hc *hookCall, ar *noeta.ApprovalRequested, mode string, deadline time.Time) {
	if ar.Quorum > 1 {
		// One answer would only count: the prompt's yes is one person's,
		// and a count given before it is no approval anybody gave.
		g.log.Info("an approval needing a quorum is left to the inbox, not handed to Claude Code's prompt", "handle", ar.Handle, "quorum", ar.Quorum)
		return
	}
	h, err := g.host()
	if err != nil {
		return
	}
	hc.mu.Lock()
	hc.prompted = ar
	hc.mu.Unlock()
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	reason := "delegated to Claude Code's own permission prompt (permission_mode " + mode + "): the call runs only if Claude Code's user allows it there; its ToolCallFinished says whether it ran"
	err = h.Approve(actx, hc.s.taskID(), ar.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: hc.s.who.SubmittedBy, Reason: reason, Auth: noeta.AuthClientPrompt})
	if err != nil {
		// Refused by the rules (self_approval: deny, an approvers
		// expression), answered already, or not sent: the request waits
		// in the inbox. A resolution that was recorded all the same is
		// seen by the tap.
		g.log.Info("an approval not handed to Claude Code's prompt; it waits in the inbox", "handle", ar.Handle, "err", err)
	}
}

// resolvedPrompt notes the resolution of a request handed to Claude Code's
// prompt, as committed (from the tap, before the call's run can start).
func (g *Gateway) resolvedPrompt(task string, p *noeta.ApprovalResolved) {
	g.hooks.mu.Lock()
	calls := make([]*hookCall, 0, len(g.hooks.calls))
	for _, hc := range g.hooks.calls {
		calls = append(calls, hc)
	}
	g.hooks.mu.Unlock()
	for _, hc := range calls {
		if hc.s.taskID() != task {
			continue
		}
		hc.mu.Lock()
		if hc.prompted != nil && hc.prompted.Handle == p.Handle {
			r := *p
			hc.resolved = &r
		}
		hc.mu.Unlock()
	}
}

// abandon marks a call whose PreToolUse stopped waiting: taken off the
// queue if the engine has not taken it, or left to be recorded as not run.
// It reports a call that started meanwhile (the answer is then allow: it is
// recorded as running).
func (g *Gateway) abandon(hc *hookCall) (started bool) {
	hc.mu.Lock()
	if hc.running {
		hc.mu.Unlock()
		return true
	}
	hc.abandoned = true
	withdrawn := hc.s.withdraw(hc.c)
	hc.mu.Unlock()
	// Not under hc.mu: quiet and resolvedPrompt take hc.mu under
	// g.hooks.mu.
	if withdrawn {
		g.dropCall(hc.c.id)
	}
	return false
}

// hookSession finds or starts the session of who's Claude Code session.
func (g *Gateway) hookSession(who Principal, in hookInput) (*hookSession, error) {
	key := who.SubmittedBy + "\x00" + in.SessionID
	g.hooks.mu.Lock()
	defer g.hooks.mu.Unlock()
	if hs, ok := g.hooks.sessions[key]; ok {
		hs.last = time.Now()
		return hs, nil
	}
	if len(g.hooks.sessions) >= MaxHookSessions {
		return nil, fmt.Errorf("the gateway holds %d Claude Code sessions, its limit", MaxHookSessions)
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, errors.New("the gateway is shutting down")
	}
	s := newSession(g, who)
	s.goal = "Claude Code session " + in.SessionID
	if in.Cwd != "" {
		s.goal += " in " + truncateText(in.Cwd, 200)
	}
	hs := &hookSession{s: s, last: time.Now(), seen: map[string]bool{}}
	g.hooks.sessions[key] = hs
	return hs, nil
}

func (hs *hookSession) remember(id string) {
	if len(hs.ids) >= maxSeenIDs {
		delete(hs.seen, hs.ids[0])
		hs.ids = hs.ids[1:]
	}
	hs.seen[id] = true
	hs.ids = append(hs.ids, id)
}

// reported records what Claude Code reports of a call it ran (or did not
// run): the call's result, which ends its run in the engine.
func (g *Gateway) reported(who Principal, in hookInput) any {
	g.hooks.mu.Lock()
	hc := g.hooks.calls[in.ToolUseID]
	g.hooks.mu.Unlock()
	if hc == nil || hc.s.who.SubmittedBy != who.SubmittedBy {
		if in.Event == hookPostToolUse || in.Event == hookPostToolUseFailure {
			g.log.Warn("Claude Code reports a call the gateway did not judge", "tool", truncateText(in.ToolName, 80), "tool_use_id", truncateText(in.ToolUseID, 80), "principal", who.SubmittedBy)
			return map[string]string{"systemMessage": "noeta: " + truncateText(in.ToolName, 80) + " ran without a decision of the gateway (no PreToolUse of it reached it): it is not in the log"}
		}
		return struct{}{}
	}
	hc.mu.Lock()
	detached, delegated := hc.detached, hc.delegatedLocked()
	hc.mu.Unlock()
	if detached {
		g.dropCall(in.ToolUseID)
		return struct{}{}
	}
	var r tools.Result
	switch in.Event {
	case hookPostToolUse:
		r = tools.Result{OK: true, Output: boundedResponse(in.ToolResponse)}
	case hookPostToolUseFailure:
		why := in.Error
		if in.IsInterrupt {
			why = "interrupted by the user: " + why
		}
		r = tools.Result{Output: json.RawMessage("null"), Error: "Claude Code: " + truncateText(why, 4000)}
	case hookPermissionDenied:
		if delegated {
			r = tools.Result{Output: json.RawMessage("null"), Error: "not run: the approval was handed to Claude Code's prompt, and Claude Code refused the call (its user declined, or its own permissions denied it)"}
			break
		}
		r = tools.Result{Output: json.RawMessage("null"), Error: "not run: Claude Code's own permissions refused it"}
	}
	if !hc.report(r) {
		g.log.Warn("a second report of a call, or one before its run; not recorded", "tool_use_id", in.ToolUseID, "event", in.Event)
	}
	return struct{}{}
}

// boundedResponse is a tool_response as recorded: whole up to
// MaxHookResultBytes, else its head and size.
func boundedResponse(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	if len(raw) <= MaxHookResultBytes {
		return raw
	}
	head, _ := json.Marshal(strings.ToValidUTF8(string(raw[:64<<10]), "\uFFFD"))
	out, _ := json.Marshal(map[string]any{"truncated": true, "bytes": len(raw), "head": json.RawMessage(head)})
	return out
}

// quiet handles the events after which no result is coming for the calls
// still waiting (Stop: Claude finished its turn; SessionEnd): they are
// recorded as reported by nobody. SessionEnd also ends the session's task.
// A UserPromptSubmit closes the calls handed to Claude Code's prompt only:
// a user who declines there interrupts the turn, so no Stop comes, and the
// next thing Claude Code says is the user's next prompt.
func (g *Gateway) quiet(who Principal, in hookInput) {
	key := who.SubmittedBy + "\x00" + in.SessionID
	g.hooks.mu.Lock()
	hs := g.hooks.sessions[key]
	var waiting []*hookCall
	for _, hc := range g.hooks.calls {
		if hs != nil && hc.s == hs.s {
			waiting = append(waiting, hc)
		}
	}
	if hs != nil && in.Event == hookSessionEnd {
		delete(g.hooks.sessions, key)
	}
	g.hooks.mu.Unlock()
	if hs == nil {
		return
	}
	for _, hc := range waiting {
		hc.mu.Lock()
		delegated, gone := hc.delegatedLocked(), !hc.running || hc.detached
		hc.mu.Unlock()
		if in.Event == hookSessionEnd && gone {
			// One not running (an approval outwaited) is never answered
			// now: its run, if it comes, finds no hook waiting.
			g.dropCall(hc.c.id)
		}
		switch {
		case in.Event == hookUserPromptSubmit && !delegated:
			continue
		case delegated:
			hc.report(tools.Result{Output: json.RawMessage("null"), Error: "not run, or not reported: the approval was handed to Claude Code's prompt and Claude Code reported no result before its " + in.Event + " (its user declined the call there, or it ran unreported)"})
		default:
			hc.report(tools.Result{Output: json.RawMessage("null"), Error: "Claude Code reported no result before its " + in.Event})
		}
	}
	if in.Event == hookSessionEnd {
		g.wg.Go(hs.s.settle)
	}
}

// sweepHooks ends the Claude Code sessions not heard of for
// hookSessionIdle.
func (g *Gateway) sweepHooks(now time.Time) {
	g.hooks.mu.Lock()
	var idle []*hookSession
	for key, hs := range g.hooks.sessions {
		if now.Sub(hs.last) > hookSessionIdle {
			idle = append(idle, hs)
			delete(g.hooks.sessions, key)
		}
	}
	for id, hc := range g.hooks.calls {
		if hc.c != nil && slices.ContainsFunc(idle, func(hs *hookSession) bool { return hs.s == hc.s }) {
			hc.mu.Lock()
			if !hc.running || hc.detached {
				delete(g.hooks.calls, id)
			}
			hc.mu.Unlock()
		}
	}
	g.hooks.mu.Unlock()
	for _, hs := range idle {
		g.wg.Go(hs.s.settle)
	}
}

// endHooks ends every Claude Code session (the gateway closes).
func (g *Gateway) endHooks() []*session {
	g.hooks.mu.Lock()
	defer g.hooks.mu.Unlock()
	out := make([]*session, 0, len(g.hooks.sessions))
	for key, hs := range g.hooks.sessions {
		out = append(out, hs.s)
		delete(g.hooks.sessions, key)
	}
	return out
}
