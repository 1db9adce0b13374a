package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/noeta-go/noeta"
)

// Reader reads a task's records. It never writes.
type Reader interface {
	// Read returns the log records with Seq > afterSeq, in Seq order (afterSeq 0
	// reads the whole log). ErrNotFound if the task was never created.
	//
	// What it returns is dense: afterSeq+1, afterSeq+2, … up to the log's last
	// record. A record the store lost is never skipped silently: the read
	// fails with a *GapError (ErrGap) naming the task and the missing Seqs,
	// and a record that does not decode fails it with ErrCorrupt naming where
	// it is. A backend that cannot lose records (memlog) never returns either.
	// A loss at the very end of a log (its last records gone together) leaves
	// nothing in the log itself to see it by; the dispatcher's row and the
	// store's own counters do (see engine doctor).
	Read(ctx context.Context, task string, afterSeq uint64) ([]Envelope, error)

	// Inbox returns the task's inbox records (SystemEmit), in the order they were
	// written. ErrNotFound if the task was never created.
	Inbox(ctx context.Context, task string) ([]Envelope, error)

	// LatestSnapshot returns the log record with the highest Seq whose type is a
	// baseline (noeta.IsBaselineType). ErrNotFound if there is none or no task.
	LatestSnapshot(ctx context.Context, task string) (Envelope, error)
}

// EmitOptions are the optional protections of an Emit.
type EmitOptions struct {
	// ExpectLastSeq, when not 0, makes the append conditional: it lands only if
	// the log's last Seq is exactly ExpectLastSeq (the record then gets
	// ExpectLastSeq+1, or +2 when Emit also writes the generation's LeaseGranted).
	// Otherwise ErrStaleSequence.
	ExpectLastSeq uint64

	// IdempotencyKey, when set, makes a retry safe: a repeat with the same key
	// under the same lease returns the original envelope and writes nothing,
	// forever, whatever else changed since (the payload, the log, the lease's
	// validity). The scope is (task, lease id, key): another lease is another
	// write.
	IdempotencyKey string
}

// Writer appends records. Write authority is this interface; a component that
// only observes never holds one.
type Writer interface {
	// Create writes the genesis record (type TaskCreated, Seq 1) of a new task.
	// ErrTaskExists if the task already has a log. No lease is involved: a task
	// is created before anyone can lease it.
	Create(ctx context.Context, env Envelope) (Envelope, error)

	// Emit appends env to the log of lease.Task under lease, and returns it as
	// stored (ID, Seq, Time and LeaseGen stamped, payload canonical).
	//
	// Every Emit is fenced. The first Emit of a lease generation appends
	// noeta.LeaseGranted{lease_id, generation, worker} before env; once it is in
	// the log, no record of an older generation can land, whatever the clocks
	// or the registry say.
	//
	// The checks, in this order (the first that fails decides):
	//  1. an IdempotencyKey already written under this lease: the original
	//     envelope, nil error, nothing written;
	//  2. the payload's canonical size: ErrPayloadTooLarge;
	//  3. ExpectLastSeq: ErrStaleSequence;
	//  4. the lease: ErrLeaseLost if a newer generation fenced the log,
	//     ErrInvalidLease if the registry does not hold it as live.
	// Malformed input (ErrInvalidArgument) and a task that does not exist
	// (ErrNotFound) are reported before all of them.
	//
	// Subscribers see the records (LeaseGranted included) after they are
	// durable and before Emit returns.
	Emit(ctx context.Context, lease Lease, env Envelope, opts EmitOptions) (Envelope, error)

	// SystemEmit writes env into the inbox of task under key, without a lease:
	// the cross-task write (a child's result into its parent's inbox). Actor and
	// Origin are required. Each (task, key) is written at most once, forever; a
	// repeat returns the original envelope with an error wrapping
	// ErrAlreadyExists. The payload cap applies. ErrNotFound if the task was
	// never created.
	SystemEmit(ctx context.Context, task, key string, env Envelope) (Envelope, error)
}

