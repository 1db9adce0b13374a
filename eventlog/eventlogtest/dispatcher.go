package eventlogtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

var dispatcherCases = []suiteCase{
	// queues and leases
	{"EnqueueLease", testEnqueueLease},
	{"LeaseNothingReady", testLeaseNothingReady},
	{"FIFO", testFIFO},
	{"QueuesIsolated", testQueuesIsolated},
	{"QueueNameValidated", testQueueNameValidated},
	{"QueueFixedAtFirstEnqueue", testQueueFixed},
	{"ChildInheritsQueue", testChildInheritsQueue},
	{"Reserved", testReserved},
	{"TargetedNotReady", testTargetedNotReady},
	{"TargetedLeaveQueueClean", testTargetedLeaveQueueClean},
	{"EnqueueReadyKeepsPlace", testEnqueueReadyKeepsPlace},
	{"ForceEnqueueInvalidatesLease", testForceEnqueueInvalidatesLease},
	{"ForceEnqueueSuspendedTerminal", testForceEnqueueSuspendedTerminal},
	{"LeaseRace", testLeaseRace},
	{"LeaseRaceTargeted", testLeaseRaceTargeted},
	{"LeaseRaceManyTasks", testLeaseRaceManyTasks},
	{"GenerationIncreases", testGenerationIncreases},
	// heartbeats
	{"HeartbeatExtends", testHeartbeatExtends},
	{"HeartbeatQuota", testHeartbeatQuota},
	{"HeartbeatQuotaWithWake", testHeartbeatQuotaWithWake},
	{"ExpiredLeaseRefused", testExpiredLeaseRefused},
	// wakes
	{"WakeMatches", testWakeMatches},
	{"WakeSurvivesLease", testWakeSurvivesLease},
	{"ConsumeClears", testConsumeClears},
	{"ConsumeMismatch", testConsumeMismatch},
	{"BufferedWakeMatchedAtSuspend", testBufferedWakeMatchedAtSuspend},
	{"EarlyWakeWhileLeased", testEarlyWakeWhileLeased},
	{"BufferedWakesArrivalOrder", testBufferedWakesArrivalOrder},
	{"UnconsumedWakeRedelivered", testUnconsumedWakeRedelivered},
	{"TerminalClearsBuffer", testTerminalClearsBuffer},
	{"TerminalKeepsMatchedWake", testTerminalKeepsMatchedWake},
	{"SuspendWithoutCondition", testSuspendWithoutCondition},
	{"WakeTerminal", testWakeTerminal},
	{"WakeUnknownTask", testWakeUnknownTask},
	{"WakeInvalid", testWakeInvalid},
	{"WakeBufferCap", testWakeBufferCap},
	// human answers: never buffered (answers.go)
	{"AnswerMatchesSuspend", testAnswerMatchesSuspend},
	{"AnswerBeforeAskRefused", testAnswerBeforeAskRefused},
	{"AnswerWrongHandleRefused", testAnswerWrongHandleRefused},
	{"AnswerOtherWaitRefused", testAnswerOtherWaitRefused},
	{"AnswerRaceOneWins", testAnswerRaceOneWins},
	{"AnswerAfterConsumeRefused", testAnswerAfterConsumeRefused},
	// release, yield, fail
	{"ReleaseNextInvalid", testReleaseNextInvalid},
	{"UnknownLease", testUnknownLease},
	{"Yield", testYield},
	{"FailRetryable", testFailRetryable},
	{"FailCap", testFailCap},
	{"FailCapReason", testFailCapReason},
	{"FailAttemptsNeverReset", testFailAttemptsNeverReset},
	{"FailNonRetryable", testFailNonRetryable},
	// expiry and reclaim
	{"ExpiredRequeuedByBackend", testExpiredRequeuedByBackend},
	{"ExpiredAheadOfQueue", testExpiredAheadOfQueue},
	{"RequeueStale", testRequeueStale},
	{"ReclaimCap", testReclaimCap},
	{"HeartbeatResetsReclaim", testHeartbeatResetsReclaim},
	// timers
	{"TimerFires", testTimerFires},
	{"TimerInclusive", testTimerInclusive},
	{"TimerAlreadyDue", testTimerAlreadyDue},
	{"TimerFiresOnce", testTimerFiresOnce},
	// expiring approvals (expiry.go)
	{"AnswerReceivedAtStamped", testAnswerReceivedAtStamped},
	{"ExpiryFiresOnce", testExpiryFiresOnce},
	{"ExpiryNotAfterAnswer", testExpiryNotAfterAnswer},
	{"ExpiryRearmedAfterResuspend", testExpiryRearmedAfterResuspend},
	{"ExpiryAcrossRestart", testExpiryAcrossRestart},
	// registry and inspection
	{"Valid", testValid},
	{"ValidStrictBoundary", testValidStrictBoundary},
	{"InspectUnknown", testInspectUnknown},
	// waiting
	{"LeaseWait", testLeaseWait},
	{"LeaseWaitCancel", testLeaseWaitCancel},
	{"LeaseCancelMidGrant", testLeaseCancelMidGrant},
	{"ExactlyOnceHandoff", testExactlyOnceHandoff},
	// cancellation and Close
	{"CancelledDispatcher", testCancelledDispatcher},
	{"ClosedDispatcher", testClosedDispatcher},
	{"LeaseWaitClose", testLeaseWaitClose},
}

// ---- queues and leases ----

func testEnqueueLease(t *testing.T, b Backend) {
	genesis := createTask(t, b)
	task := genesis.Task
	q := uniqueQueue()
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after Enqueue")
	if st.Task != task || st.Queue != q || st.Reserved {
		t.Errorf("Inspect after Enqueue: got Task %q Queue %q Reserved %v, want %q %q false", st.Task, st.Queue, st.Reserved, task, q)
	}
	ttl := leaseTTL(t, b)
	before := time.Now()
	l, err := b.Dispatcher.Lease(t.Context(), eventlog.LeaseRequest{Worker: "worker-1", Queue: q, TTL: ttl})
	wantNoErr(t, "Lease", err)
	after := time.Now()
	if l.Task != task || l.Generation != 1 || l.Worker != "worker-1" || l.ID == "" || l.Wake != nil {
		t.Errorf("Lease: got %+v, want task %s, generation 1, worker worker-1, an id and no wake", l, task)
	}
	if b.Advance != nil {
		if want := genesis.Time.Add(ttl); !l.Expires.Equal(want) {
			t.Errorf("Expires: got %v, want %v (now + TTL)", l.Expires, want)
		}
	} else if l.Expires.Before(before.Add(ttl-time.Second)) || l.Expires.After(after.Add(ttl+time.Second)) {
		t.Errorf("Expires: got %v, want about %v", l.Expires, after.Add(ttl))
	}
	st = wantStatus(t, b, task, eventlog.DispatchLeased, "after Lease")
	if st.LeaseID != l.ID || st.Generation != 1 || st.Worker != "worker-1" || !st.Expires.Equal(l.Expires) || st.Heartbeats != 0 {
		t.Errorf("Inspect after Lease: got LeaseID %q Generation %d Worker %q Expires %v Heartbeats %d, want %q 1 worker-1 %v 0", st.LeaseID, st.Generation, st.Worker, st.Expires, st.Heartbeats, l.ID, l.Expires)
	}
	wantValid(t, b, l, true, "the new lease")

	// The default queue and the default TTL.
	other := newTask(t, b)
	enqueue(t, b, other, eventlog.EnqueueOptions{})
	if st := inspect(t, b, other); st.Queue != eventlog.DefaultQueue {
		t.Errorf("queue of a task enqueued without one: got %q, want %q", st.Queue, eventlog.DefaultQueue)
	}
	l2, err := b.Dispatcher.Lease(t.Context(), eventlog.LeaseRequest{Worker: "worker-2", Task: other})
	wantNoErr(t, "Lease with the default TTL", err)
	if !l2.Expires.After(grantedAt(t, b, l)) {
		t.Errorf("Expires with the default TTL: got %v, want a time in the future", l2.Expires)
	}
}

func testLeaseNothingReady(t *testing.T, b Backend) {
	q := uniqueQueue()
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "empty queue")
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	leaseQueue(t, b, q)
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "queue whose only task is leased")
}

func testFIFO(t *testing.T, b Backend) {
	q := uniqueQueue()
	var tasks []string
	for range 5 {
		task := newTask(t, b)
		enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
		tasks = append(tasks, task)
	}
	for i, want := range tasks {
		if got := leaseParked(t, b, q); got.Task != want {
			t.Errorf("lease %d: got task %s, want %s (enqueue order)", i, got.Task, want)
		}
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "after leasing every task")
}

