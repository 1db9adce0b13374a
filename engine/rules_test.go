package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// rulesConfig: boss's echo calls need approval (the gate guard); the
// approvals rules say who may answer them.
const rulesConfig = pathsConfig + `
approvals:
  rules:
    - name: sre-approves-echo
      when: 'tool == "echo"'
      approvers: 'approver in ["sre", "alice", "bob"]'
`

const quorumConfig = pathsConfig + `
approvals:
  rules:
    - name: two-for-echo
      when: 'tool == "echo" && args.text == "ran"'
      quorum: 2
`

const selfConfig = pathsConfig + `
approvals:
  self_approval: deny
`

const expiryConfig = `
agents:
  boss:
    tools: [echo]
    approval_timeout: 1h
approvals:
  rules:
    - name: echo-expires
      when: 'tool == "echo"'
      timeout: 30m
      quorum: 2
`

// withApprovals gives the engine the approvals rules of doc.
func withApprovals(t testing.TB, doc string) func(*engine.Config) {
	t.Helper()
	cf, err := config.Parse("noeta.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *engine.Config) { c.Approvals = cf.Approvals }
}

// records collects the types of every committed record, as an observer
// sees them.
type records struct {
	mu  sync.Mutex
	got []eventlog.Envelope
}

func (r *records) handle(_ context.Context, env eventlog.Envelope) error {
	r.mu.Lock()
	r.got = append(r.got, env)
	r.mu.Unlock()
	return nil
}

func (r *records) of(typ string) []eventlog.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []eventlog.Envelope
	for _, e := range r.got {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// waitOpen waits until the task is suspended on an approval (again) and
// the dispatcher has it suspended, and returns its state.
func waitOpen(t testing.TB, h *harness, id string, cond func(*engine.State) bool) *engine.State {
	t.Helper()
	st := h.waitFor(id, "the approval to be open", func(s *engine.State) bool {
		return s.Status == noeta.StatusSuspended && s.Reason == engine.ReasonWaitingApproval && (cond == nil || cond(s))
	})
	h.waitReleased(id, eventlog.DispatchSuspended)
	return st
}

// answer delivers an answer as a dispatcher does (the NATS approval
// subject, the timer): straight to Dispatcher.Wake, with no pre-check.
func answer(t testing.TB, h *harness, id, handle, approver, auth string, d noeta.ApprovalDecision, text string) {
	t.Helper()
	w := noeta.HumanResponseWake(handle)
	w.Decision, w.Approver, w.Auth, w.Text = string(d), approver, auth, text
	if _, err := h.b.disp.Wake(context.Background(), id, w); err != nil {
		t.Fatalf("wake %s by %s: %v", handle, approver, err)
	}
}

func pendingOf(st *engine.State) noeta.PendingApproval {
	for _, pa := range st.Governance.PendingApprovals {
		return pa
	}
	return noeta.PendingApproval{}
}

// TestApproverNotAllowed: an answer from an approver the rules do not
// allow is refused before anything is sent when it comes in process
// (ErrApproverNotAllowed), and recorded as ApprovalRefused (an observer
// sees it) when it arrives as a wake; either way the request stays open,
// the task waits on it again, and an allowed approver then resolves it.
//
// Before: any approver string resolved any approval.
func TestApproverNotAllowed(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, rulesConfig, withGuards(gate("tool_call")), withApprovals(t, rulesConfig))
			seen := &records{}
			sub := b.log.Subscribe(seen.handle)
			t.Cleanup(sub.Cancel)
			h.start(1)
			ctx := context.Background()
			id := h.submit(nowApproval)
			st := waitOpen(t, h, id, nil)
			handle := st.WakeOn.Handle
			if pa := pendingOf(st); !slices.Equal(pa.Rules, []string{"sre-approves-echo"}) {
				t.Fatalf("the request's rules %v; want [sre-approves-echo]", pa.Rules)
			}

			err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "mallory", "let me", noeta.AuthLocal)
			if !errors.Is(err, engine.ErrApproverNotAllowed) || !strings.Contains(err.Error(), "rule sre-approves-echo") {
				t.Fatalf("Approve by mallory = %v; want ErrApproverNotAllowed naming the rule", err)
			}
			// The same answer on the broker's path: the woken task refuses it.
			answer(t, h, id, handle, "mallory", noeta.AuthNATS, noeta.ApprovalApprove, "let me")
			st = waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
			if st.WakeOn.Handle != handle || st.Governance.ToolCalls != 0 || len(st.Governance.Approvals) != 0 {
				t.Fatalf("after the refusal: waits on %v, %d calls, approvals %v; want the same request open and nothing run", st.WakeOn, st.Governance.ToolCalls, st.Governance.Approvals)
			}
			refused := payload[noeta.ApprovalRefused](t, h.log(id), noeta.TypeApprovalRefused)
			if refused.Approver != "mallory" || refused.Auth != noeta.AuthNATS || !strings.Contains(refused.Reason, "rule sre-approves-echo allows only") || refused.Text != "let me" {
				t.Fatalf("ApprovalRefused = %+v", refused)
			}
			if n := len(seen.of(noeta.TypeApprovalRefused)); n != 1 {
				t.Fatalf("the observer saw %d ApprovalRefused; want 1", n)
			}
			// A deny from someone not allowed is refused too.
			answer(t, h, id, handle, "mallory", noeta.AuthNATS, noeta.ApprovalDeny, "no")
			waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 2 })

			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "sre", "fine", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			st = h.waitStatus(id, noeta.StatusTerminal)
			res := payload[noeta.ApprovalResolved](t, h.log(id), noeta.TypeApprovalResolved)
			if st.Governance.ToolCalls != 1 || res.Approver != "sre" || res.Auth != noeta.AuthLocal || res.Decision != noeta.ApprovalApprove {
				t.Fatalf("resolved %+v, %d calls; want approved by sre (local) and the call run", res, st.Governance.ToolCalls)
			}
			if got := h.eng.RefusedApprovals(); got != 2 {
				t.Errorf("RefusedApprovals = %d; want 2", got)
			}
		})
	}
}

