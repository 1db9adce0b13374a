package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/compose")

// demoApprover answers approvals in the golden runs, as `engine demo` does.
const demoApprover = "cli:demo"

// compose feeds a whole log to a new composer.
func compose(t testing.TB, cfg engine.ComposerConfig, envs []eventlog.Envelope) *engine.Composer {
	t.Helper()
	c := engine.NewComposer(cfg)
	for _, env := range envs {
		applyTo(t, c, env)
	}
	return c
}

func applyTo(t testing.TB, c *engine.Composer, env eventlog.Envelope) {
	t.Helper()
	p, known, err := env.Decode()
	if err != nil {
		t.Fatalf("seq %d: %v", env.Seq, err)
	}
	if known {
		c.Apply(env, p)
	}
}

// render writes a transcript as the golden files show it: one block per
// message, its header naming role, call and error, then its text.
func render(w *strings.Builder, tr *noeta.Transcript) {
	for _, m := range tr.Messages {
		h := "--- " + string(m.Role)
		if m.ToolCallID != "" {
			h += " " + m.ToolCallID + " " + m.ToolName
		}
		if m.IsError {
			h += " error"
		}
		w.WriteString(h + "\n")
		for _, c := range m.ToolCalls {
			fmt.Fprintf(w, "tool_call %s %s %s", c.CallID, c.Tool, c.Args)
			if c.Invalid != "" {
				fmt.Fprintf(w, " invalid: %s", c.Invalid)
			}
			w.WriteString("\n")
		}
		if m.Text != "" {
			w.WriteString(m.Text + "\n")
		}
	}
	if tr.Elided > 0 {
		fmt.Fprintf(w, "=== elided %d\n", tr.Elided)
	}
}

