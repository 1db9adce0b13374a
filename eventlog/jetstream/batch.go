package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// BatchMode chooses how EmitBatch writes a batch (ADR 0038, 0040).
type BatchMode int

const (
	// BatchAuto is BatchPacked.
	BatchAuto BatchMode = iota
	// BatchSequential writes each record as its own message with its own
	// compare-and-set: on failure a prefix of the batch may be in the log.
	// It keeps one record per message for consumers that read the stream
	// without this package.
	BatchSequential
	// BatchAtomic writes the batch as one JetStream atomic batch (nats-server
	// 2.12+, the stream's allow_atomic set by Open): all or nothing, one
	// reply awaited. On a single node the server stages every batch in a
	// temporary file store, which costs more than the appends it replaces.
	BatchAtomic
	// BatchPacked writes the batch as one message holding every record (a
	// CloudEvents JSON batch) with one compare-and-set: all or nothing, one
	// durable write, on a single node as on a cluster.
	BatchPacked
)

func (m BatchMode) valid() bool { return m >= BatchAuto && m <= BatchPacked }

// ParseBatchMode reads a mode by its name: auto (or ""), packed,
// sequential, atomic.
func ParseBatchMode(s string) (BatchMode, error) {
	for m := BatchAuto; m <= BatchPacked; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	if s == "" {
		return BatchAuto, nil
	}
	return BatchAuto, fmt.Errorf("jetstream: batch mode %q, want auto, packed, sequential or atomic", s)
}

func (m BatchMode) String() string {
	switch m {
	case BatchAuto:
		return "auto"
	case BatchSequential:
		return "sequential"
	case BatchAtomic:
		return "atomic"
	case BatchPacked:
		return "packed"
	}
	return "BatchMode(" + strconv.Itoa(int(m)) + ")"
}

// Headers of JetStream's atomic batch publish (ADR-50).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
	hdrExpectLast  = "Nats-Expected-Last-Subject-Sequence"
)

// enableAtomic sets allow_atomic on the task stream when the Log writes
// batches atomically; it is off on streams created before batches.
func (l *Log) enableAtomic(ctx context.Context) error {
	cfg := l.stream.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowAtomicPublish = true
	s, err := l.js.UpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("jetstream: enable atomic batches on stream %s: %w", cfg.Name, err)
	}
	l.stream = s
	return nil
}

// Batch is how EmitBatch writes on this Log (BatchAuto resolved).
func (l *Log) Batch() BatchMode { return l.batch }

// BatchAtomic implements eventlog.BatchWriter: packed and atomic batches are
// all or nothing, sequential ones leave a prefix.
func (l *Log) BatchAtomic() bool { return l.batch != BatchSequential }

// EmitBatch implements eventlog.BatchWriter. Packed (the default): one
// message holding the batch, fenced by one compare-and-set on the log's tail
// (ADR 0040). Atomic: one JetStream atomic batch whose first message carries
// that compare-and-set. Either way a stale holder's batch fails whole.
// Sequential: one fenced append after another, each conditional on the one
// before, so the records are consecutive and a failure leaves a prefix.
func (l *Log) EmitBatch(ctx context.Context, lease eventlog.Lease, envs []eventlog.Envelope, opts eventlog.EmitOptions) ([]eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	task := lease.Task
	if task == "" && len(envs) > 0 {
		task = envs[0].Task
	}
	if err := eventlog.CheckBatch(task, envs); err != nil {
		return nil, err
	}
	prepared := make([]eventlog.Envelope, len(envs))
	for i, env := range envs {
		typed := eventlog.FromTyped(env)
		p, err := eventlog.PrepareRecord(task, env)
		if err != nil {
			return nil, fmt.Errorf("batch record %d: %w", i, err)
		}
		if err := validatePayload(p, typed); err != nil {
			return nil, fmt.Errorf("batch record %d: %w", i, err)
		}
		prepared[i] = p
	}
	ts := l.state(task)
	ts.mu.Lock()
	out, notify, hit, err := l.emitBatchLocked(ctx, ts, lease, prepared, opts)
	ts.mu.Unlock()
	if !hit {
		l.subs.Notify(ctx, notify...)
	}
	return out, err
}

