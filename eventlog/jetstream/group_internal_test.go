package jetstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
)

// groupRig is a Log with group commit whose committer the test runs: every
// write joins the queue (one write counts as in flight already) and waits
// there until the test calls commit.
type groupRig struct {
	l *Log
	g *grouper
}

func newGroupRig(t *testing.T, at int) *groupRig {
	t.Helper()
	l, err := Open(t.Context(), embeddedConn(t), Config{Registry: liveRegistry{}, GroupCommit: at})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	g := l.group
	g.inflight.Store(1)
	g.mu.Lock()
	g.running = true
	g.mu.Unlock()
	return &groupRig{l: l, g: g}
}

type published struct {
	i     int
	seq   uint64
	wrong bool
	err   error
}

// publish starts writes, one per message, each after its expected last
// sequence of its subject, and waits until all are queued.
func (r *groupRig) publish(t *testing.T, ctx context.Context, msgs []*nats.Msg, expects []uint64) <-chan published {
	t.Helper()
	out := make(chan published, len(msgs))
	for i, m := range msgs {
		go func() {
			ack, wrong, err := r.l.publish(ctx, m, expects[i])
			p := published{i: i, wrong: wrong, err: err}
			if ack != nil {
				p.seq = ack.Sequence
			}
			out <- p
		}()
	}
	r.waitQueued(t, len(msgs))
	return out
}