// golden compares got with testdata/compose/<name>.golden, or writes it
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "compose", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (-update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// checkComposer checks the properties every log must have, whatever it
// holds: a fold resumed from a composer snapshot at any record composes
// what the fold from genesis does; at every turn's start (when a policy is
// asked) the transcript is the composer's own slice, capped, and a prefix
// of every later one.
func checkComposer(t *testing.T, cfg engine.ComposerConfig, envs []eventlog.Envelope) *noeta.Transcript {
	t.Helper()
	whole := compose(t, cfg, envs).Transcript()
	wantJSON, _ := json.Marshal(whole)
	for cut := range envs {
		first := compose(t, cfg, envs[:cut])
		snap, err := json.Marshal(first)
		if err != nil {
			t.Fatal(err)
		}
		var resumed engine.Composer
		if err := json.Unmarshal(snap, &resumed); err != nil {
			t.Fatal(err)
		}
		for _, env := range envs[cut:] {
			applyTo(t, &resumed, env)
		}
		if got, _ := json.Marshal(resumed.Transcript()); !bytes.Equal(got, wantJSON) {
			t.Fatalf("resumed from a snapshot after seq %d:\n got  %s\n want %s", cut, got, wantJSON)
		}
		// The state's canonical form (what two folds must agree on) is the
		// same whether the fold started from genesis or a snapshot.
		gc, err := noeta.Canonical(&resumed)
		if err != nil {
			t.Fatal(err)
		}
		if wc, _ := noeta.Canonical(compose(t, cfg, envs)); !bytes.Equal(gc, wc) {
			t.Fatalf("canonical form resumed after seq %d:\n got  %s\n want %s", cut, gc, wc)
		}
		// A clone goes on alone: the original is as it was.
		clone := first.Clone()
		for _, env := range envs[cut:] {
			applyTo(t, clone, env)
		}
		if got, _ := json.Marshal(clone.Transcript()); !bytes.Equal(got, wantJSON) {
			t.Fatalf("a clone after seq %d:\n got  %s\n want %s", cut, got, wantJSON)
		}
		if again, _ := json.Marshal(first); !bytes.Equal(again, snap) {
			t.Fatalf("applying records to a clone changed the original after seq %d:\n got  %s\n want %s", cut, again, snap)
		}
	}
	c := engine.NewComposer(cfg)
	var seen []*noeta.Transcript
	for _, env := range envs {
		applyTo(t, c, env)
		if env.Type == noeta.TypeTurnStarted {
			tr := c.Transcript()
			if len(tr.Messages) != cap(tr.Messages) {
				t.Fatalf("seq %d: the transcript at a turn's start has room to append into (len %d, cap %d)", env.Seq, len(tr.Messages), cap(tr.Messages))
			}
			seen = append(seen, tr)
		}
	}
	for _, tr := range seen {
		b, _ := json.Marshal(tr.Messages)
		w, _ := json.Marshal(whole.Messages[:len(tr.Messages)])
		if !bytes.Equal(b, w) {
			t.Fatalf("a turn's transcript is not a prefix of the whole:\n got  %s\n want %s", b, w)
		}
	}
	return whole
}

// TestComposeExamples pins the transcripts of every example path, run
// through the engine on memlog with approvals answered as `engine demo`
// answers them: approve for 05 and 06, deny for 07.
func TestComposeExamples(t *testing.T) {
	answers := map[string]noeta.ApprovalDecision{
		"05-repetition-approval.yaml": noeta.ApprovalApprove,
		"06-approval-granted.yaml":    noeta.ApprovalApprove,
		"07-approval-refused.yaml":    noeta.ApprovalDeny,
	}
	names, err := filepath.Glob(filepath.Join("..", "examples", "0*.yaml"))
	if err != nil || len(names) != 8 {
		t.Fatalf("examples: %v %v", names, err)
	}
	for _, path := range names {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, memBackend(t, 2*time.Second), readExample(t, "noeta.yaml"))
			h.start(2)
			id := h.submit(readExample(t, name))
			if d, ok := answers[name]; ok {
				st := h.waitStatus(id, noeta.StatusSuspended)
				reason := "the demo's table says " + string(d)
				if err := h.eng.Approve(context.Background(), id, st.WakeOn.Handle, d, demoApprover, reason, noeta.AuthLocal); err != nil {
					t.Fatal(err)
				}
			}
			h.waitStatus(id, noeta.StatusTerminal)
			var sb strings.Builder
			tasks := []string{id}
			for i := 0; i < len(tasks); i++ {
				envs := h.log(tasks[i])
				for _, env := range envs {
					if env.Type == noeta.TypeSubtaskSpawned {
						tasks = append(tasks, payload[noeta.SubtaskSpawned](t, []eventlog.Envelope{env}, env.Type).SubtaskID)
					}
				}
				if i > 0 {
					h.waitStatus(tasks[i], noeta.StatusTerminal)
					fmt.Fprintf(&sb, "\n=== subtask %d\n", i)
				}
				render(&sb, checkComposer(t, engine.ComposerConfig{}, envs))
			}
			got := sb.String()
			// Task ids are minted at random: name them by spawn order.
			for i, task := range tasks[1:] {
				got = strings.ReplaceAll(got, task, fmt.Sprintf("<subtask-%d>", i+1))
			}
			golden(t, strings.TrimSuffix(name, ".yaml"), got)
		})
	}
}

// TestComposeDenials pins how each guard's denial reaches the model: a tool
// error naming the guard and its reason (so the model can adapt), for a
// call; a note for a spawn or a finish.
func TestComposeDenials(t *testing.T) {
	const cfg = `
agents:
  tester:
    tools: [echo]
    budget: {max_tool_calls: 2}
    repetition: {threshold: 2, action: deny}
    permissions: {allowed_subtask_agents: [helper]}
  helper:
    tools: [echo]
rules:
  - match_tool: echo
    match_arg: {path: text, contains: "secret"}
    action: deny
    reason: "no secrets in echo"
`
	freeze := guards.Func("freeze", 150, func(_ context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
		if noeta.ActionPoint(a) == "finish" {
			return noeta.Deny("change freeze"), nil
		}
		if c, ok := a.(noeta.ProposedToolCall); ok && strings.Contains(string(c.Call.Args), "frozen") {
			return noeta.Deny("that text is frozen"), nil
		}
		return noeta.Allow(), nil
	})
	h := newHarness(t, memBackend(t, 2*time.Second), cfg, withGuards(freeze))
	h.start(1)
	id := h.submit(`
agent: tester
goal: "meet every guard"
script:
  - tool_calls:
      - {tool: write_file, args: {path: x, content: y}}
      - {tool: echo, args: {text: "a secret"}}
      - {tool: echo, args: {text: "frozen"}}
      - {tool: echo, args: {text: again}}
      - {tool: echo, args: {text: again}}
      - {tool: echo, args: {text: one}}
      - {tool: echo, args: {text: two}}
  - spawn: [{agent: tester, goal: "not a helper"}]
`)
	h.waitStatus(id, noeta.StatusTerminal)
	var sb strings.Builder
	render(&sb, checkComposer(t, engine.ComposerConfig{}, h.log(id)))
	id = h.submit(`
agent: tester
goal: "finish in a freeze"
script:
  - finish: {answer: "done"}
`)
	h.waitStatus(id, noeta.StatusTerminal)
	sb.WriteString("\n=== finish\n")
	render(&sb, checkComposer(t, engine.ComposerConfig{}, h.log(id)))
	golden(t, "denials", sb.String())
	for _, want := range []string{
		"denied by permission: ", "denied by rules: no secrets in echo", "denied by freeze: that text is frozen",
		"denied by repetition: ", "denied by budget: ", "spawn of agent tester denied by permission: ",
		"finish denied by freeze: change freeze",
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("no %q in the transcripts:\n%s", want, sb.String())
		}
	}
}

