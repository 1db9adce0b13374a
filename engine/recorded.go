package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/tools"
)

// GuardSchema is the name the engine records, in the guard field of a
// ToolCallDenied, for a call that cannot run whatever the guards would say:
// a tool the registry does not have, args that do not match the tool's
// schema, a call the policy marked invalid (the model's arguments were not
// JSON). Such a call never runs and the guards are not asked
// (docs/adr/0027).
const GuardSchema = "schema"

// Bounds of what a recorded decision keeps of the policy's notes; they are
// commentary, and the payload cap is shared with the decision itself.
const (
	maxNotes    = 16
	maxNoteLen  = 256
	maxInvalid  = 512
	mediaBinary = "application/octet-stream"
)

// recordDecision builds the version 2 PolicyDecided of turn n: the whole
// decision, its large parts in the content store, the raw response by ref.
// The model's text stays inline up to noeta.TextInlineLimit and goes whole
// to the content store beyond it: it is never cut. Parts (the text among
// them) are moved to the content store largest first until the payload
// fits its cap; if even then it does not (many calls), all the parts go in
// one body under decision_ref.
func (g *segment) recordDecision(n int, d noeta.Decision) (noeta.PolicyDecided, error) {
	rec := noeta.PolicyDecided{
		Turn: n, Decision: d.Kind, Version: noeta.PolicyDecidedVersion,
		CostUSD: d.CostUSD, InputTokens: d.InputTokens, OutputTokens: d.OutputTokens,
		Model: d.Model, Provider: d.Provider, LatencyMS: d.LatencyMS,
	}
	for i, note := range d.Notes {
		if i == maxNotes {
			rec.Notes = append(rec.Notes, fmt.Sprintf("(%d more notes)", len(d.Notes)-maxNotes))
			break
		}
		rec.Notes = append(rec.Notes, truncate(note, maxNoteLen))
	}
	if len(d.Response) > 0 {
		media := mediaBinary
		if json.Valid(d.Response) {
			media = eventlog.MediaTypeJSON
		}
		ref, err := g.e.cfg.Content.Put(g.ctx, d.Response, media)
		if err != nil {
			return rec, fmt.Errorf("engine: task %s turn %d: storing the model's response: %w", g.st.Task, n, err)
		}
		rec.ResponseRef = &ref
	}
	if d.Text != "" {
		text, ref, err := eventlog.SpillString(g.ctx, g.e.cfg.Content, d.Text, noeta.TextInlineLimit)
		if err != nil {
			return rec, fmt.Errorf("engine: task %s turn %d: storing the model's text: %w", g.st.Task, n, err)
		}
		rec.Text, rec.TextRef = text, ref
	}
	parts, err := partsOf(d)
	if err != nil {
		return rec, err
	}
	setParts(&rec, parts)
	if sizeBound(rec) <= noeta.PayloadMaxBytes {
		// The common case (a few small calls, a short answer) fits for
		// sure: no need to encode the record twice to know it.
		return rec, nil
	}
	fits := func() (bool, error) {
		b, err := noeta.Canonical(rec)
		return len(b) <= noeta.PayloadMaxBytes, err
	}
	ok, err := fits()
	if err != nil {
		return rec, err
	}
	for !ok {
		part := largestPart(&rec)
		if part == nil {
			break
		}
		if err := part.spill(g.ctx, g.e.cfg.Content); err != nil {
			return rec, err
		}
		if ok, err = fits(); err != nil {
			return rec, err
		}
	}
	if !ok {
		body, err := noeta.Canonical(parts)
		if err != nil {
			return rec, err
		}
		ref, err := g.e.cfg.Content.Put(g.ctx, body, eventlog.MediaTypeJSON)
		if err != nil {
			return rec, err
		}
		setParts(&rec, noeta.RecordedParts{})
		rec.DecisionRef = &ref
		if ok, err = fits(); err != nil {
			return rec, err
		}
		for !ok && len(rec.Notes) > 0 {
			rec.Notes = rec.Notes[:len(rec.Notes)-1]
			if ok, err = fits(); err != nil {
				return rec, err
			}
		}
	}
	return rec, nil
}