func testQueuesIsolated(t *testing.T, b Backend) {
	q1, q2 := uniqueQueue(), uniqueQueue()
	t1, t2 := newTask(t, b), newTask(t, b)
	enqueue(t, b, t1, eventlog.EnqueueOptions{Queue: q1})
	enqueue(t, b, t2, eventlog.EnqueueOptions{Queue: q2})
	if got := leaseQueue(t, b, q2); got.Task != t2 {
		t.Errorf("lease from q2: got %s, want %s", got.Task, t2)
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q2}, "q2 after its task was leased")
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: uniqueQueue()}, "a third queue")
	if got := leaseQueue(t, b, q1); got.Task != t1 {
		t.Errorf("lease from q1: got %s, want %s", got.Task, t1)
	}
}

func testQueueFixed(t *testing.T, b Backend) {
	q1, q2 := uniqueQueue(), uniqueQueue()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q1})
	leaseTask(t, b, task)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q2}) // forced back to ready
	if st := wantStatus(t, b, task, eventlog.DispatchReady, "after the forced enqueue"); st.Queue != q1 {
		t.Errorf("queue after an Enqueue naming another: got %q, want %q (fixed at the first)", st.Queue, q1)
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q2}, "the queue of the second Enqueue")
	if got := leaseQueue(t, b, q1); got.Task != task {
		t.Errorf("lease from the first queue: got %s, want %s", got.Task, task)
	}
}

func testChildInheritsQueue(t *testing.T, b Backend) {
	q, q2 := uniqueQueue(), uniqueQueue()
	parent, child, explicit, orphan := newTask(t, b), newTask(t, b), newTask(t, b), newTask(t, b)
	enqueue(t, b, parent, eventlog.EnqueueOptions{Queue: q})
	enqueue(t, b, child, eventlog.EnqueueOptions{Parent: parent})
	enqueue(t, b, explicit, eventlog.EnqueueOptions{Parent: parent, Queue: q2})
	enqueue(t, b, orphan, eventlog.EnqueueOptions{Parent: noeta.NewTaskID()})
	for _, c := range []struct{ task, want string }{{child, q}, {explicit, q2}, {orphan, eventlog.DefaultQueue}} {
		if st := inspect(t, b, c.task); st.Queue != c.want {
			t.Errorf("queue of %s: got %q, want %q", c.task, st.Queue, c.want)
		}
	}
	if got := leaseParked(t, b, q); got.Task != parent {
		t.Errorf("first lease from the parent's queue: got %s, want the parent %s", got.Task, parent)
	}
	if got := leaseQueue(t, b, q); got.Task != child {
		t.Errorf("second lease from the parent's queue: got %s, want the child %s", got.Task, child)
	}
}

func testReserved(t *testing.T, b Backend) {
	q := uniqueQueue()
	reserved, free := newTask(t, b), newTask(t, b)
	enqueue(t, b, reserved, eventlog.EnqueueOptions{Queue: q, Reserved: true})
	enqueue(t, b, free, eventlog.EnqueueOptions{Queue: q})
	if st := inspect(t, b, reserved); !st.Reserved {
		t.Errorf("Inspect of a reserved task: got Reserved false, want true")
	}
	if got := leaseParked(t, b, q); got.Task != free {
		t.Errorf("untargeted lease: got %s, want %s (the reserved task is skipped)", got.Task, free)
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "queue with only a reserved task")
	l := leaseTask(t, b, reserved)
	if st := inspect(t, b, reserved); st.Reserved {
		t.Errorf("Inspect after the targeted lease: got Reserved true, want false (claimed once)")
	}
	yield(t, b, l)
	if got := leaseQueue(t, b, q); got.Task != reserved {
		t.Errorf("untargeted lease after the reservation was claimed: got %s, want %s", got.Task, reserved)
	}
}

func testTargetedNotReady(t *testing.T, b Backend) {
	unknown := noeta.NewTaskID()
	wantNoReady(t, b, eventlog.LeaseRequest{Task: unknown}, "targeted lease of an unknown task")
	notEnqueued := newTask(t, b)
	wantNoReady(t, b, eventlog.LeaseRequest{Task: notEnqueued}, "targeted lease of a task never enqueued")
	leased, _ := newLeased(t, b)
	wantNoReady(t, b, eventlog.LeaseRequest{Task: leased}, "targeted lease of a leased task")
	suspended, l := newLeased(t, b)
	suspendOn(t, b, l, eventCond())
	wantNoReady(t, b, eventlog.LeaseRequest{Task: suspended}, "targeted lease of a suspended task")
	terminal, l2 := newLeased(t, b)
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	wantNoReady(t, b, eventlog.LeaseRequest{Task: terminal}, "targeted lease of a terminal task")
}

// testTargetedLeaveQueueClean: tasks leased by name leave nothing in their
// queue an untargeted lease could take, and one of them made ready again
// (suspended, then woken) is in the queue once, behind what was already
// there. On JetStream a lease by name withdraws the task's ready signal; a
// withdrawal that removed the newer signal of a task woken in the meantime
// would leave it ready with nothing to lease it by.
func testTargetedLeaveQueueClean(t *testing.T, b Backend) {
	q := uniqueQueue()
	var byName []string
	for range 5 {
		task := newTask(t, b)
		enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
		byName = append(byName, task)
	}
	waiting := newTask(t, b)
	enqueue(t, b, waiting, eventlog.EnqueueOptions{Queue: q})
	conds := map[string]noeta.Wake{}
	for _, task := range byName {
		l := leaseTask(t, b, task)
		cond := eventCond()
		conds[task] = cond
		release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond})
	}
	woken := byName[2]
	wake(t, b, woken, occurred(conds[woken], "done"), true)
	for i, want := range []string{waiting, woken} {
		got := leaseQueue(t, b, q)
		if got.Task != want {
			t.Fatalf("untargeted lease %d after leases by name: got %s, want %s", i, got.Task, want)
		}
		release(t, b, got, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "a queue whose other tasks were leased by name and suspended")
}

func testEnqueueReadyKeepsPlace(t *testing.T, b Backend) {
	q := uniqueQueue()
	first, second := newTask(t, b), newTask(t, b)
	enqueue(t, b, first, eventlog.EnqueueOptions{Queue: q})
	enqueue(t, b, second, eventlog.EnqueueOptions{Queue: q})
	enqueue(t, b, first, eventlog.EnqueueOptions{Queue: q})
	if got := leaseQueue(t, b, q); got.Task != first {
		t.Errorf("first lease after re-enqueuing the head: got %s, want %s (place kept)", got.Task, first)
	}

	q2 := uniqueQueue()
	reserved := newTask(t, b)
	enqueue(t, b, reserved, eventlog.EnqueueOptions{Queue: q2, Reserved: true})
	enqueue(t, b, reserved, eventlog.EnqueueOptions{Queue: q2})
	if st := inspect(t, b, reserved); !st.Reserved {
		t.Errorf("reservation after re-enqueuing a ready task: got false, want true (kept)")
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q2}, "a reserved task re-enqueued unreserved")

	q3 := uniqueQueue()
	free := newTask(t, b)
	enqueue(t, b, free, eventlog.EnqueueOptions{Queue: q3})
	enqueue(t, b, free, eventlog.EnqueueOptions{Queue: q3, Reserved: true})
	if st := inspect(t, b, free); st.Reserved {
		t.Errorf("reservation after re-enqueuing a ready task reserved: got true, want false (kept)")
	}
	if got := leaseQueue(t, b, q3); got.Task != free {
		t.Errorf("untargeted lease: got %s, want %s", got.Task, free)
	}
}

func testForceEnqueueInvalidatesLease(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	wantStatus(t, b, task, eventlog.DispatchReady, "after forcing a leased task")
	wantValid(t, b, l, false, "the fenced lease")
	_, err := b.Log.Emit(ctx, l, turnEnv(t, task, 2), eventlog.EmitOptions{})
	checkErrIs(t, "Emit under the fenced lease", err, eventlog.ErrInvalidLease)
	_, err = b.Dispatcher.Heartbeat(ctx, l)
	checkErrIs(t, "Heartbeat of the fenced lease", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal})
	checkErrIs(t, "Release of the fenced lease", err, eventlog.ErrInvalidLease)
	wantStatus(t, b, task, eventlog.DispatchReady, "after the fenced lease's attempts")
	l2 := leaseTask(t, b, task)
	if l2.Generation <= l.Generation {
		t.Errorf("generation after the forced enqueue: got %d, want more than %d", l2.Generation, l.Generation)
	}
	if got := emitTurn(t, b, l2, 2); got.Seq != 5 {
		t.Errorf("first emit of the new lease: got seq %d, want 5", got.Seq)
	}
}

