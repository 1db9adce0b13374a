package timeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/backoff"
)

// AnswerOptions say which request AnswerRequest answers, how, and whether
// it runs the task tree after.
type AnswerOptions struct {
	Task, Handle string
	// Answer is the decision, the approver and the reason recorded.
	Answer host.Answer
	// Verb is the decision as the report says it: approved or refused.
	Verb string
	// Runs says the host runs the tree (its pool is deferred, and started
	// here once the request is known open): the tree is followed from its
	// root to its next rest, and its timeline written to Out. Otherwise
	// another process runs it, and AnswerRequest only answers.
	Runs bool
	// OnSubject says the answer goes out on the approver's approval
	// subject (<prefix>.approve.<approver>.<p>.<task>), for a serve
	// process to apply: AnswerRequest only answers, needing no more than
	// the read permissions and that one publish of deploy/nats's approver
	// role, and says where the answer went.
	OnSubject bool
	// Out gets the report and the timeline; Msgs the watch's notes.
	Out, Msgs io.Writer
	// Approver is the following printer's approver; it answers nothing:
	// a request the tree makes next is left waiting, and its outcome says
	// how to answer it.
	Approver string
	// Where names the deployment in messages (data DIR, nats URL); Flags
	// are the flags that reach it again, for the outcome's hints.
	Where, Flags string
	// ExpiryWait bounds the wait for an expired request's timer to resolve
	// it before the tree is followed (DefaultExpiryWait when zero).
	ExpiryWait time.Duration
}

// DefaultExpiryWait bounds how long AnswerRequest waits for an expired
// request's timer to resolve it before following the task.
const DefaultExpiryWait = 30 * time.Second

// AnswerRequest answers the request o.Handle of o.Task on h, refusing one
// that is not open now, and says so on o.Out. When o.Runs, it starts h's
// pool and follows the tree to its next rest, writing its timeline and
// outcome, and returns that rest; else it returns nil. Every error is a
// run that could not go on; those of a refused answer say why
// ([AnswerError]).
func AnswerRequest(ctx context.Context, h *host.Host, o AnswerOptions) (*host.Rest, error) {
	if o.ExpiryWait == 0 {
		o.ExpiryWait = DefaultExpiryWait
	}
	task, handle := o.Task, o.Handle
	if o.OnSubject {
		if err := h.Approve(ctx, task, handle, o.Answer); err != nil {
			return nil, AnswerError(err, task, handle, o.Where)
		}
		fmt.Fprintf(o.Out, "%s: the answer to %s of task %s is on %s's approval subject (the task was waiting on it); a serve process applies it unless another answer came first\n", o.Verb, handle, task, o.Answer.Approver)
		return nil, nil
	}
	ds, err := h.Dispatch(ctx, task)
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
		return nil, fmt.Errorf("no task %s in this deployment (%s)", task, o.Where)
	case err != nil:
		return nil, err
	}
	if ds.Status == eventlog.DispatchTerminal {
		// Say that another answer won, if one did (the loser of a race
		// whose winner's answer ended the task).
		if state, err := h.Inspect(ctx, task); err == nil {
			if err := engine.OpenRequest(state, handle); errors.Is(err, eventlog.ErrAlreadyAnswered) {
				return nil, AnswerError(err, task, handle, o.Where)
			}
		}
		return nil, fmt.Errorf("task %s has ended (%s); there is nothing to answer", task, ds.Reason)
	}

	// When this process runs the tree, follow it from its root, printing
	// only what happens from now on. An answer to nothing open is refused
	// before anything runs.
	var p *Printer
	if o.Runs {
		state, err := h.Inspect(ctx, task)
		if err != nil {
			return nil, err
		}
		if err := engine.OpenRequest(state, handle); err != nil {
			return nil, AnswerError(err, task, handle, o.Where)
		}
		root := state.Root
		if root == "" {
			root = task
		}
		p = NewPrinter(root, o.Out, o.Msgs, false, Leave, o.Approver)
		if err := p.Watch(ctx, h, true); err != nil {
			return nil, err
		}
		if err := h.Start(ctx); err != nil {
			return nil, err
		}
	}

	if err := h.Approve(ctx, task, handle, o.Answer); err != nil {
		if o.Runs && errors.Is(err, engine.ErrRequestExpired) {
			// Too late: the request resolves denied by timeout, and
			// nothing else here would run the task past it. Run it to its
			// next rest, printing the expiry, then say the answer lost.
			// The expiry's timer fires a moment after this process
			// started its dispatcher: until it has, the task looks at rest
			// (suspended on the request), so wait for the resolution first.
			waitResolved(ctx, h, task, handle, o.ExpiryWait)
			out, ferr := p.Follow(ctx)
			if ferr == nil {
				WriteOutcome(o.Out, p.Root(), o.Flags, out)
			}
		}
		return nil, AnswerError(err, task, handle, o.Where)
	}
	fmt.Fprintf(o.Out, "%s: task %s was waiting on %s; it is ready to run again (answer by %s)\n", o.Verb, task, handle, o.Answer.Approver)
	if !o.Runs {
		return nil, nil
	}
	out, err := p.Follow(ctx)
	if err != nil {
		return nil, err
	}
	WriteOutcome(o.Out, p.Root(), o.Flags, out)
	return &out, nil
}

// resolvedPoll is the pause between waitResolved's looks at the task.
const resolvedPoll = 50 * time.Millisecond

// waitResolved returns once handle is no longer an open request of task
// (or the task ended), within limit, or when ctx ends.
func waitResolved(ctx context.Context, h *host.Host, task, handle string, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	pause := backoff.New(resolvedPoll, resolvedPoll)
	for {
		if st, err := h.Inspect(ctx, task); err == nil {
			if _, open := st.Governance.PendingApprovals[handle]; !open || st.Status == noeta.StatusTerminal {
				return
			}
		}
		if pause.Wait(ctx) != nil {
			return
		}
	}
}

// AnswerError is the error of an answer that was refused, saying whether
// nothing was asked under the handle or another answer won; where names
// the deployment. It wraps err but for an unknown task.
func AnswerError(err error, task, handle, where string) error {
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
		return fmt.Errorf("no task %s in this deployment (%s)", task, where)
	case errors.Is(err, eventlog.ErrAlreadyAnswered):
		return fmt.Errorf("not applied: another answer to %s of task %s came first; yours was not applied: %w", handle, task, err)
	case errors.Is(err, eventlog.ErrNotWaiting):
		return fmt.Errorf("refused: task %s has no open request %s; nothing was answered or kept: %w", task, handle, err)
	case errors.Is(err, engine.ErrRequestExpired):
		return fmt.Errorf("too late: %s of task %s expired before this answer; it was not applied: %w", handle, task, err)
	case errors.Is(err, engine.ErrApproverNotAllowed):
		return fmt.Errorf("refused by the approvals rules; the answer was not taken: %w", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("answer %s of task %s: stopped before it was applied: %w", handle, task, err)
	}
	return fmt.Errorf("answer %s of task %s: %w", handle, task, err)
}
