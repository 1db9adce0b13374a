package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// packFixture is a Log in the given mode on its own prefix of the single
// node, with a created task and a lease on it whose LeaseGranted is in.
type packFixture struct {
	log    *jetstream.Log
	js     natsjs.JetStream
	prefix string
	task   string
	lease  eventlog.Lease
}

func newPackFixture(t *testing.T, url string, mode jetstream.BatchMode) *packFixture {
	t.Helper()
	ctx := t.Context()
	nc := connect(t, url)
	prefix := uniquePrefix(t, url)
	l, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: prefix, Registry: liveRegistry{}, Batch: mode})
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	task := noeta.NewTaskID()
	genesis, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, genesis); err != nil {
		t.Fatal(err)
	}
	f := &packFixture{log: l, js: js, prefix: prefix, task: task, lease: eventlog.Lease{ID: "lease-1", Task: task, Generation: 1, Worker: "w"}}
	// The first append brings the lease's LeaseGranted.
	if _, err := l.EmitBatch(ctx, f.lease, f.turns(0, 1), eventlog.EmitOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *packFixture) turns(from, n int) []eventlog.Envelope {
	out := make([]eventlog.Envelope, n)
	for i := range out {
		env, err := eventlog.NewEnvelope(f.task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: from + i})
		if err != nil {
			panic(err)
		}
		out[i] = env
	}
	return out
}

