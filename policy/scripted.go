package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/noeta-go/noeta"
)

// Input is what the engine tells a policy when it asks for a turn's decision
// ([noeta.PolicyInput]).
type Input = noeta.PolicyInput

// Script is a task's decisions in order: step i is the decision of turn i+1.
// Its steps are decisions without call ids; [Scripted] derives those from the
// turn. Its JSON form is the script of a task file, written as JSON
// ([Script.MarshalJSON]); that is the form a spawn step hands a child, in
// [noeta.SpawnSpec].Script.
type Script []noeta.Decision

// Scripted is the policy of a task file: it returns the script's steps in
// order, one per turn. It is a pure function of the turn — no clock, no
// randomness, no memory of earlier calls — so the same Turn always gives the
// same decision, with the same call ids: a task resumed after a suspend, or
// re-driven after a crash mid-step, re-derives exactly the decision it had,
// and the engine can recognise the calls it already recorded. Past the end of
// the script every turn is a fail decision, "script exhausted at turn N".
//
// A Scripted is immutable and safe for concurrent use; one value can serve
// every task run from the same script.
type Scripted struct {
	script Script
}

// NewScripted returns the policy for script. The script is copied, so changing
// it afterwards does not change the policy. It is not validated here: an
// invalid step is reported by Decide, at its turn, and [Script.Validate]
// checks a whole script up front.
func NewScripted(script Script) *Scripted {
	return &Scripted{script: script.Clone()}
}

// ParseScripted is the policy of a script in its JSON form (a task's
// script_ref body): [ScriptFromJSON], then [NewScripted].
func ParseScripted(body []byte) (*Scripted, error) {
	script, err := ScriptFromJSON(body)
	if err != nil {
		return nil, err
	}
	return NewScripted(script), nil
}

// Len returns the number of scripted steps.
func (s *Scripted) Len() int { return len(s.script) }

// Decide returns the decision of turn in.Turn: the script's step in.Turn-1 with
// its tool call ids set to [CallID](in.Turn, i) (and {} for a call without
// args), or, past the end, a fail decision with the error "script exhausted at
// turn N". The result is a copy
// the caller may keep or change. A cancelled ctx, a turn below 1 and an
// invalid step are errors; an invalid step is one built in Go, since a parsed
// script has been checked.
func (s *Scripted) Decide(ctx context.Context, in Input) (noeta.Decision, error) {
	if err := ctx.Err(); err != nil {
		return noeta.Decision{}, err
	}
	if in.Turn < 1 {
		return noeta.Decision{}, fmt.Errorf("policy: turn %d: turns count from 1", in.Turn)
	}
	if in.Turn > len(s.script) {
		return noeta.Decision{
			Kind:  noeta.DecisionFail,
			Error: fmt.Sprintf("script exhausted at turn %d", in.Turn),
		}, nil
	}
	d := withCallIDs(s.script[in.Turn-1], in.Turn)
	if err := d.Validate(); err != nil {
		return noeta.Decision{}, fmt.Errorf("policy: script[%d] (turn %d): %w", in.Turn-1, in.Turn, err)
	}
	return d, nil
}

// CallID is the id of the index-th (0-based) tool call of turn (1-based):
// "call-<turn>-<index>", e.g. call-3-0 for the first call of script[2]. It
// depends on nothing else, so every re-derivation of a turn names its calls
// the same way. It need not be unique beyond its task: everything that refers
// to a call (approval handles, results, the audit trail) is scoped to a task,
// and a short readable id is worth more in a timeline than a hash.
func CallID(turn, index int) string {
	return "call-" + strconv.Itoa(turn) + "-" + strconv.Itoa(index)
}

// withCallIDs returns a deep copy of d with its call ids derived from turn;
// ids written in a Go-built script are replaced, so no script can make a turn
// name its calls differently on two derivations. A call without args gets {},
// as it does in a task file.
func withCallIDs(d noeta.Decision, turn int) noeta.Decision {
	d = d.Clone()
	for i := range d.ToolCalls {
		d.ToolCalls[i].CallID = CallID(turn, i)
		if len(bytes.TrimSpace(d.ToolCalls[i].Args)) == 0 {
			d.ToolCalls[i].Args = json.RawMessage("{}")
		}
	}
	return d
}

// Clone returns a deep copy of s.
func (s Script) Clone() Script {
	if s == nil {
		return nil
	}
	out := make(Script, len(s))
	for i, d := range s {
		out[i] = d.Clone()
	}
	return out
}

