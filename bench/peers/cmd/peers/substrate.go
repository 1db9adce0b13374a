package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// substrateSystem is the floor under noeta's row: a run's durable writes
// and nothing else, on the server noeta's embedded default runs. Each run
// publishes steps+2 messages (the writes noeta waits for in a run of steps
// calls, 1.1 a call) one after another to a subject of its own, each with
// the compare-and-set and the message id noeta's appends carry, to a file
// stream on an embedded nats-server started as noeta's is (sync always,
// in this process, through the in-process connection). No registry check,
// no engine, no other stream: what JetStream alone costs for the writes.
// With many runs at once groupedSubstrate does better; at each
// concurrency the better of the two is about the least this server takes
// for the writes from one connection.
type substrateSystem struct {
	srv    *embedded.Server
	nc     *nats.Conn
	js     natsjs.JetStream
	steps  int
	body   []byte
	writes atomic.Uint64
	// rows and leases, when set, are read before every write of the
	// grouped floor, both at once, as noeta's registry check reads a
	// task's row and its lease key (Dispatcher.Valid, ADR 0004, 0043).
	rows, leases natsjs.KeyValue
}

// The fenced floor's buckets and the keys it reads.
const (
	fenceRows   = "PEERS_ROWS"
	fenceLeases = "PEERS_LEASES"
	fenceKey    = "task"
)

// substrateStream is the stream the substrate row writes to.
const substrateStream = "PEERS_SUBSTRATE"

// substrateBody is a message's payload: noeta's task stream held 2,454
// bytes a message on average after a sitting of the noeta row (its
// stream's bytes over its messages, headers and the store's framing
// included); the floor's messages are stored at about the same size.
const substrateBody = 2300

// substrateConfig is the stream as noeta's task stream is made
// (eventlog/jetstream's streamConfig), with atomic batches allowed for the
// grouped row as Open allows them with group commit.
func substrateConfig(atomicBatches bool) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name: substrateStream, Subjects: []string{substrateStream + ".>"},
		Storage: natsjs.FileStorage, Retention: natsjs.LimitsPolicy, Replicas: 1,
		DenyDelete: true, DenyPurge: true, AllowDirect: true, Duplicates: 2 * time.Minute,
		MaxMsgs: -1, MaxBytes: -1, Discard: natsjs.DiscardOld, AllowAtomicPublish: atomicBatches,
	}
}