// messages returns the raw messages of the task's log subject.
func (f *packFixture) messages(t *testing.T) []*natsjs.RawStreamMsg {
	t.Helper()
	ctx := t.Context()
	s, err := f.js.Stream(ctx, strings.ToUpper(f.prefix)+"_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	subject := f.prefix + ".t." + strconv.Itoa(jetstream.Partition(f.task)) + "." + f.task + ".log"
	var out []*natsjs.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(subject))
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// TestPackOnTheWire: a batch of four records under BatchPacked (the
// default) is one message of the task's log: a CloudEvents JSON batch whose
// events any CloudEvents reader takes, headers that name the last record's
// seq, the count, every type in order and the first record's id, and one
// durable wait for the four.
func TestPackOnTheWire(t *testing.T) {
	ctx := t.Context()
	f := newPackFixture(t, singleURL, jetstream.BatchAuto)
	before := len(f.messages(t))
	waits := f.log.DurableWaits()
	recs, err := f.log.EmitBatch(ctx, f.lease, f.turns(1, 4), eventlog.EmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.log.DurableWaits() - waits; got != 1 {
		t.Errorf("durable waits for a batch of 4: %d, want 1", got)
	}
	msgs := f.messages(t)
	if len(msgs) != before+1 {
		t.Fatalf("the batch added %d messages, want 1", len(msgs)-before)
	}
	m := msgs[len(msgs)-1]
	h := m.Header
	if got := h.Get("Content-Type"); got != "application/cloudevents-batch+json" {
		t.Errorf("Content-Type %q", got)
	}
	if got := h.Get("Noeta-Seq"); got != strconv.FormatUint(recs[3].Seq, 10) {
		t.Errorf("Noeta-Seq %q, want the last record's %d", got, recs[3].Seq)
	}
	if got := h.Get("Noeta-Count"); got != "4" {
		t.Errorf("Noeta-Count %q, want 4", got)
	}
	if got := h.Values("Noeta-Type"); len(got) != 4 || got[0] != noeta.TypeTurnStarted {
		t.Errorf("Noeta-Type values %q, want four TurnStarted", got)
	}
	if got := h.Get(nats.MsgIdHdr); got != recs[0].ID {
		t.Errorf("Nats-Msg-Id %q, want the first record's id %s", got, recs[0].ID)
	}
	var events []event.Event
	if err := json.Unmarshal(m.Data, &events); err != nil {
		t.Fatalf("the body is not a JSON array of CloudEvents: %v", err)
	}
	if len(events) != 4 {
		t.Fatalf("%d events in the pack, want 4", len(events))
	}
	for i, e := range events {
		if err := e.Validate(); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
		if e.ID() != recs[i].ID || e.Type() != "noeta.TurnStarted" || e.Subject() != f.task || e.Extensions()["sequence"] != strconv.FormatUint(recs[i].Seq, 10) {
			t.Errorf("event %d: id %s type %s subject %s sequence %v; want record %+v", i, e.ID(), e.Type(), e.Subject(), e.Extensions()["sequence"], recs[i])
		}
	}
	// Read, the tail and the task index see the four records.
	got, err := f.log.Read(ctx, f.task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); got[n-1].ID != recs[3].ID || got[n-4].ID != recs[0].ID {
		t.Errorf("Read does not end with the pack's records in order")
	}
	tasks, err := f.log.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].LastSeq != recs[3].Seq {
		t.Errorf("Tasks: %+v, want last seq %d", tasks, recs[3].Seq)
	}
	// A write after the pack is fenced on it.
	next, err := f.log.Emit(ctx, f.lease, f.turns(9, 1)[0], eventlog.EmitOptions{ExpectLastSeq: recs[3].Seq})
	if err != nil || next.Seq != recs[3].Seq+1 {
		t.Fatalf("Emit after the pack: seq %d, %v; want %d", next.Seq, err, recs[3].Seq+1)
	}
}

// TestPackSnapshotLast: a pack ending with a snapshot is found by
// LatestSnapshot (the snapshot is the pack's last record, not its first),
// and a Read after it starts there.
func TestPackSnapshotLast(t *testing.T) {
	ctx := t.Context()
	f := newPackFixture(t, singleURL, jetstream.BatchPacked)
	envs := f.turns(1, 2)
	snap, err := eventlog.NewEnvelope(f.task, eventlog.OriginEngine, "test", noeta.TaskSnapshot{StateRef: noeta.RefFor([]byte(`{"turn":2}`), "application/json"), UptoSeq: 4})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := f.log.EmitBatch(ctx, f.lease, append(envs, snap), eventlog.EmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.log.LatestSnapshot(ctx, f.task)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != recs[2].ID || got.Type != noeta.TypeTaskSnapshot {
		t.Fatalf("LatestSnapshot: %s %s, want the pack's last record %s", got.Type, got.ID, recs[2].ID)
	}
	after, err := f.log.Read(ctx, f.task, recs[2].Seq-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 1 || after[0].ID != recs[2].ID {
		t.Fatalf("Read after seq %d: %d records, want the snapshot alone", recs[2].Seq-1, len(after))
	}
}

// TestPackTooLargeRefusedWhole: on a server whose max payload is smaller
// than a batch's pack, EmitBatch refuses the batch before writing anything,
// naming the sizes, and the log is unchanged; a batch that fits is written.
func TestPackTooLargeRefusedWhole(t *testing.T) {
	ctx := t.Context()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 32 << 10, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	f := newPackFixture(t, srv.ClientURL(), jetstream.BatchPacked)
	before := len(f.messages(t))
	big := func(n int) []eventlog.Envelope {
		out := make([]eventlog.Envelope, n)
		for i := range out {
			env, err := eventlog.NewEnvelope(f.task, eventlog.OriginTool, "test", noeta.ToolCallFinished{CallID: fmt.Sprint("c", i), Tool: "t", OK: true, Output: json.RawMessage(`"` + strings.Repeat("x", 3500) + `"`)})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = env
		}
		return out
	}
	got, err := f.log.EmitBatch(ctx, f.lease, big(12), eventlog.EmitOptions{})
	if !errors.Is(err, eventlog.ErrInvalidArgument) || !strings.Contains(err.Error(), "max payload") || len(got) != 0 {
		t.Fatalf("a 12 × 3.5 KB batch on a 32 KiB server: %d records, %v; want none and ErrInvalidArgument naming the max payload", len(got), err)
	}
	if n := len(f.messages(t)); n != before {
		t.Fatalf("the refused batch wrote %d messages", n-before)
	}
	if _, err := f.log.EmitBatch(ctx, f.lease, big(4), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("a batch that fits: %v", err)
	}
}

// TestPackIdempotentRepeat: a batch whose pack landed under a key is found by a repeat under the same lease: the repeat
// returns the pack's records and writes nothing.
func TestPackIdempotentRepeat(t *testing.T) {
	ctx := t.Context()
	f := newPackFixture(t, singleURL, jetstream.BatchPacked)
	first, err := f.log.EmitBatch(ctx, f.lease, f.turns(1, 3), eventlog.EmitOptions{IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	// Another Log of the same stream (no cached tail) repeats it.
	other, err := jetstream.Open(ctx, connect(t, singleURL), jetstream.Config{Prefix: f.prefix, Registry: liveRegistry{}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := other.EmitBatch(ctx, f.lease, f.turns(1, 3), eventlog.EmitOptions{IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 3 {
		t.Fatalf("repeat returned %d records, want 3", len(again))
	}
	for i := range again {
		if again[i].ID != first[i].ID || again[i].Seq != first[i].Seq {
			t.Fatalf("repeat record %d is %s/%d, want %s/%d", i, again[i].ID, again[i].Seq, first[i].ID, first[i].Seq)
		}
	}
}

// TestFeedDeliversPackRecordByRecord: an observer group's feed hands out a
// pack's records one by one, in order. A handler that fails on the pack's
// second record is not handed the first again in the same process; once the
// second has used up its attempts it alone is dead-lettered (as a message of
// its own with its seq), and the third is still handled.
func TestFeedDeliversPackRecordByRecord(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := newPackFixture(t, singleURL, jetstream.BatchPacked)
	recs, err := f.log.EmitBatch(ctx, f.lease, f.turns(1, 3), eventlog.EmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := jetstream.OpenFeed(ctx, connect(t, singleURL), jetstream.FeedOptions{Prefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[uint64]int{}
	done := make(chan struct{})
	h := func(ctx context.Context, d eventlog.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen[d.Env.Seq]++
		if d.Env.Seq == recs[1].Seq {
			return errors.New("this record always fails")
		}
		if d.Env.Seq == recs[2].Seq {
			close(done)
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		errc <- feed.Consume(ctx, eventlog.FeedConfig{Group: "packs", MaxDeliver: 3, Backoff: []time.Duration{10 * time.Millisecond}}, h)
	}()
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("Consume ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the pack's third record never reached the handler")
	}
	cancel()
	<-errc
	mu.Lock()
	defer mu.Unlock()
	if seen[recs[0].Seq] != 1 || seen[recs[1].Seq] != 3 || seen[recs[2].Seq] != 1 {
		t.Errorf("deliveries per seq %v; want the first once, the failing one 3 times (MaxDeliver), the third once", seen)
	}
	st := feed.Stats()
	if st.DeadLettered != 1 {
		t.Errorf("dead-lettered %d, want 1", st.DeadLettered)
	}
	s, err := f.js.Stream(t.Context(), strings.ToUpper(f.prefix)+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), jetstream.DeadLetterSubject(f.prefix, "packs"))
	if err != nil {
		t.Fatal(err)
	}
	var e event.Event
	if err := json.Unmarshal(m.Data, &e); err != nil {
		t.Fatalf("the dead letter is not one CloudEvent: %v", err)
	}
	if e.ID() != recs[1].ID || m.Header.Get("Noeta-Seq") != strconv.FormatUint(recs[1].Seq, 10) {
		t.Errorf("dead letter holds %s (Noeta-Seq %s), want record %s seq %d", e.ID(), m.Header.Get("Noeta-Seq"), recs[1].ID, recs[1].Seq)
	}
}

// TestPackCarriesLeaseGranted: the first batch under a new lease is one
// message that opens with the lease's LeaseGranted (the fence and the
// records in one durable write, one wait); subscribers see the LeaseGranted
// first, and EmitBatch returns only the batch's records.
func TestPackCarriesLeaseGranted(t *testing.T) {
	ctx := t.Context()
	f := newPackFixture(t, singleURL, jetstream.BatchPacked)
	var mu sync.Mutex
	var seen []string
	sub := f.log.Subscribe(func(_ context.Context, env eventlog.Envelope) error {
		mu.Lock()
		seen = append(seen, env.Type)
		mu.Unlock()
		return nil
	})
	defer sub.Cancel()
	before := len(f.messages(t))
	waits := f.log.DurableWaits()
	next := eventlog.Lease{ID: "lease-2", Task: f.task, Generation: 2, Worker: "w2"}
	got, err := f.log.EmitBatch(ctx, next, f.turns(5, 2), eventlog.EmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Type != noeta.TypeTurnStarted {
		t.Fatalf("EmitBatch returned %d records starting with %s, want the 2 TurnStarted", len(got), got[0].Type)
	}
	if w := f.log.DurableWaits() - waits; w != 1 {
		t.Errorf("durable waits for a new lease's first batch: %d, want 1", w)
	}
	msgs := f.messages(t)
	if len(msgs) != before+1 {
		t.Fatalf("the batch added %d messages, want 1", len(msgs)-before)
	}
	if types := msgs[len(msgs)-1].Header.Values("Noeta-Type"); len(types) != 3 || types[0] != noeta.TypeLeaseGranted {
		t.Fatalf("the pack's types %q, want LeaseGranted then the two records", types)
	}
	recs, err := f.log.Read(ctx, f.task, got[0].Seq-2)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Type != noeta.TypeLeaseGranted || recs[0].LeaseGen != 2 || recs[1].ID != got[0].ID {
		t.Fatalf("the log after the previous generation: %d records (%v), want LeaseGranted of generation 2 then the batch", len(recs), recs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != noeta.TypeLeaseGranted {
		t.Errorf("subscribers saw %v, want LeaseGranted first, then the batch", seen)
	}
	// The old lease is fenced off by the pack's LeaseGranted.
	if _, err := f.log.EmitBatch(ctx, f.lease, f.turns(9, 1), eventlog.EmitOptions{}); !errors.Is(err, eventlog.ErrLeaseLost) {
		t.Errorf("the old lease's batch after the new pack: %v, want ErrLeaseLost", err)
	}
}