// synth builds a log from payloads, as the engine would write it.
func synth(t testing.TB, ps ...noeta.Payload) []eventlog.Envelope {
	t.Helper()
	var out []eventlog.Envelope
	for i, p := range ps {
		env, err := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "test", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Task, env.Seq = "t1", uint64(i+1)
		out = append(out, env)
	}
	return out
}

// raw is a payload given as its JSON, for the shapes of records this
// version's structs do not carry (a decision record with its parts).
type raw struct {
	typ  string
	body string
}

func (r raw) EventType() string { return r.typ }

func (r raw) MarshalJSON() ([]byte, error) { return []byte(r.body), nil }

// TestComposeShapes pins the rendering of records the examples do not
// write: decision records carrying their whole decision (calls with
// arguments by ref and a call that cannot run, a patch and a child's goal
// by ref), an output cut to the cap,
// an output and a goal stored by ref, a schema denial, an interrupted call,
// a question and its answer, the waits, a state patch, a spawn approval, a
// subtask's failure, and a task that fails.
func TestComposeShapes(t *testing.T) {
	ref := noeta.RefFor([]byte(`"x"`), "application/json")
	long := strings.Repeat("é", 30)
	cases := []struct {
		name string
		cfg  engine.ComposerConfig
		log  []noeta.Payload
	}{
		{"decision-record", engine.ComposerConfig{}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "g", RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			raw{noeta.TypePolicyDecided, `{"turn":1,"decision":"tool_calls","tool_calls":[` +
				`{"call_id":"call-1-0","tool":"echo","args":{"text":"hi"}},` +
				`{"call_id":"call-1-1","tool":"read_file","args_ref":{"hash":"` + ref.Hash + `","size":9000,"media_type":"application/json"}},` +
				`{"call_id":"call-1-2","tool":"nope","invalid":"unknown tool nope"},` +
				`{"call_id":"call-1-3","tool":"echo","args":{"text":7}}],"model":"m","provider":"openai"}`},
			&noeta.ToolCallStarted{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-0", Tool: "echo", OK: true, Output: json.RawMessage(`{"text":"hi"}`)},
			&noeta.ToolCallStarted{CallID: "call-1-1", Tool: "read_file", ArgsRef: &ref, Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-1", Tool: "read_file", OK: true, OutputRef: &ref},
			&noeta.ToolCallStarted{CallID: "call-1-2", Tool: "nope", Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-2", Tool: "nope", OK: false, Error: "unknown tool nope"},
			&noeta.ToolCallDenied{CallID: "call-1-3", Tool: "echo", Guard: "schema", Reason: "text: got number, want string"},
			&noeta.TurnStarted{Turn: 2},
			raw{noeta.TypePolicyDecided, `{"turn":2,"decision":"state_patch","patch_ref":{"hash":"` + ref.Hash + `","size":5000,"media_type":"application/json"}}`},
			&noeta.TaskStatePatched{Patch: json.RawMessage(`{"big":true}`)},
			&noeta.TurnStarted{Turn: 3},
			raw{noeta.TypePolicyDecided, `{"turn":3,"decision":"spawn","spawn":[{"agent":"helper","goal":"short"},{"agent":"helper","goal_ref":{"hash":"` + ref.Hash + `","size":5000,"media_type":"application/json"}}]}`},
			&noeta.SubtaskSpawned{SubtaskID: "kid1", Agent: "helper", Goal: "short"},
			&noeta.SubtaskSpawned{SubtaskID: "kid2", Agent: "helper", GoalRef: &ref},
			&noeta.TaskSuspended{Reason: "waiting_subtask_group", WakeOn: noeta.GroupCompletedWake("g-1", []string{"kid1", "kid2"})},
			&noeta.TaskWoken{WakeEvent: noeta.GroupCompletedWake("g-1", []string{"kid1", "kid2"})},
			&noeta.SubtaskResultRecorded{SubtaskID: "kid1", Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`"ok"`)},
			&noeta.SubtaskResultRecorded{SubtaskID: "kid2", Status: noeta.SubtaskStatusCompleted, ResultRef: &ref},
			&noeta.TurnStarted{Turn: 4},
			raw{noeta.TypePolicyDecided, `{"turn":4,"decision":"finish","answer":{"n":1}}`},
			&noeta.TaskCompleted{Answer: json.RawMessage(`{"n":1}`)},
		}},
		{"model-text", engine.ComposerConfig{}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "fix the README", RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, Version: 2, Text: "Let me check the file first.",
				ToolCalls: []noeta.RecordedCall{{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`)}}},
			&noeta.ToolCallStarted{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-0", Tool: "read_file", OK: true, Output: json.RawMessage(`"# hi"`)},
			&noeta.TurnStarted{Turn: 2},
			&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionYieldForHuman, Version: 2, Question: "Which title?", TextRef: &ref},
			&noeta.TaskSuspended{Reason: "waiting_human: Which title?", WakeOn: noeta.HumanResponseWake("question-2")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "question-2", Text: "noeta"}},
			&noeta.TurnStarted{Turn: 3},
			// Parts stored whole by decision_ref: the text is still the
			// record's own.
			&noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionToolCalls, Version: 2, Text: "Now the edit.", DecisionRef: &ref},
			&noeta.ToolCallStarted{CallID: "call-3-0", Tool: "write_file", Args: json.RawMessage(`{"path":"README.md"}`), Turn: 3},
			&noeta.ToolCallFinished{CallID: "call-3-0", Tool: "write_file", OK: true, Output: json.RawMessage(`"ok"`)},
			&noeta.TurnStarted{Turn: 4},
			&noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionFinish, Version: 2, Answer: json.RawMessage(`"done"`)},
			&noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)},
		}},
		{"cut-and-by-ref", engine.ComposerConfig{MaxToolOutput: 10}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "a", GoalRef: &ref, RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls},
			&noeta.ToolCallStarted{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-0", Tool: "echo", OK: true, Output: json.RawMessage(`"` + long + `"`)},
			&noeta.ToolCallStarted{CallID: "call-1-1", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-1", Tool: "echo", OK: true, OutputRef: &ref},
			&noeta.ToolCallStarted{CallID: "call-1-2", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.StepAttemptAbandoned{BaselineSeq: 2, Action: noeta.AbandonRedrive, Reason: "lease lost"},
			&noeta.ToolCallFinished{CallID: "call-1-2", Tool: "echo", OK: false, Error: "interrupted: the worker running this call stopped before it finished; the call is not run again"},
			&noeta.TurnStarted{Turn: 2},
			&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish},
			&noeta.TaskCompleted{AnswerRef: &ref},
		}},
		// An output recorded by ref with a preview (docs/adr/0102) reads
		// as the preview, said to be one, with the ref of the whole; one
		// without (a record written before previews) reads as the ref
		// alone, as it always did; a preview longer than the cap is cut
		// like any output.
		{"output-preview", engine.ComposerConfig{MaxToolOutput: 100}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "look at the logo", RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls},
			&noeta.ToolCallStarted{CallID: "call-1-0", Tool: "mcp__everything__get-tiny-image", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-0", Tool: "mcp__everything__get-tiny-image", OK: true, OutputRef: &ref,
				Preview: "Here is the image:\nThe image above is the MCP logo.\n[image image/png, 6128 bytes]"},
			&noeta.ToolCallStarted{CallID: "call-1-1", Tool: "read_file", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-1", Tool: "read_file", OK: true, OutputRef: &ref},
			&noeta.ToolCallStarted{CallID: "call-1-2", Tool: "shell", Args: json.RawMessage(`{}`), Turn: 1},
			&noeta.ToolCallFinished{CallID: "call-1-2", Tool: "shell", OK: true, OutputRef: &ref, Preview: `{"exit_code":0,"stdout":"` + strings.Repeat("line\\n", 20)},
			&noeta.TurnStarted{Turn: 2},
			&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish},
			&noeta.TaskCompleted{Answer: json.RawMessage(`"seen"`)},
		}},
		{"waits", engine.ComposerConfig{}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "wait for things", RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionYieldForHuman},
			&noeta.TaskSuspended{Reason: "waiting_human: which branch?", WakeOn: noeta.HumanResponseWake("question-1")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "question-1", Text: "main", Approver: "bob"}},
			&noeta.TurnStarted{Turn: 2},
			&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionWaitExternal},
			&noeta.TaskSuspended{Reason: "waiting_external", WakeOn: noeta.ExternalWake("deploy-done")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeExternalEvent, EventKind: "deploy-done", Data: json.RawMessage(`{"ok":true}`)}},
			&noeta.TurnStarted{Turn: 3},
			&noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionWaitTimer},
			&noeta.TaskSuspended{Reason: "waiting_timer", WakeOn: noeta.TimerWake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
			&noeta.TaskWoken{WakeEvent: noeta.TimerWake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
			&noeta.TurnStarted{Turn: 4},
			&noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionStatePatch},
			&noeta.TaskStatePatched{Patch: json.RawMessage(`{"branch":"main"}`)},
			&noeta.TurnStarted{Turn: 5},
			raw{noeta.TypePolicyDecided, `{"turn":5,"decision":"yield_for_human","question":"ship it?"}`},
			&noeta.TaskSuspended{Reason: "waiting_human: ship it?", WakeOn: noeta.HumanResponseWake("question-5")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "question-5", Text: "yes"}},
			&noeta.TurnStarted{Turn: 6},
			&noeta.PolicyDecided{Turn: 6, Decision: noeta.DecisionFail},
			&noeta.TaskFailed{Error: "gave up"},
		}},
		{"spawn-approval", engine.ComposerConfig{}, []noeta.Payload{
			&noeta.TaskCreated{TaskID: "t1", Agent: "boss", Goal: "delegate", RootTaskID: "t1"},
			&noeta.TurnStarted{Turn: 1},
			&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionSpawn},
			&noeta.ApprovalRequested{Handle: "approval-spawn-1-abcdefghjk", Action: noeta.ApprovalSpawnSubtask, Agent: "helper",
				Args: json.RawMessage(`{"agent":"helper","goal":"say hi"}`), Guard: "gate", Reason: "a human signs off"},
			&noeta.TaskSuspended{Reason: engine.ReasonWaitingApproval, WakeOn: noeta.HumanResponseWake("approval-spawn-1-abcdefghjk")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-spawn-1-abcdefghjk", Decision: "approve", Approver: "alice"}},
			&noeta.ApprovalResolved{Handle: "approval-spawn-1-abcdefghjk", Decision: noeta.ApprovalApprove, Approver: "alice"},
			&noeta.SubtaskSpawned{SubtaskID: "kid", Agent: "helper", Goal: "say hi"},
			&noeta.TaskSuspended{Reason: "waiting_subtask", WakeOn: noeta.SubtaskCompletedWake("kid")},
			&noeta.TaskWoken{WakeEvent: noeta.SubtaskCompletedWake("kid")},
			&noeta.SubtaskResultRecorded{SubtaskID: "kid", Status: noeta.SubtaskStatusFailed, Error: "it broke"},
			&noeta.TurnStarted{Turn: 2},
			&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish},
			&noeta.ApprovalRequested{Handle: "approval-finish-2-abcdefghjk", Action: noeta.ApprovalFinish,
				Args: json.RawMessage(`"all done"`), Guard: "gate", Reason: "a human signs off"},
			&noeta.TaskSuspended{Reason: engine.ReasonWaitingApproval, WakeOn: noeta.HumanResponseWake("approval-finish-2-abcdefghjk")},
			&noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-finish-2-abcdefghjk", Decision: "deny"}},
			&noeta.ApprovalResolved{Handle: "approval-finish-2-abcdefghjk", Decision: noeta.ApprovalDeny, Approver: "alice", Reason: "not yet"},
			&noeta.TurnStarted{Turn: 3},
			&noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionFail},
			&noeta.TaskCancelled{Reason: "operator stopped it"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sb strings.Builder
			render(&sb, checkComposer(t, c.cfg, synth(t, c.log...)))
			golden(t, c.name, sb.String())
		})
	}
}

