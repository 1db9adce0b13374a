package policy

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
)

const scriptedFile = `agent: researcher
goal: g
script:
  - tool_calls: [{tool: read_file, args: {path: README.md}}, {tool: shell, args: {command: ls}}]
    cost_usd: 0.1
  - spawn: [{agent: helper, goal: count, script: [{tool_calls: [{tool: echo}]}, {finish: {answer: "42"}}]}]
  - tool_calls: [{tool: echo, args: {text: again}}]
  - finish: {answer: done}
`

func mustParse(t testing.TB, file string) TaskFile {
	t.Helper()
	tf, err := ParseTaskFile("t.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

func TestScriptedDecideTurnByTurn(t *testing.T) {
	p := NewScripted(mustParse(t, scriptedFile).Script)
	if p.Len() != 4 {
		t.Fatalf("Len = %d", p.Len())
	}
	ctx := context.Background()
	want := []noeta.Decision{
		{Kind: noeta.DecisionToolCalls, CostUSD: 0.1, ToolCalls: []noeta.ToolCall{
			{CallID: "call-1-0", Tool: "read_file", Args: raw(`{"path":"README.md"}`)},
			{CallID: "call-1-1", Tool: "shell", Args: raw(`{"command":"ls"}`)},
		}},
		{Kind: noeta.DecisionSpawn, Spawn: []noeta.SpawnSpec{
			{Agent: "helper", Goal: "count", Script: raw(`[{"tool_calls":[{"args":{},"tool":"echo"}]},{"finish":{"answer":"42"}}]`)},
		}},
		{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{
			{CallID: "call-3-0", Tool: "echo", Args: raw(`{"text":"again"}`)},
		}},
		{Kind: noeta.DecisionFinish, Answer: raw(`"done"`)},
		{Kind: noeta.DecisionFail, Error: "script exhausted at turn 5"},
		{Kind: noeta.DecisionFail, Error: "script exhausted at turn 6"},
	}
	for i, w := range want {
		turn := i + 1
		got, err := p.Decide(ctx, Input{Task: "T1", Turn: turn})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("turn %d\ngot  %s\nwant %s", turn, dump(got), dump(w))
		}
		if err := got.Validate(); err != nil {
			t.Errorf("turn %d: %v", turn, err)
		}
	}
	// Far past the end, and out of order: still a pure function of the turn.
	got, err := p.Decide(ctx, Input{Task: "T1", Turn: 1000})
	if err != nil || got.Kind != noeta.DecisionFail || got.Error != "script exhausted at turn 1000" {
		t.Errorf("turn 1000: %+v, %v", got, err)
	}
}

// TestScriptedDecideDeterministic asks for every turn many times, from many
// goroutines, in scrambled order, with changes made to the returned decisions
// in between: every answer for a turn is the same, because a resumed or
// re-driven task must re-derive the decision (and call ids) it had.
func TestScriptedDecideDeterministic(t *testing.T) {
	tf := mustParse(t, scriptedFile)
	p := NewScripted(tf.Script)
	// Changing the script after the fact changes nothing.
	tf.Script[0].ToolCalls[0].Tool = "changed"
	tf.Script[0].ToolCalls[0].Args[2] = 'X'

	ctx := context.Background()
	first := make([]noeta.Decision, 7)
	for turn := 1; turn <= 6; turn++ {
		d, err := p.Decide(ctx, Input{Task: "T", Turn: turn})
		if err != nil {
			t.Fatal(err)
		}
		first[turn] = d.Clone()
	}
	if first[1].ToolCalls[0].Tool != "read_file" {
		t.Fatalf("the policy shares the caller's script: %+v", first[1])
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				turn := 1 + (i*7+g)%6
				d, err := p.Decide(ctx, Input{Task: "T", Turn: turn})
				if err != nil {
					errc <- err
					return
				}
				if !reflect.DeepEqual(d, first[turn]) {
					errc <- errors.New("turn " + dump(turn) + " changed: " + dump(d))
					return
				}
				// The caller owns what it got.
				for j := range d.ToolCalls {
					d.ToolCalls[j].CallID = "mine"
					d.ToolCalls[j].Args[0] = 'X'
				}
				for j := range d.Spawn {
					d.Spawn[j].Script[0] = 'X'
				}
				if len(d.Answer) > 0 {
					d.Answer[0] = 'X'
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestScriptedCallIDs(t *testing.T) {
	if got := CallID(3, 0); got != "call-3-0" {
		t.Errorf("CallID(3, 0) = %q", got)
	}
	// Ids written in a Go script are replaced; a call without args gets {}.
	p := NewScripted(Script{{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{
		{CallID: "pinned", Tool: "echo"},
		{Tool: "echo", Args: raw(`{"a":1}`)},
	}}})
	d, err := p.Decide(context.Background(), Input{Task: "T", Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []noeta.ToolCall{{CallID: "call-1-0", Tool: "echo", Args: raw(`{}`)}, {CallID: "call-1-1", Tool: "echo", Args: raw(`{"a":1}`)}}
	if !reflect.DeepEqual(d.ToolCalls, want) {
		t.Errorf("got %s", dump(d.ToolCalls))
	}
	// The ids do not depend on the task: they are scoped to it.
	d2, _ := p.Decide(context.Background(), Input{Task: "other", Turn: 1})
	if !reflect.DeepEqual(d, d2) {
		t.Errorf("the task changed the decision: %s vs %s", dump(d), dump(d2))
	}
}

func TestScriptedEmptyScript(t *testing.T) {
	for _, p := range []*Scripted{NewScripted(nil), NewScripted(Script{})} {
		d, err := p.Decide(context.Background(), Input{Task: "T", Turn: 1})
		if err != nil || !reflect.DeepEqual(d, noeta.Decision{Kind: noeta.DecisionFail, Error: "script exhausted at turn 1"}) {
			t.Errorf("got %+v, %v", d, err)
		}
	}
}

func TestScriptedDecideErrors(t *testing.T) {
	p := NewScripted(Script{
		{Kind: noeta.DecisionFinish, Answer: raw(`1`)},
		{Kind: noeta.DecisionWaitTimer, WaitSeconds: -1},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Decide(ctx, Input{Turn: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	for _, turn := range []int{0, -1} {
		if _, err := p.Decide(context.Background(), Input{Turn: turn}); err == nil || !strings.Contains(err.Error(), "turns count from 1") {
			t.Errorf("turn %d: %v", turn, err)
		}
	}
	_, err := p.Decide(context.Background(), Input{Turn: 2})
	if !errors.Is(err, noeta.ErrInvalidDecision) || !strings.Contains(err.Error(), "policy: script[1] (turn 2): ") {
		t.Errorf("invalid step: %v", err)
	}
}

// TestChildScriptRoundTrip follows a child's script from the parent's file,
// through the spawn decision's JSON, to the child's own policy.
func TestChildScriptRoundTrip(t *testing.T) {
	parent := NewScripted(mustParse(t, scriptedFile).Script)
	spawn, err := parent.Decide(context.Background(), Input{Task: "P", Turn: 2})
	if err != nil {
		t.Fatal(err)
	}
	script, err := ScriptFromJSON(spawn.Spawn[0].Script)
	if err != nil {
		t.Fatal(err)
	}
	again, err := script.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(spawn.Spawn[0].Script) {
		t.Errorf("re-encoded child script differs:\n%s\n%s", again, spawn.Spawn[0].Script)
	}
	child := NewScripted(script)
	want := []noeta.Decision{
		{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{CallID: "call-1-0", Tool: "echo", Args: raw(`{}`)}}},
		{Kind: noeta.DecisionFinish, Answer: raw(`"42"`)},
		{Kind: noeta.DecisionFail, Error: "script exhausted at turn 3"},
	}
	for i, w := range want {
		d, err := child.Decide(context.Background(), Input{Task: "C", Turn: i + 1})
		if err != nil || !reflect.DeepEqual(d, w) {
			t.Errorf("child turn %d: %s, %v", i+1, dump(d), err)
		}
	}
}

// TestScriptJSONRoundTrip encodes whole scripts, nested children and every
// kind included, and reads them back equal, through ScriptFromJSON and
// through encoding/json.
func TestScriptJSONRoundTrip(t *testing.T) {
	for _, file := range []string{designExample, scriptedFile, everyKindFile} {
		s := mustParse(t, file).Script
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !noeta.IsCanonicalJSON(b) {
			t.Errorf("not canonical: %s", b)
		}
		got, err := ScriptFromJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("round trip\ngot  %s\nwant %s", dump(got), dump(s))
		}
		var viaJSON Script
		if err := json.Unmarshal(b, &viaJSON); err != nil || !reflect.DeepEqual(viaJSON, s) {
			t.Errorf("json.Unmarshal: %v", err)
		}
	}
}

const everyKindFile = `agent: a
goal: g
script:
  - tool_calls: [{tool: echo, args: {n: 12345678901234567890123, f: 0.1, s: "😀"}}]
    cost_usd: 0.125
    input_tokens: 7
    output_tokens: 9
  - spawn: [{agent: h, goal: one, script: []}, {agent: h, goal: two}]
  - yield_for_human: {question: why}
  - wait_timer: {seconds: 2.5}
  - wait_external: {event_kind: deploy}
  - state_patch: {}
  - finish: {answer: [1, {a: null}]}
  - fail: {error: e}
`

func TestScriptFromJSONErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"not JSON", `[{"finish":`, "policy: script: noeta: invalid JSON"},
		{"duplicate key", `[{"finish":{"answer":1},"finish":{"answer":2}}]`, "policy: script: noeta: invalid JSON"},
		{"not a list", `{"finish":{"answer":1}}`, "policy: script: must be a list of steps, not a mapping"},
		{"unknown key", `[{"finish":{"answer":1}},{"fail":{"error":"x","code":1}}]`, "policy: script[1].fail.code: unknown key (known: error)"},
		{"two kinds", `[{"finish":{"answer":1},"fail":{"error":"x"}}]`, "policy: script[0]: has both finish and fail"},
		{"nested", `[{"spawn":[{"agent":"a","goal":"g","script":[{"wait_timer":{"seconds":-1}}]}]}]`, "policy: script[0].spawn[0].script[0].wait_timer.seconds: must be >= 0, not -1"},
		{"odd key", `[{"finish":{"answer":1},"a b":1}]`, `policy: script[0]."a b": unknown key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ScriptFromJSON([]byte(tt.json))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %v\nwant %s…", err, tt.want)
			}
		})
	}
	for _, empty := range []string{"", "  \n"} {
		if s, err := ScriptFromJSON([]byte(empty)); s != nil || err != nil {
			t.Errorf("empty input: %v, %v", s, err)
		}
	}
}

func TestScriptValidate(t *testing.T) {
	if err := mustParse(t, scriptedFile).Script.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Script{
		{Kind: noeta.DecisionFinish, Answer: raw(`1`)},
		{Kind: noeta.DecisionSpawn, Spawn: []noeta.SpawnSpec{{Agent: "a", Goal: "g", Script: raw(`[{"fail":{"error":""}}]`)}}},
	}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "script[1].spawn[0].script[0].fail.error: must not be empty") {
		t.Errorf("got %v", err)
	}
	err = Script{{Kind: noeta.DecisionFail}}.Validate()
	if !errors.Is(err, noeta.ErrInvalidDecision) || !strings.HasPrefix(err.Error(), "policy: script[0]: ") {
		t.Errorf("got %v", err)
	}
}

func TestScriptMarshalUnknownKind(t *testing.T) {
	if _, err := (Script{{Kind: "compact"}}).MarshalJSON(); err == nil || !strings.Contains(err.Error(), `script[0]: unknown decision kind "compact"`) {
		t.Errorf("got %v", err)
	}
}
