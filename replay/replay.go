// Package replay re-judges the actions a task's log recorded under another
// governance config: each proposed tool call, spawn and finish is asked of the
// new config's guard stack with the guard context it had when it was
// judged (the fold of the log up to that point), and the verdict it would
// get is set beside the one it got. It reads and never writes: what a
// policy change would have done to last week's actions, before it decides
// tomorrow's.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
)

// ErrNotReplayable marks an action a guard of the new stack cannot judge
// again from the log alone (its verdict depends on state outside it: an
// external decider, a rate window).
var ErrNotReplayable = errors.New("replay: not replayable")

// Replayable is a guard that says whether its verdict is a function of the
// action and the guard context alone. A caller's Go guard that does not
// implement it is taken as not replayable: replay reports the actions it
// would have judged rather than guess. Every built-in guard is replayable.
type Replayable interface {
	Replayable() bool
}

// Verdict is a guard stack's answer: allow, deny or require_approval, and
// the guard and reason of a verdict other than allow.
type Verdict struct {
	Verdict noeta.Verdict `json:"verdict"`
	Guard   string        `json:"guard,omitempty"`
	Reason  string        `json:"reason,omitempty"`
}

// Action is one recorded proposal: a tool call or a finish.
type Action struct {
	Task  string    `json:"task"`
	Agent string    `json:"agent"`
	Turn  int       `json:"turn"`
	Seq   uint64    `json:"seq"` // the record that carries its verdict
	Time  time.Time `json:"time"`
	// Point is tool_call, spawn_subtask or finish.
	Point  string `json:"point"`
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"call_id,omitempty"`
	// Child is a spawn's child agent (a fan-out's, comma-separated).
	Child string `json:"child,omitempty"`
}

// Outcome is an action with the verdict it got and the one the new config
// gives it. Err is set when it could not be judged again (the new stack
// cannot be built for its agent, its arguments are not in the store, a
// guard is not replayable); Replayed is then empty.
type Outcome struct {
	Action
	Recorded Verdict `json:"recorded"`
	Replayed Verdict `json:"replayed"`
	Err      error   `json:"-"`
}

// Changed reports whether the new config decides the action otherwise
// (the verdict, not the guard's wording).
func (o Outcome) Changed() bool { return o.Err == nil && o.Recorded.Verdict != o.Replayed.Verdict }

// Content reads content-store bodies (arguments and answers recorded by
// ref).
type Content interface {
	Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error)
}

// JudgeOptions say what the new config's stacks are built with beside the
// governance: what the host builds them with.
type JudgeOptions struct {
	// Risks looks up a tool's risk level (tools.Registry.RiskString).
	Risks guards.RiskLookup
	// Edits reports whether a tool edits (tools.Registry.Edits).
	Edits func(tool string) bool
	// Guards are the caller's Go guards, added to every stack.
	Guards []guards.Guard
	// Outside reports a tool whose risk level is known only outside the
	// log and the config (an MCP server's tool the config gives no risk:
	// its level comes from the server's annotations). An action whose
	// verdict looked its risk up is not replayable: Risks has no answer
	// for it, and the fail-closed deny it would cause is a guess.
	Outside func(tool string) bool
}

// Judge asks the new config's guard stacks. Safe for one goroutine.
type Judge struct {
	gov    *guards.Config
	opts   JudgeOptions
	stacks map[string]stackOf
	// outside is the tool of the current check whose risk Outside
	// reported, if its stack asked; building is set while a stack is
	// built, which only asks whether a tool is known.
	outside  string
	building bool
	// rated is set when a rate limit of the current check counted the
	// call (rateProbe); inCase while a policy test's case is judged.
	rated  bool
	inCase bool
}

type stackOf struct {
	s   *guards.Stack
	err error
}

// NewJudge is a judge of gov's stacks.
func NewJudge(gov *guards.Config, opts JudgeOptions) *Judge {
	return &Judge{gov: gov, opts: opts, stacks: map[string]stackOf{}}
}

func (j *Judge) stack(agent string) (*guards.Stack, error) {
	if s, ok := j.stacks[agent]; ok {
		return s.s, s.err
	}
	// A rate limit counts the calls of every task of its window, which
	// the log of one task does not hold: its counter here counts nothing
	// and notes that it was asked (ADR 0093).
	opts := []guards.StackOption{guards.WithRates(rateProbe{j})}
	if j.opts.Edits != nil {
		opts = append(opts, guards.WithEditTools(j.opts.Edits))
	}
	j.building = true
	s, err := j.gov.AgentStack(agent, j.risk, j.opts.Guards, opts...)
	j.building = false
	if err == nil {
		for _, g := range s.Guards() {
			if r, ok := g.(Replayable); ok && r.Replayable() {
				continue
			}
			if isBuiltin(g) {
				continue
			}
			err = fmt.Errorf("%w: guard %s judges from state outside the log", ErrNotReplayable, g.Name())
			break
		}
	}
	j.stacks[agent] = stackOf{s, err}
	return s, err
}

// risk is the stacks' risk lookup: Risks, noting a tool Outside reports.
func (j *Judge) risk(tool string) (string, bool) {
	if j.opts.Outside != nil && j.opts.Outside(tool) {
		if j.building {
			return "", true // known, its level asked per call
		}
		j.outside = tool
		return "", false
	}
	if j.opts.Risks == nil {
		return "", false
	}
	return j.opts.Risks(tool)
}

// check asks s about a, and fails with ErrNotReplayable if the answer
// needed a risk level from outside the log.
func (j *Judge) check(ctx context.Context, s *guards.Stack, a noeta.ProposedAction, gc *guards.Context) (Verdict, error) {
	return j.checked(func() guards.Decision { return s.Check(ctx, a, gc) })
}

func (j *Judge) checked(fn func() guards.Decision) (Verdict, error) {
	j.outside, j.rated = "", false
	d := fn()
	if j.outside != "" {
		return Verdict{}, fmt.Errorf("%w: the risk level of tool %s comes from its MCP server (give it a risk in the config's mcp_servers to replay it)", ErrNotReplayable, j.outside)
	}
	// A deny by a guard after the rate limit stands whatever the count
	// was; any other answer could have been the rate limit's deny.
	if j.rated && !j.inCase && d.Verdict != noeta.VerdictDeny {
		return Verdict{}, fmt.Errorf("%w: a rate limit applies, and its count is of every task's calls in its window, which one task's log does not hold", ErrNotReplayable)
	}
	return Verdict{Verdict: d.Verdict, Guard: d.Guard, Reason: d.Reason}, nil
}

// rateProbe is the replay's rate counter: it admits every call and notes
// that a rate limit was asked.
type rateProbe struct{ j *Judge }

func (p rateProbe) Take(context.Context, string, int64, time.Duration) (int64, bool, error) {
	p.j.rated = true
	return 1, true, nil
}

// isBuiltin reports a guard the governance config builds: a function of
// the action and the context alone, but for the rate limit, whose
// counter the judge gives it (rateProbe).
func isBuiltin(g guards.Guard) bool {
	switch g.(type) {
	case *guards.Budget, *guards.Permission, *guards.Repetition, *guards.Rules, *guards.RateLimiter:
		return true
	}
	return false
}

// Task re-judges every recorded tool call, spawn and finish of task's log, in
// log order, calling fn with each outcome. Reading the log fails it; an
// action that cannot be judged again is an outcome with Err.
func (j *Judge) Task(ctx context.Context, log eventlog.Reader, content Content, task string, fn func(Outcome)) error {
	envs, err := log.Read(ctx, task, 0)
	if err != nil {
		return err
	}
	return j.records(ctx, content, task, envs, fn)
}

// records re-judges the actions of task's records, envs.
func (j *Judge) records(ctx context.Context, content Content, task string, envs []eventlog.Envelope, fn func(Outcome)) error {
	r := taskReplay{j: j, ctx: ctx, content: content, st: &engine.State{}, fn: fn}
	for _, env := range envs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.before(env); err != nil {
			return err
		}
		if err := r.st.Apply(env); err != nil {
			return fmt.Errorf("replay: task %s seq %d: %w", task, env.Seq, err)
		}
	}
	return nil
}

// taskReplay walks one log: the fold up to the record at hand is the
// state the guards judged on when the engine wrote it.
type taskReplay struct {
	j       *Judge
	ctx     context.Context
	content Content
	st      *engine.State
	fn      func(Outcome)
	// decision is the current turn's recorded decision, rebuilt once.
	decisionTurn int
	calls        map[string]noeta.ToolCall
	spawns       []noeta.SpawnSubtask
	answer       json.RawMessage
	decisionErr  error
	// approved are the calls and the finish a person approved: their
	// start is the approval's outcome, judged at the request.
	approved map[string]bool
}

// before looks at env before it is folded in: if it carries the verdict
// of a proposal, the proposal is judged again on the state before it.
func (r *taskReplay) before(env eventlog.Envelope) error {
	if env.Seq == 0 {
		return nil
	}
	switch env.Type {
	case noeta.TypeToolCallStarted, noeta.TypeToolCallDenied, noeta.TypeApprovalRequested,
		noeta.TypeTaskCompleted, noeta.TypeFinishDenied, noeta.TypeApprovalResolved,
		noeta.TypeSubtaskSpawned, noeta.TypeSubtaskDenied:
	default:
		return nil
	}
	p, _, err := env.Decode()
	if err != nil {
		return fmt.Errorf("replay: task %s seq %d: %w", env.Task, env.Seq, err)
	}
	act := Action{Task: env.Task, Agent: r.st.Agent, Turn: r.st.Turn.N, Seq: env.Seq, Time: env.Time}
	switch p := p.(type) {
	case *noeta.ApprovalResolved:
		if pa, ok := r.st.Governance.PendingApprovals[p.Handle]; ok && p.Decision == noeta.ApprovalApprove {
			if r.approved == nil {
				r.approved = map[string]bool{}
			}
			callID := pa.CallID
			if pa.Action == noeta.ApprovalSpawnSubtask {
				callID = ""
			}
			r.approved[approvedKey(pa.Action, callID)] = true
		}
		return nil
	case *noeta.ToolCallStarted:
		if r.approved[approvedKey(noeta.ApprovalToolCall, p.CallID)] {
			return nil
		}
		act.Point, act.Tool, act.CallID = "tool_call", p.Tool, p.CallID
		r.toolCall(act, Verdict{Verdict: noeta.VerdictAllow})
	case *noeta.ToolCallDenied:
		if p.Guard == engine.GuardSchema {
			// Refused before any guard was asked: it could not run.
			return nil
		}
		act.Point, act.Tool, act.CallID = "tool_call", p.Tool, p.CallID
		r.toolCall(act, Verdict{Verdict: noeta.VerdictDeny, Guard: p.Guard, Reason: p.Reason})
	case *noeta.ApprovalRequested:
		rec := Verdict{Verdict: noeta.VerdictRequireApproval, Guard: p.Guard, Reason: p.Reason}
		switch p.Action {
		case noeta.ApprovalToolCall:
			act.Point, act.Tool, act.CallID = "tool_call", p.Tool, p.CallID
			r.toolCall(act, rec)
		case noeta.ApprovalFinish:
			act.Point = "finish"
			r.finish(act, rec)
		case noeta.ApprovalSpawnSubtask:
			act.Point = "spawn_subtask"
			r.spawn(act, rec, "")
		}
	case *noeta.SubtaskSpawned:
		if k := approvedKey(noeta.ApprovalSpawnSubtask, ""); r.approved[k] {
			delete(r.approved, k) // the approved spawn's child, judged at the request
			return nil
		}
		if len(r.st.Turn.Spawned) > 0 {
			return nil // a later member of a spawn judged at its first
		}
		act.Point = "spawn_subtask"
		r.spawn(act, Verdict{Verdict: noeta.VerdictAllow}, p.GroupID)
	case *noeta.SubtaskDenied:
		act.Point = "spawn_subtask"
		r.spawn(act, Verdict{Verdict: noeta.VerdictDeny, Guard: p.Guard, Reason: p.Reason}, p.GroupID)
	case *noeta.TaskCompleted:
		if r.approved[approvedKey(noeta.ApprovalFinish, "")] {
			return nil
		}
		act.Point = "finish"
		r.finish(act, Verdict{Verdict: noeta.VerdictAllow})
	case *noeta.FinishDenied:
		act.Point = "finish"
		r.finish(act, Verdict{Verdict: noeta.VerdictDeny, Guard: p.Guard, Reason: p.Reason})
	}
	return nil
}

func approvedKey(a noeta.ApprovalAction, callID string) string { return string(a) + "/" + callID }

func (r *taskReplay) toolCall(act Action, rec Verdict) {
	out := Outcome{Action: act, Recorded: rec}
	if err := r.decision(); err != nil {
		out.Err = err
		r.fn(out)
		return
	}
	call, ok := r.calls[act.CallID]
	if !ok {
		out.Err = fmt.Errorf("replay: task %s turn %d: call %s is not in the turn's recorded decision", act.Task, act.Turn, act.CallID)
		r.fn(out)
		return
	}
	out.Replayed, out.Err = r.judge(act.Agent, noeta.ProposedToolCall{Call: call})
	r.fn(out)
}

func (r *taskReplay) finish(act Action, rec Verdict) {
	out := Outcome{Action: act, Recorded: rec}
	if err := r.decision(); err != nil {
		out.Err = err
		r.fn(out)
		return
	}
	out.Replayed, out.Err = r.judge(act.Agent, noeta.ProposedFinish{Answer: r.answer})
	r.fn(out)
}

// spawn judges the turn's recorded spawn as the engine did: one child as
// one action, a fan-out as a batch whose members are admitted one by one
// (guards.Stack.CheckFanOut), refused whole if it is over
// engine.MaxFanOut; all on the state before its first record.
func (r *taskReplay) spawn(act Action, rec Verdict, group string) {
	out := Outcome{Action: act, Recorded: rec}
	if err := r.decision(); err != nil {
		out.Err = err
		r.fn(out)
		return
	}
	agents := make([]string, len(r.spawns))
	for i, m := range r.spawns {
		agents[i] = m.Agent
	}
	out.Child = strings.Join(agents, ",")
	switch {
	case len(r.spawns) == 0:
		out.Err = fmt.Errorf("replay: task %s turn %d: the turn's recorded decision has no spawn", act.Task, act.Turn)
	case len(r.spawns) == 1:
		out.Replayed, out.Err = r.judge(act.Agent, noeta.ProposedSpawnSubtask{Spawn: r.spawns[0]})
	case len(r.spawns) > engine.MaxFanOut:
		out.Replayed = Verdict{Verdict: noeta.VerdictDeny, Guard: "engine", Reason: fmt.Sprintf("fanout_batch_size:%d>%d", len(r.spawns), engine.MaxFanOut)}
	default:
		members := make([]noeta.SpawnSubtask, len(r.spawns))
		for i, m := range r.spawns {
			members[i] = m
			members[i].GroupID = group
		}
		s, err := r.j.stack(act.Agent)
		if err != nil {
			out.Err = err
			break
		}
		gc := r.guardContext(act.Agent)
		out.Replayed, out.Err = r.j.checked(func() guards.Decision { return s.CheckFanOut(r.ctx, members, gc).Decision })
	}
	r.fn(out)
}

func (r *taskReplay) guardContext(agent string) *guards.Context {
	return guards.NewContext(guards.ContextParams{
		TaskID:       r.st.Task,
		Governance:   r.st.Governance,
		SubtaskDepth: r.st.Depth,
		Metadata:     map[string]string{"agent": agent},
		SubmittedBy:  r.st.SubmittedBy,
	})
}

// judge asks the new stack of agent about a on the state before the
// record.
func (r *taskReplay) judge(agent string, a noeta.ProposedAction) (Verdict, error) {
	s, err := r.j.stack(agent)
	if err != nil {
		return Verdict{}, err
	}
	v, err := r.j.check(r.ctx, s, a, r.guardContext(agent))
	if err := r.ctx.Err(); err != nil {
		return Verdict{}, err
	}
	return v, err
}

// decision rebuilds the current turn's recorded calls and answer, once
// per turn.
func (r *taskReplay) decision() error {
	if r.decisionTurn == r.st.Turn.N && (r.calls != nil || r.decisionErr != nil || r.answer != nil) {
		return r.decisionErr
	}
	r.decisionTurn, r.calls, r.spawns, r.answer, r.decisionErr = r.st.Turn.N, map[string]noeta.ToolCall{}, nil, nil, nil
	rec := r.st.Turn.Decision
	if rec == nil {
		r.decisionErr = fmt.Errorf("%w: task %s turn %d has no recorded decision (a log written before decisions were recorded)", ErrNotReplayable, r.st.Task, r.st.Turn.N)
		return r.decisionErr
	}
	parts := noeta.RecordedParts{ToolCalls: rec.ToolCalls, Spawn: rec.Spawn, Answer: rec.Answer}
	if rec.DecisionRef != nil {
		b, err := r.get(rec.DecisionRef)
		if err != nil {
			r.decisionErr = err
			return err
		}
		parts = noeta.RecordedParts{}
		if err := json.Unmarshal(b, &parts); err != nil {
			r.decisionErr = fmt.Errorf("replay: task %s turn %d: the recorded decision does not decode: %w", r.st.Task, r.st.Turn.N, err)
			return r.decisionErr
		}
	}
	for _, c := range parts.ToolCalls {
		tc := noeta.ToolCall{CallID: c.CallID, Tool: c.Tool, Args: c.Args, Invalid: c.Invalid}
		if c.ArgsRef != nil {
			b, err := r.get(c.ArgsRef)
			if err != nil {
				r.decisionErr = err
				return err
			}
			tc.Args = b
		}
		r.calls[c.CallID] = tc
	}
	for _, sp := range parts.Spawn {
		m := noeta.SpawnSubtask{Agent: sp.Agent, Goal: sp.Goal}
		if sp.GoalRef != nil {
			b, err := r.get(sp.GoalRef)
			if err != nil {
				r.decisionErr = err
				return err
			}
			if json.Unmarshal(b, &m.Goal) != nil {
				m.Goal = string(b)
			}
		}
		r.spawns = append(r.spawns, m)
	}
	r.answer = parts.Answer
	if rec.AnswerRef != nil {
		b, err := r.get(rec.AnswerRef)
		if err != nil {
			r.decisionErr = err
			return err
		}
		r.answer = b
	}
	return nil
}

func (r *taskReplay) get(ref *noeta.ContentRef) ([]byte, error) {
	b, err := r.content.Get(r.ctx, *ref)
	if err != nil {
		return nil, fmt.Errorf("replay: task %s turn %d: the recorded decision's content %s: %w", r.st.Task, r.st.Turn.N, ref.Hash, err)
	}
	return b, nil
}