// Handler receives a committed record. ctx is not cancelled when the writer's
// ctx is: the record is durable, and what the handler does about it should not
// depend on the writer's deadline.
type Handler func(ctx context.Context, env Envelope) error

// Subscriber delivers committed records to in-process handlers.
//
// The contract: a handler runs after the record is durable and before the
// Emit, SystemEmit or Create that wrote it returns, on the writer's goroutine,
// outside every lock of the backend, so it may write again (to any task) and
// handlers for different writers run concurrently. Handlers run in
// subscription order. A handler's error or panic is recovered, counted in its
// Subscription's stats and dropped; it never reaches the writer or other
// handlers. Only appends made through this backend instance are delivered; a
// new subscription does not replay history.
type Subscriber interface {
	Subscribe(h Handler) *Subscription
}

// TaskSummary is one task in the index.
type TaskSummary struct {
	Task     string
	LastSeq  uint64
	LastTime time.Time
}

// TaskIndex enumerates tasks. It is its own capability: enumeration is costly
// on some backends and few components need it.
type TaskIndex interface {
	// Tasks returns every created task, most recently appended first, ties by
	// task id ascending.
	Tasks(ctx context.Context) ([]TaskSummary, error)
}

// ContentStore holds bodies too large for a payload, addressed by the sha256 of
// their bytes. Bodies are immutable: the first write wins.
type ContentStore interface {
	// Put stores body and returns its ref. Putting the same bytes again is a
	// no-op for storage; the returned ref carries the caller's media type.
	Put(ctx context.Context, body []byte, mediaType string) (noeta.ContentRef, error)
	// Get returns the body of ref (looked up by hash only). ErrNotFound if absent.
	Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error)
	// GetMany returns the bodies of refs by hash. Missing hashes are left out,
	// duplicates collapse, an empty input returns an empty map without IO.
	GetMany(ctx context.Context, refs []noeta.ContentRef) (map[string][]byte, error)
}

// Lease is a worker's right to write one task, for one segment (up to the next
// suspend or terminal record).
type Lease struct {
	ID   string
	Task string
	// Generation counts the task's leases, from 1, strictly increasing. It is
	// the fencing token: records carry it, and a side-effect proxy can refuse
	// an older one.
	Generation uint64
	Worker     string
	Expires    time.Time
	// Wake is the matched wake event this segment must consume, or nil. It stays
	// with the task until a Release names it in ConsumedWake, so a worker that
	// dies before consuming it hands it to the next lease.
	Wake *noeta.Wake
	// Ending, when set, says the dispatcher has given up on the task (its
	// retryable failures reached the cap, or its leases expired ReclaimMax
	// times in a row) and why. The holder runs nothing of the task: it
	// records the end in the task's log and releases it terminal, so no task
	// ends without a terminal record. An Ending lease that expires or fails
	// is granted again, under the same caps as any lease (ReclaimMax expiries
	// in a row, the attempt cap for failures); only past them does the task
	// end terminal in the dispatcher alone, with Ending as its reason.
	Ending string
}

// LeaseRegistry is the event log's one edge back to the dispatcher.
type LeaseRegistry interface {
	// Valid reports whether lease is the task's live lease: same id, leased, and
	// not expired (expiry strictly after now).
	Valid(ctx context.Context, lease Lease) (bool, error)
}

// DispatchStatus is a task's state in the dispatcher.
type DispatchStatus string

// The dispatcher states.
const (
	DispatchReady     DispatchStatus = "ready"
	DispatchLeased    DispatchStatus = "leased"
	DispatchSuspended DispatchStatus = "suspended"
	DispatchTerminal  DispatchStatus = "terminal"
)

// DefaultQueue is the queue of a task enqueued without one and no parent.
const DefaultQueue = "default"

