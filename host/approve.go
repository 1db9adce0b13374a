package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/backoff"
)

// approveOnSubject answers on the approver's own approval subject
// (<prefix>.approve.<approver>.<p>.<task>): on a remote NATS the broker, not
// this process, vouches for who answered, since the approver's NATS user may
// publish only under its own name (deploy/nats's approver role). It refuses
// first what the dispatcher would drop: an answer the task's row does not
// wait on now, so the sender hears of it.
func (h *Host) approveOnSubject(ctx context.Context, task, handle string, a Answer) error {
	if a.Decision != noeta.ApprovalApprove && a.Decision != noeta.ApprovalDeny {
		return fmt.Errorf("%w: decision %q (want approve or deny)", eventlog.ErrInvalidArgument, a.Decision)
	}
	if err := ValidateApprover(a.Approver); err != nil {
		return err
	}
	if err := noeta.ValidateToken("handle", handle, 128); err != nil {
		return fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	w := noeta.HumanResponseWake(handle)
	w.Decision, w.Approver, w.Text = string(a.Decision), a.Approver, a.Reason
	if err := h.awaitWaiting(ctx, task, w); err != nil {
		return err
	}
	// The one fold of the task's log this answer costs here: where the log
	// ends now (what the task records of the answer comes after) and when
	// the request expires. What follows reads only the records after it.
	var since uint64
	var expires time.Time
	if st, err := h.Inspect(ctx, task); err == nil {
		since = st.LastSeq
		pa, ok := st.Governance.PendingApprovals[handle]
		if ok {
			expires = pa.ExpiresAt
		}
		if ok && !pa.ExpiresAt.IsZero() && !time.Now().Before(pa.ExpiresAt) {
			// By this host's clock; the broker's timestamp of the answer
			// is what the task judges, so this only spares the send.
			return fmt.Errorf("%w: task %s: %s expired at %s; nothing was sent, and the request resolves denied by timeout",
				engine.ErrRequestExpired, task, handle, pa.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if err := h.route.SendAnswer(ctx, task, handle, a.Approver, a.Decision, a.Reason); err != nil {
		return err
	}
	return h.awaitAnswer(ctx, task, w, since, expires)
}

// answerSettle bounds how long Approve waits for a task whose request is
// open in its log to wait on it at the dispatcher: engine.AnswerSettle, one
// bound for both ways an answer travels.
const answerSettle = engine.AnswerSettle

// The pause of the loops that watch an answer settle, as the engine's.
const (
	answerPollFirst = engine.AnswerPollFirst
	answerPollMax   = engine.AnswerPollMax
)

// awaitWaiting returns nil once task's row waits on w's handle; an error
// naming why not when the log says the request is not open (answered
// already, never asked, the task ended), or when the row has not come to
// wait on it within answerSettle.
func (h *Host) awaitWaiting(ctx context.Context, task string, w noeta.Wake) error {
	deadline := time.Now().Add(answerSettle)
	pause := backoff.New(answerPollFirst, answerPollMax)
	for {
		ds, err := h.Dispatch(ctx, task)
		if err != nil {
			return err
		}
		if ds.Status == eventlog.DispatchTerminal {
			return fmt.Errorf("%w: task %s has ended (%s); there is nothing to answer", eventlog.ErrNotWaiting, task, ds.Reason)
		}
		cerr := eventlog.CheckAnswer(task, ds.Status, ds.WakeOn, ds.MatchedWake, w)
		if cerr == nil {
			return nil
		}
		if ds.Status != eventlog.DispatchLeased && ds.Status != eventlog.DispatchReady {
			return cerr
		}
		if errors.Is(cerr, eventlog.ErrAlreadyAnswered) && !h.quorumOpen(ctx, task, w.Handle) {
			// Another answer is in hand and, needing one approver, the
			// request closes with it.
			return cerr
		}
		// In transit: the log says whether the request is open and the
		// task is about to wait on it again.
		st, err := h.Inspect(ctx, task)
		if err != nil {
			return cerr
		}
		if oerr := engine.OpenRequest(st, w.Handle); oerr != nil {
			return oerr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: task %s asked under %s but has not come to wait on it within %s (the dispatcher has it %s); answer again once it waits",
				eventlog.ErrNotWaiting, task, w.Handle, answerSettle, ds.Status)
		}
		if err := pause.Wait(ctx); err != nil {
			return err
		}
	}
}

// answerWait bounds how long Approve watches the row for the dispatcher to
// apply an answer sent on an approval subject.
const answerWait = 10 * time.Second

// awaitAnswer watches task's row until the dispatcher has applied an answer
// to w.Handle, and reports whether it was w: the loser of two answers sent
// together is told it lost (eventlog.ErrAlreadyAnswered, naming the
// winner), as an answer handed to the dispatcher in process is. If no
// dispatcher applies anything within answerWait (no serve process runs),
// the answer stays on the wake stream for one to apply, and Approve
// returns nil.
//
// since is the last seq of task's log before the answer was sent: a
// refusal of it recorded after since (the rules refused an approval, or a
// reply to a question, and the task waits on the handle again) is reported
// as engine.ErrApproverNotAllowed.
func (h *Host) awaitAnswer(ctx context.Context, task string, w noeta.Wake, since uint64, expires time.Time) error {
	deadline := time.Now().Add(answerWait)
	pause := backoff.New(answerPollFirst, answerPollMax)
	for {
		ds, err := h.Dispatch(ctx, task)
		if err != nil {
			return err
		}
		if m := ds.MatchedWake; m != nil && m.Kind == noeta.WakeHumanResponse && m.Handle == w.Handle {
			err := sameAnswer(task, *m, w)
			if err == nil {
				if err := receivedInTime(task, *m, expires); err != nil {
					return err
				}
				// Ours, applied: the task judges it next. Watch on for
				// what it comes to (taken: the task moves on; refused: it
				// waits on the handle again, the refusal in its log), up
				// to answerWait, after which the answer is left to it.
			} else if !h.quorumOpen(ctx, task, w.Handle) {
				return err
			}
			// Another answer is being judged and the request stays open
			// after it (it needs more than one approver): the dispatcher
			// holds this one until the task waits again.
		} else if !(ds.Status == eventlog.DispatchSuspended && noeta.Matches(ds.WakeOn, &w)) {
			// Applied, and the task has moved on: the log says by whom.
			return h.answeredBy(ctx, task, w, since)
		} else if judged, err := h.judgedSince(ctx, task, w, since); judged {
			// Applied and judged, and the task waits on the handle again:
			// refused (err), or counted toward a quorum (nil).
			return err
		}
		if time.Now().After(deadline) {
			return nil
		}
		if err := pause.Wait(ctx); err != nil {
			return err
		}
	}
}

// receivedInTime is nil unless the answer m, applied to task's row, was
// received on or after its request's deadline expires (the broker's
// timestamp of the message): the task refuses it then and resolves the
// request denied by timeout, and the sender is told so now.
func receivedInTime(task string, m noeta.Wake, expires time.Time) error {
	if expires.IsZero() || m.ReceivedAt.IsZero() || m.ReceivedAt.Before(expires) {
		return nil
	}
	return fmt.Errorf("%w: task %s: %s expired at %s and this answer was received at %s; the task refuses it and the request resolves denied by timeout",
		engine.ErrRequestExpired, task, m.Handle, expires.UTC().Format(time.RFC3339Nano), m.ReceivedAt.UTC().Format(time.RFC3339Nano))
}

// judgedSince reports whether task recorded after seq since what w came
// to while the request stays open: its refusal (returned as an error
// wrapping engine.ErrApproverNotAllowed) or its count toward a quorum.
func (h *Host) judgedSince(ctx context.Context, task string, w noeta.Wake, since uint64) (bool, error) {
	envs, err := h.log.Read(ctx, task, since)
	if err != nil {
		return false, nil
	}
	for _, env := range envs {
		if env.Type != noeta.TypeApprovalRefused && env.Type != noeta.TypeApprovalCounted {
			continue
		}
		p, _, err := env.Decode()
		if err != nil {
			continue
		}
		switch r := p.(type) {
		case *noeta.ApprovalRefused:
			if r.Handle == w.Handle && approvals.SamePerson(r.Approver, w.Approver) {
				return true, fmt.Errorf("%w: task %s, %s: %s", engine.ErrApproverNotAllowed, task, w.Handle, r.Reason)
			}
		case *noeta.ApprovalCounted:
			if r.Handle == w.Handle && approvals.SamePerson(r.Approver, w.Approver) {
				return true, nil
			}
		}
	}
	return false, nil
}

// quorumOpen reports whether task's log holds handle as an open approval
// that needs more than one approver, so an answer judged before this one
// may leave it open.
func (h *Host) quorumOpen(ctx context.Context, task, handle string) bool {
	st, err := h.Inspect(ctx, task)
	if err != nil || engine.OpenRequest(st, handle) != nil {
		return false
	}
	pa, ok := st.Governance.PendingApprovals[handle]
	return ok && pa.Quorum > 1
}

// sameAnswer is nil if won, the answer the dispatcher applied to w.Handle,
// is w; otherwise w lost to it.
func sameAnswer(task string, won, w noeta.Wake) error {
	if won.Approver == w.Approver && won.Decision == w.Decision && won.Text == w.Text {
		return nil
	}
	return fmt.Errorf("%w: task %s: %s was answered already (%s by %s)", eventlog.ErrAlreadyAnswered, task, w.Handle, won.Decision, won.Approver)
}

// answeredBy reads from the records of task's log after seq since who
// resolved the approval w.Handle, once the row has moved past it; nil when
// they cannot tell (a question's answer, or an approval not resolved yet).
func (h *Host) answeredBy(ctx context.Context, task string, w noeta.Wake, since uint64) error {
	envs, err := h.log.Read(ctx, task, since)
	if err != nil {
		return nil // the answer went out; only the report is lost
	}
	var r *noeta.ApprovalResolved
	for _, env := range envs {
		if env.Type != noeta.TypeApprovalResolved {
			continue
		}
		if p, _, err := env.Decode(); err == nil {
			if res, ok := p.(*noeta.ApprovalResolved); ok && res.Handle == w.Handle {
				r = res
			}
		}
	}
	switch {
	case r == nil:
		return nil
	case string(r.Decision) == w.Decision && (r.Approver == w.Approver || slices.Contains(r.Approvers, w.Approver)):
		return nil
	case r.Auth == noeta.AuthTimer:
		// The answer reached the task after the deadline, or after the
		// expiry: it did not count.
		return fmt.Errorf("%w: %w: task %s: %s expired before this answer counted (denied by %s: %s)", engine.ErrRequestExpired, eventlog.ErrAlreadyAnswered, task, w.Handle, r.Approver, r.Reason)
	}
	return fmt.Errorf("%w: task %s: %s was answered already (%s by %s)", eventlog.ErrAlreadyAnswered, task, w.Handle, r.Decision, r.Approver)
}

// ValidateApprover checks that approver can be the approver token of an
// approval subject: 1 to 64 of A-Z, a-z, 0-9, _ and -. On a remote NATS it
// is the approver's NATS user name (deploy/nats's approver role); an
// identity such as "cli:alice" is not one.
func ValidateApprover(approver string) error {
	if err := noeta.ValidateToken("approver", approver, 64); err != nil {
		return fmt.Errorf("%w: %v: on a remote NATS the approver is the token of its approval subject (%s.approve.<approver>.…), the name its NATS user may publish under",
			eventlog.ErrInvalidArgument, err, DefaultPrefix)
	}
	return nil
}
