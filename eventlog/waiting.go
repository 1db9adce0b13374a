package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// The waiting index: every request a person must answer, across the fleet,
// kept current by the engine as it records them (put after the request is
// committed, before the task suspends on it; deleted once it is resolved or
// the task ends), so the inbox is a read of the index, never a scan of every
// log. The log stays the truth: an entry is a summary of a committed
// ApprovalRequested (or question), and whoever answers is judged by the log.

// ErrWaitingTooLarge is wrapped by PutWaiting when an entry, encoded, is over
// WaitingMaxBytes even after its arguments and goal were cut.
var ErrWaitingTooLarge = errors.New("eventlog: waiting entry too large")

// WaitingMaxBytes bounds one encoded index entry.
const WaitingMaxBytes = 16 << 10

// WaitingKind says what a person is asked.
type WaitingKind string

// The kinds of waiting requests.
const (
	WaitingApproval WaitingKind = "approval" // an ApprovalRequested
	WaitingQuestion WaitingKind = "question" // a yield_for_human question
)

// Waiting is one open request in the index.
type Waiting struct {
	Task   string      `json:"task"`
	Handle string      `json:"handle"`
	Kind   WaitingKind `json:"kind"`
	// Seq is the log sequence of the record that asked (ApprovalRequested,
	// or the TaskSuspended of a question).
	Seq   uint64 `json:"seq"`
	Agent string `json:"agent"`
	// Goal is the task's goal, cut to a few hundred runes.
	Goal        string `json:"goal,omitempty"`
	SubmittedBy string `json:"submitted_by,omitempty"`

	// Approvals: the action (tool_call, spawn_subtask, finish), the tool and
	// its arguments (cut: ArgsCut says so; the log has them whole), the
	// child's agent of a spawn, the guard that asked and why.
	Action  string          `json:"action,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsCut bool            `json:"args_cut,omitempty"`
	Child   string          `json:"child_agent,omitempty"`
	Guard   string          `json:"guard,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	// Question: what the task asks.
	Question string `json:"question,omitempty"`

	// Who may answer: the approvals rules that matched (their names and
	// what each allows, in words), the quorum and who has approved so far.
	Rules     []string `json:"rules,omitempty"`
	MayAnswer string   `json:"may_answer,omitempty"`
	Quorum    int      `json:"quorum,omitempty"`
	Approvals []string `json:"approvals,omitempty"`

	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
}

// WaitingChange is one change of the index: an entry put (Deleted false,
// Entry whole) or deleted (Deleted true, Entry has Task and Handle only).
type WaitingChange struct {
	Deleted bool
	Entry   Waiting
}

// WaitingIndex is the fleet's index of open requests. Put and Delete are
// idempotent; List returns every entry, oldest request first; Watch calls fn
// with every entry present now (Deleted false), then once with a zero
// WaitingChange and Entry.Task "" as a marker that the initial set is
// complete, then with each change until ctx ends or stop is called. fn runs on
// one goroutine, in order; it must not block for long.
type WaitingIndex interface {
	PutWaiting(ctx context.Context, w Waiting) error
	DeleteWaiting(ctx context.Context, task, handle string) error
	ListWaiting(ctx context.Context) ([]Waiting, error)
	WatchWaiting(ctx context.Context, fn func(WaitingChange)) (stop func(), err error)
}
