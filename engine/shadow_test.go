package engine_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// shadowConfig: a shadow deny rule on one echo, a real deny rule on
// another, and a shadow rule set that would ask for approval of every call
// and allow the really denied one.
const shadowConfig = `
agents:
  boss:
    tools: [echo]
    permission_mode: bypassPermissions
rules:
  - {match_tool: echo, match_arg: {path: text, equals: forbidden}, action: deny, reason: "new ban", shadow: true}
  - {match_tool: echo, match_arg: {path: text, equals: denied}, action: deny, reason: "old ban"}
guards:
  - name: trial
    priority: 150
    shadow: true
    rules:
      - {match_tool: echo, match_arg: {path: text, equals: denied}, action: allow}
      - {match_tool: "*", action: require_approval, reason: "trial approval"}
`

// TestShadowRulesRecordedNeverDecide is the contract of shadow mode in the
// engine: each shadow verdict is a GuardShadowed record, written just before
// the action's own verdict record, and the action goes as the real rules
// say. The fold gives the records no weight (no denial), and the model
// never reads them.
func TestShadowRulesRecordedNeverDecide(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), shadowConfig)
	h.start(1)
	id := h.submit(`
agent: boss
goal: shadows
script:
  - tool_calls: [{tool: echo, args: {text: forbidden}}, {tool: echo, args: {text: denied}}]
  - finish: {answer: done}
`)
	st := h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` {
		t.Fatalf("ended %q %s\n%s", st.Answer, st.Reason, h.dump(id))
	}
	envs := wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
		e("GuardShadowed"), e("GuardShadowed"), e("ToolCallStarted"), tl("ToolCallFinished"),
		e("GuardShadowed"), e("ToolCallDenied"),
		e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))

	var got []noeta.GuardShadowed
	for i, env := range envs {
		if env.Type != noeta.TypeGuardShadowed {
			continue
		}
		var g noeta.GuardShadowed
		if err := json.Unmarshal(env.Payload, &g); err != nil {
			t.Fatal(err)
		}
		// The verdict record that follows is about the same call.
		next := envs[i+1]
		if next.Type != noeta.TypeGuardShadowed && !strings.Contains(string(next.Payload), `"call_id":"`+g.CallID+`"`) {
			t.Errorf("GuardShadowed of %s is followed by %s %s", g.CallID, next.Type, next.Payload)
		}
		got = append(got, g)
	}
	want := []noeta.GuardShadowed{
		{Action: noeta.ApprovalToolCall, Tool: "echo", Guard: "rules", Rule: "rules[0]", Verdict: noeta.VerdictDeny, Reason: "new ban", Decided: noeta.VerdictAllow},
		{Action: noeta.ApprovalToolCall, Tool: "echo", Guard: "trial", Rule: "guards[0].rules[1]", Verdict: noeta.VerdictRequireApproval, Reason: "trial approval", Decided: noeta.VerdictAllow},
		{Action: noeta.ApprovalToolCall, Tool: "echo", Guard: "trial", Rule: "guards[0].rules[0]", Verdict: noeta.VerdictAllow, Reason: `hook rule on "echo" allows`, Decided: noeta.VerdictDeny, DecidedBy: "rules"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d GuardShadowed records, want %d\n%s", len(got), len(want), h.dump(id))
	}
	for i := range want {
		g := got[i]
		if g.CallID == "" {
			t.Errorf("record %d has no call id", i)
		}
		g.CallID = ""
		if g != want[i] {
			t.Errorf("record %d:\n got  %+v\n want %+v", i, g, want[i])
		}
	}
	if got[0].CallID != got[1].CallID || got[2].CallID == got[0].CallID {
		t.Errorf("call ids %s %s %s", got[0].CallID, got[1].CallID, got[2].CallID)
	}

	// Only the real denial counts.
	if len(st.Governance.Denials) != 1 || st.Governance.Denials[0].Guard != "rules" || st.Governance.ToolCalls != 1 {
		t.Errorf("governance %+v", st.Governance)
	}
	// The model reads what happened, never what a shadow rule thought.
	tr, err := json.Marshal(st.Context.Transcript())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"new ban", "trial approval", "GuardShadowed"} {
		if strings.Contains(string(tr), s) {
			t.Errorf("the transcript shows %q: %s", s, tr)
		}
	}
	if !strings.Contains(string(tr), "old ban") {
		t.Errorf("the transcript misses the real denial: %s", tr)
	}
	for _, env := range envs {
		if env.Type == noeta.TypeGuardShadowed && env.Origin != eventlog.OriginEngine {
			t.Errorf("GuardShadowed from %s", env.Origin)
		}
	}
}

// TestShadowRecordsSurviveACrashOnce: a worker that stops mid-turn leaves
// the rest of the turn to the next; every call of the turn has its shadow
// records exactly once, those of the call that was running included (its
// records landed with its start, and it is not judged again).
func TestShadowRecordsSurviveACrashOnce(t *testing.T) {
	for _, mk := range backends(t) {
		t.Run(mk(t).name, func(t *testing.T) {
			doc := modelConfig + `
rules:
  - {match_tool: "*", action: deny, reason: "would deny everything", shadow: true}
`
			counter := &runCounter{runs: map[string]int{}}
			cr := &crasher{}
			m := newModelLike(func(turn int) noeta.Decision {
				if turn == 1 {
					return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{count("a"), {Tool: "crash", Args: json.RawMessage(`{}`)}, count("b")}}
				}
				return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}
			})
			h := newHarness(t, mk(t), doc, withModel(m, counter, cr))
			id, err := h.eng.Submit(t.Context(), engine.Submission{Agent: "worker", Goal: "shadows and a crash"})
			if err != nil {
				t.Fatal(err)
			}
			runUntilCrash(t, h, cr, id)
			resume(t, h, id)
			h.waitStatus(id, noeta.StatusTerminal)
			perCall := map[string]int{}
			for _, env := range h.log(id) {
				if env.Type != noeta.TypeGuardShadowed {
					continue
				}
				var g noeta.GuardShadowed
				if err := json.Unmarshal(env.Payload, &g); err != nil {
					t.Fatal(err)
				}
				perCall[g.CallID]++
			}
			if len(perCall) != 3 {
				t.Errorf("shadow records for %d calls, want 3\n%s", len(perCall), h.dump(id))
			}
			for call, n := range perCall {
				if n != 1 {
					t.Errorf("call %s has %d shadow records\n%s", call, n, h.dump(id))
				}
			}
			counter.mu.Lock()
			defer counter.mu.Unlock()
			if counter.runs["a"] != 1 || counter.runs["b"] != 1 {
				t.Errorf("runs %v: a shadow deny stopped a call", counter.runs)
			}
		})
	}
}
