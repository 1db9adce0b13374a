package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// designExample is the task file of DESIGN.md §7, verbatim.
const designExample = `agent: researcher
goal: "Summarise the repository"
script:
  - tool_calls: [{tool: read_file, args: {path: README.md}}, {tool: shell, args: {command: "ls"}}]
  - spawn: [{agent: helper, goal: "count lines", script: [{finish: {answer: "42"}}]}]
  - finish: {answer: "done"}
`

func TestParseTaskFileDesignExample(t *testing.T) {
	tf, err := ParseTaskFile("task.yaml", []byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	want := TaskFile{
		Agent: "researcher",
		Goal:  "Summarise the repository",
		Script: Script{
			{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{
				{Tool: "read_file", Args: raw(`{"path":"README.md"}`)},
				{Tool: "shell", Args: raw(`{"command":"ls"}`)},
			}},
			{Kind: noeta.DecisionSpawn, Spawn: []noeta.SpawnSpec{
				{Agent: "helper", Goal: "count lines", Script: raw(`[{"finish":{"answer":"42"}}]`)},
			}},
			{Kind: noeta.DecisionFinish, Answer: raw(`"done"`)},
		},
		Scripted: true,
	}
	if !reflect.DeepEqual(tf, want) {
		t.Errorf("got  %s\nwant %s", dump(tf), dump(want))
	}
}

// TestParseTaskFileEveryKind parses one step of every kind, with costs, and
// checks the values YAML gives JSON.
func TestParseTaskFileEveryKind(t *testing.T) {
	const file = `agent: a
goal: g
script:
  - tool_calls:
      - {tool: echo, args: {text: "hé 😀", n: 3, f: 1.50, big: 123456789012345678901234567890, hex: 0x1F, ok: true, none: ~, date: 2024-01-01, list: [1, "2"], nested: {z: 1, a: 2}}}
      - tool: shell
    cost_usd: 0.01
  - spawn:
      - {agent: helper, goal: one, script: [{wait_timer: {seconds: 2}}]}
      - {agent: helper, goal: two}
    input_tokens: 100
    output_tokens: 20
  - yield_for_human: {question: "ship it?"}
  - wait_timer: {seconds: 1.5}
  - wait_timer: {seconds: 0}
  - wait_external: {event_kind: deploy}
  - state_patch: {phase: review, count: 2}
  - finish: {answer: {summary: done, lines: 42}}
    cost_usd: 2
  - finish: {answer: null}
  - fail: {error: "gave up"}
`
	tf, err := ParseTaskFile("every.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := Script{
		{Kind: noeta.DecisionToolCalls, CostUSD: 0.01, ToolCalls: []noeta.ToolCall{
			{Tool: "echo", Args: raw(`{"big":123456789012345678901234567890,"date":"2024-01-01","f":1.5,"hex":31,"list":[1,"2"],"n":3,"nested":{"a":2,"z":1},"none":null,"ok":true,"text":"h\u00e9 \ud83d\ude00"}`)},
			{Tool: "shell", Args: raw(`{}`)},
		}},
		{Kind: noeta.DecisionSpawn, InputTokens: 100, OutputTokens: 20, Spawn: []noeta.SpawnSpec{
			{Agent: "helper", Goal: "one", Script: raw(`[{"wait_timer":{"seconds":2}}]`)},
			{Agent: "helper", Goal: "two"},
		}},
		{Kind: noeta.DecisionYieldForHuman, Question: "ship it?"},
		{Kind: noeta.DecisionWaitTimer, WaitSeconds: 1.5},
		{Kind: noeta.DecisionWaitTimer},
		{Kind: noeta.DecisionWaitExternal, EventKind: "deploy"},
		{Kind: noeta.DecisionStatePatch, Patch: raw(`{"count":2,"phase":"review"}`)},
		{Kind: noeta.DecisionFinish, CostUSD: 2, Answer: raw(`{"lines":42,"summary":"done"}`)},
		{Kind: noeta.DecisionFinish, Answer: raw(`null`)},
		{Kind: noeta.DecisionFail, Error: "gave up"},
	}
	if !reflect.DeepEqual(tf.Script, want) {
		t.Errorf("got  %s\nwant %s", dump(tf.Script), dump(want))
	}
	seen := map[noeta.DecisionKind]bool{}
	for _, d := range tf.Script {
		seen[d.Kind] = true
	}
	for _, k := range noeta.DecisionKinds() {
		if !seen[k] {
			t.Errorf("no step of kind %s", k)
		}
	}
	if err := tf.Script.Validate(); err != nil {
		t.Error(err)
	}
}

func TestParseTaskFileNestedScripts(t *testing.T) {
	const file = `agent: lead
goal: plan
script:
  - spawn:
      - agent: helper
        goal: fan out again
        script:
          - spawn:
              - {agent: leaf, goal: a, script: [{finish: {answer: a}}]}
              - {agent: leaf, goal: b, script: [{fail: {error: b}, cost_usd: 0.5}]}
          - finish: {answer: both}
  - finish: {answer: done}
`
	tf, err := ParseTaskFile("nested.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	child, err := ScriptFromJSON(tf.Script[0].Spawn[0].Script)
	if err != nil {
		t.Fatal(err)
	}
	wantChild := Script{
		{Kind: noeta.DecisionSpawn, Spawn: []noeta.SpawnSpec{
			{Agent: "leaf", Goal: "a", Script: raw(`[{"finish":{"answer":"a"}}]`)},
			{Agent: "leaf", Goal: "b", Script: raw(`[{"cost_usd":0.5,"fail":{"error":"b"}}]`)},
		}},
		{Kind: noeta.DecisionFinish, Answer: raw(`"both"`)},
	}
	if !reflect.DeepEqual(child, wantChild) {
		t.Fatalf("child script\ngot  %s\nwant %s", dump(child), dump(wantChild))
	}
	leaf, err := ScriptFromJSON(child[0].Spawn[1].Script)
	if err != nil {
		t.Fatal(err)
	}
	want := Script{{Kind: noeta.DecisionFail, Error: "b", CostUSD: 0.5}}
	if !reflect.DeepEqual(leaf, want) {
		t.Errorf("grandchild script\ngot  %s\nwant %s", dump(leaf), dump(want))
	}
}

// TestParseTaskFileErrors checks that each kind of mistake is reported with
// the file, the line and the path of the field.
func TestParseTaskFileErrors(t *testing.T) {
	const head = "agent: a\ngoal: g\nscript:\n" // the script starts at line 4
	tests := []struct {
		name string
		file string
		want []string // every error, in order
	}{
		{"unknown top-level key", "agent: a\ngoal: g\nscript: []\nmodel: x\n",
			[]string{"t.yaml:4: model: unknown key (known: agent, goal, script)"}},
		{"unknown step key", head + "  - finish: {answer: x}\n    note: hi\n",
			[]string{"t.yaml:5: script[0].note: unknown key (known: tool_calls, spawn, yield_for_human, wait_timer, wait_external, state_patch, finish, fail, cost_usd, input_tokens, output_tokens)"}},
		{"unknown tool call key", head + "  - tool_calls: [{tool: echo, arg: {}}]\n",
			[]string{"t.yaml:4: script[0].tool_calls[0].arg: unknown key (known: tool, args)"}},
		{"unknown key in a kind", head + "  - finish: {answer: x, reason: y}\n",
			[]string{"t.yaml:4: script[0].finish.reason: unknown key (known: answer)"}},
		{"two kinds in one step", head + "  - finish: {answer: x}\n  - wait_timer: {seconds: 1}\n    fail: {error: x}\n",
			[]string{"t.yaml:6: script[1]: has both wait_timer and fail; a step is exactly one decision (make them two steps)"}},
		{"no kind", head + "  - cost_usd: 1\n",
			[]string{"t.yaml:4: script[0]: a step needs one of tool_calls, spawn, yield_for_human, wait_timer, wait_external, state_patch, finish, fail"}},
		{"empty step", head + "  - {}\n",
			[]string{"t.yaml:4: script[0]: a step needs one of tool_calls, spawn, yield_for_human, wait_timer, wait_external, state_patch, finish, fail"}},
		{"step not a mapping", head + "  - finish\n",
			[]string{"t.yaml:4: script[0]: a step must be a mapping with one of tool_calls, spawn, yield_for_human, wait_timer, wait_external, state_patch, finish, fail, not a string"}},
		{"args not a mapping", head + "  - tool_calls: [{tool: echo, args: {}}]\n  - finish: {answer: x}\n  - tool_calls:\n      - tool: echo\n        args: hello\n",
			[]string{"t.yaml:8: script[2].tool_calls[0].args: must be a mapping, not a string"}},
		{"tool not a string", head + "  - tool_calls: [{tool: 12}]\n",
			[]string{"t.yaml:4: script[0].tool_calls[0].tool: must be a string, not an integer"}},
		{"tool missing", head + "  - tool_calls:\n      - args: {}\n",
			[]string{"t.yaml:5: script[0].tool_calls[0].tool: required"}},
		{"no calls", head + "  - tool_calls: []\n",
			[]string{"t.yaml:4: script[0].tool_calls: must list at least one call"}},
		{"calls not a list", head + "  - tool_calls: {tool: echo}\n",
			[]string{"t.yaml:4: script[0].tool_calls: must be a list of {tool, args}, not a mapping"}},
		{"seconds a string", head + "  - wait_timer: {seconds: soon}\n",
			[]string{"t.yaml:4: script[0].wait_timer.seconds: must be a number, not a string"}},
		{"negative seconds", head + "  - wait_timer:\n      seconds: -5\n",
			[]string{"t.yaml:5: script[0].wait_timer.seconds: must be >= 0, not -5"}},
		{"seconds missing", head + "  - wait_timer: {}\n",
			[]string{"t.yaml:4: script[0].wait_timer.seconds: required"}},
		{"infinite seconds", head + "  - wait_timer: {seconds: .inf}\n",
			[]string{"t.yaml:4: script[0].wait_timer.seconds: .inf is not a finite number; JSON has no infinity or NaN"}},
		{"negative cost", head + "  - finish: {answer: x}\n    cost_usd: -0.5\n",
			[]string{"t.yaml:5: script[0].cost_usd: must be >= 0, not -0.5"}},
		{"cost a string", head + "  - finish: {answer: x}\n    cost_usd: cheap\n",
			[]string{"t.yaml:5: script[0].cost_usd: must be a number, not a string"}},
		{"tokens a float", head + "  - finish: {answer: x}\n    input_tokens: 1.5\n",
			[]string{"t.yaml:5: script[0].input_tokens: must be an integer, not a number"}},
		{"negative tokens", head + "  - finish: {answer: x}\n    output_tokens: -1\n",
			[]string{"t.yaml:5: script[0].output_tokens: must be >= 0, not -1"}},
		{"integer key in args", head + "  - tool_calls:\n      - tool: echo\n        args: {1: one}\n",
			[]string{`t.yaml:6: script[0].tool_calls[0].args: keys must be strings; "1" is an integer (quote it)`}},
		{"boolean key in a patch", head + "  - state_patch:\n      nested:\n        true: yes\n",
			[]string{`t.yaml:6: script[0].state_patch.nested: keys must be strings; "true" is a boolean (quote it)`}},
		{"null key in an answer", head + "  - finish: {answer: {~: x}}\n",
			[]string{`t.yaml:4: script[0].finish.answer: keys must be strings; "~" is null (quote it)`}},
		{"collection key", head + "  - finish: {answer: {[a]: x}}\n",
			[]string{`t.yaml:4: script[0].finish.answer: keys must be strings, not a collection`}},
		{"patch not a mapping", head + "  - state_patch: [a]\n",
			[]string{"t.yaml:4: script[0].state_patch: must be a mapping (the patch), not a list"}},
		{"patch null", head + "  - state_patch:\n",
			[]string{"t.yaml:4: script[0].state_patch: must be a mapping (the patch), not null"}},
		{"answer missing", head + "  - finish: {}\n",
			[]string{"t.yaml:4: script[0].finish.answer: required"}},
		{"finish null", head + "  - finish:\n",
			[]string{"t.yaml:4: script[0].finish.answer: required"}},
		{"empty error", head + "  - fail: {error: \"\"}\n",
			[]string{"t.yaml:4: script[0].fail.error: must not be empty"}},
		{"question missing", head + "  - yield_for_human: {prompt: x}\n",
			[]string{"t.yaml:4: script[0].yield_for_human.prompt: unknown key (known: question)", "t.yaml:4: script[0].yield_for_human.question: required"}},
		{"event kind a number", head + "  - wait_external: {event_kind: 7}\n",
			[]string{"t.yaml:4: script[0].wait_external.event_kind: must be a string, not an integer"}},
		{"kind body a string", head + "  - wait_external: deploy\n",
			[]string{"t.yaml:4: script[0].wait_external: must be a mapping with event_kind, not a string"}},
		{"missing agent and goal", "script:\n  - finish: {answer: x}\n",
			[]string{"t.yaml:1: agent: required", "t.yaml:1: goal: required"}},
		{"empty goal", "agent: a\ngoal: \"\"\nscript: []\n",
			[]string{"t.yaml:2: goal: must not be empty"}},
		{"agent a list", "agent: [a]\ngoal: g\nscript: []\n",
			[]string{"t.yaml:1: agent: must be a string, not a list"}},
		{"script null is no script", "agent: a\ngoal: g\nscript: ~\nextra: 1\n",
			[]string{"t.yaml:4: extra: unknown key (known: agent, goal, script)"}},
		{"script not a list", "agent: a\ngoal: g\nscript: {finish: {answer: x}}\n",
			[]string{"t.yaml:3: script: must be a list of steps, not a mapping"}},
		{"spawn without agent", head + "  - spawn: [{goal: x}]\n",
			[]string{"t.yaml:4: script[0].spawn[0].agent: required"}},
		{"spawn empty", head + "  - spawn: []\n",
			[]string{"t.yaml:4: script[0].spawn: must list at least one child"}},
		{"bad child script", head + "  - finish: {answer: x}\n  - spawn:\n      - agent: h\n        goal: g\n        script:\n          - finish: {answer: x}\n          - wait_timer: {seconds: -1}\n            finish: {answer: y}\n          - spawn:\n              - agent: leaf\n                goal: deep\n                script: [{tool_calls: [{tool: echo, args: [1]}]}]\n",
			[]string{
				"t.yaml:11: script[1].spawn[0].script[1]: has both wait_timer and finish; a step is exactly one decision (make them two steps)",
				"t.yaml:15: script[1].spawn[0].script[2].spawn[0].script[0].tool_calls[0].args: must be a mapping, not a list",
			}},
		{"child script not a list", head + "  - spawn: [{agent: h, goal: g, script: {finish: {answer: x}}}]\n",
			[]string{"t.yaml:4: script[0].spawn[0].script: must be a list of steps, not a mapping"}},
		{"duplicate key", head + "  - finish: {answer: x}\n    cost_usd: 1\n    cost_usd: 2\n",
			[]string{"t.yaml:6: script[0].cost_usd: duplicate key (first at line 5)"}},
		{"anchor under an unknown key", "base: &b {agent: a}\n", []string{"t.yaml:1: base: unknown key (known: agent, goal, script)", "t.yaml:1: agent: required", "t.yaml:1: goal: required"}},
		{"merge key used", "<<: {agent: a}\ngoal: g\nscript: []\n",
			[]string{"t.yaml:1: merge keys (<<) are not supported in task files; write the keys out", "t.yaml:1: agent: required"}},
		{"unknown tag", head + "  - finish: {answer: !secret x}\n",
			[]string{"t.yaml:4: script[0].finish.answer: unsupported YAML tag !secret"}},
		{"not a mapping", "- a\n- b\n",
			[]string{"t.yaml:1: a task file must be a mapping with agent, goal and an optional script, not a list"}},
		{"empty file", "", []string{"t.yaml: the file is empty; a task file needs agent and goal (and a script, unless the agent's model decides)"}},
		{"comment only", "# nothing\n", []string{"t.yaml: the file is empty; a task file needs agent and goal (and a script, unless the agent's model decides)"}},
		{"two documents", "agent: a\ngoal: g\nscript: []\n---\nagent: b\n", []string{"t.yaml:4: invalid YAML: a task file holds one YAML document; found another"}},
		{"every mistake at once", head + "  - tool_calls: [{tool: echo, args: x}]\n    extra: 1\n  - wait_timer: {seconds: -1}\n",
			[]string{
				"t.yaml:4: script[0].tool_calls[0].args: must be a mapping, not a string",
				"t.yaml:5: script[0].extra: unknown key (known: tool_calls, spawn, yield_for_human, wait_timer, wait_external, state_patch, finish, fail, cost_usd, input_tokens, output_tokens)",
				"t.yaml:6: script[1].wait_timer.seconds: must be >= 0, not -1",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTaskFile("t.yaml", []byte(tt.file))
			if err == nil {
				t.Fatal("accepted")
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			var te *TaskFileError
			if !errors.As(err, &te) {
				t.Fatalf("%T is not a *TaskFileError", err)
			}
			if te.File != "t.yaml" {
				t.Errorf("File = %q", te.File)
			}
		})
	}
}

// TestParseTaskFileSyntaxError checks that the parser's own errors are
// reported as task file errors. The line is the one yaml.v3 names, which for
// an unclosed bracket is where the parser gave up looking, so only its
// presence is checked.
func TestParseTaskFileSyntaxError(t *testing.T) {
	_, err := ParseTaskFile("t.yaml", []byte("agent: a\ngoal: [g\nscript: []\n"))
	var te *TaskFileError
	if !errors.As(err, &te) || te.File != "t.yaml" || te.Line == 0 || te.Msg != "invalid YAML: did not find expected ',' or ']'" {
		t.Errorf("got %+v (%v)", te, err)
	}
}

func TestTaskFileErrorFields(t *testing.T) {
	_, err := ParseTaskFile("t.yaml", []byte("agent: a\ngoal: g\nscript:\n  - tool_calls:\n      - tool: echo\n        args: hi\n"))
	var te *TaskFileError
	if !errors.As(err, &te) {
		t.Fatalf("%v is not a *TaskFileError", err)
	}
	want := TaskFileError{File: "t.yaml", Line: 6, Path: "script[0].tool_calls[0].args", Msg: "must be a mapping, not a string"}
	if *te != want {
		t.Errorf("got %+v\nwant %+v", *te, want)
	}
}

func TestParseTaskFileErrorCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("agent: a\ngoal: g\nscript:\n")
	for range 100 {
		b.WriteString("  - {}\n")
	}
	_, err := ParseTaskFile("t.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "t.yaml: and 75 more mistakes" {
		t.Errorf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

func TestParseTaskFileLimits(t *testing.T) {
	// A billion laughs: each level doubles the expanded size.
	var b strings.Builder
	b.WriteString("agent: a\ngoal: g\nscript:\n  - state_patch:\n      l0: &l0 [x, x]\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	_, err := ParseTaskFile("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "the document expands to more than 200000 values") {
		t.Errorf("got %v", err)
	}
	// An alias to the mapping that holds it is a cycle.
	_, err = ParseTaskFile("cycle.yaml", []byte("agent: a\ngoal: g\nscript:\n  - &s {finish: {answer: *s}}\n"))
	if err == nil || !strings.Contains(err.Error(), "nested more than 128 levels deep") {
		t.Errorf("got %v", err)
	}
}

func TestLoadTaskFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task.yaml")
	if err := os.WriteFile(path, []byte(designExample), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := LoadTaskFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if tf.Agent != "researcher" || len(tf.Script) != 3 {
		t.Errorf("got %s", dump(tf))
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("agent: a\ngoal: g\nscript: [{}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTaskFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":3: script[0]: ") {
		t.Errorf("error does not name the file: %v", err)
	}
	if _, err := LoadTaskFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// TestParseTaskFileWithoutScript: agent and goal only is a task its agent's
// model decides; script: [] is a script (of no steps), not that.
func TestParseTaskFileWithoutScript(t *testing.T) {
	tf, err := ParseTaskFile("t.yaml", []byte("agent: researcher\ngoal: \"Summarise the repository\"\n"))
	if err != nil || tf.Scripted || tf.Script != nil || tf.Agent != "researcher" {
		t.Fatalf("%+v %v", tf, err)
	}
	tf, err = ParseTaskFile("t.yaml", []byte("agent: a\ngoal: g\nscript: []\n"))
	if err != nil || !tf.Scripted || tf.Script == nil {
		t.Fatalf("empty script: %+v %v", tf, err)
	}
}