// Validate checks every step as the decision it will be (call ids derived, see
// [CallID]), and each child's script, recursively. The error names the step:
// script[1].spawn[0].script[0]: …
func (s Script) Validate() error {
	return s.validate("script")
}

func (s Script) validate(path string) error {
	for i, d := range s {
		p := index(path, i)
		if err := withCallIDs(d, i+1).Validate(); err != nil {
			return fmt.Errorf("policy: %s: %w", p, err)
		}
		for j, sp := range d.Spawn {
			if len(sp.Script) == 0 {
				continue
			}
			cp := index(join(p, "spawn"), j) + ".script"
			child, err := scriptFromJSON(sp.Script, cp)
			if err != nil {
				return err
			}
			if err := child.validate(cp); err != nil {
				return err
			}
		}
	}
	return nil
}

// MarshalJSON writes the script as a task file's script, in canonical JSON:
//
//	[{"tool_calls":[{"args":{"path":"README.md"},"tool":"read_file"}]},{"cost_usd":0.5,"finish":{"answer":"done"}}]
//
// Call ids are left out (they are derived from the turn), a call without args
// gets {}, a child's script is embedded as it is, and a zero cost is omitted.
// [ScriptFromJSON] reads it back to an equal Script.
func (s Script) MarshalJSON() ([]byte, error) {
	steps := make([]map[string]any, len(s))
	for i, d := range s {
		m, err := stepJSON(d)
		if err != nil {
			return nil, fmt.Errorf("policy: script[%d]: %w", i, err)
		}
		steps[i] = m
	}
	return noeta.Canonical(steps)
}

func stepJSON(d noeta.Decision) (map[string]any, error) {
	m := map[string]any{}
	switch d.Kind {
	case noeta.DecisionToolCalls:
		calls := make([]map[string]any, len(d.ToolCalls))
		for i, tc := range d.ToolCalls {
			args := json.RawMessage(tc.Args)
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage("{}")
			}
			calls[i] = map[string]any{"tool": tc.Tool, "args": args}
		}
		m[string(d.Kind)] = calls
	case noeta.DecisionSpawn:
		members := make([]map[string]any, len(d.Spawn))
		for i, sp := range d.Spawn {
			mm := map[string]any{"agent": sp.Agent, "goal": sp.Goal}
			if len(sp.Script) > 0 {
				mm["script"] = json.RawMessage(sp.Script)
			}
			members[i] = mm
		}
		m[string(d.Kind)] = members
	case noeta.DecisionYieldForHuman:
		m[string(d.Kind)] = map[string]any{"question": d.Question}
	case noeta.DecisionWaitTimer:
		m[string(d.Kind)] = map[string]any{"seconds": d.WaitSeconds}
	case noeta.DecisionWaitExternal:
		m[string(d.Kind)] = map[string]any{"event_kind": d.EventKind}
	case noeta.DecisionStatePatch:
		m[string(d.Kind)] = json.RawMessage(d.Patch)
	case noeta.DecisionFinish:
		m[string(d.Kind)] = map[string]any{"answer": json.RawMessage(d.Answer)}
	case noeta.DecisionFail:
		m[string(d.Kind)] = map[string]any{"error": d.Error}
	default:
		return nil, fmt.Errorf("unknown decision kind %q", d.Kind)
	}
	if d.CostUSD != 0 {
		m[keyCostUSD] = d.CostUSD
	}
	if d.InputTokens != 0 {
		m[keyInputTokens] = d.InputTokens
	}
	if d.OutputTokens != 0 {
		m[keyOutputTokens] = d.OutputTokens
	}
	return m, nil
}

// UnmarshalJSON reads a script as [ScriptFromJSON] does.
func (s *Script) UnmarshalJSON(data []byte) error {
	v, err := ScriptFromJSON(data)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ScriptFromJSON reads a script written as JSON — a spawn member's
// [noeta.SpawnSpec].Script, which the engine hands the child's policy — and
// checks it exactly as a task file's script is checked, errors naming paths
// from "script". Empty input (a child spawned without a script) is an empty
// script, whose task fails at its first turn.
func ScriptFromJSON(data []byte) (Script, error) {
	return scriptFromJSON(data, "script")
}

func scriptFromJSON(data []byte, path string) (Script, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	errs := &errorList{}
	v := parseJSON(data, path, errs)
	if !errs.empty() {
		return nil, errs.err()
	}
	c := &checker{errs: errs}
	s, _ := c.script(v, path)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return s, nil
}