// TestQuorum: a two-person rule runs the call only after the second
// distinct approver; the same approver twice counts once (the second is
// refused); the resolution names both.
func TestQuorum(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
			h.start(1)
			ctx := context.Background()
			id := h.submit(nowApproval)
			st := waitOpen(t, h, id, nil)
			handle := st.WakeOn.Handle
			if q := pendingOf(st).Quorum; q != 2 {
				t.Fatalf("quorum %d; want 2", q)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "one", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			st = waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
			if st.Governance.ToolCalls != 0 {
				t.Fatalf("the call ran after one approval of two")
			}
			c := payload[noeta.ApprovalCounted](t, h.log(id), noeta.TypeApprovalCounted)
			if c.Approver != "alice" || c.Approvals != 1 || c.Quorum != 2 || c.Auth != noeta.AuthLocal {
				t.Fatalf("ApprovalCounted = %+v", c)
			}
			// alice again: refused up front, and by the task on a wake.
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "two", noeta.AuthLocal); !errors.Is(err, engine.ErrApproverNotAllowed) {
				t.Fatalf("alice's second approval = %v; want ErrApproverNotAllowed", err)
			}
			answer(t, h, id, handle, "alice", noeta.AuthNATS, noeta.ApprovalApprove, "two")
			st = waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
			if pa := pendingOf(st); len(pa.Approvers) != 1 || st.Governance.ToolCalls != 0 {
				t.Fatalf("after alice twice: approvers %v, %d calls; want alice counted once and nothing run", pa.Approvers, st.Governance.ToolCalls)
			}
			if r := payload[noeta.ApprovalRefused](t, h.log(id), noeta.TypeApprovalRefused); !strings.Contains(r.Reason, "approved this request already") {
				t.Fatalf("refusal reason %q", r.Reason)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "bob", "three", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			st = h.waitStatus(id, noeta.StatusTerminal)
			res := payload[noeta.ApprovalResolved](t, h.log(id), noeta.TypeApprovalResolved)
			if st.Governance.ToolCalls != 1 || res.Approver != "bob" || !slices.Equal(res.Approvers, []string{"alice", "bob"}) {
				t.Fatalf("resolved %+v with %d calls; want approved by alice and bob, the call run once", res, st.Governance.ToolCalls)
			}
		})
	}
}

