package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/schemas"
)

// Log is the JetStream event log: Reader, Writer, Subscriber, TaskIndex and
// ContentStore over one connection. It is safe for concurrent use; appends
// to one task from one Log are serialised, appends to different tasks are
// not.
type Log struct {
	cfg        Config
	nc         *nats.Conn
	js         jetstream.JetStream
	stream     jetstream.Stream
	streamName string
	subj       subjects
	idem       jetstream.KeyValue
	content    jetstream.ObjectStore
	// contentStream holds the bodies that fit a message (ADR 0111); nil in
	// a Reader until it is found.
	contentStream jetstream.Stream
	subs          eventlog.Subscribers
	closed        atomic.Bool
	// direct reads by batched direct gets, never a consumer: a Reader
	// always, a Log when its stream has one copy (ADR 0103).
	direct bool
	// batch is how EmitBatch writes (ADR 0038, 0040): never BatchAuto.
	batch BatchMode
	// group combines different tasks' writes into atomic batches (ADR
	// 0107); nil when Config.GroupCommit is 0.
	group *grouper

	// tasks caches the tails of the tasks appended to lately, bounded by
	// Config.TailCache.
	tasks tailCache

	corrupt atomic.Uint64
	waits   atomic.Uint64 // publishes to the task stream whose ack was awaited
}

var (
	_ eventlog.EventLog     = (*Log)(nil)
	_ eventlog.ContentStore = (*Log)(nil)
	_ eventlog.BatchWriter  = (*Log)(nil)
)

// taskState is what this Log knows of a task's tail. It is a cache: a write
// made on a stale tail fails its compare-and-set and refreshes it.
type taskState struct {
	mu    sync.Mutex
	known bool
	tail  tail
}

type tail struct {
	streamSeq uint64 // stream sequence of the last log record
	seq       uint64 // its Seq
	msgID     string // its message's Nats-Msg-Id: its envelope id, or its pack's first record's
	leaseID   string // lease of the newest generation in the log ("" before any)
	gen       uint64
	baseline  baseline // newest baseline record, including the tail itself
}

// Open connects a Log to JetStream over nc (which the caller owns and
// closes), creating the stream and buckets if they do not exist and refusing
// ones that exist with other settings. A task stream that is missing while
// its buckets exist was lost: ErrStreamLost, and nothing is created.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Log, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	l := &Log{cfg: c, nc: nc, js: js, streamName: c.streamName(), subj: subjects{c.Prefix}}
	if err := checkNotLost(ctx, js, c); err != nil {
		return nil, err
	}
	want := StreamConfig(c)
	// A replicated stream this Log creates allows atomic batches (ADR 0038),
	// so a later Log of the same stream may choose them.
	// So does a stream a Log with group commit creates (ADR 0107).
	want.AllowAtomicPublish = c.Replicas > 1 && c.Batch != BatchSequential || c.GroupCommit > 0
	if l.stream, err = ensureStream(ctx, js, want); err != nil {
		return nil, err
	}
	// A stream of one copy is read by direct gets: its one server is its
	// leader, so a read sees every acknowledged append, without the
	// ordered consumer's create, pull and delete (ADR 0103). A replicated
	// stream keeps ordered consumers.
	have := l.stream.CachedInfo().Config
	l.direct = have.Replicas <= 1 && have.AllowDirect
	l.batch = c.Batch
	switch c.Batch {
	case BatchAtomic:
		if err := l.enableAtomic(ctx); err != nil {
			return nil, err
		}
	case BatchAuto:
		l.batch = BatchPacked
	}
	if c.GroupCommit > 0 {
		if have.Replicas > 1 {
			return nil, fmt.Errorf("jetstream: Config.GroupCommit is for a stream of one copy; %s has %d (a replicated stream's writes already share their rounds)", l.streamName, have.Replicas)
		}
		if err := l.enableAtomic(ctx); err != nil {
			return nil, fmt.Errorf("group commit: %w", err)
		}
		l.group = newGrouper(l, c.GroupCommit)
	}
	if l.idem, err = ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      c.idemBucket(),
		Description: "noeta idempotency keys: (task, lease, key) -> the record it wrote",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}); err != nil {
		return nil, err
	}
	if l.content, err = ensureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket:      c.contentBucket(),
		Description: "noeta content store: bodies by sha256",
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}); err != nil {
		return nil, err
	}
	if l.contentStream, err = ensureStream(ctx, js, ContentStreamConfig(c)); err != nil {
		return nil, err
	}
	return l, nil
}

