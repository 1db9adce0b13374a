package noeta

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
)

func TestGovernanceCloneIsDeep(t *testing.T) {
	g := GovernanceState{
		Denials:          []Denial{{Type: TypeToolCallDenied, Guard: "budget", Reason: "r"}},
		SubtaskResults:   []SubtaskResult{{SubtaskID: "c", Status: SubtaskStatusCompleted, Result: json.RawMessage(`"x"`)}},
		RecentToolCalls:  []ToolCallKey{{Tool: "echo", Args: "{}"}},
		PendingApprovals: map[string]PendingApproval{"approval-1": {Tool: "shell", Args: json.RawMessage(`{"c":1}`)}},
		Approvals:        []ApprovalRecord{{Handle: "h"}},
	}
	c := g.Clone()
	c.Denials[0].Reason = "changed"
	c.SubtaskResults[0].Result[1] = 'y'
	c.RecentToolCalls[0].Tool = "shell"
	p := c.PendingApprovals["approval-1"]
	p.Args[2] = 'z'
	c.PendingApprovals["approval-2"] = PendingApproval{}
	c.Approvals[0].Handle = "other"

	if g.Denials[0].Reason != "r" || string(g.SubtaskResults[0].Result) != `"x"` || g.RecentToolCalls[0].Tool != "echo" ||
		string(g.PendingApprovals["approval-1"].Args) != `{"c":1}` || len(g.PendingApprovals) != 1 || g.Approvals[0].Handle != "h" {
		t.Errorf("changing the clone changed the original: %+v", g)
	}
}

func TestNoteToolCallKeepsWindow(t *testing.T) {
	var g GovernanceState
	for i := range RecentToolCallsWindow + 5 {
		g.NoteToolCall(ToolCallKey{Tool: fmt.Sprint(i)})
	}
	if len(g.RecentToolCalls) != RecentToolCallsWindow {
		t.Fatalf("len = %d, want %d", len(g.RecentToolCalls), RecentToolCallsWindow)
	}
	if got, want := g.RecentToolCalls[0].Tool, "5"; got != want {
		t.Errorf("oldest = %s, want %s", got, want)
	}
	if got, want := g.RecentToolCalls[RecentToolCallsWindow-1].Tool, fmt.Sprint(RecentToolCallsWindow+4); got != want {
		t.Errorf("newest = %s, want %s", got, want)
	}
}

func TestVerdictZeroValueIsNotAllow(t *testing.T) {
	var r VerdictResult
	if r.IsAllow() {
		t.Errorf("zero VerdictResult is an allow")
	}
	if _, err := json.Marshal(r); err == nil {
		t.Errorf("zero verdict encoded without error")
	}
	for _, v := range []Verdict{VerdictAllow, VerdictDeny, VerdictRequireApproval} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back Verdict
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Errorf("round trip of %s = %v, %v", v, back, err)
		}
	}
}

func TestPayloadCatalogue(t *testing.T) {
	for _, typ := range EventTypes() {
		p, ok := NewPayload(typ)
		if !ok {
			t.Errorf("NewPayload(%s) not ok", typ)
			continue
		}
		if p.EventType() != typ {
			t.Errorf("NewPayload(%s).EventType() = %s", typ, p.EventType())
		}
		if !IsKnownEventType(typ) {
			t.Errorf("IsKnownEventType(%s) = false", typ)
		}
	}
	if _, ok := NewPayload("FutureThing"); ok {
		t.Errorf("NewPayload of an unknown type is ok")
	}
}

// TestSubtaskSpendCharges: a subtask's reservation counts until its result
// is recorded; the result's spend then replaces it, a result that carries
// no spend counts the whole allotment (never nothing), and a second result
// for the same subtask counts nothing more.
func TestSubtaskSpendCharges(t *testing.T) {
	cost, calls := 2.0, 3
	var g GovernanceState
	g.NoteSpawned("a", &BudgetAllotment{CostUSD: &cost, ToolCalls: &calls})
	g.NoteSpawned("b", &BudgetAllotment{CostUSD: &cost, ToolCalls: &calls})
	g.NoteSpawned("free", nil)
	if tr := g.Tree(); tr.CostUSD != 4 || tr.ToolCalls != 6 {
		t.Fatalf("reserved tree %+v, want $4 and 6 calls", tr)
	}
	cost, calls = 100, 100 // the reservation is a copy
	g.NoteSubtaskSpend("a", &TreeSpend{CostUSD: 0.5, ToolCalls: 1})
	g.SubtaskResults = append(g.SubtaskResults, SubtaskResult{SubtaskID: "a"})
	g.NoteSubtaskSpend("b", nil)
	g.SubtaskResults = append(g.SubtaskResults, SubtaskResult{SubtaskID: "b"})
	g.NoteSubtaskSpend("a", &TreeSpend{CostUSD: 0.5, ToolCalls: 1})
	g.NoteSubtaskSpend("free", nil)
	if g.SubtaskCostUSD != 2.5 || g.SubtaskToolCalls != 4 || len(g.Reserved) != 0 {
		t.Errorf("charged $%v and %d calls with %d reserved; want $2.5 and 4, none reserved", g.SubtaskCostUSD, g.SubtaskToolCalls, len(g.Reserved))
	}
	c := g.Clone()
	c.NoteSpawned("x", &BudgetAllotment{CostUSD: &cost})
	if len(g.Reserved) != 0 {
		t.Error("a clone's reservation reached the original")
	}
}

// TestNoteToolCallWindow: the window holds the last RecentToolCallsWindow
// calls in order, and an entry once written is never written over (contexts
// share the list).
func TestNoteToolCallWindow(t *testing.T) {
	var g GovernanceState
	var views [][]ToolCallKey
	for i := range 10 * RecentToolCallsWindow {
		g.NoteToolCall(ToolCallKey{Tool: strconv.Itoa(i)})
		if n := min(i+1, RecentToolCallsWindow); len(g.RecentToolCalls) != n {
			t.Fatalf("after %d calls the window holds %d, want %d", i+1, len(g.RecentToolCalls), n)
		}
		for j, k := range g.RecentToolCalls {
			if want := strconv.Itoa(i + 1 - len(g.RecentToolCalls) + j); k.Tool != want {
				t.Fatalf("after %d calls entry %d is %s, want %s", i+1, j, k.Tool, want)
			}
		}
		views = append(views, slices.Clip(g.RecentToolCalls))
	}
	for i, v := range views {
		for j, k := range v {
			if want := strconv.Itoa(i + 1 - len(v) + j); k.Tool != want {
				t.Fatalf("the window after %d calls was written over: entry %d is %s, want %s", i+1, j, k.Tool, want)
			}
		}
	}
}

// A clone encodes as its original: a nil list stays null and an empty one
// []. Before, Clone made every nil subtask_results [] (and an empty
// denials list null), so a clone's snapshot bytes differed.
func TestGovernanceCloneEncodesAsTheOriginal(t *testing.T) {
	for name, g := range map[string]GovernanceState{
		"nil lists":   {},
		"empty lists": {Denials: []Denial{}, SubtaskResults: []SubtaskResult{}, RecentToolCalls: []ToolCallKey{}, Approvals: []ApprovalRecord{}},
	} {
		want, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(g.Clone())
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: the clone encodes as\n%s\nthe original as\n%s", name, got, want)
		}
	}
}
