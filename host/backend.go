package host

import (
	"context"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Backend is where a host's tasks live: the eventlog seams. Any backend
// that passes the contract suite (eventlog/eventlogtest) runs a host:
// memlog in one process, JetStream (eventlog/jetstream/jshost) across a
// fleet. What only some backends can do is found by type assertion on the
// Backend, as database/sql finds a driver's optional interfaces:
// [ReadOnlyBackend], [AnswerRouter], [HealthChecker], [StreamChecker],
// [HandoffRecoverer].
//
// The backend is the caller's: the host never closes it; close it after
// the host.
type Backend interface {
	Log() eventlog.EventLog
	Dispatcher() eventlog.Dispatcher
	Content() eventlog.ContentStore
	// Waiting is the fleet's index of open requests (nil: none; the inbox
	// and engine approvals then read nothing).
	Waiting() eventlog.WaitingIndex
}

// ReadOnlyBackend is a backend that may only be read (a client with read
// permissions alone): the host submits, answers in process and runs
// nothing on it.
type ReadOnlyBackend interface {
	ReadOnly() bool
}

// AnswerRouter is a backend shared by processes that do not trust each
// other's word for who answered (a remote NATS): an answer given without
// an authenticated principal travels on the approver's own subject, and
// the broker vouches for the sender. Engines on it accept only
// authenticated answers. A backend other processes can write to must
// implement it: on one that does not, the host takes an answer in process
// as the local user's (auth local), which is true only when nothing else
// can reach the store.
type AnswerRouter interface {
	// RoutesAnswers reports whether answers travel so (false: handed to
	// the dispatcher in process, vouched for by this process).
	RoutesAnswers() bool
	SendAnswer(ctx context.Context, task, handle, approver string, decision noeta.ApprovalDecision, reason string) error
}

// HealthChecker reports why a backend cannot serve now (a lost
// connection), or nil.
type HealthChecker interface {
	Healthy() error
}

// StreamChecker reports a store that has lost records behind the logs'
// back (a truncated stream).
type StreamChecker interface {
	CheckStream(ctx context.Context) error
}

// HandoffRecoverer is a backend whose dispatcher finds, on its own passes,
// the parents that have waited on ended subtasks for a while (their
// handoffs may have died with another process): it calls fn for each.
// RecoverAwaiting registers fn and asks for such a pass soon.
type HandoffRecoverer interface {
	RecoverAwaiting(fn func(ctx context.Context, parent string, subtasks []string))
}

func readOnly(b Backend) bool {
	r, ok := b.(ReadOnlyBackend)
	return ok && r.ReadOnly()
}

// router is b's answer router, or nil when answers are handed over in
// process.
func router(b Backend) AnswerRouter {
	if r, ok := b.(AnswerRouter); ok && r.RoutesAnswers() {
		return r
	}
	return nil
}