// Close makes every later call return eventlog.ErrClosed. The connection is
// the caller's.
func (l *Log) Close() error {
	l.closed.Store(true)
	if l.group != nil {
		l.group.close()
	}
	return nil
}

// DurableWaits counts the writes to the task stream whose acknowledgement
// (durability, with sync always) a caller waited for: a publish, an atomic
// batch's commit. Retries count again.
func (l *Log) DurableWaits() uint64 { return l.waits.Load() }

// CorruptRecords counts records reads skipped (with OnCorrupt set) or failed on.
func (l *Log) CorruptRecords() uint64 { return l.corrupt.Load() }

func (l *Log) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.closed.Load() {
		return eventlog.ErrClosed
	}
	return nil
}

func (l *Log) state(task string) *taskState {
	return l.tasks.get(task, l.cfg.TailCache)
}

// validatePayload checks a payload of a known type against its schema;
// typed says eventlog.FromTyped held for the caller's envelope (checked
// before PrepareRecord dropped the mark), and such a payload, which the
// engine built from its own struct, is not checked again (ADR 0037).
func validatePayload(env eventlog.Envelope, typed bool) error {
	if typed || !noeta.IsKnownEventType(env.Type) {
		return nil
	}
	if err := schemas.Validate(env.Type, env.Payload); err != nil {
		return fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	return nil
}

// readTail reads the task's tail from the stream leader.
func (l *Log) readTail(ctx context.Context, task string) (tail, error) {
	m, hdr, err := l.leaderGet(ctx, msgGetRequest{LastFor: l.subj.log(task)})
	if errors.Is(err, errNoMessage) {
		return tail{}, fmt.Errorf("%w: task %s", eventlog.ErrNotFound, task)
	}
	if err != nil {
		return tail{}, err
	}
	return tailOf(m, hdr)
}

func tailOf(m *storedMsg, hdr nats.Header) (tail, error) {
	bad := func(what string) (tail, error) {
		return tail{}, &CorruptRecordError{Subject: m.Subject, StreamSeq: m.Sequence, Err: fmt.Errorf("the log's last record has %s; nothing can be appended after it until it is repaired", what)}
	}
	seq, err := strconv.ParseUint(hdr.Get(hdrSeq), 10, 64)
	if err != nil || seq == 0 {
		return bad("no valid " + hdrSeq + " header")
	}
	t := tail{streamSeq: m.Sequence, seq: seq, msgID: hdr.Get(nats.MsgIdHdr), leaseID: hdr.Get(hdrLease)}
	if g := hdr.Get(hdrLeaseGen); g != "" {
		if t.gen, err = strconv.ParseUint(g, 10, 64); err != nil {
			return bad("a bad " + hdrLeaseGen + " header")
		}
	}
	t.baseline, _ = parseBaseline(hdr.Get(hdrBaseline))
	// A pack names each record's type in order; only its last may be a
	// baseline.
	if types := hdr.Values(hdrType); len(types) > 0 && noeta.IsBaselineType(types[len(types)-1]) {
		t.baseline = baseline{seq: seq, streamSeq: m.Sequence}
	}
	return t, nil
}

// conflict classifies a publish error: a failed compare-and-set (10071),
// an in-flight sibling write on a replicated stream (10164, retry as is).
func conflict(err error) (wrongLast, inFlight bool) {
	var jsErr jetstream.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		switch jsErr.APIError().ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence:
			return true, false
		case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return false, true
		}
	}
	return false, false
}