// TestSelfApprovalRefused: with self_approval: deny the submitter of a task
// may not answer its approvals; anyone else may.
func TestSelfApprovalRefused(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), selfConfig, withGuards(gate("tool_call")), withApprovals(t, selfConfig))
	h.start(1)
	ctx := context.Background()
	id, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "ask now", SubmittedBy: "cli:bob",
		Script: json.RawMessage(`[{"tool_calls":[{"tool":"echo","args":{"text":"ran"}}]},{"finish":{"answer":"done"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	st := waitOpen(t, h, id, nil)
	if st.SubmittedBy != "cli:bob" {
		t.Fatalf("SubmittedBy %q", st.SubmittedBy)
	}
	handle := st.WakeOn.Handle
	if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "cli:bob", "mine", noeta.AuthLocal); !errors.Is(err, engine.ErrApproverNotAllowed) || !strings.Contains(err.Error(), "submitted this task") {
		t.Fatalf("self-approval = %v; want ErrApproverNotAllowed", err)
	}
	answer(t, h, id, handle, "cli:bob", noeta.AuthLocal, noeta.ApprovalApprove, "mine")
	waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
	if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "cli:alice", "ok", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	if st := h.waitStatus(id, noeta.StatusTerminal); st.Governance.ToolCalls != 1 {
		t.Fatalf("%d calls; want the call run after alice's approval", st.Governance.ToolCalls)
	}
}

// TestUnauthenticatedRefused: with RequireAuthenticatedApprovals, an answer
// whose auth is none (a plain wake) or missing is refused and recorded; the
// request stays open.
func TestUnauthenticatedRefused(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")), func(c *engine.Config) { c.RequireAuthenticatedApprovals = true })
			h.start(1)
			ctx := context.Background()
			id := h.submit(nowApproval)
			handle := waitOpen(t, h, id, nil).WakeOn.Handle
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "ops", "trust me", noeta.AuthNone); !errors.Is(err, engine.ErrApproverNotAllowed) {
				t.Fatalf("Approve with auth none = %v; want ErrApproverNotAllowed", err)
			}
			for i, auth := range []string{noeta.AuthNone, ""} {
				answer(t, h, id, handle, "ops", auth, noeta.ApprovalApprove, "trust me")
				waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == i+1 })
			}
			r := payload[noeta.ApprovalRefused](t, h.log(id), noeta.TypeApprovalRefused)
			if !strings.Contains(r.Reason, "proves nothing about who gave it") || r.Auth != noeta.AuthNone {
				t.Fatalf("ApprovalRefused = %+v", r)
			}
			answer(t, h, id, handle, "alice", noeta.AuthNATS, noeta.ApprovalApprove, "signed")
			if st := h.waitStatus(id, noeta.StatusTerminal); st.Governance.ToolCalls != 1 {
				t.Fatalf("%d calls after an authenticated approval; want 1", st.Governance.ToolCalls)
			}
		})
	}
}

// TestExpiry: the request's expiry is the smallest of the matching rules'
// timeouts and the agent's, in engine time; the task suspends on it with
// ExpireAt (and again, unchanged, after a counted approval); the timer's
// answer resolves it denied by timeout once, and the policy decides again
// (here: the script's next turn finishes). The timeout is delivered as the
// dispatcher's timer delivers it.
func TestExpiry(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			// The engine's clock sets the deadline and the broker's fires it: a
			// deadline 30 minutes ahead of both never fires in the test.
			now := time.Now().UTC().Truncate(time.Second)
			h := newHarness(t, b, expiryConfig, withGuards(gate("tool_call")), withApprovals(t, expiryConfig),
				func(c *engine.Config) { c.Now = func() time.Time { return now } })
			h.start(1)
			ctx := context.Background()
			id := h.submit(strings.Replace(nowApproval, "boss", "boss", 1))
			st := waitOpen(t, h, id, nil)
			handle := st.WakeOn.Handle
			want := now.Add(30 * time.Minute)
			if pa := pendingOf(st); !pa.ExpiresAt.Equal(want) || !st.WakeOn.ExpireAt.Equal(want) {
				t.Fatalf("expires %v, suspended with ExpireAt %v; want both %v", pa.ExpiresAt, st.WakeOn.ExpireAt, want)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "one of two", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			st = waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
			if !st.WakeOn.ExpireAt.Equal(want) {
				t.Fatalf("after a counted approval the task waits with ExpireAt %v; want the same %v", st.WakeOn.ExpireAt, want)
			}
			answer(t, h, id, handle, noeta.ApproverTimeout, noeta.AuthTimer, noeta.ApprovalDeny, "no answer before "+want.Format(time.RFC3339))
			st = h.waitStatus(id, noeta.StatusTerminal)
			if st.Status != noeta.StatusTerminal || string(st.Answer) != `"done"` || st.Governance.ToolCalls != 0 {
				t.Fatalf("after the expiry: %s answer %s calls %d; want the call never run and the next turn finishing", st.Status, st.Answer, st.Governance.ToolCalls)
			}
			// The timer fires once more (a redelivery): nothing is open.
			w := noeta.HumanResponseWake(handle)
			w.Decision, w.Approver, w.Auth = "deny", noeta.ApproverTimeout, noeta.AuthTimer
			if _, err := h.b.disp.Wake(ctx, id, w); err == nil {
				t.Fatalf("a second timer answer was taken")
			}
			envs := h.log(id)
			var resolved []noeta.ApprovalResolved
			for _, e := range envs {
				if e.Type == noeta.TypeApprovalResolved {
					var r noeta.ApprovalResolved
					_ = json.Unmarshal(e.Payload, &r)
					resolved = append(resolved, r)
				}
			}
			if len(resolved) != 1 || resolved[0].Approver != noeta.ApproverTimeout || resolved[0].Auth != noeta.AuthTimer || resolved[0].Decision != noeta.ApprovalDeny {
				t.Fatalf("resolutions %+v; want one, denied by timeout (timer)", resolved)
			}
		})
	}
}

// TestTimerAnswerNeedsExpiry: an answer that claims to be the timer's for a
// request that does not expire is refused, not taken as a denial; an answer
// that names the expiry's approver without its auth is refused too. In
// process, neither can be sent at all.
func TestTimerAnswerNeedsExpiry(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig, withGuards(gate("tool_call")))
	h.start(1)
	ctx := context.Background()
	id := h.submit(nowApproval)
	handle := waitOpen(t, h, id, nil).WakeOn.Handle
	for _, a := range [][2]string{{noeta.ApproverTimeout, noeta.AuthLocal}, {"alice", noeta.AuthTimer}} {
		if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalDeny, a[0], "", a[1]); !errors.Is(err, eventlog.ErrInvalidArgument) {
			t.Fatalf("Approve as %v = %v; want ErrInvalidArgument", a, err)
		}
	}
	answer(t, h, id, handle, noeta.ApproverTimeout, noeta.AuthTimer, noeta.ApprovalDeny, "forged")
	waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
	answer(t, h, id, handle, noeta.ApproverTimeout, noeta.AuthLocal, noeta.ApprovalDeny, "forged")
	st := waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 2 })
	if len(st.Governance.Approvals) != 0 {
		t.Fatalf("a forged timer answer resolved the request: %+v", st.Governance.Approvals)
	}
}

// TestComposedResolutions: the model reads who decided (both approvers of
// a quorum) and that an expired request was refused; counted and refused
// answers are not in its context.
func TestComposedResolutions(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
	h.start(1)
	id := h.submit(nowApproval)
	handle := waitOpen(t, h, id, nil).WakeOn.Handle
	answer(t, h, id, handle, "alice", noeta.AuthNATS, noeta.ApprovalApprove, "")
	waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
	answer(t, h, id, handle, "alice", noeta.AuthNATS, noeta.ApprovalApprove, "again")
	waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
	answer(t, h, id, handle, "bob", noeta.AuthNATS, noeta.ApprovalApprove, "")
	st := h.waitStatus(id, noeta.StatusTerminal)
	var all strings.Builder
	for _, m := range st.Context.Transcript().Messages {
		all.WriteString(m.Text + "\n")
	}
	if !strings.Contains(all.String(), "approved by alice and bob") || strings.Contains(all.String(), "again") || strings.Contains(all.String(), "already") {
		t.Fatalf("context:\n%s", all.String())
	}
}

// TestUnauthenticatedWhereAllowed: without RequireAuthenticatedApprovals
// an answer with auth none resolves a request of quorum 1, its resolution
// recording no auth (none is not a way of being authenticated, and the
// schema has no such value), but never counts toward a quorum.
//
// A resolution carrying auth "none" is refused by the JetStream log's
// schema check, and the task's segment would fail on every retry (seen
// first in cmd/engine's TestServeRunsConfiguredObserversOnACluster, whose
// approval arrives without auth).
func TestUnauthenticatedWhereAllowed(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
			h.start(1)
			// echo "other" matches no rule: quorum 1.
			id := h.submit(strings.Replace(nowApproval, `text: "ran"`, `text: "other"`, 1))
			handle := waitOpen(t, h, id, nil).WakeOn.Handle
			answer(t, h, id, handle, "ops", noeta.AuthNone, noeta.ApprovalApprove, "plain")
			h.waitStatus(id, noeta.StatusTerminal)
			if res := payload[noeta.ApprovalResolved](t, h.log(id), noeta.TypeApprovalResolved); res.Auth != "" || res.Approver != "ops" {
				t.Fatalf("resolved %+v; want approved by ops, no auth recorded", res)
			}

			id = h.submit(nowApproval)
			handle = waitOpen(t, h, id, nil).WakeOn.Handle
			answer(t, h, id, handle, "ops", noeta.AuthNone, noeta.ApprovalApprove, "plain")
			st := waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
			if len(pendingOf(st).Approvers) != 0 {
				t.Fatalf("an unauthenticated approval was counted toward a quorum")
			}
		})
	}
}

// TestSelfApprovalInherited: a subtask's submitter is its root's, so the
// person who submitted a tree may not approve what its subtasks ask either.
func TestSelfApprovalInherited(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), selfConfig, withGuards(gate("tool_call")), withApprovals(t, selfConfig))
	h.start(2)
	ctx := context.Background()
	root, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "delegate", SubmittedBy: "cli:bob",
		Script: json.RawMessage(`[{"spawn":[{"agent":"helper","goal":"echo","script":[{"tool_calls":[{"tool":"echo","args":{"text":"x"}}]},{"finish":{"answer":"hi"}}]}]},{"finish":{"answer":"done"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	st := h.waitFor(root, "the spawn", func(s *engine.State) bool { return len(s.Turn.Spawned) == 1 })
	child := st.Turn.Spawned[0]
	cst := waitOpen(t, h, child, nil)
	if cst.SubmittedBy != "cli:bob" {
		t.Fatalf("the child's submitter is %q; want the root's, cli:bob", cst.SubmittedBy)
	}
	if err := h.eng.Approve(ctx, child, cst.WakeOn.Handle, noeta.ApprovalApprove, "cli:bob", "", noeta.AuthLocal); !errors.Is(err, engine.ErrApproverNotAllowed) {
		t.Fatalf("the root's submitter approving the child's request: %v; want ErrApproverNotAllowed", err)
	}
	if err := h.eng.Approve(ctx, child, cst.WakeOn.Handle, noeta.ApprovalApprove, "cli:alice", "", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	if st := h.waitStatus(root, noeta.StatusTerminal); string(st.Answer) != `"done"` {
		t.Fatalf("root answer %s", st.Answer)
	}
}

// TestRefusedRecordsCapped: past MaxRefusedPerRequest refused answers to
// one request, a refusal is counted but not recorded, so a flood of
// answers from someone not allowed cannot grow the log without end; the
// request stays open and an allowed answer still resolves it.
func TestRefusedRecordsCapped(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), rulesConfig, withGuards(gate("tool_call")), withApprovals(t, rulesConfig))
	h.start(1)
	id := h.submit(nowApproval)
	handle := waitOpen(t, h, id, nil).WakeOn.Handle
	n := engine.MaxRefusedPerRequest + 3
	for i := range n {
		answer(t, h, id, handle, "mallory", noeta.AuthNATS, noeta.ApprovalApprove, "")
		h.waitFor(id, "the refusal", func(s *engine.State) bool { return s.LastWake != nil && s.Status == noeta.StatusSuspended })
		h.waitReleased(id, eventlog.DispatchSuspended)
		if got := h.eng.RefusedApprovals(); got != uint64(i+1) {
			// The engine counts each one once it has judged it.
			h.waitFor(id, "the count", func(*engine.State) bool { return h.eng.RefusedApprovals() == uint64(i+1) })
		}
	}
	st, _ := h.eng.Inspect(context.Background(), id)
	if r := pendingOf(st).Refused; r != engine.MaxRefusedPerRequest {
		t.Fatalf("%d ApprovalRefused recorded; want the cap, %d", r, engine.MaxRefusedPerRequest)
	}
	if got := h.eng.RefusedApprovals(); got != uint64(n) {
		t.Fatalf("RefusedApprovals = %d; want %d", got, n)
	}
	answer(t, h, id, handle, "sre", noeta.AuthNATS, noeta.ApprovalApprove, "")
	if st := h.waitStatus(id, noeta.StatusTerminal); st.Governance.ToolCalls != 1 {
		t.Fatalf("%d calls", st.Governance.ToolCalls)
	}
}

// TestQuorumBackToBack: the second approver of a quorum answers while the
// first approval is still being judged (the task not yet suspended again).
// Before, the dispatcher's "answered first" refusal reached that approver as
// ErrAlreadyAnswered although the request was still open; now Approve waits
// for the task to wait again and the second approval resolves it.
func TestQuorumBackToBack(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
			h.start(1)
			ctx := context.Background()
			id := h.submit(nowApproval)
			handle := waitOpen(t, h, id, nil).WakeOn.Handle
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "one", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "bob", "two", noeta.AuthLocal); err != nil {
				t.Fatalf("bob's approval right after alice's = %v; want taken", err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			res := payload[noeta.ApprovalResolved](t, h.log(id), noeta.TypeApprovalResolved)
			if st.Governance.ToolCalls != 1 || !slices.Equal(res.Approvers, []string{"alice", "bob"}) {
				t.Fatalf("resolved %+v with %d calls; want approved by alice and bob, the call run once", res, st.Governance.ToolCalls)
			}
		})
	}
}