func (r *groupRig) waitQueued(t *testing.T, n int) {
	t.Helper()
	for {
		r.g.mu.Lock()
		q := len(r.g.queue)
		r.g.mu.Unlock()
		if q == n {
			return
		}
		if t.Context().Err() != nil {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// commit runs the committer once over what is queued.
func (r *groupRig) commit() {
	r.g.wg.Add(1)
	r.g.commit()
}

func (r *groupRig) msgs(n int) ([]*nats.Msg, []string) {
	msgs := make([]*nats.Msg, n)
	subjects := make([]string, n)
	for i := range msgs {
		subjects[i] = r.l.subj.log(noeta.NewTaskID())
		msgs[i] = &nats.Msg{Subject: subjects[i], Data: []byte(`{"n":` + string(rune('0'+i)) + `}`), Header: nats.Header{}}
	}
	return msgs, subjects
}

func collect(t *testing.T, ch <-chan published, n int) []published {
	t.Helper()
	out := make([]published, n)
	for range n {
		p := <-ch
		out[p.i] = p
	}
	return out
}

// TestGroupCommitOneBatch: writes of three tasks waiting at once are
// written as one atomic batch, in one piece (consecutive sequences), each at
// the stream sequence its reply says.
func TestGroupCommitOneBatch(t *testing.T) {
	r := newGroupRig(t, 2)
	ctx := t.Context()
	msgs, subjects := r.msgs(3)
	ch := r.publish(t, ctx, msgs, []uint64{0, 0, 0})
	r.commit()
	res := collect(t, ch, 3)
	var seqs []uint64
	for i, p := range res {
		if p.err != nil || p.wrong {
			t.Fatalf("write %d: wrong=%v err=%v", i, p.wrong, p.err)
		}
		seqs = append(seqs, p.seq)
		m, err := r.l.stream.GetMsg(ctx, p.seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != subjects[i] {
			t.Errorf("write %d's reply names %d, which holds %s, not %s", i, p.seq, m.Subject, subjects[i])
		}
	}
	slices.Sort(seqs)
	if seqs[2]-seqs[0] != 2 || seqs[1]-seqs[0] != 1 {
		t.Errorf("the writes are at %v: a group is stored in one piece", seqs)
	}
	if groups, writes, refused := r.l.GroupCommits(); groups != 1 || writes != 3 || refused != 0 {
		t.Errorf("GroupCommits = %d, %d, %d; want 1 batch of 3, none refused", groups, writes, refused)
	}
	if msgs[0].Header.Get(hdrBatchID) != "" || msgs[0].Header.Get(hdrExpectLast) != "" {
		t.Errorf("the caller's message was changed: %v", msgs[0].Header)
	}
}

// TestGroupCommitStaleWriteInGroup: one write of a group fails its
// compare-and-set (a holder whose tail is stale). The server refuses the
// whole batch, and each write then goes alone: the stale one alone is
// refused, the others land.
func TestGroupCommitStaleWriteInGroup(t *testing.T) {
	r := newGroupRig(t, 2)
	ctx := t.Context()
	msgs, subjects := r.msgs(3)
	// The middle task already has a record the stale holder did not see.
	if _, err := r.l.js.Publish(ctx, subjects[1], []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ch := r.publish(t, ctx, msgs, []uint64{0, 0, 0})
	r.commit()
	res := collect(t, ch, 3)
	for i, p := range res {
		switch {
		case p.err != nil:
			t.Fatalf("write %d: %v", i, p.err)
		case i == 1 && !p.wrong:
			t.Errorf("the stale write landed at %d", p.seq)
		case i != 1 && (p.wrong || p.seq == 0):
			t.Errorf("write %d did not land beside the stale one: wrong=%v", i, p.wrong)
		}
	}
	if groups, _, refused := r.l.GroupCommits(); groups != 0 || refused != 1 {
		t.Errorf("GroupCommits: %d committed, %d refused; want 0 and 1", groups, refused)
	}
	info, err := r.l.stream.Info(ctx, jetstream.WithSubjectFilter(subjects[1]))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subjects[1]]; n != 1 {
		t.Errorf("the stale task's subject holds %d messages, want its one", n)
	}
}

// TestGroupCommitFewGoAlone: fewer writes waiting than GroupCommit go
// alone, each its own publish, and no batch is sent.
func TestGroupCommitFewGoAlone(t *testing.T) {
	r := newGroupRig(t, 4)
	msgs, _ := r.msgs(3)
	ch := r.publish(t, t.Context(), msgs, []uint64{0, 0, 0})
	r.commit()
	for i, p := range collect(t, ch, 3) {
		if p.err != nil || p.wrong || p.seq == 0 {
			t.Errorf("write %d: seq %d wrong=%v err=%v", i, p.seq, p.wrong, p.err)
		}
	}
	if groups, writes, refused := r.l.GroupCommits(); groups+writes+refused != 0 {
		t.Errorf("GroupCommits = %d, %d, %d; want none", groups, writes, refused)
	}
}

// TestGroupCommitCancelledWhileQueued: a write whose context ends while it
// waits for the committer leaves the queue and is never written.
func TestGroupCommitCancelledWhileQueued(t *testing.T) {
	r := newGroupRig(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	msgs, subjects := r.msgs(1)
	ch := r.publish(t, ctx, msgs, []uint64{0})
	cancel()
	p := <-ch
	if !errors.Is(p.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", p.err)
	}
	r.waitQueued(t, 0)
	r.commit()
	if _, err := r.l.stream.GetLastMsgForSubject(t.Context(), subjects[0]); err == nil {
		t.Error("the cancelled write was written")
	}
}

// TestGroupCommitClosed: after close a write goes alone at once instead of
// waiting for a committer (the rig's never runs by itself: a queued write
// would wait for ever).
func TestGroupCommitClosed(t *testing.T) {
	r := newGroupRig(t, 2)
	r.g.close()
	msgs, _ := r.msgs(1)
	if ack, wrong, err := r.l.publish(t.Context(), msgs[0], 0); err != nil || wrong || ack.Sequence == 0 {
		t.Fatalf("a write after close: %v %v %v", ack, wrong, err)
	}
	if groups, _, _ := r.l.GroupCommits(); groups != 0 {
		t.Errorf("%d groups after close", groups)
	}
}

// TestGroupCommitLargeGoesAlone: a message too close to the server's
// largest payload for a group's headers goes alone at once.
func TestGroupCommitLargeGoesAlone(t *testing.T) {
	r := newGroupRig(t, 2)
	msgs, _ := r.msgs(1)
	msgs[0].Data = make([]byte, int(r.l.nc.MaxPayload())-batchHeaderRoom/2)
	if ack, wrong, err := r.l.publish(t.Context(), msgs[0], 0); err != nil || wrong || ack.Sequence == 0 {
		t.Fatalf("a large write: %v %v %v", ack, wrong, err)
	}
}

// TestGroupCommitDuplicateInGroup: a write whose Nats-Msg-Id is already in
// the stream (a retry of a publish that landed) refuses its group; alone,
// it gets the answer a single publish gets, and the others land.
func TestGroupCommitDuplicateInGroup(t *testing.T) {
	r := newGroupRig(t, 2)
	ctx := t.Context()
	msgs, subjects := r.msgs(2)
	msgs[0].Header.Set(nats.MsgIdHdr, "dup-"+noeta.NewID())
	first, err := r.l.js.PublishMsg(ctx, msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	ch := r.publish(t, ctx, msgs, []uint64{first.Sequence, 0})
	r.commit()
	res := collect(t, ch, 2)
	if p := res[0]; p.err != nil || (!p.wrong && p.seq != first.Sequence) {
		t.Errorf("the duplicate: seq %d wrong=%v err=%v; want the original's %d or refused", p.seq, p.wrong, p.err, first.Sequence)
	}
	if p := res[1]; p.err != nil || p.wrong || p.seq == 0 {
		t.Errorf("the other write: seq %d wrong=%v err=%v", p.seq, p.wrong, p.err)
	}
	if _, _, refused := r.l.GroupCommits(); refused != 1 {
		t.Errorf("%d groups refused, want 1", refused)
	}
	info, err := r.l.stream.Info(ctx, jetstream.WithSubjectFilter(subjects[0]))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subjects[0]]; n != 1 {
		t.Errorf("the duplicate's subject holds %d messages, want 1", n)
	}
}

// TestGroupCommitAtomicTurnedOff: an operator turns the stream's
// allow_atomic off under a running Log. The group it refuses goes alone,
// every write lands, and the Log stops grouping.
func TestGroupCommitAtomicTurnedOff(t *testing.T) {
	r := newGroupRig(t, 2)
	ctx := t.Context()
	cfg := r.l.stream.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := r.l.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msgs, _ := r.msgs(3)
	ch := r.publish(t, ctx, msgs, []uint64{0, 0, 0})
	r.commit()
	for i, p := range collect(t, ch, 3) {
		if p.err != nil || p.wrong || p.seq == 0 {
			t.Errorf("write %d: seq %d wrong=%v err=%v", i, p.seq, p.wrong, p.err)
		}
	}
	if _, _, refused := r.l.GroupCommits(); refused != 1 {
		t.Errorf("%d groups refused, want 1", refused)
	}
	r.g.mu.Lock()
	closed := r.g.closed
	r.g.mu.Unlock()
	if !closed {
		t.Error("the Log goes on grouping on a stream that refuses atomic batches")
	}
}
