package hostconfig

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/host"
)

// TestRemoteApprovals: on a remote NATS the host's engines refuse an
// approval answered on a plain wake (ApprovalRefused, auth none; the request
// stays open), Approve refuses an approver that cannot be a subject token,
// and so does an answer in process claiming auth nats or local; an answer
// through Approve goes on the approver's approval subject: ApprovalResolved
// records the approver with auth nats.
//
// Before: the host built its engines without RequireAuthenticatedApprovals,
// so any publisher of wakes could approve as anyone, and Approve handed a
// self-asserted approver to the dispatcher in process.
func TestRemoteApprovals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	h, err := Open(ctx, Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "remote", Config: exampleConfig(t), Workers: 2, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	id, err := h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestWaiting || len(rest.Waiting) != 1 || rest.Waiting[0].Approval == nil {
		t.Fatalf("approval: %+v, %v", rest, err)
	}
	handle := rest.Waiting[0].Handle
	waitSuspended := func() {
		t.Helper()
		for {
			ds, err := h.Dispatch(ctx, id)
			if err == nil && ds.Status == eventlog.DispatchSuspended {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("not suspended: %+v %v", ds, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSuspended()

	// A plain wake carrying an approval: refused by the engine.
	wp, err := jetstream.NewWakePublisher(h.Conn(), "remote")
	if err != nil {
		t.Fatal(err)
	}
	plain := noeta.HumanResponseWake(handle)
	plain.Decision, plain.Approver, plain.Text = string(noeta.ApprovalApprove), "alice", "trust me"
	if _, err := wp.Wake(ctx, id, plain); err != nil {
		t.Fatal(err)
	}
	var refused *noeta.ApprovalRefused
	for deadline := time.Now().Add(30 * time.Second); refused == nil; {
		time.Sleep(10 * time.Millisecond)
		envs, err := h.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			var types []string
			for _, env := range envs {
				types = append(types, env.Type)
			}
			t.Fatalf("no ApprovalRefused within 30s; the log: %v", types)
		}
		for _, env := range envs {
			if p, _, _ := env.Decode(); p != nil {
				if r, ok := p.(*noeta.ApprovalRefused); ok && r.Handle == handle {
					refused = r
				}
				if r, ok := p.(*noeta.ApprovalResolved); ok && r.Handle == handle {
					t.Fatalf("a plain wake resolved the approval: %+v", r)
				}
			}
		}
	}
	if refused.Auth != noeta.AuthNone || refused.Approver != "alice" {
		t.Errorf("ApprovalRefused %+v, want alice with auth none", refused)
	}
	waitSuspended()

	// An approver that is no subject token is refused, naming why.
	err = h.Approve(ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:alice"})
	if !errors.Is(err, eventlog.ErrInvalidArgument) || !strings.Contains(err.Error(), "approval subject") {
		t.Errorf("Approve as cli:alice: %v, want ErrInvalidArgument naming the approval subject", err)
	}
	// Nor may a caller claim the broker's or the local user's vouching.
	for _, auth := range []string{noeta.AuthNATS, noeta.AuthLocal, noeta.AuthNone, "root"} {
		err := h.Approve(ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Auth: auth})
		if !errors.Is(err, eventlog.ErrInvalidArgument) || !strings.Contains(err.Error(), "auth \""+auth+"\"") {
			t.Errorf("Approve with auth %s: %v, want ErrInvalidArgument naming it", auth, err)
		}
	}
	// Through the approval subject.
	if err := h.Approve(ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "looks safe"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Deny(ctx, id, handle, "bob", "too late"); !errors.Is(err, eventlog.ErrAlreadyAnswered) && !errors.Is(err, eventlog.ErrNotWaiting) {
		t.Errorf("second answer: %v, want refused", err)
	}
	rest, err = h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("after the approval: %+v, %v", rest, err)
	}
	st, err := h.Inspect(ctx, id)
	if err != nil || len(st.Governance.Approvals) != 1 {
		t.Fatalf("approvals: %+v, %v", st, err)
	}
	envs, err := h.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var resolved *noeta.ApprovalResolved
	for _, env := range envs {
		if p, _, _ := env.Decode(); p != nil {
			if r, ok := p.(*noeta.ApprovalResolved); ok {
				resolved = r
			}
		}
	}
	if resolved == nil || resolved.Approver != "alice" || resolved.Auth != noeta.AuthNATS || resolved.Reason != "looks safe" {
		t.Errorf("ApprovalResolved %+v, want alice, auth nats, \"looks safe\"", resolved)
	}
}

// TestRemoteReplyRefusedIsReported: on a remote NATS a reply to a question
// sent on the approver's approval subject that the rules refuse is
// reported to the sender as refused (engine.ErrApproverNotAllowed), and
// the question stays open for an allowed approver.
//
// Before: a reply to a question was taken from any approver the broker
// let publish, whatever the approvals rules said.
func TestRemoteReplyRefusedIsReported(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	base, err := os.ReadFile("../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("noeta.yaml", append(base, []byte(`
approvals:
  rules:
    - name: sre-answers-questions
      when: 'action == "question"'
      approvers: 'approver == "sre"'
`)...))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(ctx, Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "reply", Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	id, err := h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - yield_for_human: {question: 'which branch?'}\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestWaiting {
		t.Fatalf("the question: %+v, %v", rest, err)
	}
	err = h.Approve(ctx, id, "question-1", host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "main"})
	if !errors.Is(err, engine.ErrApproverNotAllowed) || !strings.Contains(err.Error(), "sre-answers-questions") {
		t.Fatalf("alice's reply = %v; want ErrApproverNotAllowed naming the rule", err)
	}
	if err := h.Approve(ctx, id, "question-1", host.Answer{Decision: noeta.ApprovalApprove, Approver: "sre", Reason: "main"}); err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("after sre's reply: %+v, %v", rest, err)
	}
}
