package eventlogtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/noeta-go/noeta/eventlog"
)

// The hand-off: EnqueueOptions.HandOff gives a new task to a Lease of the
// same dispatcher blocked on its queue, leased at once.
var handOffCases = []suiteCase{
	{"HandOffToWaiter", testHandOffToWaiter},
	{"HandOffNobodyWaits", testHandOffNobodyWaits},
	{"HandOffKnownTask", testHandOffKnownTask},
	{"HandOffReserved", testHandOffReserved},
	{"HandOffInheritsQueue", testHandOffInheritsQueue},
	{"HandOffGoneWaiter", testHandOffGoneWaiter},
	{"HandOffRace", testHandOffRace},
}

// warmQueue returns a new queue, asked for a task once, so the backend
// has made what a Lease on it needs (a consumer on a cluster takes a
// while) before a case times a blocked Lease.
func warmQueue(t *testing.T, b Backend) string {
	t.Helper()
	q := uniqueQueue()
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "a new queue")
	return q
}

// handOffTries bounds the rounds a case gives a blocked Lease to settle into
// its wait before the Enqueue: a backend that hands nothing off fails them
// all, a loaded machine at most one or two.
const handOffTries = 3

// testHandOffToWaiter: with a Lease blocked on the queue, Enqueue with
// HandOff returns with the task leased to that Lease's worker, which
// returns it; nothing of the task is left in the queue, and the lease is
// an ordinary one: valid, written under, yielded back to the queue.
func testHandOffToWaiter(t *testing.T, b Backend) {
	q := warmQueue(t, b)
	for try := 1; ; try++ {
		ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
		wantBlocked(t, ch, "empty queue")
		task := newTask(t, b)
		enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q, HandOff: true})
		st := inspect(t, b, task)
		r := waitResult(t, b, ch, "after the Enqueue with HandOff")
		if r.err != nil || r.l.Task != task || r.l.Generation != 1 || r.l.Worker != workerB {
			t.Fatalf("the blocked Lease: got (task %q gen %d worker %q, error %v), want %s gen 1 for %s", r.l.Task, r.l.Generation, r.l.Worker, r.err, task, workerB)
		}
		if st.Status != eventlog.DispatchLeased {
			if try == handOffTries {
				t.Fatalf("Enqueue with HandOff and a Lease blocked on %s returned with the task %s, %d times in a row; want it leased to the blocked Lease", q, st.Status, try)
			}
			release(t, b, r.l, eventlog.Release{Next: eventlog.DispatchTerminal})
			continue
		}
		if st.LeaseID != r.l.ID || st.Worker != workerB || st.Generation != 1 || st.Queue != q {
			t.Fatalf("Inspect after the hand-off: got lease %q worker %q gen %d queue %q, want %q %q 1 %q", st.LeaseID, st.Worker, st.Generation, st.Queue, r.l.ID, workerB, q)
		}
		wantValid(t, b, r.l, true, "the handed lease")
		mustEmit(t, b, r.l, turnEnv(t, task, 1))
		wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "the queue after a hand-off")
		yield(t, b, r.l)
		l := leaseQueue(t, b, q)
		if l.Task != task || l.Generation != 2 {
			t.Fatalf("Lease from %s after the handed lease yielded: got task %q gen %d, want %s gen 2", q, l.Task, l.Generation, task)
		}
		wantValid(t, b, r.l, false, "the handed lease after its yield")
		return
	}
}

// testHandOffNobodyWaits: without a Lease blocked on its queue (one blocked
// on another queue does not count), a task enqueued with HandOff is ready
// in its queue, as without.
func testHandOffNobodyWaits(t *testing.T, b Backend) {
	q, other := uniqueQueue(), uniqueQueue()
	ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: other, TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q, HandOff: true})
	wantStatus(t, b, task, eventlog.DispatchReady, "enqueued with HandOff, nobody waiting on its queue")
	wantBlocked(t, ch, "a task ready on another queue")
	if l := leaseQueue(t, b, q); l.Task != task || l.Generation != 1 {
		t.Fatalf("Lease from %s: got task %q gen %d, want %s gen 1", q, l.Task, l.Generation, task)
	}
}

// testHandOffKnownTask: HandOff on a task the dispatcher knows is a plain
// Enqueue: a leased task is forced back to ready, its lease fenced, and a
// blocked Lease takes it from the queue under the next generation.
func testHandOffKnownTask(t *testing.T, b Backend) {
	q := uniqueQueue()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	l1 := leaseQueue(t, b, q)
	ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q, HandOff: true})
	wantValid(t, b, l1, false, "the lease of a task enqueued again with HandOff")
	r := waitResult(t, b, ch, "after the forced Enqueue")
	if r.err != nil || r.l.Task != task || r.l.Generation != 2 {
		t.Fatalf("the blocked Lease: got (task %q gen %d, error %v), want %s gen 2", r.l.Task, r.l.Generation, r.err, task)
	}
}

// testHandOffReserved: a reserved task is never handed off: only a Lease
// naming it takes it.
func testHandOffReserved(t *testing.T, b Backend) {
	q := uniqueQueue()
	ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q, Reserved: true, HandOff: true})
	wantStatus(t, b, task, eventlog.DispatchReady, "reserved, enqueued with HandOff")
	wantBlocked(t, ch, "a reserved task on the queue")
	leaseTask(t, b, task)
}

