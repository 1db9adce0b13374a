package host

import (
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
)

// TestRequestOpen: a prompt stays open while its request does. Before, the
// watcher behind run --approvals ask closed the prompt as soon as the task
// was not suspended on the handle at the instant it looked, which a vote
// counted toward a quorum (or a refused answer) brings about for a moment
// while the request stays open; the prompt was then never asked again.
func TestRequestOpen(t *testing.T) {
	const h = "approval-call-1-0-7kq3m9x2vd"
	pending := func(status noeta.TaskStatus, reason string, handles ...string) *engine.State {
		st := &engine.State{Status: status, Reason: reason}
		st.Governance.PendingApprovals = map[string]noeta.PendingApproval{}
		for _, x := range handles {
			st.Governance.PendingApprovals[x] = noeta.PendingApproval{}
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   *engine.State
		want bool
	}{
		{"suspended on it", pending(noeta.StatusSuspended, engine.ReasonWaitingApproval, h), true},
		{"awake between a counted vote and the next suspend", pending(noeta.StatusRunning, "", h), true},
		{"resolved", pending(noeta.StatusRunning, ""), false},
		{"another request open", pending(noeta.StatusSuspended, engine.ReasonWaitingApproval, "approval-call-2-0-aaaaaaaaaa"), false},
		{"the task ended", pending(noeta.StatusTerminal, "cancelled", h), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := requestOpen(tc.st, h); got != tc.want {
				t.Errorf("requestOpen = %v, want %v", got, tc.want)
			}
		})
	}
}
