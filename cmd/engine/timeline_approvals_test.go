package main

import (
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestDescribeApprovals: the timeline says what each approval record
// means: the request's terms, a count toward a quorum, a refused answer
// and why, a quorum's approvers, an expiry.
func TestDescribeApprovals(t *testing.T) {
	exp := time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		p    noeta.Payload
		want string
	}{
		{&noeta.ApprovalRequested{Handle: "h", Action: noeta.ApprovalToolCall, CallID: "c1", Tool: "shell", Args: []byte(`{"command":"ls"}`), Guard: "g", Reason: "risky",
			Rules: []string{"sre"}, Quorum: 2, ExpiresAt: exp},
			`guard=g  h shell c1 {"command":"ls"}: risky [rules sre; quorum 2; expires 2026-12-01T12:30:00Z]`},
		{&noeta.ApprovalRequested{Handle: "h", Action: noeta.ApprovalFinish, Args: []byte(`{"answer":1}`), Guard: "g", Reason: "r"},
			`guard=g  h finish {"answer":1}: r`},
		{&noeta.ApprovalCounted{Handle: "h", Approver: "alice", Auth: noeta.AuthNATS, Approvals: 1, Quorum: 2},
			"h approved by alice (nats): 1 of 2 approvals"},
		{&noeta.ApprovalRefused{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "mallory", Auth: noeta.AuthNone, Reason: "not allowed"},
			"h approve by mallory (none) REFUSED: not allowed"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "bob", Auth: noeta.AuthToken, Approvers: []string{"alice", "bob"}},
			"h approve by alice, bob (token)"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "cli:ann", Auth: noeta.AuthLocal, Reason: "ok"},
			"h approve by cli:ann: ok"},
		{&noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer, Reason: "no answer before 2026-12-01T12:30:00Z"},
			"h deny: expired: no answer before 2026-12-01T12:30:00Z"},
	}
	for _, tt := range tests {
		if got := describe(eventlog.Envelope{}, tt.p); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.p.EventType(), got, tt.want)
		}
	}
}
