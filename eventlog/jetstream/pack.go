package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// A pack is several consecutive log records of one task in one JetStream
// message (ADR 0040): the body is a CloudEvents JSON batch (an array of
// structured-mode events, each exactly the body a record of its own would
// have), and one compare-and-set on the log's tail fences all of them. One
// message is one durable write, so a pack costs one fsync and one wait
// whatever the number of records in it, on a single node as on a cluster.
const (
	contentTypeCEBatch = "application/cloudevents-batch+json"
	// hdrCount is the number of records of a pack; Noeta-Seq is the last
	// one's, Nats-Msg-Id the first one's id, and Noeta-Type and
	// Noeta-Origin have one value per record, in order.
	hdrCount = "Noeta-Count"
)

// headerSize is what h takes on the wire, near enough.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// encodePack builds the message of envs (consecutive records of one log,
// their bodies already written) under m. One record is an ordinary message.
func encodePack(subject string, envs []eventlog.Envelope, bodies [][]byte, m meta) *nats.Msg {
	if len(envs) == 1 {
		return encodeBody(subject, envs[0], bodies[0], m)
	}
	n := 1
	for _, b := range bodies {
		n += len(b) + 1
	}
	body := make([]byte, 0, n)
	body = append(body, '[')
	for i, b := range bodies {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, b...)
	}
	body = append(body, ']')
	first, last := envs[0], envs[len(envs)-1]
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set("Content-Type", contentTypeCEBatch)
	for _, env := range envs {
		msg.Header.Add(hdrType, env.Type)
		msg.Header.Add(hdrOrigin, string(env.Origin))
	}
	msg.Header.Set(hdrSeq, strconv.FormatUint(last.Seq, 10))
	msg.Header.Set(hdrCount, strconv.Itoa(len(envs)))
	for _, env := range envs {
		if env.TraceParent != "" {
			msg.Header.Set(hdrTraceParent, env.TraceParent)
			break
		}
	}
	m.apply(msg.Header, last.LeaseGen, first.ID)
	return msg
}

