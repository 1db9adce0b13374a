package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/schemas"
)

// TestSizeBoundIsABound: the shortcut that skips encoding a record to learn
// its size must never say a record fits when it does not (the append would
// then be refused over the cap and the turn could not be recorded). Strings
// are drawn from the worst cases of canonical JSON: control characters,
// quotes, non-ASCII runes, astral runes.
func TestSizeBoundIsABound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	alphabet := []string{"a", "\x01", "\"", "\\", "é", "漢", "😀", "\u2028", " "}
	str := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	ref := noeta.RefFor([]byte("x"), "application/json")
	for i := range 2000 {
		rec := noeta.PolicyDecided{Turn: r.IntN(1 << 30), Decision: noeta.DecisionToolCalls, Version: 2,
			CostUSD: r.Float64() * 1e-7, InputTokens: r.Int64(), OutputTokens: r.Int64(), LatencyMS: r.Int64(),
			Model: str(r.IntN(40)), Provider: str(r.IntN(10)), Question: str(r.IntN(100)), Error: str(r.IntN(100)), EventKind: str(r.IntN(20)),
			ResponseRef: &ref, WaitSeconds: r.Float64() * 1e9, Text: str(r.IntN(300))}
		if r.IntN(2) == 0 {
			rec.Text, rec.TextRef = "", &ref
		}
		for range r.IntN(8) {
			rec.Notes = append(rec.Notes, str(r.IntN(60)))
		}
		for j := range r.IntN(6) {
			args, _ := noeta.Canonical(map[string]string{str(5): str(r.IntN(80))})
			rec.ToolCalls = append(rec.ToolCalls, noeta.RecordedCall{CallID: str(10) + string(rune('a'+j)), Tool: str(r.IntN(20)), Args: args, Invalid: str(r.IntN(30))})
		}
		for range r.IntN(3) {
			script, _ := noeta.Canonical([]string{str(r.IntN(30))})
			rec.Spawn = append(rec.Spawn, noeta.RecordedSpawn{Agent: str(8), Goal: str(r.IntN(60)), Script: script})
		}
		if r.IntN(2) == 0 {
			rec.Answer, _ = noeta.Canonical(str(r.IntN(200)))
			rec.Patch = json.RawMessage(`{"k":1}`)
		}
		b, err := noeta.Canonical(rec)
		if err != nil {
			t.Fatal(err)
		}
		if bound := sizeBound(rec); bound < len(b) {
			t.Fatalf("record %d: bound %d < canonical size %d: %s", i, bound, len(b), b)
		}
	}
}