// sizeBound is an upper bound of the canonical size of rec: members'
// names and punctuation in a fixed allowance, raw JSON parts (already
// canonical) at their length, strings at six bytes a byte (the longest
// escape, \u00XX, for one byte), numbers at 32.
func sizeBound(rec noeta.PolicyDecided) int {
	const fixed = 600 // every member name, the refs of a response, the version
	str := func(s string) int { return 6*len(s) + 2 }
	n := fixed + str(string(rec.Decision)) + str(rec.Model) + str(rec.Provider) + str(rec.Question) + str(rec.EventKind) + str(rec.Error) +
		str(rec.Text) + len(rec.Patch) + len(rec.Answer)
	if rec.TextRef != nil {
		n += 200 // its member name and a ref: hash, size, media type
	}
	for _, note := range rec.Notes {
		n += str(note) + 1
	}
	for _, c := range rec.ToolCalls {
		n += 60 + str(c.CallID) + str(c.Tool) + str(c.Invalid) + len(c.Args)
	}
	for _, sp := range rec.Spawn {
		n += 60 + str(sp.Agent) + str(sp.Goal) + len(sp.Script)
	}
	return n
}

// partsOf is the part of d its kind has, all inline.
func partsOf(d noeta.Decision) (noeta.RecordedParts, error) {
	p := noeta.RecordedParts{
		Question: d.Question, WaitSeconds: d.WaitSeconds, EventKind: d.EventKind,
		Patch: d.Patch, Answer: d.Answer, Error: d.Error,
	}
	for _, c := range d.ToolCalls {
		rc := noeta.RecordedCall{CallID: c.CallID, Tool: c.Tool, Invalid: truncate(c.Invalid, maxInvalid)}
		if len(c.Args) > 0 {
			canon, err := noeta.CanonicalizeJSON(c.Args)
			switch {
			case err == nil:
				rc.Args = canon
			case c.Invalid == "":
				// Validate refused this already; a call that can run has
				// JSON args.
				return p, fmt.Errorf("engine: call %s: args: %w", c.CallID, err)
			}
		}
		p.ToolCalls = append(p.ToolCalls, rc)
	}
	for _, s := range d.Spawn {
		rs := noeta.RecordedSpawn{Agent: s.Agent, Goal: s.Goal}
		if len(s.Script) > 0 {
			canon, err := noeta.CanonicalizeJSON(s.Script)
			if err != nil {
				return p, fmt.Errorf("engine: spawn of %s: script: %w", s.Agent, err)
			}
			rs.Script = canon
		}
		p.Spawn = append(p.Spawn, rs)
	}
	if d.Patch != nil {
		canon, err := noeta.CanonicalizeJSON(d.Patch)
		if err != nil {
			return p, fmt.Errorf("engine: patch: %w", err)
		}
		p.Patch = canon
	}
	if d.Answer != nil {
		canon, err := noeta.CanonicalizeJSON(d.Answer)
		if err != nil {
			return p, fmt.Errorf("engine: answer: %w", err)
		}
		p.Answer = canon
	}
	return p, nil
}

func setParts(rec *noeta.PolicyDecided, p noeta.RecordedParts) {
	rec.ToolCalls, rec.Spawn, rec.Question, rec.WaitSeconds = p.ToolCalls, p.Spawn, p.Question, p.WaitSeconds
	rec.EventKind, rec.Patch, rec.PatchRef, rec.Answer, rec.AnswerRef, rec.Error = p.EventKind, p.Patch, nil, p.Answer, nil, p.Error
}

// spillable is one inline part of a record that can move to the content
// store.
type spillable struct {
	size  int
	order int // position in the record, for a deterministic tie-break
	spill func(ctx context.Context, cs eventlog.ContentStore) error
}