// testHandOffInheritsQueue: a child enqueued with its parent and no queue
// is handed to a Lease blocked on the parent's queue.
func testHandOffInheritsQueue(t *testing.T, b Backend) {
	q := warmQueue(t, b)
	for try := 1; ; try++ {
		parent := newTask(t, b)
		enqueue(t, b, parent, eventlog.EnqueueOptions{Queue: q})
		ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
		r := waitResult(t, b, ch, "the parent's lease")
		if r.err != nil || r.l.Task != parent {
			t.Fatalf("the parent's lease: got (task %q, error %v), want %s", r.l.Task, r.err, parent)
		}
		ch = leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
		wantBlocked(t, ch, "the parent leased")
		child := newTask(t, b)
		enqueue(t, b, child, eventlog.EnqueueOptions{Parent: parent, HandOff: true})
		st := inspect(t, b, child)
		r = waitResult(t, b, ch, "after the child's Enqueue")
		if r.err != nil || r.l.Task != child {
			t.Fatalf("the blocked Lease on the parent's queue: got (task %q, error %v), want the child %s", r.l.Task, r.err, child)
		}
		if st.Queue != q {
			t.Fatalf("the child's queue: got %q, want the parent's %q", st.Queue, q)
		}
		if st.Status == eventlog.DispatchLeased || try == handOffTries {
			if st.Status != eventlog.DispatchLeased {
				t.Fatalf("the child was %s when its Enqueue with HandOff returned, %d times in a row; want it leased", st.Status, try)
			}
			return
		}
	}
}

// testHandOffGoneWaiter: a Lease whose ctx ends as a task is handed to it
// either returns the task or leaves it ready in its queue, leasable at
// once; it never leaves the task leased to a caller that has gone.
func testHandOffGoneWaiter(t *testing.T, b Backend) {
	q := warmQueue(t, b)
	for round := range 12 {
		ctx, cancel := context.WithCancel(t.Context())
		ch := leaseAsync(ctx, b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true})
		wantBlocked(t, ch, "empty queue")
		task := newTask(t, b)
		var wg sync.WaitGroup
		wg.Go(func() {
			if round%3 == 0 {
				cancel()
			}
			enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q, HandOff: true})
		})
		if round%3 != 0 {
			cancel()
		}
		wg.Wait()
		r := waitResult(t, b, ch, "a cancelled Lease")
		if r.err == nil {
			if r.l.Task != task {
				t.Fatalf("round %d: the cancelled Lease returned task %q, want %s or an error", round, r.l.Task, task)
			}
			release(t, b, r.l, eventlog.Release{Next: eventlog.DispatchTerminal})
			continue
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("round %d: the cancelled Lease: got error %v, want %v", round, r.err, context.Canceled)
		}
		// Given back before the Lease returned: ready now, not once a
		// lease left behind has expired and been reclaimed.
		if st := inspect(t, b, task); st.Status != eventlog.DispatchReady || st.LeaseID != "" || st.ReclaimCount != 0 {
			t.Fatalf("round %d: a Lease cancelled as its task was handed off returned %v and left the task %s (lease %q, reclaimed %d times), want it ready with no lease", round, r.err, st.Status, st.LeaseID, st.ReclaimCount)
		}
		l := leaseQueue(t, b, q)
		if l.Task != task {
			t.Fatalf("round %d: Lease from %s after the hand-off to a gone Lease: got task %q, want %s", round, q, l.Task, task)
		}
		release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal})
	}
}

// testHandOffRace: tasks enqueued with HandOff at once, with fewer Leases
// blocked on their queue than tasks: every task is leased exactly once,
// whether handed off or taken from the queue.
func testHandOffRace(t *testing.T, b Backend) {
	const waiters, tasks = 4, 10
	q := warmQueue(t, b)
	var chs []<-chan leaseResult
	for range waiters {
		chs = append(chs, leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b), Wait: true}))
	}
	for _, ch := range chs {
		wantBlocked(t, ch, "empty queue")
	}
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = newTask(t, b)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := b.Dispatcher.Enqueue(t.Context(), id, eventlog.EnqueueOptions{Queue: q, HandOff: true}); err != nil {
				t.Errorf("Enqueue(%s, HandOff): %v", id, err)
			}
		})
	}
	wg.Wait()
	// Each lease is ended as soon as it is counted, so none can expire
	// (and its task be leased again) while the rest are taken.
	got := map[string]string{}
	take := func(l eventlog.Lease) {
		t.Helper()
		if prev, ok := got[l.Task]; ok {
			t.Fatalf("task %s leased twice: leases %s and %s", l.Task, prev, l.ID)
		}
		if l.Generation != 1 {
			t.Fatalf("task %s leased under generation %d, want 1: an earlier lease of it was granted and lost", l.Task, l.Generation)
		}
		got[l.Task] = l.ID
		release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal})
	}
	for i, ch := range chs {
		r := waitResult(t, b, ch, fmt.Sprintf("blocked Lease %d", i))
		if r.err != nil {
			t.Fatalf("blocked Lease %d: %v", i, r.err)
		}
		take(r.l)
	}
	for len(got) < tasks {
		take(leaseQueue(t, b, q))
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "every task leased")
}
