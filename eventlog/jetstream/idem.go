package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
)

// An idempotency entry lives in its own bucket, keyed by (task, lease, key),
// and outlives the stream's dedupe window. It is reserved before the publish
// (naming the envelope id and the tail it was published on) and completed
// after, so a writer that crashed in between finds its record, if it landed,
// as the one message after that tail.
type idemValue struct {
	EnvID     string `json:"env_id"`
	After     uint64 `json:"after"`
	Seq       uint64 `json:"seq,omitempty"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	// Count is how many records the key wrote, from the first (a batch); 0
	// means 1.
	Count int `json:"count,omitempty"`
}

type idemEntry struct {
	key    string
	rev    uint64
	exists bool
	count  int // records under the key: 0 or 1 for an Emit, more for a batch
}

func idemKey(task, leaseID, key string) string {
	sum := sha256.Sum256([]byte(leaseID + "\x00" + key))
	return task + "." + hex.EncodeToString(sum[:16])
}

// idemLookup returns the original record of (task, lease, key) if one landed,
// else the entry to reserve.
func (l *Log) idemLookup(ctx context.Context, task string, lease eventlog.Lease, key string) (*eventlog.Envelope, *idemEntry, error) {
	k := idemKey(task, lease.ID, key)
	e, err := l.idem.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &idemEntry{key: k}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: idempotency lookup for %s: %w", task, err)
	}
	var v idemValue
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, nil, fmt.Errorf("jetstream: idempotency entry %s is unreadable: %w", k, err)
	}
	entry := &idemEntry{key: k, rev: e.Revision(), exists: true, count: v.Count}
	if v.StreamSeq != 0 {
		env, err := l.recordAt(ctx, v.StreamSeq, v.Seq)
		if err != nil {
			return nil, nil, err
		}
		return &env, entry, nil
	}
	// Reserved but not completed: the record, if it landed, is the next log
	// message after v.After (the publish was a compare-and-set on it).
	m, hdr, err := l.leaderGet(ctx, msgGetRequest{Seq: v.After + 1, NextFor: l.subj.log(task)})
	if errors.Is(err, errNoMessage) {
		return nil, entry, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if hdr.Get("Nats-Msg-Id") != v.EnvID && !sameKey(hdr, lease.ID, key) {
		return nil, entry, nil
	}
	rs, err := decodeMsg(m.Subject, m.Sequence, hdr, m.Data)
	if err != nil {
		return nil, nil, err
	}
	// The key names the batch's first record: a pack may hold its
	// generation's LeaseGranted before it.
	r := rs[len(granted(rs))]
	l.idemCommit(ctx, entry, r.env, m.Sequence)
	return &r.env, entry, nil
}

func (l *Log) idemReserve(ctx context.Context, e *idemEntry, envID string, after uint64) error {
	b, _ := json.Marshal(idemValue{EnvID: envID, After: after, Count: e.count})
	var rev uint64
	var err error
	if e.exists {
		rev, err = l.idem.Update(ctx, e.key, b, e.rev)
	} else {
		rev, err = l.idem.Create(ctx, e.key, b)
	}
	if err != nil {
		return fmt.Errorf("jetstream: idempotency key in use by a concurrent writer of the same lease: %w", err)
	}
	e.rev, e.exists = rev, true
	return nil
}

// idemCommit completes an entry. Failing is harmless: a later lookup finds the
// record through the reservation.
func (l *Log) idemCommit(ctx context.Context, e *idemEntry, env eventlog.Envelope, streamSeq uint64) {
	b, _ := json.Marshal(idemValue{EnvID: env.ID, Seq: env.Seq, StreamSeq: streamSeq, Count: e.count})
	if rev, err := l.idem.Update(context.WithoutCancel(ctx), e.key, b, e.rev); err == nil {
		e.rev = rev
	}
}

// recordAt reads the record with Seq seq (0: the first) of the message at a
// stream sequence from the leader; a pack holds several.
func (l *Log) recordAt(ctx context.Context, streamSeq, seq uint64) (eventlog.Envelope, error) {
	m, hdr, err := l.leaderGet(ctx, msgGetRequest{Seq: streamSeq})
	if err != nil {
		return eventlog.Envelope{}, fmt.Errorf("jetstream: record at stream sequence %d: %w", streamSeq, err)
	}
	rs, err := decodeMsg(m.Subject, m.Sequence, hdr, m.Data)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if seq == 0 {
		return rs[0].env, nil
	}
	for _, r := range rs {
		if r.env.Seq == seq {
			return r.env, nil
		}
	}
	return eventlog.Envelope{}, &CorruptRecordError{Subject: m.Subject, StreamSeq: m.Sequence, Err: fmt.Errorf("no record with sequence %d in the message that should hold it", seq)}
}

// sameKey reports whether a stored record was written under lease with
// idempotency key key (an attempt whose reservation a later one replaced).
func sameKey(hdr nats.Header, leaseID, key string) bool {
	return hdr.Get(hdrLease) == leaseID && hdr.Get(hdrIdempotency) == key
}

// attemptAfter returns the log record right after stream sequence after if it
// was written under lease with key.
func (l *Log) attemptAfter(ctx context.Context, task string, after uint64, leaseID, key string) (record, bool) {
	m, hdr, err := l.leaderGet(ctx, msgGetRequest{Seq: after + 1, NextFor: l.subj.log(task)})
	if err != nil || !sameKey(hdr, leaseID, key) {
		return record{}, false
	}
	rs, err := decodeMsg(m.Subject, m.Sequence, hdr, m.Data)
	if err != nil {
		return record{}, false
	}
	return rs[0], true
}
