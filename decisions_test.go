package noeta

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func validDecisions() map[DecisionKind]Decision {
	return map[DecisionKind]Decision{
		DecisionToolCalls: {Kind: DecisionToolCalls, ToolCalls: []ToolCall{
			{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`)},
			{CallID: "call-1-1", Tool: "shell", Args: json.RawMessage(` { } `)},
		}},
		DecisionSpawn: {Kind: DecisionSpawn, Spawn: []SpawnSpec{
			{Agent: "helper", Goal: "count lines", Script: json.RawMessage(`[{"finish":{"answer":"42"}}]`)},
			{Agent: "helper", Goal: "no script"},
		}},
		DecisionYieldForHuman: {Kind: DecisionYieldForHuman, Question: "ship it?"},
		DecisionWaitTimer:     {Kind: DecisionWaitTimer, WaitSeconds: 0},
		DecisionWaitExternal:  {Kind: DecisionWaitExternal, EventKind: "deploy"},
		DecisionStatePatch:    {Kind: DecisionStatePatch, Patch: json.RawMessage(`{}`)},
		DecisionFinish:        {Kind: DecisionFinish, Answer: json.RawMessage(`null`), CostUSD: 0.5, InputTokens: 10, OutputTokens: 3},
		DecisionFail:          {Kind: DecisionFail, Error: "gave up"},
	}
}

func TestDecisionValidateAcceptsEveryKind(t *testing.T) {
	valid := validDecisions()
	if len(valid) != len(DecisionKinds()) {
		t.Fatalf("test covers %d kinds, vocabulary has %d", len(valid), len(DecisionKinds()))
	}
	for _, k := range DecisionKinds() {
		if !k.Valid() {
			t.Errorf("%s.Valid() = false", k)
		}
		if err := valid[k].Validate(); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if DecisionKind("compact").Valid() || DecisionKind("").Valid() {
		t.Error("an unknown kind is valid")
	}
}

func TestDecisionValidateRejects(t *testing.T) {
	v := validDecisions()
	with := func(k DecisionKind, f func(*Decision)) Decision {
		d := v[k].Clone()
		f(&d)
		return d
	}
	tests := []struct {
		name string
		d    Decision
		want string // the field and what is wrong, after "invalid decision: "
	}{
		{"no kind", Decision{}, "kind: is empty"},
		{"unknown kind", Decision{Kind: "compact"}, `kind: unknown kind "compact"`},
		{"no calls", Decision{Kind: DecisionToolCalls}, "tool_calls: needs at least one call"},
		{"missing call id", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[1].CallID = "" }), "tool_calls[1].call_id: call id \"\" is empty"},
		{"call id not a token", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[0].CallID = "a b" }), "tool_calls[0].call_id: call id \"a b\" has ' '"},
		{"call id too long", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[0].CallID = strings.Repeat("x", 65) }), `tool_calls[0].call_id: call id "` + strings.Repeat("x", 65) + `" is 65 bytes long, the limit is 64`},
		{"duplicate call id", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[1].CallID = "call-1-0" }), `tool_calls[1].call_id: "call-1-0" is also the id of tool_calls[0]`},
		{"no tool", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[0].Tool = "" }), "tool_calls[0].tool: is empty"},
		{"args missing", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[0].Args = nil }), "tool_calls[0].args: must be a JSON object"},
		{"args an array", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[0].Args = json.RawMessage(`[1]`) }), "tool_calls[0].args: must be a JSON object"},
		{"args broken", with(DecisionToolCalls, func(d *Decision) { d.ToolCalls[1].Args = json.RawMessage(`{"a":}`) }), "tool_calls[1].args: must be a JSON object"},
		{"no children", Decision{Kind: DecisionSpawn, Spawn: []SpawnSpec{}}, "spawn: needs at least one child"},
		{"child without agent", with(DecisionSpawn, func(d *Decision) { d.Spawn[1].Agent = "" }), "spawn[1].agent: is empty"},
		{"child without goal", with(DecisionSpawn, func(d *Decision) { d.Spawn[0].Goal = "" }), "spawn[0].goal: is empty"},
		{"child script broken", with(DecisionSpawn, func(d *Decision) { d.Spawn[0].Script = json.RawMessage(`[`) }), "spawn[0].script: is not valid JSON"},
		{"no question", Decision{Kind: DecisionYieldForHuman}, "question: is empty"},
		{"negative wait", Decision{Kind: DecisionWaitTimer, WaitSeconds: -1}, "wait_seconds: must be a finite number >= 0, not -1"},
		{"NaN wait", Decision{Kind: DecisionWaitTimer, WaitSeconds: math.NaN()}, "wait_seconds: must be a finite number >= 0, not NaN"},
		{"infinite wait", Decision{Kind: DecisionWaitTimer, WaitSeconds: math.Inf(1)}, "wait_seconds: must be a finite number >= 0, not +Inf"},
		{"no event kind", Decision{Kind: DecisionWaitExternal}, "event_kind: is empty"},
		{"patch missing", Decision{Kind: DecisionStatePatch}, "patch: must be a JSON object"},
		{"patch a string", Decision{Kind: DecisionStatePatch, Patch: json.RawMessage(`"x"`)}, "patch: must be a JSON object"},
		{"answer missing", Decision{Kind: DecisionFinish}, "answer: is missing"},
		{"answer broken", Decision{Kind: DecisionFinish, Answer: json.RawMessage(`tru`)}, "answer: is not valid JSON"},
		{"no error", Decision{Kind: DecisionFail}, "error: is empty"},
		{"foreign field", with(DecisionFinish, func(d *Decision) { d.Question = "why?" }), "question: is set in a finish decision; only a yield_for_human decision has it"},
		{"foreign calls", with(DecisionFail, func(d *Decision) { d.ToolCalls = []ToolCall{} }), "tool_calls: is set in a fail decision"},
		{"foreign wait", with(DecisionSpawn, func(d *Decision) { d.WaitSeconds = 3 }), "wait_seconds: is set in a spawn decision"},
		{"foreign answer", with(DecisionStatePatch, func(d *Decision) { d.Answer = json.RawMessage(`1`) }), "answer: is set in a state_patch decision"},
		{"negative cost", with(DecisionFail, func(d *Decision) { d.CostUSD = -0.01 }), "cost_usd: must be a finite number >= 0, not -0.01"},
		{"NaN cost", with(DecisionFail, func(d *Decision) { d.CostUSD = math.NaN() }), "cost_usd: must be a finite number >= 0"},
		{"negative input tokens", with(DecisionFail, func(d *Decision) { d.InputTokens = -1 }), "input_tokens: must be >= 0, not -1"},
		{"negative output tokens", with(DecisionFail, func(d *Decision) { d.OutputTokens = -2 }), "output_tokens: must be >= 0, not -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidDecision) {
				t.Errorf("%v does not wrap ErrInvalidDecision", err)
			}
			if !strings.Contains(err.Error(), "invalid decision: "+tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestDecisionCloneSharesNothing(t *testing.T) {
	for _, d := range validDecisions() {
		c := d.Clone()
		if !reflect.DeepEqual(c, d) {
			t.Fatalf("clone differs:\n%+v\n%+v", c, d)
		}
		for i := range c.ToolCalls {
			c.ToolCalls[i].Args[0] = 'X'
			c.ToolCalls[i].Tool = "changed"
		}
		for i := range c.Spawn {
			if len(c.Spawn[i].Script) > 0 {
				c.Spawn[i].Script[0] = 'X'
			}
			c.Spawn[i].Goal = "changed"
		}
		if len(c.Patch) > 0 {
			c.Patch[0] = 'X'
		}
		if len(c.Answer) > 0 {
			c.Answer[0] = 'X'
		}
		if err := d.Validate(); err != nil {
			t.Errorf("changing a clone changed the original: %v", err)
		}
	}
	if c := (Decision{Kind: DecisionFail, Error: "x"}).Clone(); c.ToolCalls != nil || c.Spawn != nil || c.Patch != nil || c.Answer != nil {
		t.Errorf("clone invented fields: %+v", c)
	}
}
