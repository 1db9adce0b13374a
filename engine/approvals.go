package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
)

// MaxRefusedPerRequest bounds the ApprovalRefused records of one request:
// past it a refused answer is logged and counted (RefusedApprovals) only,
// so a flood of answers from someone not allowed cannot grow the log
// without end.
const MaxRefusedPerRequest = 16

// msgUnauthenticated is the reason an answer that proves nothing about who
// gave it is refused.
const msgUnauthenticated = "an approval on a plain wake proves nothing about who gave it; answer on your approval subject or through the HTTP API"

func validAuth(a string) bool {
	switch a {
	case "", noeta.AuthNATS, noeta.AuthToken, noeta.AuthProxy, noeta.AuthLocal, noeta.AuthNone, noeta.AuthElicitation, noeta.AuthClientPrompt:
		return true
	}
	return false
}

// answerer is the name of who gave w in its one form, whichever door it
// came through, as it is compared and recorded (approvals.Approver); a name
// that refuses is returned escaped with the refusal, so that what it hides
// shows in the log.
func answerer(w noeta.Wake) (string, error) {
	raw := w.Approver
	if raw == "" {
		raw = "unknown"
	}
	approver, err := approvals.Approver(raw)
	if err != nil {
		return truncate(strconv.QuoteToASCII(raw), maxErrorLen), err
	}
	return approver, nil
}

// judgement is what one answer to an open approval comes to: exactly one of
// a refusal, a count toward the quorum, or a resolution; or, for an answer
// received after the request expired (late), the refusal of the answer
// and the request's resolution as denied by timeout.
type judgement struct {
	refused  *noeta.ApprovalRefused
	counted  *noeta.ApprovalCounted
	resolved *noeta.ApprovalResolved
	late     bool
}

// receivedAt is when the answer w was received, by the clock that decides
// it against an expiry: the ReceivedAt its dispatcher stamped (the broker's
// timestamp of the message, or the in-process dispatcher's clock; never the
// sender's), or, when nothing stamped it, now, the judge's clock, which is
// never earlier than the answer's arrival: an answer nobody dated is
// taken to be as late as it can be shown to be.
func (e *Engine) receivedAt(w noeta.Wake) time.Time {
	if !w.ReceivedAt.IsZero() {
		return w.ReceivedAt
	}
	return e.cfg.Now()
}

// expiredBefore returns the judgement of an answer received at at, on or
// after pa's deadline: refused, and the request resolved as its timer
// would have, denied by timeout. The deadline recorded on the request
// decides, not which of the answer and the timer reaches the task first:
// with no engine running at the deadline, or the timer's whole-second
// rounding, a late answer used to get there first and was taken.
func expiredBefore(pa noeta.PendingApproval, w noeta.Wake, at time.Time, refused noeta.ApprovalRefused) judgement {
	deadline := pa.ExpiresAt.UTC().Format(time.RFC3339Nano)
	refused.Reason = truncate(fmt.Sprintf("received at %s, after the request expired at %s: an answer counts only if it arrives before the deadline", at.UTC().Format(time.RFC3339Nano), deadline), maxErrorLen)
	return judgement{
		late:    true,
		refused: &refused,
		resolved: &noeta.ApprovalResolved{Handle: w.Handle, Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer,
			Reason: "no answer before " + pa.ExpiresAt.UTC().Format(time.RFC3339) + " (an answer received after it is refused)"},
	}
}

// approvalRequest is what the approvals rules read of an open request.
func (e *Engine) approvalRequest(ctx context.Context, st *State, pa noeta.PendingApproval) (approvals.Request, error) {
	args := pa.Args
	if pa.ArgsRef != nil {
		b, err := e.cfg.Content.Get(ctx, *pa.ArgsRef)
		if err != nil {
			return approvals.Request{}, fmt.Errorf("engine: task %s: the arguments of an approval request: %w", st.Task, err)
		}
		args = b
	}
	return approvals.Request{
		Task: st.Task, Agent: st.Agent, Action: string(pa.Action), Tool: pa.Tool, Args: args,
		Guard: pa.Guard, Reason: pa.Reason, Submitter: st.SubmittedBy, ChildAgent: pa.Agent,
	}, nil
}

