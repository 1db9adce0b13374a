package eventlogtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// batchCases are the cases of [eventlog.BatchWriter] (ADR 0038). Every
// backend implements it; what a failure leaves is the backend's to say
// (BatchAtomic), and the cases hold it to what it says.
var batchCases = []suiteCase{
	{"BatchStored", testBatchStored},
	{"BatchInvalidWritesNothing", testBatchInvalidWritesNothing},
	{"BatchStaleSequenceWritesNothing", testBatchStaleSequenceWritesNothing},
	{"BatchFenced", testBatchFenced},
	{"BatchIdempotent", testBatchIdempotent},
	{"BatchSubscribersSeeEachOnceInOrder", testBatchSubscribers},
	{"BatchConcurrentConsecutive", testBatchConcurrentConsecutive},
	{"BatchReadFromWithin", testBatchReadFromWithin},
}

// RunBatchSuite runs the cases of [eventlog.BatchWriter]: stored records,
// checks before any write, the fence, idempotency, subscribers, and that a
// batch's records are consecutive under concurrency.
func RunBatchSuite(t *testing.T, f Factory) {
	t.Helper()
	run(t, f, batchCases)
}

func batchWriter(t *testing.T, b Backend) eventlog.BatchWriter {
	t.Helper()
	bw, ok := b.Log.(eventlog.BatchWriter)
	if !ok {
		t.Fatalf("%T does not implement eventlog.BatchWriter", b.Log)
	}
	return bw
}

func turnBatch(t *testing.T, task string, from, n int) []eventlog.Envelope {
	t.Helper()
	out := make([]eventlog.Envelope, n)
	for i := range out {
		out[i] = turnEnv(t, task, from+i)
	}
	return out
}

// testBatchStored: the first batch of a lease writes its LeaseGranted, then
// the records in order, densely numbered, stamped, and returned as stored.
func testBatchStored(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	got, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 1, 3), eventlog.EmitOptions{ExpectLastSeq: 1})
	if err != nil {
		t.Fatalf("EmitBatch: got error %v, want nil", err)
	}
	log := wantLogLen(t, b, task, 5, "after a batch of 3")
	if log[1].Type != noeta.TypeLeaseGranted {
		t.Fatalf("record 2 is %s, want the lease's LeaseGranted before the batch", log[1].Type)
	}
	if len(got) != 3 {
		t.Fatalf("EmitBatch returned %d records, want 3", len(got))
	}
	ids := map[string]bool{}
	for i, r := range got {
		wantSameEnvelope(t, fmt.Sprintf("returned record %d", i), r, log[2+i])
		if r.LeaseGen != l.Generation || !isULID(r.ID) || ids[r.ID] {
			t.Errorf("record %d: lease gen %d (want %d), id %q (want a fresh ULID)", i, r.LeaseGen, l.Generation, r.ID)
		}
		ids[r.ID] = true
		if turnOf(r) != i+1 {
			t.Errorf("record %d is turn %d, want %d: out of order", i, turnOf(r), i+1)
		}
	}
	// A second batch follows without a LeaseGranted; a baseline may end it.
	snap := mustEnvelope(t, task, noeta.TaskSnapshot{StateRef: noeta.ContentRef{Hash: strings.Repeat("a", 64), Size: 2, MediaType: "application/json"}, UptoSeq: 6})
	if _, err := bw.EmitBatch(t.Context(), l, append(turnBatch(t, task, 4, 1), snap), eventlog.EmitOptions{ExpectLastSeq: 5}); err != nil {
		t.Fatalf("second EmitBatch ending in a snapshot: got error %v, want nil", err)
	}
	wantLogLen(t, b, task, 7, "after the second batch")
	ls, err := b.Log.LatestSnapshot(t.Context(), task)
	if err != nil || ls.Seq != 7 {
		t.Fatalf("LatestSnapshot after a batch ending in one: got seq %d, %v; want 7", ls.Seq, err)
	}
}

