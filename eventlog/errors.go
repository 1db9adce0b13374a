package eventlog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

var (
	// ErrNoWaitingIndex: the deployment has no waiting index (a read-only
	// client found no bucket: no engine of this version has run on it yet).
	ErrNoWaitingIndex = errors.New("host: the deployment has no waiting index")

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

	// ErrTooManyWakes: Wake with an event that would be buffered on a row
	// whose buffer of pending wakes is full (the dispatcher's
	// MaxPendingWakes). Nothing was changed: the buffer is bounded so that a
	// flood of wakes to one task cannot grow its row without end; the sender
	// is told, and may retry once the task has consumed some.
	ErrTooManyWakes = errors.New("eventlog: too many pending wakes")

	// ErrInvalidArgument: malformed input (task id, origin, actor, payload, key,
	// release state). The message names the field.
	ErrInvalidArgument = errors.New("eventlog: invalid argument")

	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("eventlog: closed")

	// ErrGap: a task's log is missing records — the Seqs a read returned are
	// not dense (1, 2, 3, …) up to the log's last record. Records are never
	// deleted, so a gap is damage to the store (a lost or corrupted message
	// block, a truncated file), never a state a writer leaves. It comes as a
	// *GapError naming the task and the missing Seqs. Nothing may be appended
	// to a gapped log: what was lost may have been a tool call's result.
	ErrGap = errors.New("eventlog: gap in the log")

	// ErrCorrupt: a stored record does not decode (a flipped byte, a foreign
	// message on a task's subject). The error names the task or subject and
	// where in the store it is.
	ErrCorrupt = errors.New("eventlog: corrupt record")
)

// DefaultMaxPendingWakes is how many wakes a dispatcher row buffers (wakes
// that matched no suspend yet) before Wake refuses more with
// ErrTooManyWakes.
const DefaultMaxPendingWakes = 64

// TooManyWakes is the error of a Wake refused because task's buffer holds
// limit wakes already.
func TooManyWakes(task string, kind string, limit int) error {
	return fmt.Errorf("%w: task %q already buffers %d wakes that matched nothing (the cap); this %s wake is refused, not kept: retry once the task has consumed some",
		ErrTooManyWakes, task, limit, kind)
}

// IsDamage reports whether err says the store lost or mangled a task's
// records (ErrGap, ErrCorrupt), as opposed to an ordinary failure to read.
func IsDamage(err error) bool { return errors.Is(err, ErrGap) || errors.Is(err, ErrCorrupt) }

// GapError reports the records missing from a task's log.
type GapError struct {
	Task string
	// After is the last Seq read before the gap (0: the gap starts at the
	// genesis).
	After uint64
	// First through Last are the absent Seqs.
	First, Last uint64
	// Next is the Seq found after the gap; 0 when the gap is at the end (the
	// log's last record was expected and not found).
	Next uint64
}

func (e *GapError) Error() string {
	var b strings.Builder
	b.WriteString("eventlog: gap in the log of task ")
	b.WriteString(e.Task)
	b.WriteString(": missing seq ")
	b.WriteString(e.Seqs())
	if e.Next != 0 {
		b.WriteString(" (seq " + strconv.FormatUint(e.After, 10) + " is followed by seq " + strconv.FormatUint(e.Next, 10) + ")")
	}
	return b.String()
}

// Seqs renders the missing Seqs: "37" or "37-41".
func (e *GapError) Seqs() string {
	if e.First == e.Last {
		return strconv.FormatUint(e.First, 10)
	}
	return strconv.FormatUint(e.First, 10) + "-" + strconv.FormatUint(e.Last, 10)
}

// Unwrap lets errors.Is(err, ErrGap) hold.
func (e *GapError) Unwrap() error { return ErrGap }

// CheckDense checks that envs, records of task's log read after Seq after,
// are exactly after+1, after+2, … and, when last is not 0, end at last (the
// log's last Seq as the backend knows it). It returns the first gap as a
// *GapError, or nil. Every backend's Read runs it, so a reader never folds or
// prints a log with a hole in it.
func CheckDense(task string, after uint64, envs []Envelope, last uint64) error {
	want := after + 1
	for _, env := range envs {
		switch {
		case env.Seq == want:
			want++
			continue
		case env.Seq < want:
			return fmt.Errorf("%w: task %s: seq %d appears again after seq %d", ErrCorrupt, task, env.Seq, want-1)
		}
		return &GapError{Task: task, After: want - 1, First: want, Last: env.Seq - 1, Next: env.Seq}
	}
	if last != 0 && want <= last {
		return &GapError{Task: task, After: want - 1, First: want, Last: last}
	}
	return nil
}
