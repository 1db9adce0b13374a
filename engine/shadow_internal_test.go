package engine

import (
	"encoding/json"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
)

// TestShadowRecordsNotWrittenTwice: an action whose GuardShadowed records
// are in the log (its verdict record is not: the worker stopped between
// them) is judged again by the next worker, which must not record its
// shadow verdicts a second time. A new turn starts afresh.
func TestShadowRecordsNotWrittenTwice(t *testing.T) {
	var envs []eventlog.Envelope
	add := func(p noeta.Payload) {
		t.Helper()
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.LeaseGen = uint64(len(envs)+1), 1
		envs = append(envs, env)
	}
	add(noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"})
	add(noeta.LeaseGranted{LeaseID: "l", Generation: 1, Worker: "w"})
	add(noeta.TurnStarted{Turn: 1})
	add(noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls})
	add(noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "c1", Tool: "echo", Guard: "rules", Rule: "rules[0]",
		Verdict: noeta.VerdictDeny, Reason: "r", Decided: noeta.VerdictAllow})
	st, err := Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Turn.Shadowed[shadowKey(noeta.ApprovalToolCall, "c1")] {
		t.Fatalf("the fold did not note the shadowed call: %+v", st.Turn)
	}
	if len(st.Governance.Denials) != 0 {
		t.Errorf("a shadow verdict counted as a denial: %+v", st.Governance.Denials)
	}
	if c := st.Clone(); !c.Turn.Shadowed[shadowKey(noeta.ApprovalToolCall, "c1")] {
		t.Error("Clone lost the shadowed calls")
	}
	// A segment with no engine: writing anything would panic.
	g := &segment{st: st}
	d := guards.Decision{VerdictResult: noeta.Allow(), Shadows: []guards.ShadowVerdict{{Guard: "rules", Rule: "rules[0]", VerdictResult: noeta.Deny("r")}}}
	if err := g.shadowed(noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "c1", Tool: "echo"}, d); err != nil {
		t.Fatal(err)
	}
	if len(g.pending) != 0 {
		t.Errorf("recorded again: %d pending", len(g.pending))
	}
	// A snapshot keeps the note.
	b, err := st.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Turn.Shadowed[shadowKey(noeta.ApprovalToolCall, "c1")] {
		t.Error("a snapshot lost the shadowed calls")
	}
	add(noeta.TurnStarted{Turn: 2})
	if st, err = Fold(envs); err != nil {
		t.Fatal(err)
	}
	if len(st.Turn.Shadowed) != 0 {
		t.Errorf("the next turn kept %v", st.Turn.Shadowed)
	}
}