// judge decides what answer w to the open request pa comes to. It reads
// only the folded state, the rules and w, so a caller in process can judge
// an answer before it wakes the task (Approve) and the woken task judges it
// again the same way (afterWake), which is the authority.
func (e *Engine) judge(ctx context.Context, st *State, pa noeta.PendingApproval, w noeta.Wake) (judgement, error) {
	decision := noeta.ApprovalDecision(w.Decision)
	text := w.Text
	if decision != noeta.ApprovalApprove && decision != noeta.ApprovalDeny {
		decision, text = noeta.ApprovalDeny, fmt.Sprintf("unrecognised decision %q: taken as deny", w.Decision)
	}
	approver, nameErr := answerer(w)
	auth := w.Auth
	if auth == "" || auth != noeta.AuthTimer && !validAuth(auth) {
		// Whoever delivered it did not say, or said something unknown:
		// it proves nothing.
		auth = noeta.AuthNone
	}
	refuse := func(reason string) judgement {
		return judgement{refused: &noeta.ApprovalRefused{Handle: w.Handle, Decision: decision, Approver: approver, Auth: auth, Reason: truncate(reason, maxErrorLen), Text: truncate(w.Text, maxErrorLen)}}
	}
	if w.Auth == noeta.AuthTimer {
		if pa.ExpiresAt.IsZero() {
			return refuse("a timer answered a request that does not expire"), nil
		}
		reason := w.Text
		if reason == "" {
			reason = "no answer before " + pa.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return judgement{resolved: &noeta.ApprovalResolved{Handle: w.Handle, Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer, Reason: reason}}, nil
	}
	if nameErr != nil {
		return refuse(nameErr.Error()), nil
	}
	if approvals.Reserved(approver) {
		return refuse(fmt.Sprintf("the approver %q reads as %q, the expiry's own; only the request's timer answers as it", approver, noeta.ApproverTimeout)), nil
	}
	if at := e.receivedAt(w); !pa.ExpiresAt.IsZero() && !at.Before(pa.ExpiresAt) {
		return expiredBefore(pa, w, at, *refuse("").refused), nil
	}
	if auth == noeta.AuthNone && e.cfg.RequireAuthenticatedApprovals {
		return refuse(msgUnauthenticated), nil
	}
	req, err := e.approvalRequest(ctx, st, pa)
	if err != nil {
		return judgement{}, err
	}
	if err := e.cfg.Approvals.Check(req, pa.Rules, approver, auth); err != nil {
		return refuse(err.Error()), nil
	}
	res := &noeta.ApprovalResolved{Handle: w.Handle, Decision: decision, Approver: approver, Reason: text, Auth: auth}
	if auth == noeta.AuthNone {
		// A resolution records how its approver was authenticated, or
		// nothing: "none" is not a way of being authenticated.
		res.Auth = ""
	}
	if decision == noeta.ApprovalDeny {
		return judgement{resolved: res}, nil
	}
	quorum := max(pa.Quorum, 1)
	if quorum > 1 && auth == noeta.AuthNone {
		return refuse(fmt.Sprintf("a quorum of %d distinct approvers counts authenticated approvals only; %s", quorum, msgUnauthenticated)), nil
	}
	// One person answering through two doors (cli:alice, the NATS approver
	// alice, the token alice) is one approver of a quorum.
	if slices.ContainsFunc(pa.Approvers, func(a string) bool { return a == approver || approvals.SamePerson(a, approver) }) {
		return refuse(fmt.Sprintf("%s has approved this request already; it needs %d distinct approvers (%d so far)", approver, quorum, len(pa.Approvers))), nil
	}
	if n := len(pa.Approvers) + 1; n < quorum {
		return judgement{counted: &noeta.ApprovalCounted{Handle: w.Handle, Approver: approver, Auth: auth, Reason: text, Approvals: n, Quorum: quorum}}, nil
	}
	if quorum > 1 {
		res.Approvers = append(slices.Clone(pa.Approvers), approver)
	}
	return judgement{resolved: res}, nil
}

// recordAnswer records what the answer w to the open request pa comes to.
func (g *segment) recordAnswer(pa noeta.PendingApproval, w noeta.Wake) error {
	j, err := g.e.judge(g.ctx, g.st, pa, w)
	if err != nil {
		return err
	}
	if j.late {
		// The refusal first, so the log says whose answer came too late;
		// then the expiry. A crash between them leaves the request open
		// past its deadline, and the suspend that follows expires at once.
		g.e.refusedApprovals.Add(1)
		if pa.Refused < MaxRefusedPerRequest {
			if err := g.engineEmit(*j.refused); err != nil {
				return err
			}
		}
		j.refused = nil
	}
	switch {
	case j.resolved != nil:
		if err := g.engineEmit(*j.resolved); err != nil {
			return err
		}
		g.e.unindex(g.ctx, g.st.Task, w.Handle)
		return nil
	case j.counted != nil:
		if err := g.engineEmit(*j.counted); err != nil {
			return err
		}
	default:
		g.e.refusedApprovals.Add(1)
		if pa.Refused >= MaxRefusedPerRequest {
			g.e.log.Warn("refused an answer to an approval; not recorded: the request has had its share of refused answers",
				"task", g.st.Task, "handle", w.Handle, "approver", j.refused.Approver, "auth", j.refused.Auth, "reason", j.refused.Reason)
			return nil
		}
		if err := g.engineEmit(*j.refused); err != nil {
			return err
		}
	}
	g.e.index(g.ctx, g.st, w.Handle)
	return nil
}

// requirement fixes what the approvals rules ask of req: the rules that
// matched, the quorum and the expiry (engine time).
func (g *segment) requirement(req *noeta.ApprovalRequested, args []byte) {
	r := g.e.cfg.Approvals.Require(approvals.Request{
		Task: g.st.Task, Agent: g.st.Agent, Action: string(req.Action), Tool: req.Tool, Args: args,
		Guard: req.Guard, Reason: req.Reason, Submitter: g.st.SubmittedBy, ChildAgent: req.Agent,
	})
	for _, p := range r.Problems {
		g.e.log.Warn("an approvals rule's when failed to evaluate; the rule applies", "task", g.st.Task, "problem", p)
	}
	req.Rules = r.Rules
	if r.Quorum > 1 {
		req.Quorum = r.Quorum
	}
	if r.Timeout > 0 {
		req.ExpiresAt = g.e.cfg.Now().Add(r.Timeout).UTC().Truncate(time.Millisecond)
	}
}

// approvalWake is the condition a task waiting on the approval handle
// suspends on: its expiry goes with it, for the dispatcher to arm.
func (g *segment) approvalWake(handle string) noeta.Wake {
	w := noeta.HumanResponseWake(handle)
	if pa, ok := g.st.Governance.PendingApprovals[handle]; ok {
		w.ExpireAt = pa.ExpiresAt
	}
	return w
}

// The actions a rule's when sees for a reply that is not an approval: the
// answer to a model's question, and the resume of a parked task.
const (
	ActionQuestion = "question"
	ActionPark     = "park"
)

// replyRequest is what the approvals rules read of the question or park
// the task was suspended on (reason, as its TaskSuspended gave it) when a
// reply woke it.
func replyRequest(st *State, reason string) approvals.Request {
	req := approvals.Request{Task: st.Task, Agent: st.Agent, Action: ActionQuestion, Reason: reason, Submitter: st.SubmittedBy}
	if isParkReason(reason) {
		req.Action = ActionPark
	} else if q, ok := strings.CutPrefix(reason, reasonWaitingHuman); ok {
		req.Reason = q
	}
	return req
}

// reasonWaitingHuman prefixes the reason of a suspend on a model's question.
const reasonWaitingHuman = "waiting_human: "

// judgeReply decides whether w, a reply to the question or park the task
// was suspended on for reason, may be taken: nil if so, else the refusal
// to record. A reply meets what an answer to an approval meets: a name in
// its one form, not the expiry's, authenticated where the engine requires
// it, from someone other than the submitter under self_approval: deny,
// and allowed by the approvers of every rule whose when holds of it
// (action "question" or "park"). Quorums and timeouts are an approval's:
// one allowed reply answers a question. Before, a reply was taken from
// anyone: the submitter answered their own task's question under
// self_approval: deny, and a plain wake answered one where approvals had
// to be authenticated.
func (e *Engine) judgeReply(st *State, reason string, w noeta.Wake) *noeta.ApprovalRefused {
	approver, nameErr := answerer(w)
	auth := w.Auth
	if auth == "" || !validAuth(auth) {
		auth = noeta.AuthNone
	}
	decision := noeta.ApprovalDecision(w.Decision)
	if decision != noeta.ApprovalApprove {
		decision = noeta.ApprovalDeny
	}
	refuse := func(why string) *noeta.ApprovalRefused {
		return &noeta.ApprovalRefused{Handle: w.Handle, Decision: decision, Approver: approver, Auth: auth, Reason: truncate(why, maxErrorLen), Text: truncate(w.Text, maxErrorLen)}
	}
	switch {
	case w.Auth == noeta.AuthTimer:
		return refuse("a timer answered a question, which does not expire")
	case nameErr != nil:
		return refuse(nameErr.Error())
	case approvals.Reserved(approver):
		return refuse(fmt.Sprintf("the approver %q reads as %q, the expiry's own", approver, noeta.ApproverTimeout))
	case auth == noeta.AuthNone && e.cfg.RequireAuthenticatedApprovals:
		return refuse(msgUnauthenticated)
	}
	req := replyRequest(st, reason)
	r := e.cfg.Approvals.Require(req)
	for _, p := range r.Problems {
		e.log.Warn("an approvals rule's when failed to evaluate; the rule applies", "task", st.Task, "problem", p)
	}
	if err := e.cfg.Approvals.Check(req, r.Rules, approver, auth); err != nil {
		return refuse(err.Error())
	}
	return nil
}

// recordReply judges w, the reply that woke the task from a question or a
// park: taken, the turn goes on as before; refused, the refusal is
// recorded and the task suspends on the same handle again.
func (g *segment) recordReply(w noeta.Wake) error {
	st := g.st
	reason := st.WokenFrom
	if !st.Answered {
		ref := g.e.judgeReply(st, reason, w)
		if ref == nil {
			return nil
		}
		g.e.refusedApprovals.Add(1)
		if st.ReplyRefusedHandle == w.Handle && st.ReplyRefused >= MaxRefusedPerRequest {
			g.e.log.Warn("refused a reply; not recorded: the question has had its share of refused replies",
				"task", st.Task, "handle", w.Handle, "approver", ref.Approver, "auth", ref.Auth, "reason", ref.Reason)
		} else if err := g.engineEmit(*ref); err != nil {
			return err
		}
	}
	if reason == "" {
		reason = reasonWaitingHuman + "(asked again: a reply was refused)"
	}
	return g.suspend(reason, noeta.HumanResponseWake(w.Handle))
}