// ValidateQueue refuses a queue name that is not a subject token; "" (the
// default) is fine.
func ValidateQueue(field, queue string) error {
	if queue == "" {
		return nil
	}
	if err := noeta.ValidateToken(field, queue, 64); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return nil
}

// Reasons the dispatcher itself records.
const (
	ReasonLeaseQuotaExceeded   = "lease_quota_exceeded"
	ReasonStaleReclaimExceeded = "stale_reclaim_exceeded"
	ReasonMaxAttemptsExceeded  = "max_attempts_exceeded"
)

// EnqueueOptions shape an Enqueue.
type EnqueueOptions struct {
	// Queue names the ready queue; only workers leasing from it see the task.
	// Empty: the parent's queue if Parent is known, else DefaultQueue. A task's
	// queue is fixed when it is first enqueued. Queue names are subject tokens,
	// [A-Za-z0-9_-]{1,64} (ValidateQueue), on every backend.
	Queue string
	// Parent is the parent task, for queue inheritance.
	Parent string
	// Reserved keeps the task from untargeted leases: only a Lease naming it can
	// take it, once.
	Reserved bool
	// HandOff, for a task the dispatcher does not know yet and not Reserved,
	// hands it to an untargeted Lease of this same dispatcher (this value,
	// not another process's) blocked with Wait on its queue, if one is: the
	// task is created leased to that Lease's worker (the first of them in
	// the order they began waiting), and that Lease returns it. The task
	// then never waits in its queue. Otherwise (nobody waits, a known task,
	// Reserved, a write that failed) Enqueue is as without HandOff.
	HandOff bool
}

// LeaseRequest asks for a lease.
type LeaseRequest struct {
	Worker string        // required: who holds the lease, recorded in LeaseGranted
	Queue  string        // untargeted leases take from this queue (DefaultQueue if empty)
	Task   string        // targeted: this task only, whatever its queue or reservation
	TTL    time.Duration // lease length; the backend's default if 0
	// Wait makes an untargeted Lease block until a task is ready or ctx ends,
	// instead of returning ErrNoReadyTask at once.
	Wait bool
}

// Release ends a segment.
type Release struct {
	// Next is DispatchSuspended or DispatchTerminal; anything else is
	// ErrInvalidArgument, reported before the lease is looked at.
	Next DispatchStatus
	// WakeOn is the condition a suspended task waits for. A matching wake
	// already buffered (it arrived early) makes the task ready at once.
	WakeOn *noeta.Wake
	// Reason is recorded as the suspend or terminal reason.
	Reason string
	// ConsumedWake names the matched wake this segment consumed; it must equal
	// the stored one (ErrWakeMismatch otherwise, nothing changed) and clears it.
	// A matched wake that is not consumed makes a suspended task ready again, so
	// it is re-delivered.
	ConsumedWake *noeta.Wake
}

// Failure describes a failed segment.
type Failure struct {
	// Retryable failures count toward the dispatcher's attempt cap (which never
	// resets) and make the task ready again until the cap; at the cap the task
	// is ready once more for a lease that only ends it (Lease.Ending, the
	// reason ReasonMaxAttemptsExceeded and this failure's reason). Others end
	// it at once.
	Retryable bool
	Reason    string
}

// DispatchState is what the dispatcher holds about a task, for inspection.
type DispatchState struct {
	Task         string
	Status       DispatchStatus
	Queue        string
	Reserved     bool
	Reason       string      // suspend or terminal reason
	WakeOn       *noeta.Wake // while suspended
	MatchedWake  *noeta.Wake // matched and not yet consumed
	PendingWakes int         // buffered wakes
	LeaseID      string
	Generation   uint64 // of the current or last lease
	Worker       string
	Expires      time.Time
	Heartbeats   int
	FailAttempts int
	ReclaimCount int
	Ending       string // the reason the dispatcher gave up on the task, until it is terminal (Lease.Ending)
}