// TestComposeDecisionRecordIsNotDoubled: a decision record that carries
// its calls, followed by the records that carry them out, gives each call
// once, with the arguments the decision recorded.
func TestComposeDecisionRecordIsNotDoubled(t *testing.T) {
	envs := synth(t,
		&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "g", RootTaskID: "t1"},
		&noeta.TurnStarted{Turn: 1},
		raw{noeta.TypePolicyDecided, `{"turn":1,"decision":"tool_calls","tool_calls":[{"call_id":"c1","tool":"echo","args":{"a":1}},{"call_id":"c2","tool":"echo","args":{"a":2}}]}`},
		&noeta.ToolCallStarted{CallID: "c2", Tool: "echo", Args: json.RawMessage(`{"a":2}`), Turn: 1},
		&noeta.ToolCallFinished{CallID: "c2", Tool: "echo", OK: true, Output: json.RawMessage(`2`)},
		&noeta.ToolCallDenied{CallID: "c1", Tool: "echo", Guard: "g", Reason: "r"},
		&noeta.TurnStarted{Turn: 2},
	)
	tr := compose(t, engine.ComposerConfig{}, envs).Transcript()
	var roles []string
	for _, m := range tr.Messages {
		roles = append(roles, string(m.Role)+":"+m.ToolCallID)
	}
	// The tool messages follow the calls' order in the decision, not the
	// order their results were recorded in.
	if want := []string{"user:", "assistant:", "tool:c1", "tool:c2"}; !slices.Equal(roles, want) {
		t.Fatalf("messages %v, want %v", roles, want)
	}
	if calls := tr.Messages[1].ToolCalls; len(calls) != 2 || string(calls[0].Args) != `{"a":1}` {
		t.Fatalf("calls %+v", calls)
	}
}