func testForceEnqueueSuspendedTerminal(t *testing.T, b Backend) {
	suspended, l := newLeased(t, b)
	suspendOn(t, b, l, eventCond())
	enqueue(t, b, suspended, eventlog.EnqueueOptions{})
	wantStatus(t, b, suspended, eventlog.DispatchReady, "after forcing a suspended task")
	leaseTask(t, b, suspended)

	if b.MaxFailAttempts < 2 {
		t.Fatalf("Backend.MaxFailAttempts is %d; the suite needs at least 2", b.MaxFailAttempts)
	}
	terminal, l2 := newLeased(t, b)
	if err := b.Dispatcher.Fail(t.Context(), l2, eventlog.Failure{Retryable: true, Reason: "flaky"}); err != nil {
		t.Fatalf("Fail: got error %v, want nil", err)
	}
	l3 := leaseTask(t, b, terminal)
	release(t, b, l3, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	enqueue(t, b, terminal, eventlog.EnqueueOptions{})
	st := wantStatus(t, b, terminal, eventlog.DispatchReady, "after forcing a terminal task")
	if st.FailAttempts != 1 {
		t.Errorf("FailAttempts after the forced enqueue: got %d, want 1 (kept)", st.FailAttempts)
	}
	leaseTask(t, b, terminal)
}

func testLeaseRace(t *testing.T, b Backend) {
	q := uniqueQueue()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	raceLeases(t, b, 20, eventlog.LeaseRequest{Queue: q}, 1)
}

func testLeaseRaceTargeted(t *testing.T, b Backend) {
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	raceLeases(t, b, 20, eventlog.LeaseRequest{Task: task}, 1)
}

func testLeaseRaceManyTasks(t *testing.T, b Backend) {
	q := uniqueQueue()
	for range 8 {
		enqueue(t, b, newTask(t, b), eventlog.EnqueueOptions{Queue: q})
	}
	raceLeases(t, b, 20, eventlog.LeaseRequest{Queue: q}, 8)
}

// raceLeases runs n concurrent Leases of req and checks that exactly winners
// succeed, each with a different task.
func raceLeases(t *testing.T, b Backend, n int, req eventlog.LeaseRequest, winners int) {
	t.Helper()
	req.TTL = leaseTTL(t, b)
	leases := make([]eventlog.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := req
			r.Worker = fmt.Sprintf("worker-%d", i)
			leases[i], errs[i] = b.Dispatcher.Lease(t.Context(), r)
		})
	}
	wg.Wait()
	got := map[string]int{}
	for i, err := range errs {
		switch {
		case err == nil:
			got[leases[i].Task]++
		case !errors.Is(err, eventlog.ErrNoReadyTask):
			t.Errorf("Lease #%d: got error %v, want nil or %v", i, err, eventlog.ErrNoReadyTask)
		}
	}
	if len(got) != winners {
		t.Errorf("tasks granted: got %d, want %d", len(got), winners)
	}
	for task, c := range got {
		if c != 1 {
			t.Errorf("task %s granted to %d workers, want 1", task, c)
		}
		if st := inspect(t, b, task); st.Status != eventlog.DispatchLeased || st.Generation != 1 {
			t.Errorf("task %s after the race: got %s generation %d, want leased generation 1", task, st.Status, st.Generation)
		}
	}
}

func testGenerationIncreases(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	gens := []uint64{l.Generation}
	next := func(what string) {
		t.Helper()
		l = leaseTask(t, b, task)
		if l.Generation <= gens[len(gens)-1] {
			t.Fatalf("generation after %s: got %d, want more than %d", what, l.Generation, gens[len(gens)-1])
		}
		gens = append(gens, l.Generation)
	}
	yield(t, b, l)
	next("Yield")
	cond := eventCond()
	suspendOn(t, b, l, cond)
	wake(t, b, task, occurred(cond, "ok"), true)
	next("suspend and wake")
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	next("a forced Enqueue")
	if err := b.Dispatcher.Fail(t.Context(), l, eventlog.Failure{Retryable: true}); err != nil {
		t.Fatalf("Fail: got error %v, want nil", err)
	}
	next("a retryable Fail")
	expire(t, b, l)
	next("expiry")
	if st := inspect(t, b, task); st.Generation != l.Generation {
		t.Errorf("Inspect Generation: got %d, want %d", st.Generation, l.Generation)
	}
	t.Logf("generations: %v", gens)
}

// ---- heartbeats ----

func testHeartbeatExtends(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	ttl := leaseTTL(t, b)
	advance(t, b, ttl/2)
	exp, err := b.Dispatcher.Heartbeat(t.Context(), l)
	wantNoErr(t, "Heartbeat", err)
	if !exp.After(l.Expires) {
		t.Errorf("expiry after Heartbeat: got %v, want after %v", exp, l.Expires)
	}
	if b.Advance != nil {
		if want := grantedAt(t, b, l).Add(ttl / 2).Add(ttl); !exp.Equal(want) {
			t.Errorf("expiry after Heartbeat: got %v, want %v (now + TTL)", exp, want)
		}
	}
	st := wantStatus(t, b, task, eventlog.DispatchLeased, "after Heartbeat")
	if !st.Expires.Equal(exp) || st.Heartbeats != 1 {
		t.Errorf("Inspect after Heartbeat: got Expires %v Heartbeats %d, want %v 1", st.Expires, st.Heartbeats, exp)
	}
	// Past the original expiry by ttl/8, short of the extended one by
	// 3ttl/8: a wall clock's overruns (a loaded machine) only move the
	// check later, so the first margin holds and the second is the wider.
	advance(t, b, ttl/2+ttl/8)
	wantValid(t, b, l, true, "after the original expiry, heartbeated")
	emitTurn(t, b, l, 1)
	wantStatus(t, b, task, eventlog.DispatchLeased, "after the original expiry, heartbeated")
}

func heartbeatMax(t *testing.T, b Backend) int {
	t.Helper()
	if b.HeartbeatMax <= 0 {
		t.Fatalf("Backend.HeartbeatMax is %d; the factory must report the cap it configured", b.HeartbeatMax)
	}
	return b.HeartbeatMax
}

// heartbeatToQuota runs HeartbeatMax heartbeats and the one past the cap.
func heartbeatToQuota(t *testing.T, b Backend, l eventlog.Lease) {
	t.Helper()
	for i := 1; i <= heartbeatMax(t, b); i++ {
		if _, err := b.Dispatcher.Heartbeat(t.Context(), l); err != nil {
			t.Fatalf("heartbeat %d of %d: got error %v, want nil", i, b.HeartbeatMax, err)
		}
	}
	if st := inspect(t, b, l.Task); st.Heartbeats != b.HeartbeatMax {
		t.Errorf("Heartbeats: got %d, want %d", st.Heartbeats, b.HeartbeatMax)
	}
	_, err := b.Dispatcher.Heartbeat(t.Context(), l)
	checkErrIs(t, "heartbeat past the cap", err, eventlog.ErrLeaseQuotaExceeded)
	checkErrIs(t, "heartbeat past the cap", err, eventlog.ErrInvalidLease)
}

func testHeartbeatQuota(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	heartbeatToQuota(t, b, l)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after the heartbeat cap")
	if st.Reason != eventlog.ReasonLeaseQuotaExceeded {
		t.Errorf("Reason: got %q, want %q", st.Reason, eventlog.ReasonLeaseQuotaExceeded)
	}
	wantValid(t, b, l, false, "after the heartbeat cap")
	_, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 1), eventlog.EmitOptions{})
	checkErrIs(t, "Emit after the heartbeat cap", err, eventlog.ErrInvalidLease)
	_, err = b.Dispatcher.Heartbeat(t.Context(), l)
	checkErrIs(t, "another heartbeat", err, eventlog.ErrInvalidLease)
}

func testHeartbeatQuotaWithWake(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	heartbeatToQuota(t, b, l)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the heartbeat cap with a wake in flight")
	wantWake(t, "MatchedWake", st.MatchedWake, ev)
	l2 := leaseTask(t, b, task)
	wantWake(t, "next lease", l2.Wake, ev)
}