// TestRecordReplayRoundTrip: every kind of decision, small and large,
// comes back from its record exactly as it was decided (args, goals,
// scripts, patch and answer canonical), with the payload under the cap,
// large parts by ref, and the raw response by ref only.
func TestRecordReplayRoundTrip(t *testing.T) {
	store, err := memlog.New(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	g := &segment{e: &Engine{cfg: Config{Content: store}}, ctx: t.Context(), st: &State{Task: "T"}}
	big := `"` + strings.Repeat("é", 2000) + `"`
	many := func() []noeta.ToolCall {
		var cs []noeta.ToolCall
		for i := range 80 {
			cs = append(cs, noeta.ToolCall{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Args: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`)})
		}
		return cs
	}
	for _, tt := range []struct {
		name string
		d    noeta.Decision
	}{
		{"calls", noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{CallID: "a", Tool: "echo", Args: json.RawMessage(`{"b": 1, "a": [1.0]}`)}, {CallID: "b", Invalid: "not JSON"}, {CallID: "c", Tool: "x", Args: json.RawMessage(`{"x":` + big + `}`)}}}},
		{"many calls", noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: many()}},
		{"spawn", noeta.Decision{Kind: noeta.DecisionSpawn, Spawn: []noeta.SpawnSpec{{Agent: "a", Goal: strings.Repeat("g", 5000)}, {Agent: "b", Goal: "small", Script: json.RawMessage(`[{"finish":{"answer":` + big + `}}]`)}}}},
		{"question", noeta.Decision{Kind: noeta.DecisionYieldForHuman, Question: "which?"}},
		{"long question", noeta.Decision{Kind: noeta.DecisionYieldForHuman, Question: strings.Repeat("q", 6000)}},
		{"timer", noeta.Decision{Kind: noeta.DecisionWaitTimer, WaitSeconds: 0}},
		{"external", noeta.Decision{Kind: noeta.DecisionWaitExternal, EventKind: "push"}},
		{"patch", noeta.Decision{Kind: noeta.DecisionStatePatch, Patch: json.RawMessage(`{"k":` + big + `}`)}},
		{"answer", noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(big), Model: "m", Provider: "openai", LatencyMS: 9, CostUSD: 0.1, InputTokens: 1, OutputTokens: 2, Response: []byte(`{"id":"r"}`), Notes: []string{"retried after 429"}}},
		{"fail", noeta.Decision{Kind: noeta.DecisionFail, Error: "cannot"}},
		{"calls with text", noeta.Decision{Kind: noeta.DecisionToolCalls, Text: "Let me check the file first.", ToolCalls: []noeta.ToolCall{{CallID: "a", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`)}}}},
		{"long text", noeta.Decision{Kind: noeta.DecisionYieldForHuman, Question: "which?", Text: strings.Repeat("I weigh the options. ", 400)}},
		{"text at the bound", noeta.Decision{Kind: noeta.DecisionToolCalls, Text: strings.Repeat("t", noeta.TextInlineLimit-2), ToolCalls: []noeta.ToolCall{{CallID: "a", Tool: "echo", Args: json.RawMessage(`{}`)}}}},
		{"text and large args", noeta.Decision{Kind: noeta.DecisionToolCalls, Text: strings.Repeat("é", 900), ToolCalls: []noeta.ToolCall{{CallID: "a", Tool: "x", Args: json.RawMessage(`{"x":` + big + `}`)}}}},
		{"text and many calls", noeta.Decision{Kind: noeta.DecisionToolCalls, Text: strings.Repeat("w", 1500), ToolCalls: many()}},
		{"text beside a finish", noeta.Decision{Kind: noeta.DecisionFinish, Text: "Here it is.", Answer: json.RawMessage(`{"n":42}`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.d.Validate(); err != nil {
				t.Fatal(err)
			}
			rec, err := g.recordDecision(3, tt.d)
			if err != nil {
				t.Fatal(err)
			}
			b, err := noeta.Canonical(rec)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > noeta.PayloadMaxBytes {
				t.Fatalf("record of %d bytes", len(b))
			}
			if err := schemas.Validate(noeta.TypePolicyDecided, b); err != nil {
				t.Fatalf("record does not validate: %v\n%s", err, b)
			}
			if bytes.Contains(b, []byte(`"id":"r"`)) {
				t.Fatal("the raw response is inline")
			}
			var back noeta.PolicyDecided
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			// The text: inline or by ref, never both, never cut; by ref
			// whenever it is over the bound.
			if back.Text != "" && back.TextRef != nil {
				t.Fatalf("text both inline and by ref: %s", b)
			}
			if tb, _ := noeta.Canonical(tt.d.Text); tt.d.Text != "" && len(tb) > noeta.TextInlineLimit && back.TextRef == nil {
				t.Fatalf("a text of %d bytes is inline", len(tb))
			}
			if back.Text != "" && back.Text != tt.d.Text {
				t.Fatalf("inline text %q, want %q", back.Text, tt.d.Text)
			}
			got, err := g.replayDecision(&back)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.d.Clone()
			want.Response = nil
			canon := func(r json.RawMessage) json.RawMessage {
				if r == nil {
					return nil
				}
				c, err := noeta.CanonicalizeJSON(r)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			for i := range want.ToolCalls {
				want.ToolCalls[i].Args = canon(want.ToolCalls[i].Args)
			}
			for i := range want.Spawn {
				want.Spawn[i].Script = canon(want.Spawn[i].Script)
			}
			want.Patch, want.Answer = canon(want.Patch), canon(want.Answer)
			wb, _ := json.Marshal(want)
			gb, _ := json.Marshal(got)
			if !bytes.Equal(wb, gb) {
				t.Fatalf("replayed\n%s\nwant\n%s", gb, wb)
			}
		})
	}
}

// TestSnapshotWithoutContextFoldsFromGenesis: a snapshot written before the
// composed context was part of the state would give a task whose context
// starts at the snapshot, missing its history; it is passed over, with a
// note, and the task is folded from genesis.
func TestSnapshotWithoutContextFoldsFromGenesis(t *testing.T) {
	store, err := memlog.New(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := t.Context()
	var envs []eventlog.Envelope
	add := func(p noeta.Payload) eventlog.Envelope {
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.LeaseGen = uint64(len(envs)+1), 1
		envs = append(envs, env)
		return env
	}
	add(noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"})
	add(noeta.LeaseGranted{LeaseID: "L", Generation: 1, Worker: "w"})
	st, err := Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		drop     bool
		wantNote string
	}{
		{"with context", false, ""},
		{"without context", true, "predates the composed context"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, err := st.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			if tt.drop {
				var m map[string]json.RawMessage
				_ = json.Unmarshal(body, &m)
				if _, ok := m["context"]; !ok {
					t.Fatal("the state has no context member to drop")
				}
				delete(m, "context")
				body, _ = noeta.Canonical(m)
			}
			ref, err := store.Put(ctx, body, eventlog.MediaTypeJSON)
			if err != nil {
				t.Fatal(err)
			}
			snap, _ := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", noeta.TaskSnapshot{StateRef: ref, UptoSeq: 2})
			snap.Seq = 3
			got, note := fromSnapshot(ctx, store, snap)
			if !strings.Contains(note, tt.wantNote) || (tt.wantNote == "") != (got != nil) {
				t.Fatalf("state %v, note %q; want a note containing %q", got != nil, note, tt.wantNote)
			}
		})
	}
}

// TestRecordsWithoutTextAsBefore: a decision record written before records
// carried the model's text encodes to the same bytes, validates, folds the
// same with the fast reader and the decoder, and composes an assistant
// message without text, as it did (docs/adr/0084).
func TestRecordsWithoutTextAsBefore(t *testing.T) {
	old := `{"cost_usd":0.5,"decision":"tool_calls","input_tokens":3,"model":"m","output_tokens":4,"provider":"openai","tool_calls":[{"args":{"a":1},"call_id":"call-1-0","tool":"echo"}],"turn":1,"version":2}`
	if err := schemas.Validate(noeta.TypePolicyDecided, []byte(old)); err != nil {
		t.Fatal(err)
	}
	var rec noeta.PolicyDecided
	if err := json.Unmarshal([]byte(old), &rec); err != nil {
		t.Fatal(err)
	}
	if b, err := noeta.Canonical(rec); err != nil || string(b) != old {
		t.Fatalf("re-encoded: %s %v\nwant %s", b, err, old)
	}
	created, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", noeta.TurnStarted{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	decided := turn
	decided.Type, decided.Payload = noeta.TypePolicyDecided, json.RawMessage(old)
	created.Seq, turn.Seq, decided.Seq = 1, 2, 3
	envs := []eventlog.Envelope{created, turn, decided}
	fast, err := Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	fastFold = false
	slow, err := Fold(envs)
	fastFold = true
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fast.Canonical()
	b, _ := slow.Canonical()
	if !bytes.Equal(a, b) || fast.Turn.Decision == nil || fast.Turn.Decision.Text != "" || fast.Turn.Decision.TextRef != nil {
		t.Fatalf("fast fold\n%s\ndecoded fold\n%s", a, b)
	}
	msgs := fast.Context.Transcript().Messages
	if len(msgs) != 3 || msgs[1].Role != noeta.RoleAssistant || msgs[1].Text != "" || len(msgs[1].ToolCalls) != 1 {
		t.Fatalf("transcript %+v", msgs)
	}
}