// testBatchInvalidWritesNothing: every record is checked before anything is
// written, whatever the backend's atomicity; a bad last record leaves the log
// as it was.
func testBatchInvalidWritesNothing(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	other := newTask(t, b)
	badOrigin := turnEnv(t, task, 3)
	badOrigin.Origin = "robot"
	snap := mustEnvelope(t, task, noeta.TaskSnapshot{StateRef: noeta.ContentRef{Hash: strings.Repeat("a", 64), Size: 2, MediaType: "application/json"}, UptoSeq: 2})
	tooMany := turnBatch(t, task, 1, eventlog.MaxBatch+1)
	cases := []struct {
		name string
		envs []eventlog.Envelope
		want error
	}{
		{"empty", nil, eventlog.ErrInvalidArgument},
		{"too many", tooMany, eventlog.ErrInvalidArgument},
		{"another task's record", append(turnBatch(t, task, 1, 1), turnEnv(t, other, 2)), eventlog.ErrInvalidArgument},
		{"a bad origin last", append(turnBatch(t, task, 1, 2), badOrigin), eventlog.ErrInvalidArgument},
		{"a baseline not last", append([]eventlog.Envelope{snap}, turnBatch(t, task, 1, 1)...), eventlog.ErrInvalidArgument},
		{"a payload over the cap last", append(turnBatch(t, task, 1, 2), rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1))), eventlog.ErrPayloadTooLarge},
	}
	for _, c := range cases {
		got, err := bw.EmitBatch(t.Context(), l, c.envs, eventlog.EmitOptions{})
		checkErrIs(t, "EmitBatch with "+c.name, err, c.want)
		if len(got) != 0 {
			t.Errorf("EmitBatch with %s returned %d records, want none", c.name, len(got))
		}
		wantLogLen(t, b, task, 1, "after EmitBatch with "+c.name)
	}
}

// testBatchStaleSequenceWritesNothing: ExpectLastSeq is checked before the
// first record, so a stale one writes nothing.
func testBatchStaleSequenceWritesNothing(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1) // seq 3
	_, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 2, 3), eventlog.EmitOptions{ExpectLastSeq: 2})
	checkErrIs(t, "EmitBatch with a stale ExpectLastSeq", err, eventlog.ErrStaleSequence)
	wantLogLen(t, b, task, 3, "after the stale batch")
}

// testBatchFenced: after a takeover, the old holder's batch fails and
// writes nothing: the fence covers the batch, not only its first record.
func testBatchFenced(t *testing.T, b Backend) {
	ctx := t.Context()
	bw := batchWriter(t, b)
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	la := leaseTaskAs(t, b, task, workerA)
	if _, err := bw.EmitBatch(ctx, la, turnBatch(t, task, 1, 2), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("A's batch: %v", err)
	}
	expire(t, b, la)
	if _, err := b.Dispatcher.RequeueStale(ctx); err != nil {
		t.Fatalf("RequeueStale: got error %v, want nil", err)
	}
	lb := leaseTaskAs(t, b, task, workerB)
	if _, err := bw.EmitBatch(ctx, lb, turnBatch(t, task, 3, 2), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("B's batch: %v", err)
	}
	before := wantLogLen(t, b, task, 7, "after B's batch")
	for _, opts := range []eventlog.EmitOptions{{}, {ExpectLastSeq: 7}} {
		got, err := bw.EmitBatch(ctx, la, turnBatch(t, task, 5, 3), opts)
		if !isLeaseErr(err) {
			t.Errorf("A's batch after the takeover (%+v): got %v, want ErrInvalidLease or ErrLeaseLost", opts, err)
		}
		if len(got) != 0 {
			t.Errorf("A's batch after the takeover returned %d records, want none", len(got))
		}
	}
	after := wantLogLen(t, b, task, 7, "after A's refused batches")
	for i := range before {
		wantSameEnvelope(t, fmt.Sprintf("record %d", i+1), after[i], before[i])
	}
}

func isLeaseErr(err error) bool {
	return err != nil && (errors.Is(err, eventlog.ErrInvalidLease) || errors.Is(err, eventlog.ErrLeaseLost))
}

