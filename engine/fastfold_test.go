package engine

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestFastFoldAgreesWithDecode folds logs with the direct field reader and
// with encoding/json and wants the same state, byte for byte, including
// payloads the reader must hand back (escapes, refs, odd numbers).
func TestFastFoldAgreesWithDecode(t *testing.T) {
	logs := map[string][]eventlog.Envelope{"synthetic": syntheticLog(t, 2000)}
	var odd []eventlog.Envelope
	add := func(p noeta.Payload) {
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.LeaseGen = uint64(len(odd)+1), 1
		odd = append(odd, env)
	}
	ref := noeta.RefFor([]byte(`{"big":1}`), eventlog.MediaTypeJSON)
	add(noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"})
	add(noeta.LeaseGranted{LeaseID: "L", Generation: 1, Worker: "w"})
	add(noeta.TurnStarted{Turn: 1})
	add(noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, CostUSD: 1e-7, InputTokens: 123456789012, OutputTokens: 7})
	add(noeta.ToolCallStarted{CallID: "c\"1", Tool: "t\\x", Args: []byte(`{"s":"a\"b","n":[1,{"x":"}"}]}`), Turn: 1})
	add(noeta.ToolCallFinished{CallID: "c\"1", Tool: "t", OK: true, Output: []byte(`"}]"`), CostUSD: 0.3})
	add(noeta.ToolCallStarted{CallID: "c2", Tool: "echo", ArgsRef: &ref, Turn: 1})
	add(noeta.ToolCallFinished{CallID: "c2", Tool: "echo", OK: false, Error: "boom \u00e9\n", OutputRef: &ref})
	add(noeta.ToolCallStarted{CallID: "c5", Tool: "mcp__s__fetch", Turn: 1})
	add(noeta.ToolCallFinished{CallID: "c5", Tool: "mcp__s__fetch", OK: true, OutputRef: &ref, Preview: "The \"page\":\n\t\u00e9 \U0001F600\n[image image/png, 6400 bytes]"})
	add(noeta.ToolCallStarted{CallID: "c6", Tool: "shell", Turn: 1})
	add(noeta.ToolCallFinished{CallID: "c6", Tool: "shell", OK: true, OutputRef: &ref, Preview: "plain"})
	add(noeta.ToolCallStarted{CallID: "c3", Tool: "echo", Turn: 1})
	add(noeta.ToolCallFinished{CallID: "c3", Tool: "echo", CostUSD: 1.5e21})
	add(noeta.TaskSnapshot{StateRef: ref, UptoSeq: 9})
	add(noeta.TurnStarted{Turn: 2})
	add(noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish})
	add(noeta.ToolCallFinished{CallID: "c4", Tool: "echo", OK: true, Output: []byte(`null`), DurationMS: 12})
	add(noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish, Version: 2, Answer: []byte(`"a"`), Model: "m"})
	add(noeta.TurnStarted{Turn: 3})
	add(noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionToolCalls, Version: 2, CostUSD: 0.5, InputTokens: 3, OutputTokens: 4,
		Model: "gpt", Provider: "openai", LatencyMS: 12, ResponseRef: &ref, ToolCalls: []noeta.RecordedCall{
			{CallID: "a", Tool: "echo", Args: []byte(`{"s":"x,]}"}`)}, {CallID: "b", Tool: "echo", ArgsRef: &ref}, {CallID: "c", Invalid: "not JSON"},
		}})
	add(noeta.TurnStarted{Turn: 4})
	add(noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionToolCalls, Version: 2, Notes: []string{"n"}, ToolCalls: []noeta.RecordedCall{{CallID: "q\"", Tool: "echo", Args: []byte(`{}`)}}})
	add(noeta.TurnStarted{Turn: 6})
	add(noeta.PolicyDecided{Turn: 6, Decision: noeta.DecisionToolCalls, Version: 2, Text: "Let me \"check\" it.\n\tFirst the file \u00e9 \U0001F600 \x1b[31m",
		ToolCalls: []noeta.RecordedCall{{CallID: "t6", Tool: "echo", Args: []byte(`{}`)}}})
	add(noeta.TurnStarted{Turn: 7})
	add(noeta.PolicyDecided{Turn: 7, Decision: noeta.DecisionFinish, Version: 2, Answer: []byte(`1`), TextRef: &ref})
	add(noeta.TurnStarted{Turn: 5})
	add(noeta.PolicyDecided{Turn: 5, Decision: noeta.DecisionSpawn, Version: 2, Spawn: []noeta.RecordedSpawn{{Agent: "a", Goal: "g"}}})
	logs["odd"] = odd
	// What the fast reader hands back is the whole payload, as the decoder
	// gives it: the composed context reads every field.
	read := 0
	for _, env := range odd {
		fp, ok := fastPayload(env.Type, env.Payload, nil)
		if ok && env.Type == noeta.TypePolicyDecided {
			read++
		}
		if !ok || env.Type == noeta.TypeLeaseGranted || env.Type == noeta.TypeTaskSnapshot {
			// Those two are read for their type alone; the context shows
			// neither.
			continue
		}
		dp, _, err := env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fp, dp) {
			t.Errorf("seq %d %s: fast %+v, decoded %+v", env.Seq, env.Type, fp, dp)
		}
	}
	if read != 6 {
		t.Errorf("the fast reader read %d PolicyDecided records, want 6 (notes, an escaped call id and spawn go to the decoder; text with escapes does not)", read)
	}
	for name, envs := range logs {
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
		if !bytes.Equal(a, b) {
			t.Errorf("%s: fast fold\n%s\ndecoded fold\n%s", name, a, b)
		}
	}
}

func TestMembersRefusesWhatItCannotRead(t *testing.T) {
	for _, in := range []string{``, `{`, `[]`, `{"a"}`, `{"a":}`, `{"a\"b":1}`, `{"a":1,}`, `{"a":"x}`, `{"a":{"b":1}`, `{"a":1}x`} {
		if members([]byte(in), func(_, _ []byte) bool { return true }) {
			t.Errorf("members(%q) = true", in)
		}
	}
	var keys []string
	if !members([]byte(`{"a":{"b":[1,"]"]},"c":"d","e":null}`), func(k, v []byte) bool { keys = append(keys, string(k)+"="+string(v)); return true }) {
		t.Fatal("refused a good object")
	}
	if got := keys; len(got) != 3 || got[0] != `a={"b":[1,"]"]}` || got[1] != `c="d"` || got[2] != "e=null" {
		t.Errorf("members: %q", got)
	}
}