// Dispatcher decides which worker runs which task and delivers every wake
// exactly once: durable at-least-once delivery of the matched wake, consumed
// idempotently by the worker (which recognises a redelivery by the TaskWoken
// already in the log).
//
// A task is in one of four states: ready (waiting for a worker), leased,
// suspended (waiting on a wake condition), terminal. Leases that stop
// heartbeating are requeued by the dispatcher itself; timers (timer_fired wake
// conditions) are fired by the dispatcher itself with the recorded deadline.
type Dispatcher interface {
	LeaseRegistry

	// Enqueue makes a task ready. A new task joins the back of its queue; a
	// ready task keeps its place and reservation; a leased, suspended or
	// terminal task is forced back to ready at the back of its queue, and a live
	// lease on it is invalidated (the way to fence a stuck worker). Attempts,
	// queue, buffered wakes and a pending Ending (the task was given up and its
	// end is not recorded yet) are kept.
	Enqueue(ctx context.Context, task string, opts EnqueueOptions) error

	// Lease grants the first ready, unreserved task of the queue (or the named
	// task, if ready) and returns it with the next generation and the matched
	// wake. ErrNoReadyTask if nothing qualifies (untargeted with Wait: blocks).
	// Concurrent callers never get the same task.
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)

	// Heartbeat extends a live lease by its TTL and returns the new expiry. An
	// expired lease is not revived: ErrInvalidLease. Past the heartbeat cap the
	// task is released (ready if a matched wake is in flight, else suspended
	// with ReasonLeaseQuotaExceeded) and ErrLeaseQuotaExceeded returned.
	Heartbeat(ctx context.Context, lease Lease) (time.Time, error)

	// Release ends the segment as rel says (see Release). ErrInvalidLease if the
	// lease is not live.
	Release(ctx context.Context, lease Lease, rel Release) error

	// Yield hands a leased task back: ready at the back of its queue, matched
	// wake kept.
	Yield(ctx context.Context, lease Lease) error

	// Fail ends a segment that failed (see Failure). The matched wake is kept.
	Fail(ctx context.Context, lease Lease, f Failure) error

	// Wake delivers a wake event. If the task is suspended on a condition the
	// event matches, it becomes the matched wake, the task becomes ready and
	// matched is true; otherwise the event is buffered, in arrival order, and
	// checked again at the task's next suspend. A human_response is never
	// buffered: it applies only to the suspend of this moment, and otherwise
	// is refused with ErrNotWaiting, or ErrAlreadyAnswered when another answer
	// on its handle was matched first (see CheckAnswer); buffered
	// human_responses (rows written before this rule) are dropped at the next
	// suspend. ErrNotFound for a task the dispatcher does not know;
	// ErrInvalidArgument for an invalid event.
	Wake(ctx context.Context, task string, event noeta.Wake) (matched bool, err error)

	// RequeueStale requeues every leased task whose lease has expired and
	// returns their ids. A task reclaimed reclaim_max times in a row without
	// progress is given up (ReasonStaleReclaimExceeded): requeued once more
	// for a lease whose Ending says so; when that lease expires too, the task
	// ends terminal instead and is not returned. The dispatcher also does this
	// on its own; calling it is a sweep on demand.
	RequeueStale(ctx context.Context) ([]string, error)

	// Inspect returns the dispatcher's state of task. ErrNotFound if unknown.
	Inspect(ctx context.Context, task string) (DispatchState, error)
}

// EventLog is a whole log backend: what the engine holds.
type EventLog interface {
	Reader
	Writer
	Subscriber
	TaskIndex
}

// MaxBatch is the most records one EmitBatch takes (JetStream's atomic batch
// allows 1000; a turn needs a handful).
const MaxBatch = 100