// TestComposerSnapshotRefusesGarbage: a snapshot body that is not a
// composer's is an error naming it, not an empty transcript that would hand
// a model a task with no history.
func TestComposerSnapshotRefusesGarbage(t *testing.T) {
	for _, body := range []string{`[]`, `{"max_tool_output":-1}`, `{"messages":7}`} {
		var c engine.Composer
		err := json.Unmarshal([]byte(body), &c)
		if err == nil || !strings.Contains(err.Error(), "composer snapshot") {
			t.Errorf("%s: err %v", body, err)
		}
	}
}

// TestComposeMidTurnTranscriptIsACopy: a transcript taken while a turn's
// records are still arriving is not changed by the records after it; the
// open turn is rendered with every call answered, so it is valid on the
// wire even then.
func TestComposeMidTurnTranscriptIsACopy(t *testing.T) {
	envs := synth(t,
		&noeta.TaskCreated{TaskID: "t1", Agent: "a", Goal: "g", RootTaskID: "t1"},
		&noeta.TurnStarted{Turn: 1},
		&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls},
		&noeta.ToolCallStarted{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
		&noeta.ToolCallFinished{CallID: "c1", Tool: "echo", OK: true, Output: json.RawMessage(`"one"`)},
		&noeta.ToolCallStarted{CallID: "c2", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
		&noeta.ToolCallFinished{CallID: "c2", Tool: "echo", OK: true, Output: json.RawMessage(`"two"`)},
		&noeta.TurnStarted{Turn: 2},
	)
	c := compose(t, engine.ComposerConfig{}, envs[:6])
	mid := c.Transcript()
	before, _ := json.Marshal(mid)
	var sb strings.Builder
	render(&sb, mid)
	want := "--- user\ng\n--- assistant\ntool_call c1 echo {}\ntool_call c2 echo {}\n--- tool c1 echo\none\n--- tool c2 echo error\nno result: the call has not finished\n"
	if sb.String() != want {
		t.Fatalf("mid-turn transcript:\n%s\nwant\n%s", sb.String(), want)
	}
	for _, env := range envs[6:] {
		applyTo(t, c, env)
	}
	if after, _ := json.Marshal(mid); !bytes.Equal(after, before) {
		t.Fatalf("a later record changed a transcript already handed out:\n%s\n%s", before, after)
	}
	if got := c.Transcript(); got.Messages[3].Text != "two" {
		t.Fatalf("the turn's end: %+v", got.Messages)
	}
}
