package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/policy"
)

// Submission is a task to submit: an agent of the config, a goal, the
// scripted policy's decisions (nil for a policy of Options.Policies that
// needs none), an id (a new one if empty) and a queue (the host's).
type Submission = engine.Submission

// Submit creates a task and makes it ready; it returns the task's id. The
// agent must be one of the config's.
func (h *Host) Submit(ctx context.Context, sub Submission) (string, error) {
	if h.client == nil || h.ro {
		return "", ErrReadOnly
	}
	if _, ok := h.gov.Agent(sub.Agent); !ok {
		return "", badOption("agent %q is not an agent of the config (its agents: %v)", sub.Agent, h.gov.Agents())
	}
	if len(sub.Script) == 0 && h.opts.Policies == nil && !h.decidesQueue(sub.Queue) && !h.HasModel(sub.Agent) {
		return "", badOption("the task has no script and agent %q has no model to decide it (give the task a script, or the agent a model: of models:)", sub.Agent)
	}
	if sub.Queue == "" {
		sub.Queue = h.opts.Queue
	}
	return h.client.Submit(ctx, sub)
}

// decidesQueue says whether a pool of the host works queue with
// policies of its own (PoolOptions.Policies: a mounted gateway's), which
// decide a task without a script.
func (h *Host) decidesQueue(queue string) bool {
	if queue == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.pools {
		if p.queue == queue && p.ownPolicies {
			return true
		}
	}
	return false
}

// Approve answers the approval request (or question) handle of task with
// a, whose Decision must be noeta.ApprovalApprove or noeta.ApprovalDeny and
// whose Approver must say who answered. It is refused, and nothing kept,
// unless the request is open now:
// eventlog.ErrNotWaiting when nothing is asked under handle,
// eventlog.ErrAlreadyAnswered when another answer came first.
//
// On a backend that routes answers ([AnswerRouter]: a remote NATS) an
// answer whose Auth is empty goes through the
// approver's own approval subject (<prefix>.approve.<approver>.<p>.<task>),
// so a.Approver must be a subject token (ValidateApprover) and the host's
// NATS user one allowed to publish under that name (deploy/nats's approver
// role); the broker vouches for it, and a read-only host may answer so. It is
// refused first, as the dispatcher would drop it, unless the task's row
// waits on handle now. An answer with Auth noeta.AuthToken or
// noeta.AuthProxy (an HTTP layer that authenticated its approver), or
// noeta.AuthElicitation or noeta.AuthClientPrompt (a gateway's
// authenticated client), is handed
// to the dispatcher in process; any other Auth is refused there.
func (h *Host) Approve(ctx context.Context, task, handle string, a Answer) error {
	if err := taskCheck(task); err != nil {
		return err
	}
	// One form of the name, whichever door: CLI:alice is cli:alice, and a
	// name hiding invisible characters is refused before anything is sent.
	name, err := approvals.Approver(a.Approver)
	if err != nil {
		return fmt.Errorf("%w: approver: %w", eventlog.ErrInvalidArgument, err)
	}
	a.Approver = name
	if h.route != nil {
		switch a.Auth {
		case "":
			return h.approveOnSubject(ctx, task, handle, a)
		case noeta.AuthToken, noeta.AuthProxy, noeta.AuthElicitation, noeta.AuthClientPrompt:
		default:
			// Only the broker says nats, only the embedded default local:
			// a caller claiming either here would vouch for what nothing
			// checked.
			return fmt.Errorf("%w: auth %q: on a remote NATS an answer in process carries %q or %q (an HTTP layer's principal); leave it empty to answer on the approver's approval subject",
				eventlog.ErrInvalidArgument, a.Auth, noeta.AuthToken, noeta.AuthProxy)
		}
	}
	if h.client == nil || h.ro {
		return ErrReadOnly
	}
	// No default decision: an answer that does not say approve is never
	// taken for one.
	auth := a.Auth
	if auth == "" {
		// The local user, who holds the backend (on the embedded default,
		// can read the data directory) and so could write the store anyway.
		auth = noeta.AuthLocal
	}
	return h.client.Approve(ctx, task, handle, a.Decision, a.Approver, a.Reason, auth)
}