// emitBatchLocked runs under ts.mu. It returns the records of envs that are
// durable, every record appended (a LeaseGranted too) to notify, and whether
// this was an idempotent hit.
func (l *Log) emitBatchLocked(ctx context.Context, ts *taskState, lease eventlog.Lease, envs []eventlog.Envelope, opts eventlog.EmitOptions) (out, notify []eventlog.Envelope, hit bool, err error) {
	var entry *idemEntry
	if opts.IdempotencyKey != "" && lease.ID != "" {
		orig, e, err := l.idemLookup(ctx, envs[0].Task, lease, opts.IdempotencyKey)
		if err != nil {
			return nil, nil, false, err
		}
		if orig != nil {
			recs, err := l.batchFrom(ctx, *orig, e.count)
			return recs, nil, true, err
		}
		entry = e
		entry.count = len(envs)
	}
	for i, env := range envs {
		if err := eventlog.CheckCap(env); err != nil {
			return nil, nil, false, fmt.Errorf("batch record %d: %w", i, err)
		}
	}
	switch l.batch {
	case BatchPacked:
		b := &packOp{appendOp: appendOp{l: l, ts: ts, lease: lease, env: envs[0], opts: opts, idem: entry}, envs: envs}
		out, err := b.run(ctx)
		return out, append(b.notify, out...), false, err
	case BatchAtomic:
		b := &batchOp{appendOp: appendOp{l: l, ts: ts, lease: lease, env: envs[0], opts: opts, idem: entry}, envs: envs}
		out, err := b.run(ctx)
		return out, append(b.notify, out...), false, err
	}
	expect := opts.ExpectLastSeq
	for i, env := range envs {
		a := &appendOp{l: l, ts: ts, lease: lease, env: env, opts: eventlog.EmitOptions{ExpectLastSeq: expect}}
		if i == 0 {
			a.opts.IdempotencyKey, a.idem = opts.IdempotencyKey, entry
		}
		stored, err := a.run(ctx)
		notify = append(notify, a.notify...)
		if err != nil {
			return out, notify, false, err
		}
		out = append(out, stored)
		expect = stored.Seq
	}
	return out, notify, false, nil
}