// TestQuorumOverApprovalSubjects: two approvers of a quorum answer on their
// own approval subjects back to back, the second while the first is being
// judged. Before, the dispatcher dropped the second as "answered first" (the
// row had the first answer in hand), so the request stayed open although two
// people had approved; now it is held on the ingress until the task waits
// again, and resolves the request.
func TestQuorumOverApprovalSubjects(t *testing.T) {
	b := jsBackend(t, 2*time.Second)
	h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
	h.start(1)
	ctx := context.Background()
	id := h.submit(nowApproval)
	handle := waitOpen(t, h, id, nil).WakeOn.Handle
	for _, who := range []string{"alice", "bob"} {
		p, err := jetstream.NewApprovalPublisher(b.nc, b.prefix, who)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Answer(ctx, id, handle, noeta.ApprovalApprove, "yes"); err != nil {
			t.Fatalf("%s answers: %v", who, err)
		}
	}
	st := h.waitStatus(id, noeta.StatusTerminal)
	res := payload[noeta.ApprovalResolved](t, h.log(id), noeta.TypeApprovalResolved)
	if st.Governance.ToolCalls != 1 || !slices.Equal(res.Approvers, []string{"alice", "bob"}) || res.Auth != noeta.AuthNATS {
		t.Fatalf("resolved %+v with %d calls; want approved by alice and bob over nats, the call run once", res, st.Governance.ToolCalls)
	}
}

