package taskview

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// turnLog is a task's log with a model's turns: words beside calls, words
// that would act on a terminal, words stored by ref, and a decision
// without words (a script's, or a record written before records had them).
func turnLog(t *testing.T) []eventlog.Envelope {
	t.Helper()
	ref := noeta.RefFor([]byte(`"long"`), eventlog.MediaTypeJSON)
	var envs []eventlog.Envelope
	for _, p := range []noeta.Payload{
		&noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"},
		&noeta.TurnStarted{Turn: 1},
		&noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, Version: 2, Model: "gpt-test", Provider: "openai", CostUSD: 0.002, InputTokens: 1500, OutputTokens: 40, LatencyMS: 412,
			Text:      "Let me check the file first. " + strings.Repeat("Then the tests. ", 20) + "The end.",
			ToolCalls: []noeta.RecordedCall{{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{}`)}}},
		&noeta.TurnStarted{Turn: 2},
		&noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionYieldForHuman, Version: 2, Question: "q", Text: hostile},
		&noeta.TurnStarted{Turn: 3},
		&noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionYieldForHuman, Version: 2, Question: "q", TextRef: &ref},
		&noeta.TurnStarted{Turn: 4},
		&noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionFinish, CostUSD: 0.001},
	} {
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "test", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.Time = uint64(len(envs)+1), time.Date(2026, 12, 1, 12, 0, len(envs), 0, time.UTC)
		envs = append(envs, env)
	}
	return envs
}

// TestWriteTurns: each decision on its line, the model's words whole on
// the line under it, escaped; a decision without words has no such line.
func TestWriteTurns(t *testing.T) {
	var b strings.Builder
	WriteTurns(&b, turnLog(t))
	out := b.String()
	assertSafe(t, "turns", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"turns",
		"  #3    turn 1: tool_calls by gpt-test (openai) cost $0.002 tokens 1500/40 412ms",
		`        said "Let me check the file first. ` + strings.Repeat("Then the tests. ", 20) + `The end."`,
		"  #5    turn 2: yield_for_human",
		"  #7    turn 3: yield_for_human",
		"  #9    turn 4: finish cost $0.001",
	}
	if len(lines) != len(want)+2 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want)+2, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("no line %q in:\n%s", w, out)
		}
	}
	if !strings.Contains(out, `said "x\u001b[2J`) || !strings.Contains(out, "said (") {
		t.Errorf("the escaped words or the ref are missing:\n%s", out)
	}

	var empty strings.Builder
	WriteTurns(&empty, turnLog(t)[:2])
	if empty.Len() != 0 {
		t.Errorf("a task that decided nothing: %q", empty.String())
	}
}

// TestTurnsJSON: the turns with the text whole; a record without text has
// no text member.
func TestTurnsJSON(t *testing.T) {
	b, err := TurnsJSON(turnLog(t))
	if err != nil {
		t.Fatal(err)
	}
	var ts []map[string]any
	if err := json.Unmarshal(b, &ts); err != nil {
		t.Fatal(err)
	}
	if len(ts) != 4 || ts[1]["text"] != hostile || ts[2]["text_ref"] == nil {
		t.Fatalf("turns: %s", b)
	}
	if _, has := ts[3]["text"]; has {
		t.Errorf("a decision without words has a text: %v", ts[3])
	}
	if b, _ := TurnsJSON(nil); string(b) != "[]" {
		t.Errorf("no turns: %s", b)
	}
}

// TestWriteStateShowsTheDecision: the state's decision of the turn, with
// the model's words escaped; a state folded from records without words
// shows none.
func TestWriteStateShowsTheDecision(t *testing.T) {
	envs := turnLog(t)
	for _, tt := range []struct {
		name string
		upto int
		said string
	}{
		{"words", 3, `said      "Let me check the file first.`},
		{"hostile words", 5, `said      "x\u001b[2J`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := engine.Fold(envs[:tt.upto])
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			WriteState(&b, s, eventlog.DispatchState{}, false)
			assertSafe(t, "state", b.String())
			if !strings.Contains(b.String(), "decided   turn") || !strings.Contains(b.String(), tt.said) {
				t.Errorf("state lacks the decision and %q:\n%s", tt.said, b.String())
			}
		})
	}
	// A version 1 decision (no words, no parts): the state reads as before.
	s, err := engine.Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteState(&b, s, eventlog.DispatchState{}, false)
	if strings.Contains(b.String(), "decided") || strings.Contains(b.String(), "said") {
		t.Errorf("a turn without a recorded decision shows one:\n%s", b.String())
	}
}

// TestInspectJSON: the state, the dispatcher's row and the turns, the
// state as StateJSON writes it.
func TestInspectJSON(t *testing.T) {
	envs := turnLog(t)
	s, err := engine.Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := InspectJSON(s, eventlog.DispatchState{Status: eventlog.DispatchReady}, true, envs)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		State      json.RawMessage `json:"state"`
		Dispatcher map[string]any  `json:"dispatcher"`
		Turns      []Turn          `json:"turns"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want, _ := StateJSON(s, eventlog.DispatchState{}, false)
	var st struct {
		State json.RawMessage `json:"state"`
	}
	_ = json.Unmarshal(want, &st)
	if !jsonEqual(t, got.State, st.State) || got.Dispatcher == nil || len(got.Turns) != 4 || got.Turns[1].Text != hostile {
		t.Errorf("inspect JSON: %s", b)
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
