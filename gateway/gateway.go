// Package gateway is noeta's MCP server for the agents people already run
// (Claude Code, Claude Desktop, Cursor, VS Code, any MCP client): it offers
// the tools of the configured MCP servers and governs every call.
//
// Each client session is a task of one agent. A tools/call becomes the
// task's next decision, recorded with origin client (a [engine.ClientPolicy]
// hands it to the engine), judged by the agent's guard stack like any other
// action (rules, permissions and risk, budgets, repetition, shadow rules,
// approvals), run against the upstream server through the host's tool
// registry, and its outcome recorded; the client gets the result, or an
// error result naming the guard and the reason. A call that needs an
// approval waits while a person answers in the inbox or with engine
// approve. The session's end finishes the task (docs/adr/0090).
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/tools"
)

// Defaults of [Options].
const (
	// DefaultIdle is how long a session's task keeps its worker waiting for
	// the client's next call before it parks (suspends until the next call
	// wakes it). Parking makes the last result durable.
	DefaultIdle = 5 * time.Second
	// DefaultMaxArgsBytes bounds a call's arguments.
	DefaultMaxArgsBytes = 256 << 10
	// DefaultMaxQueued bounds the calls of one session waiting their turn.
	DefaultMaxQueued = 16
	// DefaultProgressEvery is how often a call waiting (for an approval)
	// sends the client a progress notification, when it gave a token.
	DefaultProgressEvery = 10 * time.Second
	// DefaultToolsEvery is how often the sessions' tools are compared with
	// the upstream servers' (as tools/mcp last listed them).
	DefaultToolsEvery = 2 * time.Second
	// EventKind is the external event a parked session's task waits on.
	EventKind = "gateway_call"
)

// Options say what a gateway fronts.
type Options struct {
	// Agent is the agent whose tasks the sessions are (stdio); over HTTP the
	// principal's agent (see [Principal]).
	Agent string
	// Idle, MaxArgsBytes, MaxQueued, ProgressEvery, ToolsEvery: see the
	// defaults.
	Idle          time.Duration
	MaxArgsBytes  int
	MaxQueued     int
	ProgressEvery time.Duration
	ToolsEvery    time.Duration
	// HookResultWait is how long a Claude Code call that was allowed
	// waits for Claude Code's report of its run (DefaultHookResultWait).
	HookResultWait time.Duration
	// AgentOf maps an HTTP principal to the agent its sessions are tasks
	// of (http.tokens' agent:); a principal not in it gets the agent the
	// handler was given.
	AgentOf map[string]string
	// Approvals are the config's approvals rules: an agent whose
	// approval: is elicitation has its sessions' users asked (nil: none).
	Approvals *approvals.Policy
	// HeartbeatEvery and GoneAfter: see the defaults and [Gateway.Enlist].
	HeartbeatEvery time.Duration
	GoneAfter      time.Duration
	// Aliases are the names a client sees tools under, alias → the tool's
	// own name (noeta.yaml's gateway.aliases).
	Aliases map[string]string
	// Logger reports what the log cannot hold (discarded if nil).
	Logger *slog.Logger
	// ToolNames is how the tools are named to the clients: NamesPrefixed
	// (the default) as in the registry, mcp__<server>__<tool>;
	// NamesUpstream an MCP server's tool by its name on the server (see
	// [Gateway.Exposed]). The log names the registry's tool either way.
	ToolNames string
}

// The values of Options.ToolNames.
const (
	NamesPrefixed = "prefixed"
	NamesUpstream = "upstream"
)

// ErrToolNames: Options.ToolNames is neither of its values.
var ErrToolNames = errors.New("gateway: tool names are prefixed or upstream")

// CheckToolNames refuses a ToolNames that is neither of its values.
func CheckToolNames(v string) error {
	switch v {
	case "", NamesPrefixed, NamesUpstream:
		return nil
	}
	return fmt.Errorf("%w, not %q", ErrToolNames, v)
}

// Gateway serves MCP sessions over a host that runs their tasks. Its
// tasks go on a queue of its own ([Gateway.Queue]): only this process
// holds their sessions, so only its workers may decide them.
type Gateway struct {
	opts  Options
	queue string
	log   *slog.Logger

	mu       sync.Mutex
	h        *host.Host
	sessions map[string]*session // by task id
	untap    func()
	closed   bool
	pins     *Pins // nil: no pinning
	// owners holds the principal of each HTTP session, by its id; live
	// the HTTP sessions initialized, each watched by a goroutine of wg.
	owners map[string]owner
	live   map[*sdk.ServerSession]struct{}
	wg     sync.WaitGroup
	// watched are the sessions whose tools refreshTools keeps current,
	// every ToolsEvery until stop closes.
	watched map[*session]struct{}
	stop    chan struct{}
	// hooks are the Claude Code sessions and their calls in flight.
	hooks hooks
	// beats is the gateway's part in the registry, once enlisted.
	beats *liveness
	// aliasOf is the alias of each aliased tool, by its own name.
	aliasOf map[string]string
}