// batchFrom reads the n records a key wrote, from first on (fewer when a
// sequential batch stopped part way).
func (l *Log) batchFrom(ctx context.Context, first eventlog.Envelope, n int) ([]eventlog.Envelope, error) {
	if n <= 1 {
		return []eventlog.Envelope{first}, nil
	}
	recs, err := l.Read(ctx, first.Task, first.Seq-1)
	if err != nil {
		return nil, err
	}
	out := []eventlog.Envelope{}
	for _, r := range recs {
		if len(out) == n || r.LeaseGen != first.LeaseGen {
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// batchOp is one atomic batch: appendOp's checks and fence for the first
// record, then every record in one atomic publish.
type batchOp struct {
	appendOp
	envs []eventlog.Envelope
}

func (b *batchOp) run(ctx context.Context) ([]eventlog.Envelope, error) {
	a := &b.appendOp
	if !a.ts.known {
		if err := a.refresh(ctx); err != nil {
			return nil, err
		}
	}
	return a.runBatch(ctx, true, b.write)
}

// runBatch tries a batch write until it lands or the checks refuse it: the
// first record's admission as an append's, the fence (a LeaseGranted of its
// own, unless write carries it), then write; a conflict pauses, reads the
// tail again and retries, bounded in time.
func (a *appendOp) runBatch(ctx context.Context, fence bool, write func(context.Context) ([]eventlog.Envelope, attempt, error)) ([]eventlog.Envelope, error) {
	giveUp := time.Now().Add(a.l.cfg.RequestTimeout)
	conflicts := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		again, err := a.admit(ctx)
		if err != nil {
			return nil, err
		}
		if again {
			continue
		}
		lost := false
		if fence {
			if lost, err = a.fence(ctx); err != nil {
				return nil, err
			}
		}
		if !lost {
			out, res, err := write(ctx)
			if err != nil || res == appended {
				return out, err
			}
		}
		conflicts++
		if err := a.pause(ctx, conflicts, giveUp); err != nil {
			return nil, err
		}
	}
}

// write publishes the batch after the known tail; on success it moves the
// tail to the batch's last record.
func (b *batchOp) write(ctx context.Context) ([]eventlog.Envelope, attempt, error) {
	a := &b.appendOp
	l, ts, task := a.l, a.ts, a.env.Task
	now := l.cfg.Now()
	recs := make([]eventlog.Envelope, len(b.envs))
	msgs := make([]*nats.Msg, len(b.envs))
	for i, env := range b.envs {
		env.Time = now
		env.ID = noeta.NewIDAt(now)
		env.Seq = ts.tail.seq + 1 + uint64(i)
		env.LeaseGen = a.lease.Generation
		env.Key = ""
		m := meta{leaseID: a.lease.ID, baseline: ts.tail.baseline}
		if i == 0 {
			m.idemKey = a.opts.IdempotencyKey
		}
		msg, err := encode(l.subj.log(task), env, m)
		if err != nil {
			return nil, 0, err
		}
		recs[i], msgs[i] = env, msg
	}
	if a.idem != nil {
		if err := l.idemReserve(ctx, a.idem, recs[0].ID, ts.tail.streamSeq); err != nil {
			return nil, 0, err
		}
	}
	expect := ts.tail.streamSeq
	lastSeq, wrong, err := l.publishBatch(ctx, msgs, expect)
	if err != nil || wrong {
		// Ambiguous or refused: the tail says which. All or nothing, so
		// the batch landed exactly when its last record is the tail.
		last := recs[len(recs)-1]
		if rerr := a.refresh(ctx); rerr != nil {
			return nil, 0, rerr
		}
		switch {
		case ts.tail.msgID == last.ID:
			lastSeq = ts.tail.streamSeq
		case err != nil && !wrong:
			return nil, 0, fmt.Errorf("jetstream: batch append to %s: %w", task, err)
		default:
			return nil, conflicted, nil
		}
	}
	t := ts.tail
	t.streamSeq, t.seq, t.msgID, t.leaseID, t.gen = lastSeq, recs[len(recs)-1].Seq, recs[len(recs)-1].ID, a.lease.ID, a.lease.Generation
	if last := recs[len(recs)-1]; noeta.IsBaselineType(last.Type) {
		t.baseline = baseline{seq: last.Seq, streamSeq: lastSeq}
	}
	ts.tail = t
	// An idempotency entry stays as reserved: it names the first record by
	// its envelope id and the tail it followed, which a lookup resolves (the
	// first record's stream sequence is not in the commit's reply).
	return recs, appended, nil
}

// batchAck is the reply to an atomic batch's commit.
type batchAck struct {
	Seq   uint64 `json:"seq"`
	Batch string `json:"batch"`
	Count int    `json:"count"`
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// errBatchUnsent: the commit of an atomic batch was never taken (a message
// the client could not send, no stream to answer): nothing of it is stored.
var errBatchUnsent = errors.New("jetstream: atomic batch not sent")

// commitAtomic sends msgs as one atomic batch, their compare-and-set headers
// set by the caller, and returns the commit's reply: its error, or the
// stream sequence of the last message (the batch is stored in one piece).
func commitAtomic(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) (batchAck, error) {
	id := noeta.NewID()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		m.Header.Del(hdrBatchCommit)
	}
	msgs[len(msgs)-1].Header.Set(hdrBatchCommit, "1")
	for _, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return batchAck{}, fmt.Errorf("%w: %w", errBatchUnsent, err)
		}
	}
	reply, err := nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if errors.Is(err, nats.ErrNoResponders) {
		return batchAck{}, fmt.Errorf("%w: %w", errBatchUnsent, err)
	}
	if err != nil {
		return batchAck{}, err
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return batchAck{}, fmt.Errorf("jetstream: atomic batch reply %q: %w", reply.Data, err)
	}
	if ack.Error == nil && (ack.Count != len(msgs) || ack.Seq < uint64(len(msgs))) {
		return batchAck{}, fmt.Errorf("jetstream: atomic batch stored %d messages up to %d, sent %d", ack.Count, ack.Seq, len(msgs))
	}
	return ack, nil
}

// publishBatch publishes msgs as one atomic batch, the first conditional on
// the log's last stream sequence being expect, and returns the stream
// sequence of the last. wrong: the compare-and-set failed. A sibling write in
// flight (10164) is retried as a new batch after a short pause.
func (l *Log) publishBatch(ctx context.Context, msgs []*nats.Msg, expect uint64) (uint64, bool, error) {
	pause := 200 * time.Microsecond
	msgs[0].Header.Set(hdrExpectLast, strconv.FormatUint(expect, 10))
	for {
		pctx, cancel := l.withTimeout(ctx)
		l.waits.Add(1)
		ack, err := commitAtomic(pctx, l.nc, msgs)
		cancel()
		if err != nil {
			return 0, false, err
		}
		if ack.Error == nil {
			return ack.Seq, false, nil
		}
		switch jetstream.ErrorCode(ack.Error.ErrCode) {
		case jetstream.JSErrCodeStreamWrongLastSequence:
			return 0, true, nil
		case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		default:
			return 0, false, fmt.Errorf("jetstream: atomic batch refused: %s (%d)", ack.Error.Description, ack.Error.ErrCode)
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 20*time.Millisecond)
	}
}