// publish publishes msg with expected last subject sequence expect, retrying
// 10164 with a short pause. It returns the ack, or wrongLast for a failed
// compare-and-set, or the error.
func (l *Log) publish(ctx context.Context, msg *nats.Msg, expect uint64) (*jetstream.PubAck, bool, error) {
	if l.group != nil {
		seq, alone, err := l.group.publish(ctx, msg, expect)
		if alone == nil {
			if err != nil {
				return nil, false, err
			}
			return l.groupAck(seq), false, nil
		}
		defer alone.done()
		if alone.gated {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, l.cfg.RequestTimeout)
			defer cancel()
		}
	}
	pause := 200 * time.Microsecond
	for {
		pctx, cancel := l.withTimeout(ctx)
		l.waits.Add(1)
		ack, err := l.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithRetryAttempts(2))
		cancel()
		if err == nil {
			return ack, false, nil
		}
		wrong, inFlight := conflict(err)
		if wrong {
			return nil, true, nil
		}
		if !inFlight {
			return nil, false, err
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 20*time.Millisecond)
	}
}

// Create implements eventlog.Writer.
func (l *Log) Create(ctx context.Context, env eventlog.Envelope) (eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	typed := eventlog.FromTyped(env)
	env, err := eventlog.PrepareRecord(env.Task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if env.Type != noeta.TypeTaskCreated {
		return eventlog.Envelope{}, fmt.Errorf("%w: genesis type is %q, want %s", eventlog.ErrInvalidArgument, env.Type, noeta.TypeTaskCreated)
	}
	if err := eventlog.CheckCap(env); err != nil {
		return eventlog.Envelope{}, err
	}
	if err := validatePayload(env, typed); err != nil {
		return eventlog.Envelope{}, err
	}
	var tc noeta.TaskCreated
	if err := json.Unmarshal(env.Payload, &tc); err == nil && tc.TaskID != "" && tc.TaskID != env.Task {
		return eventlog.Envelope{}, fmt.Errorf("%w: TaskCreated.task_id %q differs from the envelope's task %q", eventlog.ErrInvalidArgument, tc.TaskID, env.Task)
	}
	env.Time = l.cfg.Now()
	env.ID = noeta.NewIDAt(env.Time)
	env.Seq, env.Key, env.LeaseGen = 1, "", 0
	msg, err := encode(l.subj.log(env.Task), env, meta{})
	if err != nil {
		return eventlog.Envelope{}, err
	}
	ts := l.state(env.Task)
	ts.mu.Lock()
	ack, wrong, err := l.publish(ctx, msg, 0)
	if err == nil && wrong {
		// Either someone created it, or an earlier attempt of ours did.
		t, terr := l.readTail(ctx, env.Task)
		if terr != nil {
			ts.mu.Unlock()
			return eventlog.Envelope{}, terr
		}
		ts.tail, ts.known = t, true
		ts.mu.Unlock()
		if t.seq == 1 && t.msgID == env.ID {
			l.subs.Notify(ctx, env)
			return env, nil
		}
		return eventlog.Envelope{}, fmt.Errorf("%w: task %s", eventlog.ErrTaskExists, env.Task)
	}
	if err != nil {
		// Ambiguous (a timeout): it may have landed. The tail says.
		ts.known = false
		if t, terr := l.readTail(ctx, env.Task); terr == nil && t.seq == 1 && t.msgID == env.ID {
			ts.tail, ts.known = t, true
			ts.mu.Unlock()
			l.subs.Notify(ctx, env)
			return env, nil
		}
		ts.mu.Unlock()
		return eventlog.Envelope{}, fmt.Errorf("jetstream: create %s: %w", env.Task, err)
	}
	ts.tail, ts.known = tail{streamSeq: ack.Sequence, seq: 1, msgID: env.ID}, true
	ts.mu.Unlock()
	l.subs.Notify(ctx, env)
	return env, nil
}

// Emit implements eventlog.Writer.
func (l *Log) Emit(ctx context.Context, lease eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	task := lease.Task
	if task == "" {
		task = env.Task
	}
	typed := eventlog.FromTyped(env)
	env, err := eventlog.PrepareRecord(task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if err := validatePayload(env, typed); err != nil {
		return eventlog.Envelope{}, err
	}
	ts := l.state(task)
	ts.mu.Lock()
	out, notify, hit, err := l.emitLocked(ctx, ts, lease, env, opts)
	ts.mu.Unlock()
	if !hit {
		// Deliver whatever became durable, even when the call failed after it:
		// a LeaseGranted that landed before a refused record is in the log.
		l.subs.Notify(ctx, notify...)
	}
	if err != nil {
		return eventlog.Envelope{}, err
	}
	return out, nil
}

// emitLocked runs under ts.mu. It returns the stored record, every record it
// appended (to notify once the lock is released, also when it fails after an
// append), and whether this was an idempotent hit (nothing appended, nothing to
// notify). Every failure leaves through its one error return, with what was
// appended before it.
func (l *Log) emitLocked(ctx context.Context, ts *taskState, lease eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (out eventlog.Envelope, notify []eventlog.Envelope, hit bool, err error) {
	a := &appendOp{l: l, ts: ts, lease: lease, env: env, opts: opts}
	if opts.IdempotencyKey != "" && lease.ID != "" {
		orig, entry, err := l.idemLookup(ctx, env.Task, lease, opts.IdempotencyKey)
		if err != nil {
			return eventlog.Envelope{}, nil, false, err
		}
		if orig != nil {
			return *orig, nil, true, nil
		}
		a.idem = entry
	}
	out, err = a.run(ctx)
	if err != nil {
		return eventlog.Envelope{}, a.notify, false, err
	}
	return out, a.notify, false, nil
}

// appendOp is one fenced append to a task's log, under the task's lock: the
// record, what is known of the tail, and every record appended so far.
type appendOp struct {
	l     *Log
	ts    *taskState
	lease eventlog.Lease
	env   eventlog.Envelope
	opts  eventlog.EmitOptions
	idem  *idemEntry // the reserved idempotency key, if the append has one

	refreshed bool                // the tail was read during this append
	notify    []eventlog.Envelope // appended, in order: a LeaseGranted, the record
}

// attempt says how one try at the append ended.
type attempt int

const (
	appended attempt = iota
	// recheck: the tail was read again; check it at once.
	recheck
	// conflicted: another writer moved the tail first; pause, read it, try again.
	conflicted
)

// run tries until the record is appended or the checks refuse it. A conflict
// means another writer moved the tail; the checks decide whether we may still
// write. Retrying is bounded in time, not count: a new holder taking over from
// one still appending in a tight loop can lose several races before its
// LeaseGranted lands, and a jittered pause lets it win.
func (a *appendOp) run(ctx context.Context) (eventlog.Envelope, error) {
	if err := eventlog.CheckCap(a.env); err != nil {
		return eventlog.Envelope{}, err
	}
	if !a.ts.known {
		t, err := a.l.readTail(ctx, a.env.Task)
		if err != nil {
			return eventlog.Envelope{}, err
		}
		a.ts.tail, a.ts.known = t, true
	}
	a.env.LeaseGen = a.lease.Generation
	a.env.Key = ""
	giveUp := time.Now().Add(a.l.cfg.RequestTimeout)
	conflicts := 0
	for {
		out, res, err := a.try(ctx)
		if err != nil || res == appended {
			return out, err
		}
		if res == conflicted {
			conflicts++
			if err := a.pause(ctx, conflicts, giveUp); err != nil {
				return eventlog.Envelope{}, err
			}
		}
	}
}

// pause waits a jittered time that grows with the conflicts, then reads the
// tail right before the next attempt: a tail read before the pause would be
// stale by the end of it.
func (a *appendOp) pause(ctx context.Context, conflicts int, giveUp time.Time) error {
	if time.Now().After(giveUp) {
		return fmt.Errorf("jetstream: append to %s: gave up after %d conflicting attempts in %v", a.env.Task, conflicts, a.l.cfg.RequestTimeout)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(rand.Int64N(int64(100*time.Microsecond) << min(conflicts, 4)))):
	}
	return a.refresh(ctx)
}

// refresh reads the tail; a failed read leaves it unknown.
func (a *appendOp) refresh(ctx context.Context) error {
	t, err := a.l.readTail(ctx, a.env.Task)
	if err != nil {
		a.ts.known = false
		return err
	}
	a.ts.tail, a.ts.known, a.refreshed = t, true, true
	return nil
}

// try is one attempt against the known tail: may we write, is the log fenced
// by our lease, and the compare-and-set publish.
func (a *appendOp) try(ctx context.Context) (eventlog.Envelope, attempt, error) {
	if err := ctx.Err(); err != nil {
		return eventlog.Envelope{}, 0, err
	}
	if again, err := a.admit(ctx); err != nil || again {
		return eventlog.Envelope{}, recheck, err
	}
	if lost, err := a.fence(ctx); err != nil || lost {
		return eventlog.Envelope{}, conflicted, err
	}
	return a.write(ctx)
}

// admit decides from the tail whether this lease may append: the expected
// last seq, a lease given, not fenced off by a later or another lease, and
// live in the registry. again: the tail was stale and has been read again.
func (a *appendOp) admit(ctx context.Context) (again bool, err error) {
	task, lease, tl := a.env.Task, a.lease, a.ts.tail
	if a.opts.ExpectLastSeq != 0 && a.opts.ExpectLastSeq != tl.seq {
		if !a.refreshed {
			return true, a.refresh(ctx)
		}
		return false, fmt.Errorf("%w: task_id=%s, expected last seq %d, actual %d", eventlog.ErrStaleSequence, task, a.opts.ExpectLastSeq, tl.seq)
	}
	if lease.ID == "" || lease.Generation == 0 {
		return false, fmt.Errorf("%w: no lease (id %q, generation %d) given for task %s", eventlog.ErrInvalidLease, lease.ID, lease.Generation, task)
	}
	if tl.gen > lease.Generation || tl.gen == lease.Generation && tl.leaseID != lease.ID {
		return false, fmt.Errorf("%w: task_id=%s, lease_id=%s generation %d, log fenced by lease %s generation %d",
			eventlog.ErrLeaseLost, task, lease.ID, lease.Generation, tl.leaseID, tl.gen)
	}
	// The registry is asked after the tail was read: a takeover that
	// happens after this check appends after that tail, so our
	// compare-and-set on it fails.
	return false, a.l.checkRegistry(ctx, lease)
}

// fence appends this lease's LeaseGranted when the tail is another lease's.
// lost: the tail moved first.
func (a *appendOp) fence(ctx context.Context) (lost bool, err error) {
	if a.ts.tail.leaseID == a.lease.ID {
		return false, nil
	}
	lg, err := a.l.grant(ctx, a.ts, a.lease, a.env.CorrelationID)
	if err != nil || lg == nil {
		return lg == nil, err
	}
	a.notify = append(a.notify, *lg)
	return false, nil
}

// write publishes the record after the known tail and, when it is stored,
// moves the tail to it.
func (a *appendOp) write(ctx context.Context) (eventlog.Envelope, attempt, error) {
	l, ts, task := a.l, a.ts, a.env.Task
	env := &a.env
	env.Time = l.cfg.Now()
	env.ID = noeta.NewIDAt(env.Time)
	env.Seq = ts.tail.seq + 1
	if a.idem != nil {
		if err := l.idemReserve(ctx, a.idem, env.ID, ts.tail.streamSeq); err != nil {
			return eventlog.Envelope{}, 0, err
		}
	}
	msg, err := encode(l.subj.log(task), *env, meta{leaseID: a.lease.ID, baseline: ts.tail.baseline, idemKey: a.opts.IdempotencyKey})
	if err != nil {
		return eventlog.Envelope{}, 0, err
	}
	expect := ts.tail.streamSeq
	ack, wrong, err := l.publish(ctx, msg, expect)
	if err != nil || wrong {
		if a.idem != nil {
			// An earlier attempt with this key (one whose publish timed
			// out) may have landed late, right where this one was aimed.
			// It is the original: writing this one too would break the key.
			if orig, ok := l.attemptAfter(ctx, task, expect, a.lease.ID, a.opts.IdempotencyKey); ok {
				if rerr := a.refresh(ctx); rerr != nil {
					return eventlog.Envelope{}, 0, rerr
				}
				l.idemCommit(ctx, a.idem, orig.env, orig.streamSeq)
				a.notify = append(a.notify, orig.env)
				return orig.env, appended, nil
			}
		}
		// Ambiguous or refused: the tail says which.
		if rerr := a.refresh(ctx); rerr != nil {
			return eventlog.Envelope{}, 0, rerr
		}
		switch {
		case ts.tail.msgID == env.ID:
			ack = &jetstream.PubAck{Sequence: ts.tail.streamSeq}
		case err != nil && !wrong:
			return eventlog.Envelope{}, 0, fmt.Errorf("jetstream: append to %s: %w", task, err)
		default:
			return eventlog.Envelope{}, conflicted, nil
		}
	}
	t := ts.tail
	t.streamSeq, t.seq, t.msgID, t.leaseID, t.gen = ack.Sequence, env.Seq, env.ID, a.lease.ID, a.lease.Generation
	if noeta.IsBaselineType(env.Type) {
		t.baseline = baseline{seq: env.Seq, streamSeq: ack.Sequence}
	}
	ts.tail = t
	if a.idem != nil {
		l.idemCommit(ctx, a.idem, *env, ack.Sequence)
	}
	a.notify = append(a.notify, *env)
	return *env, appended, nil
}

func (l *Log) checkRegistry(ctx context.Context, lease eventlog.Lease) error {
	if l.cfg.Registry == nil {
		return fmt.Errorf("%w: no lease registry configured for task %s", eventlog.ErrInvalidLease, lease.Task)
	}
	ok, err := l.cfg.Registry.Valid(ctx, lease)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: task_id=%s, lease_id=%s is not live", eventlog.ErrInvalidLease, lease.Task, lease.ID)
	}
	return nil
}

// leaseGranted is the record that fences a log for lease; the fence belongs
// to the task tree of the record it precedes (correlationID).
func leaseGranted(lease eventlog.Lease, correlationID string) (eventlog.Envelope, error) {
	worker := lease.Worker
	if worker == "" {
		worker = "unknown"
	}
	lg, err := eventlog.NewEnvelope(lease.Task, eventlog.OriginEngine, worker,
		noeta.LeaseGranted{LeaseID: lease.ID, Generation: lease.Generation, Worker: worker})
	lg.CorrelationID = correlationID
	return lg, err
}

// grant appends the LeaseGranted of lease after the known tail. It returns
// nil (and no error) when the tail moved: the caller re-reads and decides.
func (l *Log) grant(ctx context.Context, ts *taskState, lease eventlog.Lease, correlationID string) (*eventlog.Envelope, error) {
	lg, err := leaseGranted(lease, correlationID)
	if err != nil {
		return nil, err
	}
	lg.Time = l.cfg.Now()
	lg.ID = noeta.NewIDAt(lg.Time)
	lg.Seq = ts.tail.seq + 1
	lg.LeaseGen = lease.Generation
	msg, err := encode(l.subj.log(lease.Task), lg, meta{leaseID: lease.ID, baseline: ts.tail.baseline})
	if err != nil {
		return nil, err
	}
	ack, wrong, err := l.publish(ctx, msg, ts.tail.streamSeq)
	if wrong || err != nil {
		t, rerr := l.readTail(ctx, lease.Task)
		if rerr != nil {
			ts.known = false
			return nil, rerr
		}
		ts.tail = t
		if t.msgID == lg.ID {
			return &lg, nil
		}
		if err != nil && !wrong {
			return nil, fmt.Errorf("jetstream: lease grant on %s: %w", lease.Task, err)
		}
		return nil, nil
	}
	ts.tail = tail{streamSeq: ack.Sequence, seq: lg.Seq, msgID: lg.ID, leaseID: lease.ID, gen: lease.Generation, baseline: ts.tail.baseline}
	return &lg, nil
}