// TestQuorumOnePersonTwoDoors: a two-person quorum is not met by one person
// approving as cli:alice and again as the NATS approver Alice. Before, the
// approvers were compared as strings, so the second door counted as a
// second person and the call ran on one person's word.
func TestQuorumOnePersonTwoDoors(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig))
	h.start(1)
	id := h.submit(nowApproval)
	handle := waitOpen(t, h, id, nil).WakeOn.Handle
	answer(t, h, id, handle, "cli:alice", noeta.AuthLocal, noeta.ApprovalApprove, "one")
	waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
	answer(t, h, id, handle, "Alice", noeta.AuthNATS, noeta.ApprovalApprove, "two")
	st := waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == 1 })
	if pa := pendingOf(st); len(pa.Approvers) != 1 || st.Governance.ToolCalls != 0 {
		t.Fatalf("approvers %v, %d calls; want one approver and nothing run", pa.Approvers, st.Governance.ToolCalls)
	}
}

// TestHostileApproverNames: names are compared after one normalisation
// (approvals.Approver). Before, CLI:bob passed self_approval: deny for the
// submitter cli:bob, and cli:cli:alice, ALICE and alice with a zero-width
// space each counted as another person toward a quorum alice had voted in.
func TestHostileApproverNames(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			doc := quorumConfig + "  self_approval: deny\n"
			h := newHarness(t, b, doc, withGuards(gate("tool_call")), withApprovals(t, doc))
			h.start(1)
			ctx := context.Background()
			id, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "ask now", SubmittedBy: "cli:bob",
				Script: json.RawMessage(`[{"tool_calls":[{"tool":"echo","args":{"text":"ran"}}]},{"finish":{"answer":"done"}}]`)})
			if err != nil {
				t.Fatal(err)
			}
			handle := waitOpen(t, h, id, nil).WakeOn.Handle
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "CLI:bob", "mine", noeta.AuthLocal); !errors.Is(err, engine.ErrApproverNotAllowed) {
				t.Fatalf("CLI:bob approving cli:bob's task = %v; want ErrApproverNotAllowed", err)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "ali\u200bce", "hidden", noeta.AuthLocal); !errors.Is(err, eventlog.ErrInvalidArgument) {
				t.Fatalf("a name with a zero-width space = %v; want ErrInvalidArgument", err)
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "one", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
			// Delivered as a dispatcher would, past every pre-check: the task
			// refuses each and records why.
			for i, name := range []string{"CLI:bob", "cli:cli:alice", "ALICE", "ali\u200bce", "ａｌｉｃｅ", "Timeout"} {
				answer(t, h, id, handle, name, noeta.AuthNATS, noeta.ApprovalApprove, "again")
				st := waitOpen(t, h, id, func(s *engine.State) bool { return pendingOf(s).Refused == i+1 })
				if pa := pendingOf(st); len(pa.Approvers) != 1 || st.Governance.ToolCalls != 0 {
					t.Fatalf("after %q: approvers %q, %d calls; want alice alone and nothing run", name, pa.Approvers, st.Governance.ToolCalls)
				}
			}
			for _, e := range h.log(id) {
				if p, _, err := e.Decode(); err == nil {
					if r, ok := p.(*noeta.ApprovalRefused); ok && strings.ContainsRune(r.Approver, '\u200b') {
						t.Errorf("a refusal records the name with its zero-width space raw: %+q", r.Approver)
					}
				}
			}
			if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "carol", "two", noeta.AuthLocal); err != nil {
				t.Fatal(err)
			}
			if st := h.waitStatus(id, noeta.StatusTerminal); st.Governance.ToolCalls != 1 {
				t.Fatalf("%d calls; want the call run once alice and carol approved", st.Governance.ToolCalls)
			}
		})
	}
}