func testExpiredLeaseRefused(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	expire(t, b, l)
	_, err := b.Dispatcher.Heartbeat(ctx, l)
	checkErrIs(t, "Heartbeat of an expired lease", err, eventlog.ErrInvalidLease)
	cond := eventCond()
	err = b.Dispatcher.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond})
	checkErrIs(t, "Release of an expired lease", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Yield(ctx, l)
	checkErrIs(t, "Yield of an expired lease", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Fail(ctx, l, eventlog.Failure{Retryable: true})
	checkErrIs(t, "Fail of an expired lease", err, eventlog.ErrInvalidLease)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the expired lease's attempts")
	if st.FailAttempts != 0 || st.WakeOn != nil {
		t.Errorf("Inspect: got FailAttempts %d WakeOn %s, want 0 and none", st.FailAttempts, wakeString(st.WakeOn))
	}
}

// ---- wakes ----

func testWakeMatches(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_human"})
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after the suspend")
	wantWake(t, "WakeOn", st.WakeOn, cond)
	if st.Reason != "waiting_human" {
		t.Errorf("Reason: got %q, want %q", st.Reason, "waiting_human")
	}
	wake(t, b, task, occurred(eventCond(), "other handle"), false)
	ev := occurred(cond, "approved")
	wake(t, b, task, ev, true)
	st = wantStatus(t, b, task, eventlog.DispatchReady, "after the matching wake")
	wantWake(t, "MatchedWake (the event, not the condition)", st.MatchedWake, ev)
	wake(t, b, task, occurred(cond, "again"), false) // the task no longer waits
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease after the wake", l2.Wake, ev)
}

func testWakeSurvivesLease(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	wantWake(t, "MatchedWake while leased", inspect(t, b, task).MatchedWake, ev)
	expire(t, b, l)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after expiry")
	wantWake(t, "MatchedWake after expiry", st.MatchedWake, ev)
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease after expiry", l2.Wake, ev)
}

func testConsumeClears(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	next := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting", ConsumedWake: &ev})
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after a consuming suspend")
	wantNoWake(t, "MatchedWake after consuming", st.MatchedWake)

	task2, l2, ev2 := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done", ConsumedWake: &ev2})
	st = wantStatus(t, b, task2, eventlog.DispatchTerminal, "after a consuming terminal release")
	wantNoWake(t, "MatchedWake after a consuming terminal release", st.MatchedWake)
}

func testConsumeMismatch(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	before := inspect(t, b, task)
	for what, wrong := range map[string]noeta.Wake{
		"another event kind":       occurred(eventCond(), "x"),
		"the condition, not event": noeta.ExternalWake(ev.EventKind),
		"same kind, other data":    occurred(noeta.ExternalWake(ev.EventKind), "a different event"),
	} {
		next := eventCond()
		err := b.Dispatcher.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, ConsumedWake: &wrong})
		checkErrIs(t, "Release consuming "+what, err, eventlog.ErrWakeMismatch)
		after := inspect(t, b, task)
		if after.Status != before.Status || after.LeaseID != before.LeaseID || after.Generation != before.Generation ||
			!after.Expires.Equal(before.Expires) || !wakeIs(after.MatchedWake, ev) || wakeString(after.WakeOn) != wakeString(before.WakeOn) || after.PendingWakes != before.PendingWakes {
			t.Errorf("Inspect after the refused release consuming %s: got %+v, want unchanged %+v", what, after, before)
		}
	}
	wantValid(t, b, l, true, "after refused releases")

	// Naming a consumed wake when none is matched is a mismatch too.
	plain, pl := newLeased(t, b)
	err := b.Dispatcher.Release(ctx, pl, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &ev})
	checkErrIs(t, "Release consuming a wake when none is matched", err, eventlog.ErrWakeMismatch)
	wantStatus(t, b, plain, eventlog.DispatchLeased, "after the refused release")

	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &ev})
	wantNoWake(t, "MatchedWake after the right consume", inspect(t, b, task).MatchedWake)
}

func testBufferedWakeMatchedAtSuspend(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	c1, c2 := eventCond(), eventCond()
	suspendOn(t, b, l, c1)
	ev2 := occurred(c2, "early")
	wake(t, b, task, ev2, false)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after a non-matching wake")
	if st.PendingWakes != 1 {
		t.Errorf("PendingWakes: got %d, want 1", st.PendingWakes)
	}
	ev1 := occurred(c1, "first")
	wake(t, b, task, ev1, true)
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease", l2.Wake, ev1)
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &c2, Reason: "waiting", ConsumedWake: &ev1})
	st = wantStatus(t, b, task, eventlog.DispatchReady, "after suspending on the buffered wake's condition")
	wantWake(t, "MatchedWake", st.MatchedWake, ev2)
	if st.PendingWakes != 0 {
		t.Errorf("PendingWakes: got %d, want 0", st.PendingWakes)
	}
	l3 := leaseTask(t, b, task)
	wantWake(t, "lease", l3.Wake, ev2)
}

func testEarlyWakeWhileLeased(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := eventCond()
	ev := occurred(cond, "before the suspend")
	wake(t, b, task, ev, false)
	if st := wantStatus(t, b, task, eventlog.DispatchLeased, "after an early wake"); st.PendingWakes != 1 {
		t.Errorf("PendingWakes: got %d, want 1", st.PendingWakes)
	}
	wantValid(t, b, l, true, "after an early wake")
	suspendOn(t, b, l, cond)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after suspending on the early wake's condition")
	wantWake(t, "MatchedWake", st.MatchedWake, ev)
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease", l2.Wake, ev)
}

func testBufferedWakesArrivalOrder(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := eventCond()
	first, second, other := occurred(cond, "first"), occurred(cond, "second"), occurred(eventCond(), "other")
	wake(t, b, task, first, false)
	wake(t, b, task, other, false)
	wake(t, b, task, second, false)
	if st := inspect(t, b, task); st.PendingWakes != 3 {
		t.Errorf("PendingWakes: got %d, want 3", st.PendingWakes)
	}
	suspendOn(t, b, l, cond)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the suspend")
	wantWake(t, "MatchedWake (first in arrival order)", st.MatchedWake, first)
	if st.PendingWakes != 2 {
		t.Errorf("PendingWakes: got %d, want 2", st.PendingWakes)
	}
	l2 := leaseTask(t, b, task)
	release(t, b, l2, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "again", ConsumedWake: &first})
	st = wantStatus(t, b, task, eventlog.DispatchReady, "after the second suspend")
	wantWake(t, "MatchedWake (next in arrival order)", st.MatchedWake, second)
	if st.PendingWakes != 1 {
		t.Errorf("PendingWakes: got %d, want 1", st.PendingWakes)
	}
}

func testUnconsumedWakeRedelivered(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	suspendOn(t, b, l, eventCond())
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after a suspend that did not consume the wake")
	wantWake(t, "MatchedWake", st.MatchedWake, ev)
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease", l2.Wake, ev)
}

func testTerminalClearsBuffer(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := eventCond()
	wake(t, b, task, occurred(cond, "buffered"), false)
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	st := wantStatus(t, b, task, eventlog.DispatchTerminal, "after the terminal release")
	if st.PendingWakes != 0 || st.Reason != "done" {
		t.Errorf("Inspect: got PendingWakes %d Reason %q, want 0 %q", st.PendingWakes, st.Reason, "done")
	}
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	l2 := leaseTask(t, b, task)
	suspendOn(t, b, l2, cond)
	wantStatus(t, b, task, eventlog.DispatchSuspended, "suspended on the condition of a wake buffered before the terminal")
}

func testTerminalKeepsMatchedWake(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	st := wantStatus(t, b, task, eventlog.DispatchTerminal, "after the terminal release")
	wantWake(t, "MatchedWake after a terminal release that did not consume it", st.MatchedWake, ev)
}

func testSuspendWithoutCondition(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, Reason: "parked"})
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after a suspend without condition")
	if st.Reason != "parked" || st.WakeOn != nil {
		t.Errorf("Inspect: got Reason %q WakeOn %s, want %q and none", st.Reason, wakeString(st.WakeOn), "parked")
	}
	wake(t, b, task, occurred(eventCond(), "anything"), false)
	wantStatus(t, b, task, eventlog.DispatchSuspended, "after a wake")
}

func testWakeTerminal(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	cond := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
	wake(t, b, task, occurred(cond, "late"), false)
	wantStatus(t, b, task, eventlog.DispatchTerminal, "after a wake of a terminal task")
}

func testWakeUnknownTask(t *testing.T, b Backend) {
	_, err := b.Dispatcher.Wake(t.Context(), noeta.NewTaskID(), occurred(eventCond(), "x"))
	checkErrIs(t, "Wake of an unknown task", err, eventlog.ErrNotFound)
}

func testWakeInvalid(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	suspendOn(t, b, l, eventCond())
	for what, ev := range map[string]noeta.Wake{
		"the zero wake":               {},
		"an unknown kind":             {Kind: "bogus", Handle: "h"},
		"human_response, no handle":   {Kind: noeta.WakeHumanResponse},
		"timer_fired, no fire_at":     {Kind: noeta.WakeTimerFired},
		"subtask_completed, no id":    {Kind: noeta.WakeSubtaskCompleted},
		"external_event, no kind":     {Kind: noeta.WakeExternalEvent},
		"external_event, bad data":    {Kind: noeta.WakeExternalEvent, EventKind: "deploy", Data: json.RawMessage(`{`)},
		"group_completed, no groupid": {Kind: noeta.WakeSubtaskGroupCompleted, SubtaskIDs: []string{"a"}},
	} {
		matched, err := b.Dispatcher.Wake(t.Context(), task, ev)
		checkErrIs(t, "Wake with "+what, err, eventlog.ErrInvalidArgument)
		if matched {
			t.Errorf("Wake with %s: got matched true, want false", what)
		}
	}
	if st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after invalid wakes"); st.PendingWakes != 0 {
		t.Errorf("PendingWakes after invalid wakes: got %d, want 0", st.PendingWakes)
	}
}

