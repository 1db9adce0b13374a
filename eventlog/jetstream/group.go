package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Group commit (ADR 0107): on a task stream of one copy whose server syncs
// every write, each publish pays an fsync of its own, and the server writes
// one connection's publishes one after another, so many tasks writing at
// once queue behind each other's fsyncs. An atomic batch is written with
// one fsync whatever it holds (nats-server's coalesced sync), but costs a
// staging store of its own, about as much as seven or eight single writes
// on this machine. So a write goes alone while few of the Log's are in
// flight; beyond that it waits for the committer, which sends what waits
// as one atomic batch when enough do, each write keeping its own
// compare-and-set, and lets them go alone when few do.

// DefaultGroupCommit is Config.GroupCommit's value for a stream of one copy
// on a server that syncs every write (the embedded default): the writes
// waiting at once that the committer sends as one atomic batch. Measured
// in bench/peers at 16, 32 and 64 concurrent runs against 8 and 24
// (docs/benchmarks.md, "Group commit").
const DefaultGroupCommit = 16

// Bounds of one group: nats-server refuses an atomic batch of more than
// 1,000 messages by default, and a group is staged whole on the server.
const (
	groupMaxMsgs  = 256
	groupMaxBytes = 8 << 20
)

// grouper combines the writes of different tasks into atomic batches. Its
// committer goroutine runs while writes wait and ends when none do; close
// waits for it.
type grouper struct {
	l *Log
	// at is the writes waiting that make a batch; alone the writes in
	// flight up to which a write goes alone without waiting (a quarter of
	// at: under that load the server is not queueing; 0 below 4, so every
	// write then waits for the committer).
	at, alone int64
	// inflight counts this Log's writes to the task stream in flight.
	inflight atomic.Int64

	mu      sync.Mutex
	queue   []*groupWrite
	running bool
	closed  bool
	wg      sync.WaitGroup

	// groups and grouped count the batches committed and the writes they
	// held; refused the batches the server refused.
	groups, grouped, refused atomic.Uint64
}

// groupWrite is one write waiting in, or sent with, a group.
type groupWrite struct {
	msg    *nats.Msg
	expect uint64
	done   chan struct{}
	// Set before done is closed: the write's stream sequence, or alone
	// (write it by itself, and call released when that is over), or err
	// (the group's fate is unknown, as a publish's whose reply did not
	// come).
	seq      uint64
	alone    bool
	released func()
	err      error
}

func newGrouper(l *Log, at int) *grouper {
	return &grouper{l: l, at: int64(at), alone: int64(at) / 4}
}

// goAlone tells a write to go by itself; done is called once it is over.
// gated: the committer waits for it, so it is bounded by the request
// timeout whatever its caller's deadline.
type goAlone struct {
	gated bool
	done  func()
}

// publish writes msg after expect in a group and returns its stream
// sequence, or says to write it alone.
func (g *grouper) publish(ctx context.Context, msg *nats.Msg, expect uint64) (seq uint64, alone *goAlone, err error) {
	if g.inflight.Add(1) <= g.alone || !g.fits(msg) {
		return 0, &goAlone{done: g.leave}, nil
	}
	w, sent := g.join(ctx, msg, expect)
	if w.alone && w.released == nil {
		// Grouping has stopped: nothing waits for this write.
		return 0, &goAlone{done: g.leave}, nil
	}
	if w.alone {
		return 0, &goAlone{gated: true, done: func() {
			w.released()
			g.leave()
		}}, nil
	}
	g.leave()
	if sent {
		g.l.waits.Add(1)
	}
	return w.seq, nil, w.err
}

// batchHeaderRoom is what a group adds to a message: the Nats-Batch-*
// headers and the expected sequence.
const batchHeaderRoom = 256

// fits: msg can travel in a group. One within a few bytes of the server's
// largest payload goes alone, so that the headers a group adds do not make
// the whole group fail.
func (g *grouper) fits(msg *nats.Msg) bool {
	return int64(len(msg.Data)+headerSize(msg.Header)+batchHeaderRoom) <= g.l.nc.MaxPayload()
}

func (g *grouper) leave() { g.inflight.Add(-1) }

// join queues the write and waits for its group's outcome; sent false:
// the write was never sent.
func (g *grouper) join(ctx context.Context, msg *nats.Msg, expect uint64) (*groupWrite, bool) {
	w := &groupWrite{msg: msg, expect: expect, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		w.alone = true
		return w, false
	}
	g.queue = append(g.queue, w)
	if !g.running {
		g.running = true
		g.wg.Add(1)
		go g.commit()
	}
	g.mu.Unlock()
	select {
	case <-w.done:
		return w, !w.alone
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.queue, w); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		g.mu.Unlock()
		return &groupWrite{err: ctx.Err()}, false
	}
	g.mu.Unlock()
	// Taken by the committer: wait for its outcome, which is bounded by
	// the request timeout, so that a write told to go alone is released.
	<-w.done
	if w.alone {
		w.released()
		return &groupWrite{err: ctx.Err()}, false
	}
	return w, true
}

