package eventlog

import (
	"errors"
	"fmt"
)

var (
	// ErrStaleSequence: Emit with an ExpectLastSeq that is not the log's last seq.
	ErrStaleSequence = errors.New("eventlog: stale sequence")

	// ErrInvalidLease: the lease is not (or no longer) the task's live lease —
	// never granted, released, expired, taken over, or for another task. Emit,
	// Heartbeat, Release, Yield and Fail return it.
	ErrInvalidLease = errors.New("eventlog: invalid lease")

	// ErrLeaseLost: a newer lease generation has fenced the task's log. It wraps
	// ErrInvalidLease, so errors.Is(err, ErrInvalidLease) holds for both; a holder
	// that sees either must stop writing at once.
	ErrLeaseLost = fmt.Errorf("%w: lease lost to a newer generation", ErrInvalidLease)

	// ErrLeaseQuotaExceeded: Heartbeat past the dispatcher's heartbeat cap; the
	// task has been released. It wraps ErrInvalidLease.
	ErrLeaseQuotaExceeded = fmt.Errorf("%w: heartbeat quota exceeded", ErrInvalidLease)

	// ErrPayloadTooLarge: the canonical payload is over noeta.PayloadMaxBytes.
	// Nothing was written; large bodies go to the ContentStore.
	ErrPayloadTooLarge = errors.New("eventlog: payload too large (large bodies must go through ContentStore)")

	// ErrTaskExists: Create for a task that already has a log.
	ErrTaskExists = errors.New("eventlog: task exists")

	// ErrAlreadyExists: SystemEmit with a key already written for the task. The
	// error comes with the original envelope, so a retry learns what landed.
	ErrAlreadyExists = errors.New("eventlog: already exists")

	// ErrNotFound: no such task (Read, Emit, SystemEmit, Wake, Inspect), no
	// snapshot (LatestSnapshot), no such body (ContentStore.Get).
	ErrNotFound = errors.New("eventlog: not found")

	// ErrNoReadyTask: Lease found no task it could grant.
	ErrNoReadyTask = errors.New("eventlog: no ready task")

	// ErrWakeMismatch: Release named a consumed wake that is not the task's
	// matched wake. Nothing was changed.
	ErrWakeMismatch = errors.New("eventlog: consumed wake does not match")

	// ErrNotWaiting: Wake with a human_response the task is not suspended on
	// now (it asked nothing under that handle, or not yet, or no longer).
	// Nothing was changed: a human's answer is never buffered for a request
	// that does not exist yet.
	ErrNotWaiting = errors.New("eventlog: the task is not waiting on that handle")

	// ErrAlreadyAnswered: Wake with a human_response on a handle another
	// answer has already matched. Nothing was changed: the first answer wins.
	ErrAlreadyAnswered = errors.New("eventlog: already answered")

	// ErrInvalidArgument: malformed input (task id, origin, actor, payload, key,
	// release state). The message names the field.
	ErrInvalidArgument = errors.New("eventlog: invalid argument")

	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("eventlog: closed")
)