// questionConfig: self-approval denied; a rule lets only sre and bob
// answer questions.
const questionConfig = pathsConfig + `
approvals:
  self_approval: deny
  rules:
    - name: sre-answers-questions
      when: 'action == "question"'
      approvers: 'approver in ["sre", "bob"]'
`

// TestQuestionObeysRules: a reply to a model's question meets the approvals
// rules, self-approval and authentication as an approval does: refused, it
// is recorded and the task asks again; an allowed reply goes on.
//
// Before: a question's reply was taken from anyone: the submitter answered
// their own task's question under self_approval: deny (over HTTP), and an
// unauthenticated plain wake answered one where approvals had to be
// authenticated.
func TestQuestionObeysRules(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, questionConfig, withApprovals(t, questionConfig),
				func(c *engine.Config) { c.RequireAuthenticatedApprovals = true })
			h.start(1)
			ctx := context.Background()
			id, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "ask", SubmittedBy: "cli:bob",
				Script: json.RawMessage(`[{"yield_for_human":{"question":"which branch?"}},{"finish":{"answer":"done"}}]`)})
			if err != nil {
				t.Fatal(err)
			}
			asked := func(refused int) {
				t.Helper()
				h.waitFor(id, "the question asked", func(s *engine.State) bool {
					return s.Status == noeta.StatusSuspended && s.WakeOn != nil && s.WakeOn.Handle == "question-1" &&
						s.Reason == "waiting_human: which branch?" && countRefused(h, id) == refused
				})
				h.waitReleased(id, eventlog.DispatchSuspended)
			}
			asked(0)
			// In process: refused before anything is sent.
			for _, who := range []string{"cli:bob", "Bob", "alice"} {
				if err := h.eng.Approve(ctx, id, "question-1", noeta.ApprovalApprove, who, "main", noeta.AuthToken); !errors.Is(err, engine.ErrApproverNotAllowed) {
					t.Fatalf("%s's reply in process = %v; want ErrApproverNotAllowed", who, err)
				}
			}
			// As a dispatcher delivers them: refused by the woken task,
			// recorded, and the question asked again.
			for i, tc := range []struct{ who, auth, why string }{
				{"sre", noeta.AuthNone, "proves nothing"},
				{"cli:bob", noeta.AuthToken, "submitted this task"},
				{"BOB", noeta.AuthNATS, "submitted this task"},
				{"alice", noeta.AuthNATS, "rule sre-answers-questions"},
			} {
				answer(t, h, id, "question-1", tc.who, tc.auth, noeta.ApprovalApprove, "main")
				asked(i + 1)
				var last *noeta.ApprovalRefused
				for _, e := range h.log(id) {
					if p, _, err := e.Decode(); err == nil {
						if r, ok := p.(*noeta.ApprovalRefused); ok {
							last = r
						}
					}
				}
				if last == nil || !strings.Contains(last.Reason, tc.why) || last.Handle != "question-1" {
					t.Fatalf("refusal of %s (%s): %+v; want one saying %q", tc.who, tc.auth, last, tc.why)
				}
			}
			if st, _ := h.eng.Inspect(ctx, id); st.Turn.N != 1 {
				t.Fatalf("turn %d after the refused replies; want still 1 (nothing decided on them)", st.Turn.N)
			}
			if err := h.eng.Approve(ctx, id, "question-1", noeta.ApprovalApprove, "sre", "main", noeta.AuthToken); err != nil {
				t.Fatal(err)
			}
			if st := h.waitStatus(id, noeta.StatusTerminal); string(st.Answer) != `"done"` {
				t.Fatalf("answer %s after sre's reply; want done\n%s", st.Answer, h.dump(id))
			}
		})
	}
}