// commit sends the waiting writes, a group at a time, until none wait.
func (g *grouper) commit() {
	defer g.wg.Done()
	for {
		g.mu.Lock()
		n, size := 0, 0
		for n < len(g.queue) && n < groupMaxMsgs {
			size += len(g.queue[n].msg.Data) + headerSize(g.queue[n].msg.Header)
			if n > 0 && size > groupMaxBytes {
				break
			}
			n++
		}
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		batch := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		g.send(batch)
	}
}

// send writes batch as one atomic batch, or lets its writes go alone, and
// returns once they are over: what arrives meanwhile is the next group.
func (g *grouper) send(batch []*groupWrite) {
	finish := func(f func(w *groupWrite)) {
		for _, w := range batch {
			f(w)
			close(w.done)
		}
	}
	alone := func() {
		var over sync.WaitGroup
		over.Add(len(batch))
		finish(func(w *groupWrite) { w.alone, w.released = true, over.Done })
		over.Wait()
	}
	g.mu.Lock()
	stopped := g.closed
	g.mu.Unlock()
	if int64(len(batch)) < g.at || stopped {
		alone()
		return
	}
	last, err := g.sendBatch(batch)
	switch {
	case errors.Is(err, errGroupsStop):
		// The stream takes no more of our batches (an operator turned
		// allow_atomic off, or a server limit): every write goes alone
		// from now on.
		g.stop()
		g.refused.Add(1)
		alone()
	case errors.Is(err, errGroupRefused):
		g.refused.Add(1)
		alone()
	case err != nil:
		// Ambiguous: each write reads its task's tail to learn whether it
		// landed. A batch cut short on the server (a store error) is left
		// registered there and may be finished by a restart, so this Log
		// sends no more batches.
		g.stop()
		finish(func(w *groupWrite) { w.err = err })
	default:
		g.groups.Add(1)
		g.grouped.Add(uint64(len(batch)))
		seq := last - uint64(len(batch))
		finish(func(w *groupWrite) { seq++; w.seq = seq })
	}
}

// stop makes every later write go alone.
func (g *grouper) stop() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// errGroupRefused: the batch was not committed (a compare-and-set that
// failed, a duplicate Nats-Msg-Id, a message the client could not send):
// each write goes alone and gets its own answer. On a server that syncs
// every write nothing of a refused batch is stored; elsewhere a store
// error on the last message can leave the others stored, and each of
// those, sent alone, fails its compare-and-set and finds itself at its
// task's tail.
var errGroupRefused = errors.New("jetstream: group refused")

// errGroupsStop: refused for a reason every later batch would meet too.
var errGroupsStop = fmt.Errorf("%w, and will refuse every batch", errGroupRefused)

// nats-server's codes of refusals that are not about one batch: atomic
// publish disabled on the stream, a batch larger than the server allows,
// too many batches in flight, a header the server refuses in a batch.
var groupsStopCodes = []int{10174, 10199, 10210, 10177}

// sendBatch publishes the writes as one atomic batch, each message with its
// own compare-and-set, and returns the stream sequence of the last. An
// atomic batch is stored in one piece, so its messages have consecutive
// sequences.
func (g *grouper) sendBatch(batch []*groupWrite) (uint64, error) {
	msgs := make([]*nats.Msg, len(batch))
	for i, w := range batch {
		// A copy: the caller keeps its message to write it alone if the
		// group is refused.
		m := &nats.Msg{Subject: w.msg.Subject, Data: w.msg.Data, Header: maps.Clone(w.msg.Header)}
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(hdrExpectLast, strconv.FormatUint(w.expect, 10))
		msgs[i] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.l.cfg.RequestTimeout)
	defer cancel()
	ack, err := commitAtomic(ctx, g.l.nc, msgs)
	switch {
	case errors.Is(err, errBatchUnsent):
		return 0, fmt.Errorf("%w: %w", errGroupRefused, err)
	case err != nil:
		return 0, err
	case ack.Error != nil && slices.Contains(groupsStopCodes, ack.Error.ErrCode):
		return 0, fmt.Errorf("%w: %s (%d)", errGroupsStop, ack.Error.Description, ack.Error.ErrCode)
	case ack.Error != nil:
		return 0, fmt.Errorf("%w: %s (%d)", errGroupRefused, ack.Error.Description, ack.Error.ErrCode)
	}
	return ack.Seq, nil
}

// close makes later writes go alone and waits for the groups in flight.
func (g *grouper) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// GroupCommit is the Log's Config.GroupCommit: the writes waiting that make
// an atomic batch, 0 when every write goes alone.
func (l *Log) GroupCommit() int {
	if l.group == nil {
		return 0
	}
	return int(l.group.at)
}

// GroupCommits reports the group commits of this Log (ADR 0107): the atomic
// batches committed, the writes they held, and the batches the server
// refused (their writes then went alone).
func (l *Log) GroupCommits() (groups, writes, refused uint64) {
	if l.group == nil {
		return 0, 0, 0
	}
	return l.group.groups.Load(), l.group.grouped.Load(), l.group.refused.Load()
}

// groupAck is the acknowledgement a grouped write stands on.
func (l *Log) groupAck(seq uint64) *jetstream.PubAck {
	return &jetstream.PubAck{Stream: l.streamName, Sequence: seq}
}