// largestPart returns the largest part of rec still inline, or nil.
func largestPart(rec *noeta.PolicyDecided) *spillable {
	var all []spillable
	put := func(ctx context.Context, cs eventlog.ContentStore, body []byte) (*noeta.ContentRef, error) {
		ref, err := cs.Put(ctx, body, eventlog.MediaTypeJSON)
		return &ref, err
	}
	for i := range rec.ToolCalls {
		c := &rec.ToolCalls[i]
		if len(c.Args) > 0 {
			all = append(all, spillable{len(c.Args), len(all), func(ctx context.Context, cs eventlog.ContentStore) (err error) {
				c.ArgsRef, err = put(ctx, cs, c.Args)
				c.Args = nil
				return err
			}})
		}
	}
	for i := range rec.Spawn {
		s := &rec.Spawn[i]
		if s.Goal != "" {
			all = append(all, spillable{len(s.Goal), len(all), func(ctx context.Context, cs eventlog.ContentStore) error {
				b, err := noeta.Canonical(s.Goal)
				if err != nil {
					return err
				}
				s.GoalRef, err = put(ctx, cs, b)
				s.Goal = ""
				return err
			}})
		}
		if len(s.Script) > 0 {
			all = append(all, spillable{len(s.Script), len(all), func(ctx context.Context, cs eventlog.ContentStore) (err error) {
				s.ScriptRef, err = put(ctx, cs, s.Script)
				s.Script = nil
				return err
			}})
		}
	}
	if len(rec.Patch) > 0 {
		all = append(all, spillable{len(rec.Patch), len(all), func(ctx context.Context, cs eventlog.ContentStore) (err error) {
			rec.PatchRef, err = put(ctx, cs, rec.Patch)
			rec.Patch = nil
			return err
		}})
	}
	if len(rec.Answer) > 0 {
		all = append(all, spillable{len(rec.Answer), len(all), func(ctx context.Context, cs eventlog.ContentStore) (err error) {
			rec.AnswerRef, err = put(ctx, cs, rec.Answer)
			rec.Answer = nil
			return err
		}})
	}
	if rec.Text != "" {
		// The model's words are commentary, but they are kept whole like
		// every part: moved, never cut.
		all = append(all, spillable{len(rec.Text), len(all), func(ctx context.Context, cs eventlog.ContentStore) error {
			b, err := noeta.Canonical(rec.Text)
			if err != nil {
				return err
			}
			rec.TextRef, err = put(ctx, cs, b)
			rec.Text = ""
			return err
		}})
	}
	// A ref costs about 120 bytes: moving a part smaller than that gains
	// nothing.
	all = slices.DeleteFunc(all, func(s spillable) bool { return s.size <= 160 })
	if len(all) == 0 {
		return nil
	}
	best := slices.MinFunc(all, func(a, b spillable) int {
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	return &best
}

// replayDecision rebuilds the decision a version 2 PolicyDecided recorded,
// fetching its parts from the content store.
func (g *segment) replayDecision(rec *noeta.PolicyDecided) (noeta.Decision, error) {
	get := func(ref *noeta.ContentRef) ([]byte, error) {
		b, err := g.e.cfg.Content.Get(g.ctx, *ref)
		if err != nil {
			return nil, fmt.Errorf("engine: task %s turn %d: the recorded decision's content %s: %w", g.st.Task, rec.Turn, ref.Hash, err)
		}
		return b, nil
	}
	parts := noeta.RecordedParts{
		ToolCalls: rec.ToolCalls, Spawn: rec.Spawn, Question: rec.Question, WaitSeconds: rec.WaitSeconds,
		EventKind: rec.EventKind, Patch: rec.Patch, Answer: rec.Answer, Error: rec.Error,
	}
	if rec.DecisionRef != nil {
		b, err := get(rec.DecisionRef)
		if err != nil {
			return noeta.Decision{}, err
		}
		parts = noeta.RecordedParts{}
		if err := json.Unmarshal(b, &parts); err != nil {
			return noeta.Decision{}, fmt.Errorf("%w: task %s turn %d: the recorded decision does not decode: %v", ErrBadLog, g.st.Task, rec.Turn, err)
		}
	}
	d := noeta.Decision{
		Kind: rec.Decision, Question: parts.Question, WaitSeconds: parts.WaitSeconds, EventKind: parts.EventKind,
		Patch: parts.Patch, Answer: parts.Answer, Error: parts.Error,
		CostUSD: rec.CostUSD, InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens,
		Model: rec.Model, Provider: rec.Provider, LatencyMS: rec.LatencyMS, Notes: rec.Notes, Text: rec.Text,
	}
	var err error
	if rec.TextRef != nil {
		b, err := get(rec.TextRef)
		if err != nil {
			return d, err
		}
		if err := json.Unmarshal(b, &d.Text); err != nil {
			return d, fmt.Errorf("%w: task %s turn %d: the recorded text does not decode: %v", ErrBadLog, g.st.Task, rec.Turn, err)
		}
	}
	if rec.PatchRef != nil {
		if d.Patch, err = get(rec.PatchRef); err != nil {
			return d, err
		}
	}
	if rec.AnswerRef != nil {
		if d.Answer, err = get(rec.AnswerRef); err != nil {
			return d, err
		}
	}
	for _, c := range parts.ToolCalls {
		tc := noeta.ToolCall{CallID: c.CallID, Tool: c.Tool, Args: c.Args, Invalid: c.Invalid}
		if c.ArgsRef != nil {
			if tc.Args, err = get(c.ArgsRef); err != nil {
				return d, err
			}
		}
		d.ToolCalls = append(d.ToolCalls, tc)
	}
	for _, s := range parts.Spawn {
		sp := noeta.SpawnSpec{Agent: s.Agent, Goal: s.Goal, Script: s.Script}
		if s.GoalRef != nil {
			b, err := get(s.GoalRef)
			if err != nil {
				return d, err
			}
			if err := json.Unmarshal(b, &sp.Goal); err != nil {
				return d, fmt.Errorf("%w: task %s turn %d: a recorded goal does not decode: %v", ErrBadLog, g.st.Task, rec.Turn, err)
			}
		}
		if s.ScriptRef != nil {
			if sp.Script, err = get(s.ScriptRef); err != nil {
				return d, err
			}
		}
		d.Spawn = append(d.Spawn, sp)
	}
	if err := d.Validate(); err != nil {
		// The engine recorded only decisions that validated: the log or
		// the content store has been tampered with. Never act on it.
		return d, fmt.Errorf("%w: task %s turn %d: the recorded decision: %v", ErrBadLog, g.st.Task, rec.Turn, err)
	}
	return d, nil
}

// offer is what a model is offered: the agent's allowed tools with their
// schemas, and the agents it may spawn.
type offer struct {
	tools []noeta.ToolSpec
	spawn []string
}

// offerOf computes the offer of the segment's agent once. Tools: the
// registry's tools the agent may call ([guards.AgentConfig.MayCall]: on its
// tools: and permissions.allowed_tools, each when set, names or patterns;
// not in denied_tools), within max_risk_level (when set), in the
// registry's order. Spawn: permissions.allowed_subtask_agents,
// only when it is set (an agent may spawn only what its config names), and
// none when max_spawned_subtasks is 0 or the task is at max_subtask_depth.
// The guards still decide every call: offering less never allows more.
func (g *segment) offerOf() offer {
	if g.offered != nil {
		return *g.offered
	}
	var o offer
	reg := g.e.cfg.Tools
	a, ok := g.e.cfg.Governance.Agent(g.st.Agent)
	if ok {
		// The registry's tools the agent's lists let it call (names or
		// patterns, such as mcp__files__*).
		p := a.Permissions
		names := slices.DeleteFunc(reg.Names(), func(t string) bool {
			if !a.MayCall(t) {
				return true
			}
			return !p.MaxRiskLevel.Admits(reg.RiskString(t))
		})
		o.tools = reg.Specs(names)
		if p.AllowedSubtaskAgents != nil {
			b := a.Budget
			noRoom := b.MaxSpawnedSubtasks != nil && *b.MaxSpawnedSubtasks <= 0 ||
				b.MaxSubtaskDepth != nil && g.st.Depth >= *b.MaxSubtaskDepth
			if !noRoom {
				o.spawn = slices.Compact(slices.Sorted(slices.Values(p.AllowedSubtaskAgents)))
			}
		}
	}
	g.offered = &o
	return o
}

// policyInput is what the policy of turn n is told: the task, its agent,
// the composed context and the offer (copies: a policy cannot change the
// next turn's by changing them).
func (g *segment) policyInput(n int) noeta.PolicyInput {
	o := g.offerOf()
	in := noeta.PolicyInput{Task: g.st.Task, Turn: n, Agent: g.st.Agent, SpawnAgents: slices.Clone(o.spawn)}
	if o.tools != nil {
		in.Tools = make([]noeta.ToolSpec, len(o.tools))
		for i, t := range o.tools {
			t.InputSchema = slices.Clone(t.InputSchema)
			in.Tools[i] = t
		}
	}
	if g.st.Context != nil {
		in.Context = g.st.Context.Transcript()
	}
	return in
}

// invalidCall says why call cannot run at all, or "": the policy marked it
// invalid, the registry has no such tool, or its args do not match the
// tool's schema.
func (g *segment) invalidCall(call noeta.ToolCall) string {
	if call.Invalid != "" {
		return truncate(call.Invalid, maxInvalid)
	}
	err := g.e.cfg.Tools.ValidateArgs(call.Tool, call.Args)
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, p := range []string{tools.ErrInvalidArgs.Error() + ": ", tools.ErrUnknownTool.Error() + " "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if errors.Is(err, tools.ErrUnknownTool) {
		return truncate("unknown tool "+msg, maxInvalid)
	}
	return truncate(msg, maxInvalid)
}

// deniedToolName is a name a ToolCallDenied can carry for a call the model
// named however it liked.
func deniedToolName(tool string) string {
	if tool == "" {
		return "(none)"
	}
	return truncate(tool, 64)
}