func openSubstrate(ctx context.Context, dir string, steps int, atomicBatches bool) (*substrateSystem, error) {
	srv, err := embedded.Start(ctx, embedded.Config{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("start the embedded server on %s: %w", dir, err)
	}
	nc, err := srv.ConnectInProcess()
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("connect in process: %w", err)
	}
	s := &substrateSystem{srv: srv, nc: nc, steps: steps, body: make([]byte, substrateBody)}
	// A lone write of the grouped floor waits for its acknowledgement at
	// most this long, as a batch's commit does.
	if s.js, err = natsjs.New(nc, natsjs.WithPublishAsyncTimeout(substrateTimeout)); err != nil {
		s.close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if _, err := s.js.CreateOrUpdateStream(ctx, substrateConfig(atomicBatches)); err != nil {
		s.close()
		return nil, fmt.Errorf("create %s: %w", substrateStream, err)
	}
	for i := range s.body {
		s.body[i] = 'a' + byte(i%26)
	}
	return s, nil
}

// addFence gives s the fence's reads: before each write a key of one
// bucket and a key of another, both at once, by direct gets (buckets of
// one copy, as noeta reads its own, ADR 0043).
func (s *substrateSystem) addFence(ctx context.Context) error {
	for _, b := range []struct {
		name string
		kv   *natsjs.KeyValue
	}{{fenceRows, &s.rows}, {fenceLeases, &s.leases}} {
		kv, err := s.js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: b.name, Storage: natsjs.FileStorage, Replicas: 1})
		if err != nil {
			return fmt.Errorf("bucket %s: %w", b.name, err)
		}
		if _, err := kv.Put(ctx, fenceKey, s.body[:300]); err != nil {
			return fmt.Errorf("bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	return nil
}

// fence reads the row and the lease key at once.
func (s *substrateSystem) fence(ctx context.Context) error {
	key := make(chan error, 1)
	go func() {
		_, err := s.leases.Get(ctx, fenceKey)
		key <- err
	}()
	_, err := s.rows.Get(ctx, fenceKey)
	if kerr := <-key; err == nil {
		err = kerr
	}
	return err
}

// run publishes one run's writes, each after the last one's
// acknowledgement, each expecting the one before it on the run's subject.
func (s *substrateSystem) run(ctx context.Context, i int) error {
	subj := fmt.Sprintf("%s.%d.%d", substrateStream, time.Now().UnixNano(), i+1)
	var last uint64
	for j := range s.steps + 2 {
		m := nats.NewMsg(subj)
		m.Data = s.body
		ack, err := s.js.PublishMsg(ctx, m,
			natsjs.WithMsgID(subj+"/"+strconv.Itoa(j)),
			natsjs.WithExpectLastSequencePerSubject(last))
		if err != nil {
			return fmt.Errorf("write %d of %s: %w", j, subj, err)
		}
		last = ack.Sequence
		s.writes.Add(1)
	}
	return nil
}

func (s *substrateSystem) durableWrites() uint64                  { return s.writes.Load() }
func (s *substrateSystem) groupedWrites() (groups, writes uint64) { return 0, 0 }
func (s *substrateSystem) handOffs() uint64                       { return 0 }

func (s *substrateSystem) close() {
	s.nc.Close()
	s.srv.Shutdown()
}

// groupedSubstrate is the floor with group commit: the same writes, each
// handed to one committer that takes whatever waits and sends it as one
// JetStream atomic batch (one fsync for all of it, each message keeping its
// own compare-and-set) when at least groupMin wait, and otherwise as lone
// writes sent one after another without waiting in between (each its own
// fsync), since a small atomic batch costs the server as much as several
// lone writes (ADR 0107).
type groupedSubstrate struct {
	*substrateSystem
	q       chan *substrateWrite
	stop    chan struct{}
	done    chan struct{}
	batches atomic.Uint64
	grouped atomic.Uint64
}

// groupMin is the fewest waiting writes sent as a batch, as noeta's
// embedded default groups them (jshost's DefaultGroupCommit).
const groupMin = 16

type substrateWrite struct {
	msg    *nats.Msg
	expect uint64
	seq    uint64
	err    error
	done   chan struct{}
}

// openGroupedSubstrate opens the grouped floor; fenced, each write is
// after the fence's reads (addFence), as noeta's are.
func openGroupedSubstrate(ctx context.Context, dir string, steps int, fenced bool) (*groupedSubstrate, error) {
	s, err := openSubstrate(ctx, dir, steps, true)
	if err != nil {
		return nil, err
	}
	if fenced {
		if err := s.addFence(ctx); err != nil {
			s.close()
			return nil, err
		}
	}
	g := &groupedSubstrate{substrateSystem: s, q: make(chan *substrateWrite, 1024), stop: make(chan struct{}), done: make(chan struct{})}
	go g.commit()
	return g, nil
}

// substrateTimeout bounds the wait for a write's or a batch's
// acknowledgement.
const substrateTimeout = 30 * time.Second

// maxGroup bounds a batch well under the server's limit of 1,000 messages.
const maxGroup = 256

// errClosed answers the writes still queued when the floor closes.
var errClosed = errors.New("the floor is closed")

// commit sends what waits, one group at a time. Once stopped it answers
// every write still queued with errClosed, so no writer waits forever.
func (g *groupedSubstrate) commit() {
	defer close(g.done)
	for {
		var w *substrateWrite
		select {
		case w = <-g.q:
		default:
			select {
			case <-g.stop:
				for {
					select {
					case w := <-g.q:
						w.err = errClosed
						close(w.done)
					default:
						return
					}
				}
			case w = <-g.q:
			}
		}
		batch := []*substrateWrite{w}
	drain:
		for len(batch) < maxGroup {
			select {
			case w := <-g.q:
				batch = append(batch, w)
			default:
				break drain
			}
		}
		if len(batch) < groupMin {
			g.sendAlone(batch)
			continue
		}
		g.sendBatch(batch)
	}
}

// sendAlone publishes each write as a message of its own, all of them
// before waiting for the first acknowledgement.
func (g *groupedSubstrate) sendAlone(batch []*substrateWrite) {
	futures := make([]natsjs.PubAckFuture, len(batch))
	for i, w := range batch {
		futures[i], w.err = g.js.PublishMsgAsync(w.msg, natsjs.WithExpectLastSequencePerSubject(w.expect))
	}
	for i, w := range batch {
		if w.err == nil {
			select {
			case ack := <-futures[i].Ok():
				w.seq = ack.Sequence
			case w.err = <-futures[i].Err():
			}
		}
		close(w.done)
	}
}

// sendBatch publishes batch as one atomic batch (the protocol of
// nats-server's ADR-50: Nats-Batch-Id, -Sequence, and -Commit on the last,
// whose reply names the last message's sequence).
func (g *groupedSubstrate) sendBatch(batch []*substrateWrite) {
	id := nuid.Next()
	var err error
	var last uint64
	for i, w := range batch {
		m := w.msg
		m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(w.expect, 10))
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(batch)-1 {
			if err = g.nc.PublishMsg(m); err != nil {
				break
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		ctx, cancel := context.WithTimeout(context.Background(), substrateTimeout)
		var reply *nats.Msg
		reply, err = g.nc.RequestMsgWithContext(ctx, m)
		cancel()
		if err != nil {
			break
		}
		var ack struct {
			Seq   uint64           `json:"seq"`
			Count int              `json:"count"`
			Error *natsjs.APIError `json:"error"`
		}
		if err = json.Unmarshal(reply.Data, &ack); err != nil {
			break
		}
		if ack.Error != nil {
			err = ack.Error
			break
		}
		if ack.Count != len(batch) || ack.Seq < uint64(len(batch)) {
			err = fmt.Errorf("atomic batch stored %d messages up to %d, sent %d", ack.Count, ack.Seq, len(batch))
			break
		}
		last = ack.Seq
	}
	if err == nil {
		g.batches.Add(1)
		g.grouped.Add(uint64(len(batch)))
	}
	for i, w := range batch {
		w.err = err
		if err == nil {
			w.seq = last - uint64(len(batch)-1-i)
		}
		close(w.done)
	}
}

func (g *groupedSubstrate) run(ctx context.Context, i int) error {
	subj := fmt.Sprintf("%s.%d.%d", substrateStream, time.Now().UnixNano(), i+1)
	var last uint64
	for j := range g.steps + 2 {
		// The task's creation is written by its submitter, without the
		// registry's check; every later write of a run has it.
		if g.rows != nil && j > 0 {
			if err := g.fence(ctx); err != nil {
				return fmt.Errorf("the fence's reads before write %d of %s: %w", j, subj, err)
			}
		}
		m := nats.NewMsg(subj)
		m.Data = g.body
		m.Header.Set(natsjs.MsgIDHeader, subj+"/"+strconv.Itoa(j))
		w := &substrateWrite{msg: m, expect: last, done: make(chan struct{})}
		select {
		case g.q <- w:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-w.done // the committer answers every write it took
		if w.err != nil {
			return fmt.Errorf("write %d of %s: %w", j, subj, w.err)
		}
		last = w.seq
		g.writes.Add(1)
	}
	return nil
}

func (g *groupedSubstrate) handOffs() uint64 { return 0 }

func (g *groupedSubstrate) groupedWrites() (groups, writes uint64) {
	return g.batches.Load(), g.grouped.Load()
}

func (g *groupedSubstrate) close() {
	close(g.stop)
	<-g.done
	g.substrateSystem.close()
}