// testBatchIdempotent: a repeat of a batch with its key under the same lease
// returns the records the first call wrote and writes nothing, even after
// the log moved on.
func testBatchIdempotent(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	opts := eventlog.EmitOptions{IdempotencyKey: "turn-1-batch"}
	first, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 1, 3), opts)
	if err != nil {
		t.Fatalf("EmitBatch: %v", err)
	}
	emitTurn(t, b, l, 4)
	again, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 1, 3), opts)
	if err != nil {
		t.Fatalf("repeated EmitBatch: got error %v, want nil", err)
	}
	if len(again) != len(first) {
		t.Fatalf("repeated EmitBatch returned %d records, want the first call's %d", len(again), len(first))
	}
	for i := range first {
		wantSameEnvelope(t, fmt.Sprintf("repeated record %d", i), again[i], first[i])
	}
	wantLogLen(t, b, task, 6, "after the repeat")
}

// testBatchSubscribers: a subscriber sees the LeaseGranted and every record
// of the batch once, in log order, before EmitBatch returns.
func testBatchSubscribers(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	var mu sync.Mutex
	var seen []eventlog.Envelope
	subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			mu.Lock()
			seen = append(seen, env)
			mu.Unlock()
		}
		return nil
	})
	if _, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 1, 4), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("EmitBatch: %v", err)
	}
	mu.Lock()
	got := append([]eventlog.Envelope(nil), seen...)
	mu.Unlock()
	log := readAll(t, b, task)
	if len(got) != len(log)-1 {
		t.Fatalf("subscriber saw %v before EmitBatch returned, want %v", typesOf(got), typesOf(log[1:]))
	}
	for i, env := range got {
		wantSameEnvelope(t, fmt.Sprintf("delivered record %d", i), env, log[i+1])
	}
}

// testBatchConcurrentConsecutive: writers sharing a lease emit batches at
// once; the log stays dense and each batch's records are consecutive.
func testBatchConcurrentConsecutive(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	const writers, batches, size = 3, 4, 3
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				if _, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, (w*batches+i)*size+1, size), eventlog.EmitOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("EmitBatch: %v", err)
	}
	log := wantLogLen(t, b, task, 2+writers*batches*size, "after the concurrent batches")
	for i := 2; i < len(log); i += size {
		start := turnOf(log[i])
		if (start-1)%size != 0 {
			t.Fatalf("record %d is turn %d, not the start of a batch: batches interleaved (%v)", log[i].Seq, start, typesOf(log))
		}
		for j := 1; j < size; j++ {
			if got := turnOf(log[i+j]); got != start+j {
				t.Fatalf("record %d is turn %d, want %d: batches interleaved", log[i+j].Seq, got, start+j)
			}
		}
	}
}

// testBatchReadFromWithin: a read that starts inside a batch returns the
// batch's records after that point and nothing before it, however the
// backend stores a batch (ADR 0040 packs one into a single message); the
// task index names the batch's last record.
func testBatchReadFromWithin(t *testing.T, b Backend) {
	bw := batchWriter(t, b)
	task, l := newLeased(t, b)
	got, err := bw.EmitBatch(t.Context(), l, turnBatch(t, task, 1, 4), eventlog.EmitOptions{})
	if err != nil || len(got) != 4 {
		t.Fatalf("EmitBatch: got %d records, %v; want 4 and nil", len(got), err)
	}
	for after := got[0].Seq - 1; after <= got[3].Seq; after++ {
		recs, err := b.Log.Read(t.Context(), task, after)
		if err != nil {
			t.Fatalf("Read after seq %d: %v", after, err)
		}
		want := int(got[3].Seq - after)
		if len(recs) != want {
			t.Fatalf("Read after seq %d: %d records, want %d", after, len(recs), want)
		}
		for i, r := range recs {
			wantSameEnvelope(t, fmt.Sprintf("Read after seq %d, record %d", after, i), r, got[int(after-got[0].Seq)+1+i])
		}
	}
	if idx, ok := b.Log.(eventlog.TaskIndex); ok {
		tasks, err := idx.Tasks(t.Context())
		if err != nil {
			t.Fatalf("Tasks: %v", err)
		}
		for _, s := range tasks {
			if s.Task == task && s.LastSeq != got[3].Seq {
				t.Errorf("Tasks: task %s last seq %d, want the batch's last %d", task, s.LastSeq, got[3].Seq)
			}
		}
	}
}