// ---- release, yield, fail ----

func testReleaseNextInvalid(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	for _, next := range []eventlog.DispatchStatus{eventlog.DispatchReady, eventlog.DispatchLeased, "", "bogus"} {
		err := b.Dispatcher.Release(t.Context(), l, eventlog.Release{Next: next})
		checkErrIs(t, fmt.Sprintf("Release to %q with a live lease", next), err, eventlog.ErrInvalidArgument)
		err = b.Dispatcher.Release(t.Context(), fakeLease(task), eventlog.Release{Next: next})
		checkErrIs(t, fmt.Sprintf("Release to %q with a lease never granted", next), err, eventlog.ErrInvalidArgument)
	}
	wantStatus(t, b, task, eventlog.DispatchLeased, "after the refused releases")
	wantValid(t, b, l, true, "after the refused releases")
}

func testUnknownLease(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	fake := fakeLease(task)
	err := b.Dispatcher.Release(ctx, fake, eventlog.Release{Next: eventlog.DispatchTerminal})
	checkErrIs(t, "Release of a lease never granted", err, eventlog.ErrInvalidLease)
	_, err = b.Dispatcher.Heartbeat(ctx, fake)
	checkErrIs(t, "Heartbeat of a lease never granted", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Yield(ctx, fake)
	checkErrIs(t, "Yield of a lease never granted", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Fail(ctx, fake, eventlog.Failure{})
	checkErrIs(t, "Fail of a lease never granted", err, eventlog.ErrInvalidLease)
	wantValid(t, b, fake, false, "a lease never granted")
	st := wantStatus(t, b, task, eventlog.DispatchLeased, "after the impostor's calls")
	if st.LeaseID != l.ID || st.Heartbeats != 0 || st.FailAttempts != 0 {
		t.Errorf("Inspect: got LeaseID %q Heartbeats %d FailAttempts %d, want %q 0 0", st.LeaseID, st.Heartbeats, st.FailAttempts, l.ID)
	}
	wantValid(t, b, l, true, "the real lease")
}

func testYield(t *testing.T, b Backend) {
	q := uniqueQueue()
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{Queue: q})
	ahead, behind := newTask(t, b), newTask(t, b)
	enqueue(t, b, ahead, eventlog.EnqueueOptions{Queue: q})
	enqueue(t, b, behind, eventlog.EnqueueOptions{Queue: q})
	yield(t, b, l)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after Yield")
	wantWake(t, "MatchedWake after Yield", st.MatchedWake, ev)
	wantValid(t, b, l, false, "the yielded lease")
	for _, want := range []string{ahead, behind, task} {
		got := leaseQueue(t, b, q)
		if got.Task != want {
			t.Fatalf("lease after Yield: got %s, want %s (a yielded task goes to the back)", got.Task, want)
		}
		if got.Task == task {
			wantWake(t, "lease of the yielded task", got.Wake, ev)
		} else {
			// Parked, so that its lease cannot run out and bring it back
			// ahead of the queue while the rest is leased.
			release(t, b, got, eventlog.Release{Next: eventlog.DispatchSuspended})
		}
	}
}

func maxFail(t *testing.T, b Backend) int {
	t.Helper()
	if b.MaxFailAttempts < 2 {
		t.Fatalf("Backend.MaxFailAttempts is %d; the factory must report its cap, and the suite needs at least 2", b.MaxFailAttempts)
	}
	return b.MaxFailAttempts
}

func fail(t *testing.T, b Backend, l eventlog.Lease, f eventlog.Failure) {
	t.Helper()
	if err := b.Dispatcher.Fail(t.Context(), l, f); err != nil {
		t.Fatalf("Fail(%+v): got error %v, want nil", f, err)
	}
}

func testFailRetryable(t *testing.T, b Backend) {
	maxFail(t, b)
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	fail(t, b, l, eventlog.Failure{Retryable: true, Reason: "flaky"})
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after a retryable Fail below the cap")
	if st.FailAttempts != 1 {
		t.Errorf("FailAttempts: got %d, want 1", st.FailAttempts)
	}
	wantWake(t, "MatchedWake after Fail", st.MatchedWake, ev)
	wantValid(t, b, l, false, "the failed lease")
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease after Fail", l2.Wake, ev)
}

// failToCap fails a task's segments up to the cap and returns the lease
// granted after it. At the cap a task does not end in the dispatcher
// alone: it is ready once more, for a lease whose Ending says why, so a
// worker records the end in the task's log (before, it went terminal with
// no record anywhere but the dispatcher).
func failToCap(t *testing.T, b Backend, reason, wantEnding string) (string, eventlog.Lease) {
	t.Helper()
	n := maxFail(t, b)
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	for i := 1; i <= n; i++ {
		l := leaseTask(t, b, task)
		if l.Ending != "" {
			t.Fatalf("lease %d of %d: Ending %q before the cap", i, n, l.Ending)
		}
		fail(t, b, l, eventlog.Failure{Retryable: true, Reason: reason})
		st := inspect(t, b, task)
		if st.FailAttempts != i {
			t.Errorf("FailAttempts after failure %d: got %d, want %d", i, st.FailAttempts, i)
		}
		if st.Status != eventlog.DispatchReady {
			t.Fatalf("after failure %d of %d: got %s, want ready", i, n, st.Status)
		}
		if want := map[bool]string{true: wantEnding}[i == n]; st.Ending != want {
			t.Errorf("after failure %d of %d: Ending %q, want %q", i, n, st.Ending, want)
		}
	}
	l := leaseTask(t, b, task)
	if l.Ending != wantEnding {
		t.Fatalf("the lease after the cap: Ending %q, want %q", l.Ending, wantEnding)
	}
	return task, l
}

func testFailCap(t *testing.T, b Backend) {
	task, l := failToCap(t, b, "", eventlog.ReasonMaxAttemptsExceeded)
	// The holder records the end and releases the task terminal.
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "recorded"})
	st := wantStatus(t, b, task, eventlog.DispatchTerminal, "after the ending lease's release")
	if st.Reason != "recorded" || st.Ending != "" {
		t.Errorf("after the ending lease's release: Reason %q Ending %q, want %q and none", st.Reason, st.Ending, "recorded")
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Task: task}, "after the fail cap")
}

func testFailCapReason(t *testing.T, b Backend) {
	want := eventlog.ReasonMaxAttemptsExceeded + ": tool kept crashing"
	task, l := failToCap(t, b, "tool kept crashing", want)
	// The ending lease fails too (the store unwritable for a moment): the
	// task is offered again for another ending lease, with the reason it
	// was given up with. Before, it ended in the dispatcher alone, its log
	// left suspended or running for ever (found by the partition run).
	fail(t, b, l, eventlog.Failure{Retryable: true, Reason: "store unwritable"})
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the ending lease failed")
	if st.Ending != want {
		t.Errorf("after the ending lease failed: Ending %q, want %q", st.Ending, want)
	}
	l = leaseTask(t, b, task)
	if l.Ending != want {
		t.Fatalf("the lease after the failed ending lease: Ending %q, want %q", l.Ending, want)
	}
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "recorded"})
	wantStatus(t, b, task, eventlog.DispatchTerminal, "after the second ending lease's release")
	wantNoReady(t, b, eventlog.LeaseRequest{Task: task}, "after the fail cap")
}

func testFailAttemptsNeverReset(t *testing.T, b Backend) {
	n := maxFail(t, b)
	task, l := newLeased(t, b)
	for i := 1; i <= n; i++ {
		// Progress of every kind between failures: heartbeat, yield,
		// suspend and wake, forced enqueue.
		if _, err := b.Dispatcher.Heartbeat(t.Context(), l); err != nil {
			t.Fatalf("Heartbeat: got error %v, want nil", err)
		}
		yield(t, b, l)
		l = leaseTask(t, b, task)
		cond := eventCond()
		suspendOn(t, b, l, cond)
		wake(t, b, task, occurred(cond, "go"), true)
		l = leaseTask(t, b, task)
		release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, Reason: "parked", ConsumedWake: l.Wake})
		enqueue(t, b, task, eventlog.EnqueueOptions{})
		l = leaseTask(t, b, task)
		enqueue(t, b, task, eventlog.EnqueueOptions{})
		l = leaseTask(t, b, task)
		fail(t, b, l, eventlog.Failure{Retryable: true})
		st := inspect(t, b, task)
		if st.FailAttempts != i {
			t.Fatalf("FailAttempts after failure %d: got %d, want %d (never reset)", i, st.FailAttempts, i)
		}
		if i == n {
			if st.Status != eventlog.DispatchReady || st.Ending == "" {
				t.Errorf("after failure %d of %d: got %s Ending %q, want ready for an ending lease", i, n, st.Status, st.Ending)
			}
			return
		}
		l = leaseTask(t, b, task)
	}
}