// BatchWriter appends several records of one task in one call, so a writer
// that has records needing no effect between them waits for durability once
// instead of once per record (ADR 0038). It is its own capability: a Writer
// without it is driven record by record by EmitAll.
type BatchWriter interface {
	// EmitBatch appends envs, in order, to the log of lease.Task under lease
	// and returns them as stored. The records land consecutively: no other
	// writer's record comes between them. Every record is fenced as an Emit
	// is (the generation's LeaseGranted, when needed, lands before the first);
	// ExpectLastSeq applies to the first record; IdempotencyKey covers the
	// whole batch: a repeat under the same lease returns the records the
	// first call wrote and writes nothing. The checks and their order are
	// Emit's; every record is checked (ErrInvalidArgument, ErrPayloadTooLarge)
	// before anything is written. envs must hold 1 to MaxBatch records, and a
	// baseline record (noeta.IsBaselineType: a snapshot) may only be the last
	// (readers locate a baseline by where it was stored, which a record
	// written in the same batch cannot know).
	//
	// What lands when it fails depends on the backend, and it says which
	// (Atomic): all or nothing, or a prefix in order. Either way the returned
	// slice holds exactly the records that became durable (none, some or,
	// with a nil error, all), and subscribers see each of them once, in
	// order, after they are durable and before EmitBatch returns. envs is
	// the caller's: EmitBatch neither keeps it nor returns it (the engine
	// reuses it for its next batch).
	EmitBatch(ctx context.Context, lease Lease, envs []Envelope, opts EmitOptions) ([]Envelope, error)

	// BatchAtomic reports whether a failed EmitBatch wrote nothing of envs
	// (true) or possibly a prefix of them (false).
	BatchAtomic() bool
}

// CheckBatch refuses a batch that is empty, too long, names another task
// than task in any record, or has a baseline record before its last.
func CheckBatch(task string, envs []Envelope) error {
	if len(envs) == 0 {
		return fmt.Errorf("%w: an empty batch for task %s", ErrInvalidArgument, task)
	}
	if len(envs) > MaxBatch {
		return fmt.Errorf("%w: a batch of %d records for task %s; at most %d", ErrInvalidArgument, len(envs), task, MaxBatch)
	}
	for i, env := range envs {
		if env.Task != "" && env.Task != task {
			return fmt.Errorf("%w: batch record %d (%s) is for task %q, the lease for %q", ErrInvalidArgument, i, env.Type, env.Task, task)
		}
		if i < len(envs)-1 && noeta.IsBaselineType(env.Type) {
			return fmt.Errorf("%w: batch record %d of %d is a %s; a baseline may only end a batch", ErrInvalidArgument, i, len(envs), env.Type)
		}
	}
	return nil
}

// EmitAll appends envs under lease through w: in one EmitBatch when w is a
// BatchWriter, else one Emit after another, each conditional on the last
// (ExpectLastSeq from opts for the first). The fallback gives a prefix on
// failure and takes no IdempotencyKey (ErrInvalidArgument). It returns the
// records that became durable, as EmitBatch does.
func EmitAll(ctx context.Context, w Writer, lease Lease, envs []Envelope, opts EmitOptions) ([]Envelope, error) {
	if bw, ok := w.(BatchWriter); ok {
		return bw.EmitBatch(ctx, lease, envs, opts)
	}
	if err := CheckBatch(lease.Task, envs); err != nil {
		return nil, err
	}
	if opts.IdempotencyKey != "" {
		return nil, fmt.Errorf("%w: an idempotency key on a batch needs a BatchWriter", ErrInvalidArgument)
	}
	out := make([]Envelope, 0, len(envs))
	expect := opts.ExpectLastSeq
	for _, env := range envs {
		stored, err := w.Emit(ctx, lease, env, EmitOptions{ExpectLastSeq: expect})
		if err != nil {
			return out, err
		}
		out = append(out, stored)
		expect = stored.Seq
	}
	return out, nil
}

// GiveUpReason is the reason a dispatcher gives up on a task with: what
// (one of its own reasons) and, when known, the last failure's reason.
func GiveUpReason(what, last string) string {
	if last == "" {
		return what
	}
	return what + ": " + last
}