// isPack: the body is a JSON array, not one event. The body decides, not
// the Content-Type header, so a message cannot pass for one kind while
// holding the other.
func isPack(data []byte) bool {
	b := bytes.TrimLeft(data, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

// decodeMsg reads a stored message back as the records it holds: one, or a
// pack's in order. Anything that is not a valid record (or pack) of ours is a
// *CorruptRecordError for the whole message.
func decodeMsg(subject string, streamSeq uint64, hdr nats.Header, data []byte) ([]record, error) {
	if !isPack(data) {
		r, err := decode(subject, streamSeq, hdr, data)
		if err != nil {
			return nil, err
		}
		rs := []record{r}
		if err := headersName(hdr, rs); err != nil {
			return nil, &CorruptRecordError{Subject: subject, StreamSeq: streamSeq, Err: err}
		}
		return rs, nil
	}
	corrupt := func(format string, args ...any) ([]record, error) {
		return nil, &CorruptRecordError{Subject: subject, StreamSeq: streamSeq, Err: fmt.Errorf("pack: "+format, args...)}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return corrupt("body is not a JSON array of CloudEvents: %v", err)
	}
	if len(raws) == 0 || len(raws) > eventlog.MaxBatch {
		return corrupt("%d records; want 1 to %d", len(raws), eventlog.MaxBatch)
	}
	out := make([]record, len(raws))
	for i, raw := range raws {
		r, err := decode(subject, streamSeq, hdr, raw)
		if err != nil {
			return nil, err
		}
		env, first := r.env, out[0].env
		switch {
		case env.Seq == 0 || env.Key != "":
			return corrupt("record %d has no sequence or an inbox key: a pack holds log records only", i)
		case i > 0 && env.Task != first.Task:
			return corrupt("record %d is of task %q, record 0 of %q", i, env.Task, first.Task)
		case i > 0 && env.Seq != first.Seq+uint64(i):
			return corrupt("record %d has sequence %d, want %d", i, env.Seq, first.Seq+uint64(i))
		case i > 0 && env.LeaseGen != first.LeaseGen:
			return corrupt("record %d has lease generation %d, record 0 %d", i, env.LeaseGen, first.LeaseGen)
		case i < len(raws)-1 && noeta.IsBaselineType(env.Type):
			return corrupt("record %d is a baseline (%s) before the end of the pack", i, env.Type)
		}
		out[i] = r
	}
	last := out[len(out)-1].env.Seq
	if hdr != nil {
		if s := hdr.Get(hdrSeq); s != "" && s != strconv.FormatUint(last, 10) {
			return corrupt("%s header %s, last record's sequence %d", hdrSeq, s, last)
		}
		if s := hdr.Get(hdrCount); s != "" && s != strconv.Itoa(len(out)) {
			return corrupt("%s header %s, %d records", hdrCount, s, len(out))
		}
		if err := headersName(hdr, out); err != nil {
			return corrupt("%v", err)
		}
	}
	return out, nil
}

// headersName checks that a message's per-record headers, where present,
// name the records its body holds, in order: readers that go by the
// headers alone (the tail's baseline, a stream browser) must see what the
// body says.
func headersName(hdr nats.Header, rs []record) error {
	for _, h := range []struct {
		name string
		of   func(eventlog.Envelope) string
	}{
		{hdrType, func(e eventlog.Envelope) string { return e.Type }},
		{hdrOrigin, func(e eventlog.Envelope) string { return string(e.Origin) }},
	} {
		vs := hdr.Values(h.name)
		if len(vs) == 0 {
			continue
		}
		if len(vs) != len(rs) {
			return fmt.Errorf("%d %s headers for %d records", len(vs), h.name, len(rs))
		}
		for i, r := range rs {
			if v := h.of(r.env); vs[i] != v {
				return fmt.Errorf("%s header %d is %q, its record's is %q", h.name, i, vs[i], v)
			}
		}
	}
	return nil
}

// packOp writes a batch as one pack: appendOp's admission for the first
// record, then one compare-and-set publish of the whole batch, with the
// generation's LeaseGranted first in the same message when the log is
// another lease's (one durable write where an append pays two).
type packOp struct {
	appendOp
	envs []eventlog.Envelope
	// built is the pack fits built, which the first write sends when the
	// tail is still the one it was built after.
	built *builtPack
}

// builtPack is a pack built after a tail (its seq and lease).
type builtPack struct {
	after   uint64
	leaseID string
	recs    []eventlog.Envelope
	grant   bool
	msg     *nats.Msg
}

func (b *packOp) run(ctx context.Context) ([]eventlog.Envelope, error) {
	a := &b.appendOp
	if !a.ts.known {
		if err := a.refresh(ctx); err != nil {
			return nil, err
		}
	}
	if err := b.fits(); err != nil {
		return nil, err
	}
	return a.runBatch(ctx, false, b.write)
}

// build stamps the pack's records after the known tail at now, the
// generation's LeaseGranted first when the tail is another lease's, and
// writes their bodies. grant says whether the first is the LeaseGranted.
func (b *packOp) build(now time.Time) (recs []eventlog.Envelope, bodies [][]byte, grant bool, err error) {
	a := &b.appendOp
	tl := a.ts.tail
	if grant = tl.leaseID != a.lease.ID; grant {
		lg, err := leaseGranted(a.lease, a.env.CorrelationID)
		if err != nil {
			return nil, nil, false, err
		}
		recs = append(recs, lg)
	}
	recs = append(recs, b.envs...)
	bodies = make([][]byte, len(recs))
	for i := range recs {
		env := &recs[i]
		env.Time = now
		env.ID = noeta.NewIDAt(now)
		env.Seq = tl.seq + 1 + uint64(i)
		env.LeaseGen = a.lease.Generation
		env.Key = ""
		if bodies[i], err = cloudEventBody(*env); err != nil {
			return nil, nil, false, err
		}
	}
	return recs, bodies, grant, nil
}

// fits refuses, before anything is written, a batch whose pack the server
// would refuse for its size, so a batch stays all or nothing. The pack is
// built as write will build it; ids and times then differ by a few bytes,
// which the margin covers. The engine's batches are a few records (ADR
// 0040).
func (b *packOp) fits() error {
	a := &b.appendOp
	p, err := b.pack(a.l.cfg.Now())
	if err != nil {
		return err
	}
	size := len(p.msg.Data) + headerSize(p.msg.Header) + 64*len(p.recs)
	if max := a.l.nc.MaxPayload(); int64(size) > max {
		return fmt.Errorf("%w: a batch of %d records of task %s is %d bytes in one message, more than the server's max payload (%d); raise max_payload or write this log with BatchSequential",
			eventlog.ErrInvalidArgument, len(b.envs), a.env.Task, size, max)
	}
	// The first write sends this pack if the tail has not moved: building
	// it again costs as much as the rest of the append's own work.
	b.built = p
	return nil
}

// pack builds the pack after the known tail at now.
func (b *packOp) pack(now time.Time) (*builtPack, error) {
	a := &b.appendOp
	recs, bodies, grant, err := b.build(now)
	if err != nil {
		return nil, err
	}
	return &builtPack{
		after: a.ts.tail.seq, leaseID: a.ts.tail.leaseID, recs: recs, grant: grant,
		msg: encodePack(a.l.subj.log(a.env.Task), recs, bodies, meta{leaseID: a.lease.ID, baseline: a.ts.tail.baseline, idemKey: a.opts.IdempotencyKey}),
	}, nil
}

// next is the pack the next write sends: the one fits built when the tail
// is still the one it was built after, else one built now. A pack is sent
// once: a write after a conflict builds its own, with fresh ids.
func (b *packOp) next() (*builtPack, error) {
	p := b.built
	b.built = nil
	if p != nil && p.after == b.ts.tail.seq && p.leaseID == b.ts.tail.leaseID {
		return p, nil
	}
	return b.pack(b.l.cfg.Now())
}

// write publishes the pack after the known tail; on success it moves the
// tail to the pack's last record.
func (b *packOp) write(ctx context.Context) ([]eventlog.Envelope, attempt, error) {
	a := &b.appendOp
	l, ts, task, idem := a.l, a.ts, a.env.Task, a.idem
	p, err := b.next()
	if err != nil {
		return nil, 0, err
	}
	all, grant, msg := p.recs, p.grant, p.msg
	recs := all
	if grant {
		recs = all[1:]
	}
	expect := ts.tail.streamSeq
	if idem != nil {
		if err := l.idemReserve(ctx, idem, recs[0].ID, expect); err != nil {
			return nil, 0, err
		}
	}
	ack, wrong, err := l.publish(ctx, msg, expect)
	streamSeq := uint64(0)
	if err == nil && !wrong {
		streamSeq = ack.Sequence
	} else {
		if idem != nil {
			// An earlier attempt with this key (one whose publish timed
			// out) may have landed late, right where this one was aimed.
			if rs, ok := l.packAfter(ctx, task, expect, a.lease.ID, a.opts.IdempotencyKey); ok {
				if rerr := a.refresh(ctx); rerr != nil {
					return nil, 0, rerr
				}
				lgs := granted(rs)
				rs = rs[len(lgs):]
				l.idemCommit(ctx, idem, rs[0].env, rs[0].streamSeq)
				a.notify = append(a.notify, lgs...)
				out := make([]eventlog.Envelope, len(rs))
				for i, r := range rs {
					out[i] = r.env
				}
				return out, appended, nil
			}
		}
		// Ambiguous or refused: the tail says which. A pack is one
		// message, so it landed exactly when the tail is it.
		if rerr := a.refresh(ctx); rerr != nil {
			return nil, 0, rerr
		}
		switch {
		case ts.tail.msgID == all[0].ID && ts.tail.seq == all[len(all)-1].Seq:
			streamSeq = ts.tail.streamSeq
		case err != nil && !wrong:
			return nil, 0, fmt.Errorf("jetstream: batch append to %s: %w", task, err)
		default:
			return nil, conflicted, nil
		}
	}
	last := all[len(all)-1]
	t := ts.tail
	t.streamSeq, t.seq, t.msgID, t.leaseID, t.gen = streamSeq, last.Seq, all[0].ID, a.lease.ID, a.lease.Generation
	if noeta.IsBaselineType(last.Type) {
		t.baseline = baseline{seq: last.Seq, streamSeq: streamSeq}
	}
	ts.tail = t
	if idem != nil {
		l.idemCommit(ctx, idem, recs[0], streamSeq)
	}
	if grant {
		a.notify = append(a.notify, all[0])
	}
	return recs, appended, nil
}

// granted returns the LeaseGranted records a pack opens with (its
// generation's fence, written with the batch).
func granted(rs []record) []eventlog.Envelope {
	var out []eventlog.Envelope
	for _, r := range rs {
		if r.env.Type != noeta.TypeLeaseGranted || len(out) == len(rs)-1 {
			break
		}
		out = append(out, r.env)
	}
	return out
}

// packAfter returns the records of the log message right after stream
// sequence after if it was written under lease with key.
func (l *Log) packAfter(ctx context.Context, task string, after uint64, leaseID, key string) ([]record, bool) {
	m, hdr, err := l.leaderGet(ctx, msgGetRequest{Seq: after + 1, NextFor: l.subj.log(task)})
	if err != nil || !sameKey(hdr, leaseID, key) {
		return nil, false
	}
	rs, err := decodeMsg(m.Subject, m.Sequence, hdr, m.Data)
	if err != nil {
		return nil, false
	}
	return rs, true
}