// Deny is Approve with a refusal.
func (h *Host) Deny(ctx context.Context, task, handle, approver, reason string) error {
	return h.Approve(ctx, task, handle, Answer{Decision: noeta.ApprovalDeny, Approver: approver, Reason: reason})
}

// Cancel ends task with TaskCancelled, and with tree every task below it
// (the task first, so it spawns nothing more, then its subtasks, found
// through its SubtaskSpawned records). It returns the tasks it cancelled;
// tasks that had ended already are left as they are.
func (h *Host) Cancel(ctx context.Context, task, reason string, tree bool) ([]string, error) {
	if h.client == nil || h.ro {
		return nil, ErrReadOnly
	}
	if err := taskCheck(task); err != nil {
		return nil, err
	}
	eng := h.client
	if m := h.main.Load(); m != nil {
		// The pool's engine stops a segment of the task it runs at once.
		eng = m.eng
	}
	queue, seen := []string{task}, map[string]bool{task: true}
	var done []string
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		ok, err := eng.Cancel(ctx, id, reason)
		if err != nil {
			return done, fmt.Errorf("cancel task %s: %w", id, err)
		}
		if ok {
			done = append(done, id)
		}
		if !tree {
			break
		}
		envs, err := h.log.Read(ctx, id, 0)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return done, err
		}
		for _, env := range envs {
			if env.Type != noeta.TypeSubtaskSpawned {
				continue
			}
			p, _, err := env.Decode()
			if err != nil {
				continue
			}
			if sp, ok := p.(*noeta.SubtaskSpawned); ok && !seen[sp.SubtaskID] {
				seen[sp.SubtaskID] = true
				queue = append(queue, sp.SubtaskID)
			}
		}
	}
	return done, nil
}

// Events returns the records of task's log after seq after (0: all).
func (h *Host) Events(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error) {
	if err := taskCheck(task); err != nil {
		return nil, err
	}
	return h.log.Read(ctx, task, after)
}

// Inbox returns the records of task's inbox.
func (h *Host) Inbox(ctx context.Context, task string) ([]eventlog.Envelope, error) {
	return h.log.Inbox(ctx, task)
}

// Tasks lists every task, most recently appended first.
func (h *Host) Tasks(ctx context.Context) ([]eventlog.TaskSummary, error) {
	return h.log.Tasks(ctx)
}

// Content reads a body from the content store.
func (h *Host) Content(ctx context.Context, ref noeta.ContentRef) ([]byte, error) {
	return h.content.Get(ctx, ref)
}

// Inspect folds task's log into its state.
func (h *Host) Inspect(ctx context.Context, task string) (*engine.State, error) {
	st, _, err := h.Fold(ctx, task)
	return st, err
}

// Fold folds task's log; note says what the fold had to step over (a
// snapshot it could not use).
func (h *Host) Fold(ctx context.Context, task string) (*engine.State, string, error) {
	if err := taskCheck(task); err != nil {
		return nil, "", err
	}
	return engine.FoldTask(ctx, h.log, h.content, task)
}

// Dispatch is the dispatcher's row of task: eventlog.ErrNotFound while
// the dispatcher does not know it (it is created before it is enqueued).
func (h *Host) Dispatch(ctx context.Context, task string) (eventlog.DispatchState, error) {
	return h.disp.Inspect(ctx, task)
}

// CheckStream reports a store that has lost records behind the logs' back,
// when the backend can tell ([StreamChecker]); nil otherwise.
func (h *Host) CheckStream(ctx context.Context) error {
	if c, ok := h.b.(StreamChecker); ok {
		return c.CheckStream(ctx)
	}
	return nil
}

// TaskFromFile is the submission of a task file (policy.ParseTaskFile,
// policy.LoadTaskFileContext): its agent, goal and script — none for a task
// file without one, whose agent's model decides.
func TaskFromFile(tf policy.TaskFile) (Submission, error) {
	sub := Submission{Agent: tf.Agent, Goal: tf.Goal}
	if !tf.Scripted {
		return sub, nil
	}
	script, err := json.Marshal(tf.Script)
	if err != nil {
		return Submission{}, fmt.Errorf("script: %w", err)
	}
	sub.Script = script
	return sub, nil
}