func countRefused(h *harness, id string) int {
	n := 0
	for _, e := range h.log(id) {
		if e.Type == noeta.TypeApprovalRefused {
			n++
		}
	}
	return n
}

// TestRefusedRepliesBounded: a flood of replies the rules refuse (here,
// unauthenticated ones on a plain wake) records MaxRefusedPerRequest
// refusals and no more, as refused answers to an approval do. Before, every
// refused reply to a question added an ApprovalRefused record without end.
func TestRefusedRepliesBounded(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, questionConfig, withApprovals(t, questionConfig),
				func(c *engine.Config) { c.RequireAuthenticatedApprovals = true })
			h.start(1)
			ctx := context.Background()
			id, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "ask", SubmittedBy: "cli:bob",
				Script: json.RawMessage(`[{"yield_for_human":{"question":"which branch?"}},{"finish":{"answer":"done"}}]`)})
			if err != nil {
				t.Fatal(err)
			}
			suspends := func() int {
				n := 0
				for _, e := range h.log(id) {
					if e.Type == noeta.TypeTaskSuspended {
						n++
					}
				}
				return n
			}
			asked := func(times int) {
				t.Helper()
				h.waitFor(id, "the question asked", func(s *engine.State) bool {
					return s.Status == noeta.StatusSuspended && s.WakeOn != nil && s.WakeOn.Handle == "question-1" && suspends() == times
				})
				h.waitReleased(id, eventlog.DispatchSuspended)
			}
			asked(1)
			const flood = engine.MaxRefusedPerRequest + 4
			for i := range flood {
				answer(t, h, id, "question-1", "sre", noeta.AuthNone, noeta.ApprovalApprove, "main")
				asked(i + 2)
			}
			if n := countRefused(h, id); n != engine.MaxRefusedPerRequest {
				t.Fatalf("%d refused replies recorded after %d sent; want %d", n, flood, engine.MaxRefusedPerRequest)
			}
			if err := h.eng.Approve(ctx, id, "question-1", noeta.ApprovalApprove, "sre", "main", noeta.AuthToken); err != nil {
				t.Fatal(err)
			}
			if st := h.waitStatus(id, noeta.StatusTerminal); string(st.Answer) != `"done"` {
				t.Fatalf("answer %s after sre's reply; want done\n%s", st.Answer, h.dump(id))
			}
		})
	}
}