// New returns a gateway; open the host with [Gateway.Policies] and
// [Gateway.Queue], then [Gateway.Attach] it.
func New(o Options) *Gateway {
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.MaxArgsBytes <= 0 {
		o.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.ToolsEvery <= 0 {
		o.ToolsEvery = DefaultToolsEvery
	}
	if o.HookResultWait <= 0 {
		o.HookResultWait = DefaultHookResultWait
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if o.GoneAfter <= 0 {
		o.GoneAfter = DefaultGoneAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Gateway{opts: o, queue: queuePrefix + strings.ToLower(noeta.NewTaskID()), log: o.Logger,
		sessions: map[string]*session{}, owners: map[string]owner{}, live: map[*sdk.ServerSession]struct{}{},
		watched: map[*session]struct{}{}, stop: make(chan struct{}),
		hooks: hooks{sessions: map[string]*hookSession{}, calls: map[string]*hookCall{}, tools: map[string]tools.Tool{}}}
}

// Queue is the ready queue of the gateway's tasks: the host's workers must
// work it (host.Options.Queue).
func (g *Gateway) Queue() string { return g.queue }

// Attach gives the gateway the host that runs its tasks, opened with
// [Gateway.Policies], [Gateway.Queue] and [Gateway.Guard], and the pins of
// the upstream tools' definitions (nil: none are pinned).
func (g *Gateway) Attach(h *host.Host, pins *Pins) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.h, g.pins = h, pins
	g.setAliases(h, g.opts.Aliases)
	g.untap = h.Tap(g.tap)
	g.wg.Go(g.watchTools)
}

// watchTools refreshes the sessions' tools every ToolsEvery until Close.
func (g *Gateway) watchTools() {
	t := time.NewTicker(g.opts.ToolsEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), g.opts.ToolsEvery)
			g.refreshTools(ctx)
			cancel()
			g.sweepOwners(time.Now())
			g.sweepHooks(time.Now())
		}
	}
}

// Close ends every session and waits, within SettleWait each, for their
// tasks to finish; then it stops watching the host. Call it before the
// host closes (the host is the caller's).
func (g *Gateway) Close() {
	g.mu.Lock()
	ss := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		ss = append(ss, s)
	}
	live := make([]*sdk.ServerSession, 0, len(g.live))
	for l := range g.live {
		live = append(live, l)
	}
	if !g.closed {
		close(g.stop)
	}
	g.closed = true
	g.mu.Unlock()
	g.endHooks()
	g.hooks.mu.Lock()
	inFlight := make([]*hookCall, 0, len(g.hooks.calls))
	for _, hc := range g.hooks.calls {
		inFlight = append(inFlight, hc)
	}
	g.hooks.mu.Unlock()
	for _, hc := range inFlight {
		// Recorded now: nobody would be left to hear Claude Code's report.
		hc.report(tools.Result{Output: json.RawMessage("null"), Error: "the gateway shut down before Claude Code reported a result"})
	}
	for _, s := range ss {
		s.end()
	}
	for _, l := range live {
		_ = l.Close()
	}
	g.wg.Wait()
	g.unbeat()
	g.mu.Lock()
	untap := g.untap
	g.untap = nil
	g.mu.Unlock()
	if untap != nil {
		untap()
	}
}

// Policies is the host's policy resolver (host.Options.Policies): a task
// of a live session is decided by its client; any other task on the
// gateway's queue (its session is gone) finishes.
func (g *Gateway) Policies(_ context.Context, st *engine.State) (engine.Policy, error) {
	g.mu.Lock()
	s, ok := g.sessions[st.Task]
	g.mu.Unlock()
	if ok {
		return s, nil
	}
	return ended{}, nil
}