func testFailNonRetryable(t *testing.T, b Backend) {
	task, l, ev := leasedWithWake(t, b, eventlog.EnqueueOptions{})
	fail(t, b, l, eventlog.Failure{Retryable: false, Reason: "bad input"})
	st := wantStatus(t, b, task, eventlog.DispatchTerminal, "after a non-retryable Fail")
	if st.Reason != "bad input" || st.FailAttempts != 0 {
		t.Errorf("Inspect: got Reason %q FailAttempts %d, want %q 0", st.Reason, st.FailAttempts, "bad input")
	}
	wantWake(t, "MatchedWake after Fail", st.MatchedWake, ev)
	wantValid(t, b, l, false, "the failed lease")
}

// ---- expiry and reclaim ----

func reclaimMax(t *testing.T, b Backend) int {
	t.Helper()
	if b.ReclaimMax < 2 {
		t.Fatalf("Backend.ReclaimMax is %d; the factory must report its cap, and the suite needs at least 2", b.ReclaimMax)
	}
	return b.ReclaimMax
}

func testExpiredRequeuedByBackend(t *testing.T, b Backend) {
	reclaimMax(t, b)
	task, l := newLeased(t, b)
	advance(t, b, leaseTTL(t, b))
	eventually(t, b, "requeue of the expired lease by the backend", statusIs(t, b, task, eventlog.DispatchReady))
	st := inspect(t, b, task)
	if st.ReclaimCount != 1 {
		t.Errorf("ReclaimCount: got %d, want 1", st.ReclaimCount)
	}
	wantValid(t, b, l, false, "the expired lease")
	l2 := leaseTask(t, b, task)
	if l2.Generation <= l.Generation {
		t.Errorf("generation after the requeue: got %d, want more than %d", l2.Generation, l.Generation)
	}
}

// testExpiredAheadOfQueue: a task whose lease expired is taken over after
// the TTL, not after the TTL plus the whole ready queue. Reproduction (before
// requeue put it at the front): lease X from queue q, enqueue ten tasks on q,
// let X's lease expire; the next untargeted Lease on q returned the first of
// the ten, and X came eleventh.
//
// A backend may make the row ready a moment before its queue shows it (the
// JetStream dispatcher writes the row, then signals it), so on a wall clock
// a lease of another task is given back and the queue asked again, a few
// times: far fewer than the ten tasks that were ahead of X when it was
// requeued at the back.
func testExpiredAheadOfQueue(t *testing.T, b Backend) {
	reclaimMax(t, b)
	q := uniqueQueue()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	l := leaseQueue(t, b, q)
	if l.Task != task {
		t.Fatalf("first lease on %s: got %s, want %s", q, l.Task, task)
	}
	waiting := map[string]bool{}
	for range 10 {
		w := newTask(t, b)
		waiting[w] = true
		enqueue(t, b, w, eventlog.EnqueueOptions{Queue: q})
	}
	expire(t, b, l)
	eventually(t, b, "requeue of the expired lease", statusIs(t, b, task, eventlog.DispatchReady))
	tries := 3
	if b.Advance != nil {
		tries = 1
	}
	for i := 1; ; i++ {
		got := leaseQueue(t, b, q)
		if got.Task == task {
			// Parked, so that a lease outliving a short TTL does not
			// bring it back while the rest drain.
			release(t, b, got, eventlog.Release{Next: eventlog.DispatchSuspended})
			break
		}
		if i == tries {
			t.Fatalf("lease after the expiry: got %s, want the expired task %s ahead of the %d tasks already waiting", got.Task, task, len(waiting))
		}
		yield(t, b, got)
		time.Sleep(100 * time.Millisecond)
	}
	// The rest follow, and the expired task is not handed out twice.
	for range len(waiting) {
		got := leaseQueue(t, b, q)
		if !waiting[got.Task] {
			t.Fatalf("lease of the queue after the expired task: got %s, want one of the tasks that waited", got.Task)
		}
		delete(waiting, got.Task)
		release(t, b, got, eventlog.Release{Next: eventlog.DispatchSuspended})
	}
	wantNoReady(t, b, eventlog.LeaseRequest{Queue: q}, "queue drained")
}

func testRequeueStale(t *testing.T, b Backend) {
	ctx := t.Context()
	reclaimMax(t, b)
	task, l := newLeased(t, b)
	ids, err := b.Dispatcher.RequeueStale(ctx)
	wantNoErr(t, "RequeueStale", err)
	if containsString(ids, task) {
		t.Errorf("RequeueStale with a live lease: got %v, want %s left alone", ids, task)
	}
	wantStatus(t, b, task, eventlog.DispatchLeased, "after RequeueStale with a live lease")

	advance(t, b, leaseTTL(t, b))
	ids, err = b.Dispatcher.RequeueStale(ctx)
	wantNoErr(t, "RequeueStale", err)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after expiry and RequeueStale")
	if !containsString(ids, task) {
		// Allowed only if the backend's own sweep got there first.
		t.Logf("RequeueStale returned %v: the backend had already requeued %s itself", ids, task)
	}
	if st.ReclaimCount != 1 {
		t.Errorf("ReclaimCount: got %d, want 1 (one expiry counted once)", st.ReclaimCount)
	}
	ids, err = b.Dispatcher.RequeueStale(ctx)
	wantNoErr(t, "second RequeueStale", err)
	if containsString(ids, task) {
		t.Errorf("second RequeueStale: got %v, want %s not requeued again", ids, task)
	}
	if st := inspect(t, b, task); st.ReclaimCount != 1 {
		t.Errorf("ReclaimCount after a second sweep: got %d, want 1", st.ReclaimCount)
	}
	wantValid(t, b, l, false, "the expired lease")
}

func testReclaimCap(t *testing.T, b Backend) {
	n := reclaimMax(t, b)
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	for i := 1; i <= n; i++ {
		l := leaseTask(t, b, task)
		expire(t, b, l)
		ids, err := b.Dispatcher.RequeueStale(t.Context())
		wantNoErr(t, "RequeueStale", err)
		st := inspect(t, b, task)
		_ = ids // the backend may have requeued it on its own already
		if st.Status != eventlog.DispatchReady || st.ReclaimCount != i {
			t.Fatalf("after reclaim %d of %d: got %s ReclaimCount %d, want ready %d", i, n, st.Status, st.ReclaimCount, i)
		}
		// At the cap the task is ready once more, for a lease that only
		// records its end (before, it went terminal with no record
		// anywhere but the dispatcher).
		if want := map[bool]string{true: eventlog.ReasonStaleReclaimExceeded}[i == n]; st.Ending != want {
			t.Errorf("after reclaim %d of %d: Ending %q, want %q", i, n, st.Ending, want)
		}
	}
	l := leaseTask(t, b, task)
	if l.Ending != eventlog.ReasonStaleReclaimExceeded {
		t.Fatalf("the lease after the reclaim cap: Ending %q, want %q", l.Ending, eventlog.ReasonStaleReclaimExceeded)
	}
	// Its holder dies too: the task is offered again for another ending
	// lease; it never ends in the dispatcher alone.
	expire(t, b, l)
	_, err := b.Dispatcher.RequeueStale(t.Context())
	wantNoErr(t, "RequeueStale", err)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the ending lease expired")
	if st.Ending != eventlog.ReasonStaleReclaimExceeded {
		t.Errorf("after the ending lease expired: Ending %q, want %q", st.Ending, eventlog.ReasonStaleReclaimExceeded)
	}
	l = leaseTask(t, b, task)
	if l.Ending != eventlog.ReasonStaleReclaimExceeded {
		t.Fatalf("the lease after the expired ending lease: Ending %q", l.Ending)
	}
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "recorded"})
	wantNoReady(t, b, eventlog.LeaseRequest{Task: task}, "after the reclaim cap")
}

