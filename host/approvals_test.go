package host

import (
	"errors"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
)

const rulesDoc = `
agents:
  researcher:
    tools: [shell]
    permissions: {require_approval_tools: [shell]}
approvals:
  self_approval: deny
  rules:
    - {name: sre-shell, when: 'tool == "shell"', approvers: 'approver in ["sre", "cli:ann"]'}
`

// TestApprovalRulesInProcess: the host gives the engine the
// config's approvals rules; an answer through Approve on a backend that
// does not route answers (memlog, as the embedded default) is authenticated as the local user; one the rules refuse is
// refused up front (the submitter, someone not in the rule), and an
// allowed one resolves the request, recorded with auth local.
func TestApprovalRulesInProcess(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte(rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	h := openMem(t, cfg, Options{Workers: 1})
	ctx := t.Context()
	sub := task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n")
	sub.SubmittedBy = "cli:ann"
	id, err := h.Submit(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != RestWaiting || len(rest.Waiting) != 1 {
		t.Fatalf("waiting: %+v, %v", rest, err)
	}
	handle := rest.Waiting[0].Handle
	for _, who := range []string{"cli:ann", "cli:mallory"} {
		if err := h.Approve(ctx, id, handle, Answer{Decision: noeta.ApprovalApprove, Approver: who}); !errors.Is(err, engine.ErrApproverNotAllowed) {
			t.Fatalf("approve by %s: %v; want ErrApproverNotAllowed", who, err)
		}
	}
	if err := h.Approve(ctx, id, handle, Answer{Decision: noeta.ApprovalApprove, Approver: "sre", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != RestCompleted {
		t.Fatalf("after the approval: %+v, %v", rest, err)
	}
	envs, err := h.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var res *noeta.ApprovalResolved
	for _, e := range envs {
		if p, _, err := e.Decode(); err == nil {
			if r, ok := p.(*noeta.ApprovalResolved); ok {
				res = r
			}
		}
	}
	if res == nil || res.Approver != "sre" || res.Auth != noeta.AuthLocal {
		t.Fatalf("resolution %+v; want approved by sre, auth local", res)
	}
}