// tap watches the records committed in this process for the approvals the
// sessions' calls wait on, their resolutions (a Claude Code call's answer
// is ask only once the log holds the answer handed to its prompt), and
// the end of their tasks.
func (g *Gateway) tap(ctx context.Context, env eventlog.Envelope) error {
	switch env.Type {
	case noeta.TypeTaskCompleted, noeta.TypeTaskFailed, noeta.TypeTaskCancelled:
		g.unlist(env.Task)
	case noeta.TypeApprovalRequested, noeta.TypeApprovalResolved:
	default:
		return nil
	}
	g.mu.Lock()
	s, ok := g.sessions[env.Task]
	h := g.h
	g.mu.Unlock()
	if !ok {
		return nil
	}
	p, _, err := env.Decode()
	if err != nil {
		return nil
	}
	switch p := p.(type) {
	case *noeta.ApprovalRequested:
		if p.Action == noeta.ApprovalToolCall {
			s.awaiting(p)
		}
		return nil
	case *noeta.ApprovalResolved:
		g.resolvedPrompt(env.Task, p)
		return nil
	case *noeta.TaskFailed:
		g.ended(ctx, h, s, env.Task, "it failed: "+p.Error)
	case *noeta.TaskCancelled:
		g.ended(ctx, h, s, env.Task, "it was cancelled: "+p.Reason)
	default:
		g.ended(ctx, h, s, env.Task, "it completed")
	}
	return nil
}

// ended answers the calls of a session whose task ended from its log.
func (g *Gateway) ended(ctx context.Context, h *host.Host, s *session, task, why string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	envs, err := h.Events(ctx, task, 0)
	if err != nil {
		g.log.Warn("reading an ended session's task", "task", task, "err", err)
	}
	recs := make([]noeta.Payload, 0, len(envs))
	for _, e := range envs {
		if e.Type != noeta.TypeToolCallFinished && e.Type != noeta.TypeToolCallDenied {
			continue
		}
		if p, _, err := e.Decode(); err == nil {
			recs = append(recs, p)
		}
	}
	s.terminal(recs, why)
}

// host returns the attached host.
func (g *Gateway) host() (*host.Host, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h == nil {
		return nil, errors.New("gateway: no host attached")
	}
	return g.h, nil
}

// Tools returns the specs of the tools agent may call: the registry's tools
// its permissions let it call, within its maximum risk, that no rule
// denies whatever the arguments. A tool outside them is never offered (a
// guard would deny every call).
func (g *Gateway) Tools(agent string) ([]noeta.ToolSpec, error) {
	h, err := g.host()
	if err != nil {
		return nil, err
	}
	a, ok := h.Governance().Agent(agent)
	if !ok {
		return nil, fmt.Errorf("gateway: agent %q is not in the config (agents: %s)", agent, strings.Join(h.Governance().Agents(), ", "))
	}
	reg := h.Tools()
	stack, err := h.Governance().AgentStack(agent, reg.RiskString, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway: the guards of agent %q: %w", agent, err)
	}
	var refusers []refuser
	for _, gd := range stack.Guards() {
		if r, ok := gd.(refuser); ok {
			refusers = append(refusers, r)
		}
	}
	names := slices.DeleteFunc(reg.Names(), func(t string) bool {
		if strings.HasPrefix(t, config.ClaudeCodeToolPrefix) {
			return true // Claude Code's, called through its hook only
		}
		if !a.MayCall(t) {
			return true
		}
		if slices.ContainsFunc(refusers, func(r refuser) bool { return r.Refuses(t) }) {
			return true
		}
		return !a.Permissions.MaxRiskLevel.Admits(reg.RiskString(t))
	})
	return reg.Specs(names), nil
}

// agentFor is the agent of principal's sessions over HTTP.
func (g *Gateway) agentFor(principal, fallback string) string {
	if a, ok := g.opts.AgentOf[principal]; ok {
		return a
	}
	return fallback
}

// refuser is a guard that can say it denies every call of a tool (the
// rules and rule sets: guards.Rules).
type refuser interface{ Refuses(tool string) bool }

// ended decides the tasks whose session is gone: they finish.
type ended struct{}

func (ended) Decide(context.Context, noeta.PolicyInput) (noeta.Decision, error) {
	return noeta.Decision{Kind: noeta.DecisionFinish, Answer: []byte(`"the client session ended"`)}, nil
}

func (ended) Client() string { return "gateway" }

// owner is the principal of an HTTP session, and whether it was
// initialized (then its end deletes it).
type owner struct {
	name   string
	since  time.Time
	inited bool
}

// ownerGrace is how long a session id may wait for its client's
// notifications/initialized before it is forgotten.
const ownerGrace = time.Minute

// sweepOwners forgets the session ids handed out whose session never
// started, so that they do not count against MaxSessions for ever.
func (g *Gateway) sweepOwners(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, o := range g.owners {
		if !o.inited && now.Sub(o.since) > ownerGrace {
			delete(g.owners, id)
		}
	}
}
