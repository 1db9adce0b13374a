package guards

import (
	"reflect"
	"testing"

	"github.com/noeta-go/noeta"
)

// TestNewContextAppendOnly: the shared-history context shows the same view as
// a deep copy, keeps showing it while the caller appends and slides the
// recent-calls window, copies what the caller changes in place (pending
// approvals), and hands a guard no shared memory (the metadata map is shared
// with its caller, who does not change it).
func TestNewContextAppendOnly(t *testing.T) {
	gov := noeta.GovernanceState{
		ToolCalls:        2,
		Denials:          make([]noeta.Denial, 1, 8),
		RecentToolCalls:  []noeta.ToolCallKey{{Tool: "a", Args: "{}"}},
		PendingApprovals: map[string]noeta.PendingApproval{"h": {Tool: "x"}},
	}
	gov.Denials[0] = noeta.Denial{Type: "ToolCallDenied", Reason: "r"}
	p := ContextParams{TaskID: "T", Governance: gov, Metadata: map[string]string{"k": "v"}}
	deep, shared := NewContext(p), NewContextAppendOnly(p)
	if !reflect.DeepEqual(deep.Governance(), shared.Governance()) || !reflect.DeepEqual(deep.Metadata(), shared.Metadata()) {
		t.Fatalf("views differ:\n%+v\n%+v", deep.Governance(), shared.Governance())
	}
	want := shared.Governance()
	// What the engine's fold does next: append, shift the window, resolve.
	gov.Denials = append(gov.Denials, noeta.Denial{Type: "TaskCancelled", Reason: "later"})
	for range 5 * noeta.RecentToolCallsWindow {
		gov.NoteToolCall(noeta.ToolCallKey{Tool: "changed"})
	}
	delete(gov.PendingApprovals, "h")
	if got := shared.Governance(); !reflect.DeepEqual(got, want) {
		t.Errorf("the context changed with its caller's state:\n got  %+v\n want %+v", got, want)
	}
	shared.Metadata()["k"] = "guard wrote here"
	if shared.Metadata()["k"] != "v" || p.Metadata["k"] != "v" {
		t.Error("Metadata hands out shared memory")
	}
	g := shared.Governance()
	g.Denials[0].Reason = "guard wrote here"
	if shared.Governance().Denials[0].Reason != "r" {
		t.Error("Governance hands out shared memory")
	}
}