func testHeartbeatResetsReclaim(t *testing.T, b Backend) {
	n := reclaimMax(t, b)
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	for i := 1; i < n; i++ {
		expire(t, b, leaseTask(t, b, task))
	}
	if st := inspect(t, b, task); st.ReclaimCount != n-1 {
		t.Fatalf("ReclaimCount: got %d, want %d", st.ReclaimCount, n-1)
	}
	l := leaseTask(t, b, task)
	if _, err := b.Dispatcher.Heartbeat(t.Context(), l); err != nil {
		t.Fatalf("Heartbeat: got error %v, want nil", err)
	}
	if st := inspect(t, b, task); st.ReclaimCount != 0 {
		t.Errorf("ReclaimCount after a heartbeat: got %d, want 0", st.ReclaimCount)
	}
	expire(t, b, l)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after one more expiry")
	if st.ReclaimCount != 1 {
		t.Errorf("ReclaimCount: got %d, want 1", st.ReclaimCount)
	}
}

// ---- timers ----

// suspendOnTimer suspends a fresh task on a timer at its lease's grant time
// plus d, and returns the task and the condition.
func suspendOnTimer(t *testing.T, b Backend, d time.Duration) (string, noeta.Wake) {
	t.Helper()
	task, l := newLeased(t, b)
	cond := noeta.TimerWake(grantedAt(t, b, l).Add(d))
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_timer"})
	return task, cond
}

func wantTimerFired(t *testing.T, b Backend, task string, cond noeta.Wake) {
	t.Helper()
	eventually(t, b, "timer "+cond.FireAt.String(), statusIs(t, b, task, eventlog.DispatchReady))
	st := inspect(t, b, task)
	wantWake(t, "MatchedWake of a fired timer (the recorded deadline)", st.MatchedWake, cond)
	l := leaseTask(t, b, task)
	wantWake(t, "lease after the timer", l.Wake, cond)
	if !l.Wake.FireAt.Equal(cond.FireAt) {
		t.Errorf("fired timer FireAt: got %v, want %v", l.Wake.FireAt, cond.FireAt)
	}
}

func testTimerFires(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, cond := suspendOnTimer(t, b, d)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "right after the suspend")
	wantWake(t, "WakeOn", st.WakeOn, cond)
	if b.Advance != nil {
		advance(t, b, d-time.Second)
		wantStatus(t, b, task, eventlog.DispatchSuspended, "a second before the deadline")
		advance(t, b, 2*time.Second)
	} else {
		advance(t, b, d)
	}
	wantTimerFired(t, b, task, cond)
}

func testTimerInclusive(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, cond := suspendOnTimer(t, b, d)
	if b.Advance != nil {
		advance(t, b, d-time.Nanosecond)
		wantStatus(t, b, task, eventlog.DispatchSuspended, "a nanosecond before the deadline")
		advance(t, b, time.Nanosecond)
	} else {
		advance(t, b, d)
	}
	wantTimerFired(t, b, task, cond)
}

func testTimerAlreadyDue(t *testing.T, b Backend) {
	now, cond := suspendOnTimer(t, b, 0)
	wantTimerFired(t, b, now, cond)
	past, cond2 := suspendOnTimer(t, b, -time.Hour)
	wantTimerFired(t, b, past, cond2)
}

func testTimerFiresOnce(t *testing.T, b Backend) {
	d := timerDelay(b)
	task, cond := suspendOnTimer(t, b, d)
	advance(t, b, d)
	eventually(t, b, "timer", statusIs(t, b, task, eventlog.DispatchReady))
	l := leaseTask(t, b, task)
	wantWake(t, "lease after the timer", l.Wake, cond)
	next := eventCond()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &next, Reason: "waiting", ConsumedWake: l.Wake})
	advance(t, b, 2*d)
	st := wantStatus(t, b, task, eventlog.DispatchSuspended, "after the timer's deadline passed again")
	if st.MatchedWake != nil || st.PendingWakes != 0 {
		t.Errorf("Inspect: got MatchedWake %s PendingWakes %d, want none (the timer fired once)", wakeString(st.MatchedWake), st.PendingWakes)
	}
}

// ---- registry and inspection ----

func testValid(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	wantValid(t, b, l, true, "a live lease")
	other, _ := newLeased(t, b)
	wrongID := l
	wrongID.ID = noeta.NewID()
	wantValid(t, b, wrongID, false, "another id on the task")
	wrongTask := l
	wrongTask.Task = other
	wantValid(t, b, wrongTask, false, "the id on another task")
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchTerminal})
	wantValid(t, b, l, false, "a released lease")
	_ = task

	_, l2 := newLeased(t, b)
	expire(t, b, l2)
	wantValid(t, b, l2, false, "an expired lease")
}

func testValidStrictBoundary(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	ttl := leaseTTL(t, b)
	if b.Advance != nil {
		advance(t, b, ttl-time.Nanosecond)
		wantValid(t, b, l, true, "a nanosecond before expiry")
		advance(t, b, time.Nanosecond)
	} else {
		advance(t, b, ttl)
	}
	wantValid(t, b, l, false, "at expiry (expiry must be strictly after now)")
}

func testInspectUnknown(t *testing.T, b Backend) {
	_, err := b.Dispatcher.Inspect(t.Context(), noeta.NewTaskID())
	checkErrIs(t, "Inspect of an unknown task", err, eventlog.ErrNotFound)
}

// ---- waiting ----

type leaseResult struct {
	l   eventlog.Lease
	err error
}

func leaseAsync(ctx context.Context, b Backend, req eventlog.LeaseRequest) <-chan leaseResult {
	out := make(chan leaseResult, 1)
	go func() {
		l, err := b.Dispatcher.Lease(ctx, req)
		out <- leaseResult{l, err}
	}()
	return out
}

func wantBlocked(t *testing.T, ch <-chan leaseResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: Lease with Wait returned (task %q, error %v), want it to block", what, r.l.Task, r.err)
	case <-time.After(100 * time.Millisecond):
	}
}

func waitResult(t *testing.T, b Backend, ch <-chan leaseResult, what string) leaseResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitLimit(b)):
		t.Fatalf("%s: Lease with Wait did not return within %v", what, waitLimit(b))
		return leaseResult{}
	}
}

func testLeaseWait(t *testing.T, b Backend) {
	q := uniqueQueue()
	ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerA, Queue: q, TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	task := newTask(t, b)
	other := newTask(t, b)
	enqueue(t, b, other, eventlog.EnqueueOptions{Queue: uniqueQueue()})
	wantBlocked(t, ch, "a task ready on another queue")
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	r := waitResult(t, b, ch, "after the Enqueue")
	if r.err != nil || r.l.Task != task || r.l.Generation != 1 {
		t.Fatalf("Lease with Wait: got (task %q gen %d, error %v), want task %s gen 1", r.l.Task, r.l.Generation, r.err, task)
	}
	wantStatus(t, b, task, eventlog.DispatchLeased, "after the waiting lease")
}

