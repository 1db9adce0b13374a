package hostconfig

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/host"
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

// TestApprovalRulesOnTheEmbeddedDefault: the host gives the engine the
// config's approvals rules; an answer through Approve on the embedded
// default is authenticated as the local user; one the rules refuse is
// refused up front (the submitter, someone not in the rule), and an
// allowed one resolves the request, recorded with auth local.
func TestApprovalRulesOnTheEmbeddedDefault(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte(rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ctx := t.Context()
	sub := task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n")
	sub.SubmittedBy = "cli:ann"
	id, err := h.Submit(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestWaiting || len(rest.Waiting) != 1 {
		t.Fatalf("waiting: %+v, %v", rest, err)
	}
	handle := rest.Waiting[0].Handle
	for _, who := range []string{"cli:ann", "cli:mallory"} {
		if err := h.Approve(ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: who}); !errors.Is(err, engine.ErrApproverNotAllowed) {
			t.Fatalf("approve by %s: %v; want ErrApproverNotAllowed", who, err)
		}
	}
	if err := h.Approve(ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "sre", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestCompleted {
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

const vouchedQuorumDoc = `
agents:
  researcher:
    tools: [shell]
    permissions: {require_approval_tools: [shell]}
approvals:
  rules:
    - {name: two-vouched, when: 'tool == "shell"', approvers: 'auth in ["nats", "token", "proxy"]', quorum: 2}
`

// TestLocalCredentialsCannotForgeTheBroker: a process that holds the
// embedded data directory's credentials publishes answers on the approval
// subjects of "bob" and "carol". Before, the dispatcher recorded every
// answer on an approval subject as vouched for by the broker (auth nats),
// so one local user met a quorum of two approvers the rules count only when
// the broker or the HTTP layer authenticated them, and the shell command
// ran. Now each answer is refused by the server or recorded auth local, and
// the request stays open.
func TestLocalCredentialsCannotForgeTheBroker(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte(vouchedQuorumDoc))
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	h, err := Open(t.Context(), Options{DataDir: data, Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ctx := t.Context()
	id, err := h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestWaiting || len(rest.Waiting) != 1 {
		t.Fatalf("waiting: %+v, %v", rest, err)
	}
	handle := rest.Waiting[0].Handle

	// What any local process can read: the credentials and where the
	// server listens.
	cb, err := os.ReadFile(filepath.Join(data, "credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds struct{ User, Password string }
	if err := json.Unmarshal(cb, &creds); err != nil || creds.User == "" {
		t.Fatalf("credentials %q: %v", cb, err)
	}
	b, err := os.ReadFile(filepath.Join(data, "engine.lock"))
	if err != nil {
		t.Fatal(err)
	}
	var holder jshost.Holder
	if err := json.Unmarshal(b, &holder); err != nil || holder.URL == "" {
		t.Fatalf("lock file %q: %v", b, err)
	}
	nc, err := nats.Connect(holder.URL, nats.UserInfo(creds.User, creds.Password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	published := 0
	for _, who := range []string{"bob", "carol"} {
		p, err := jetstream.NewApprovalPublisher(nc, DefaultPrefix, who)
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = p.Answer(pctx, id, handle, noeta.ApprovalApprove, "as "+who)
		cancel()
		if err == nil {
			published++
		} else {
			t.Logf("the server refused the answer as %s: %v", who, err)
		}
	}

	// Every answer the server took is judged by the task: wait for that
	// many refusals, then nothing may have counted or resolved.
	var refused []*noeta.ApprovalRefused
	deadline := time.Now().Add(time.Minute)
	for {
		refused = refused[:0]
		envs, err := h.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range envs {
			p, _, err := e.Decode()
			if err != nil {
				continue
			}
			switch p := p.(type) {
			case *noeta.ApprovalRefused:
				refused = append(refused, p)
			case *noeta.ApprovalCounted:
				t.Fatalf("an answer on a local approval subject counted toward the quorum: %+v", p)
			case *noeta.ApprovalResolved:
				t.Fatalf("answers on local approval subjects resolved the request: %+v", p)
			case *noeta.ToolCallStarted:
				t.Fatalf("the shell call ran: %+v", p)
			}
		}
		if len(refused) >= published {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d answers published, %d judged", published, len(refused))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range refused {
		if r.Auth != noeta.AuthLocal {
			t.Errorf("refused answer %+v: auth %q, want %q", r, r.Auth, noeta.AuthLocal)
		}
	}
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestWaiting {
		t.Fatalf("after the forged answers: %+v, %v; want still waiting", rest, err)
	}
}