func testLeaseWaitCancel(t *testing.T, b Backend) {
	ctx, cancel := context.WithCancel(t.Context())
	ch := leaseAsync(ctx, b, eventlog.LeaseRequest{Worker: workerA, Queue: uniqueQueue(), TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	cancel()
	r := waitResult(t, b, ch, "after cancel")
	checkErrIs(t, "Lease with Wait, cancelled", r.err, context.Canceled)

	dctx, dcancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer dcancel()
	r = waitResult(t, b, leaseAsync(dctx, b, eventlog.LeaseRequest{Worker: workerA, Queue: uniqueQueue(), TTL: leaseTTL(t, b), Wait: true}), "deadline")
	checkErrIs(t, "Lease with Wait past its deadline", r.err, context.DeadlineExceeded)
}

// countdownCtx is a context that cancels itself at the n-th time anyone
// looks at it (Done or Err): run against Lease with n = 1, 2, 3 … it
// cancels the request at every point where the backend consults its ctx,
// whatever the backend's steps are. Value reaches the embedded cancelCtx,
// so contexts derived from it register with that directly (no goroutine
// looking at Done at a time of its own).
type countdownCtx struct {
	context.Context
	left   atomic.Int64
	cancel context.CancelFunc
	fired  atomic.Bool
}

func newCountdownCtx(parent context.Context, n int64) *countdownCtx {
	ctx, cancel := context.WithCancel(parent)
	c := &countdownCtx{Context: ctx, cancel: cancel}
	c.left.Store(n)
	return c
}

func (c *countdownCtx) tick() {
	if c.left.Add(-1) == 0 {
		c.fired.Store(true)
		c.cancel()
	}
}

func (c *countdownCtx) Done() <-chan struct{} { c.tick(); return c.Context.Done() }
func (c *countdownCtx) Err() error            { c.tick(); return c.Context.Err() }

// testLeaseCancelMidGrant: a Lease whose ctx ends at any point of a grant
// returns the ctx's error and leaves no lease behind: the task is ready and
// leasable at once from its queue, not after a TTL. (A lease returned to a
// request already cancelled is orphaned: its caller has gone, and a worker
// pool that stops its lease requests by cancelling them would run it on a
// cancelled segment and leave it to expire.) Reproduction (before a grant
// was undone for a gone caller): on the JetStream dispatcher, the ctx ending
// while the row's write was in flight made the write ambiguous; the read
// that settled it found the write landed, and Lease returned the lease, with
// no error, to the cancelled request.
func testLeaseCancelMidGrant(t *testing.T, b Backend) {
	q := uniqueQueue()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{Queue: q})
	for _, req := range []eventlog.LeaseRequest{
		{Worker: workerA, Queue: q, TTL: leaseTTL(t, b), Wait: true},
		{Worker: workerA, Queue: q, TTL: leaseTTL(t, b)},
		{Worker: workerA, Task: task, TTL: leaseTTL(t, b)},
	} {
		for n := int64(1); ; n++ {
			if n > 500 {
				t.Fatalf("Lease(%+v) still consults its ctx after 500 looks", req)
			}
			ctx := newCountdownCtx(t.Context(), n)
			l, err := b.Dispatcher.Lease(ctx, req)
			fired := ctx.fired.Load()
			ctx.cancel()
			if err == nil {
				if l.Task != task {
					t.Fatalf("Lease(%+v) cancelled at look %d: got task %s, want %s", req, n, l.Task, task)
				}
				if fired {
					t.Fatalf("Lease(%+v) cancelled at look %d returned lease %s to a request already cancelled: its caller has gone, so the lease is orphaned until it expires", req, n, l.ID)
				}
				yield(t, b, l)
				break // the grant ran past every look at ctx
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Lease(%+v) cancelled at look %d: got error %v, want %v or a lease", req, n, err, context.Canceled)
			}
			st := inspect(t, b, task)
			if st.Status != eventlog.DispatchReady || st.LeaseID != "" {
				t.Fatalf("Lease(%+v) cancelled at look %d returned %v but left the task %s (lease %q), want it ready with no lease", req, n, err, st.Status, st.LeaseID)
			}
			// Leasable at once from its queue (no Wait: its signal must be
			// there now), then given back for the next round.
			got, err := b.Dispatcher.Lease(t.Context(), eventlog.LeaseRequest{Worker: workerB, Queue: q, TTL: leaseTTL(t, b)})
			if err != nil || got.Task != task {
				t.Fatalf("Lease from %s right after a Lease cancelled at look %d: got (task %q, error %v), want %s", q, n, got.Task, err, task)
			}
			yield(t, b, got)
		}
	}
}

func testExactlyOnceHandoff(t *testing.T, b Backend) {
	task, l1 := newLeased(t, b)
	emitTurn(t, b, l1, 1)
	cond := eventCond()
	suspendOn(t, b, l1, cond)

	// 1. The wake matches: stored, task ready.
	ev := occurred(cond, "approved")
	wake(t, b, task, ev, true)
	// 2. The lease hands it over and keeps it.
	l2 := leaseTask(t, b, task)
	wantWake(t, "lease 2", l2.Wake, ev)
	// 3. The worker records TaskWoken durably, then crashes before releasing.
	mustEmit(t, b, l2, mustEnvelope(t, task, noeta.TaskWoken{WakeEvent: *l2.Wake}))
	// 4. Expiry requeues the task with the wake intact.
	expire(t, b, l2)
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after the crash")
	wantWake(t, "MatchedWake after the crash", st.MatchedWake, ev)
	// 5. The next lease delivers the identical wake; the log shows it was
	// already recorded, so the worker does not record it again.
	l3 := leaseTask(t, b, task)
	if l3.Generation <= l2.Generation {
		t.Errorf("generation of lease 3: got %d, want more than %d", l3.Generation, l2.Generation)
	}
	wantWake(t, "lease 3 (redelivery)", l3.Wake, ev)
	woken := 0
	for _, e := range readAll(t, b, task) {
		if e.Type == noeta.TypeTaskWoken {
			woken++
			p, _, err := e.Decode()
			if err != nil || !p.(*noeta.TaskWoken).WakeEvent.Equal(*l3.Wake) {
				t.Errorf("TaskWoken in the log: got %s (%v), want the redelivered wake", e.Payload, err)
			}
		}
	}
	if woken != 1 {
		t.Errorf("TaskWoken records: got %d, want 1", woken)
	}
	emitTurn(t, b, l3, 2)
	// 6. The consuming release clears it.
	release(t, b, l3, eventlog.Release{Next: eventlog.DispatchSuspended, Reason: "parked", ConsumedWake: l3.Wake})
	st = wantStatus(t, b, task, eventlog.DispatchSuspended, "after the consuming release")
	wantNoWake(t, "MatchedWake after the consuming release", st.MatchedWake)
	// 7. The next lease has no wake.
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	l4 := leaseTask(t, b, task)
	wantNoWake(t, "lease 4", l4.Wake)
	envs := wantLogLen(t, b, task, 7, "at the end")
	if n := countType(envs, noeta.TypeLeaseGranted); n != 3 {
		t.Errorf("LeaseGranted records: got %d, want 3 (log %v)", n, typesOf(envs))
	}
}

// ---- cancellation and Close ----

func dispatcherCalls(t *testing.T, b Backend, l eventlog.Lease) []call {
	d := b.Dispatcher
	ttl := leaseTTL(t, b)
	cond := eventCond()
	return []call{
		{"Valid", func(ctx context.Context) error { _, err := d.Valid(ctx, l); return err }},
		{"Enqueue", func(ctx context.Context) error { return d.Enqueue(ctx, l.Task, eventlog.EnqueueOptions{}) }},
		{"Lease", func(ctx context.Context) error {
			_, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: workerB, Queue: uniqueQueue(), TTL: ttl})
			return err
		}},
		{"Lease with Wait", func(ctx context.Context) error {
			_, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: workerB, Queue: uniqueQueue(), TTL: ttl, Wait: true})
			return err
		}},
		{"Heartbeat", func(ctx context.Context) error { _, err := d.Heartbeat(ctx, l); return err }},
		{"Release", func(ctx context.Context) error {
			return d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond})
		}},
		{"Yield", func(ctx context.Context) error { return d.Yield(ctx, l) }},
		{"Fail", func(ctx context.Context) error { return d.Fail(ctx, l, eventlog.Failure{Retryable: true}) }},
		{"Wake", func(ctx context.Context) error { _, err := d.Wake(ctx, l.Task, occurred(cond, "x")); return err }},
		{"RequeueStale", func(ctx context.Context) error { _, err := d.RequeueStale(ctx); return err }},
		{"Inspect", func(ctx context.Context) error { _, err := d.Inspect(ctx, l.Task); return err }},
	}
}

func testCancelledDispatcher(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	before := inspect(t, b, task)
	wantAll(t, b, cancelledCtx(t), dispatcherCalls(t, b, l), context.Canceled)
	after := wantStatus(t, b, task, eventlog.DispatchLeased, "after cancelled calls")
	if after.LeaseID != before.LeaseID || after.Heartbeats != 0 || after.PendingWakes != 0 || after.FailAttempts != 0 {
		t.Errorf("Inspect after cancelled calls: got %+v, want unchanged %+v", after, before)
	}
	wantValid(t, b, l, true, "after cancelled calls")
}

func testClosedDispatcher(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	closeBackend(t, b)
	wantAll(t, b, t.Context(), dispatcherCalls(t, b, l), eventlog.ErrClosed)
}

func testLeaseWaitClose(t *testing.T, b Backend) {
	ch := leaseAsync(t.Context(), b, eventlog.LeaseRequest{Worker: workerA, Queue: uniqueQueue(), TTL: leaseTTL(t, b), Wait: true})
	wantBlocked(t, ch, "empty queue")
	closeBackend(t, b)
	r := waitResult(t, b, ch, "after Close")
	checkErrIs(t, "Lease with Wait when the backend closes", r.err, eventlog.ErrClosed)
}

// Queue names are subject tokens on every backend, so a name that works on one
// works on all.
func testQueueNameValidated(t *testing.T, b Backend) {
	ctx := t.Context()
	task := noeta.NewTaskID()
	for _, q := range []string{"a.b", "a b", "a>", strings.Repeat("q", 65)} {
		err := b.Dispatcher.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: q})
		checkErrIs(t, fmt.Sprintf("Enqueue with queue %q", q), err, eventlog.ErrInvalidArgument)
		_, err = b.Dispatcher.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Queue: q})
		checkErrIs(t, fmt.Sprintf("Lease from queue %q", q), err, eventlog.ErrInvalidArgument)
	}
	if _, err := b.Dispatcher.Inspect(ctx, task); !errors.Is(err, eventlog.ErrNotFound) {
		t.Errorf("Inspect after refused enqueues: got %v, want ErrNotFound", err)
	}
}
