package memlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

var dispT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const dispTTL = 30 * time.Second

// newDispatcher returns a Store on a ManualClock with small caps, so the cap
// paths are reached in a few steps.
func newDispatcher(t *testing.T, opts memlog.Options) (*memlog.Store, *memlog.ManualClock) {
	t.Helper()
	clk := memlog.NewManualClock(dispT0)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = dispTTL
	}
	s, err := memlog.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

// frozenTimers is a Clock whose AfterFunc never fires, so expired leases stay
// unswept until RequeueStale is called.
type frozenTimers struct {
	mu  sync.Mutex
	now time.Time
}

func (c *frozenTimers) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *frozenTimers) AfterFunc(time.Duration, func()) func() bool {
	return func() bool { return true }
}

func (c *frozenTimers) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func mustEnqueue(t *testing.T, s *memlog.Store, task string, opts eventlog.EnqueueOptions) {
	t.Helper()
	if err := s.Enqueue(context.Background(), task, opts); err != nil {
		t.Fatalf("Enqueue(%s): %v", task, err)
	}
}

func mustLease(t *testing.T, s *memlog.Store, req eventlog.LeaseRequest) eventlog.Lease {
	t.Helper()
	if req.Worker == "" {
		req.Worker = "w1"
	}
	l, err := s.Lease(context.Background(), req)
	if err != nil {
		t.Fatalf("Lease(%+v): %v", req, err)
	}
	return l
}

func inspect(t *testing.T, s *memlog.Store, task string) eventlog.DispatchState {
	t.Helper()
	st, err := s.Inspect(context.Background(), task)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", task, err)
	}
	return st
}

func wantStatus(t *testing.T, s *memlog.Store, task string, want eventlog.DispatchStatus) eventlog.DispatchState {
	t.Helper()
	st := inspect(t, s, task)
	if st.Status != want {
		t.Fatalf("%s: status %s (reason %q), want %s", task, st.Status, st.Reason, want)
	}
	return st
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}

func valid(t *testing.T, s *memlog.Store, l eventlog.Lease) bool {
	t.Helper()
	ok, err := s.Valid(context.Background(), l)
	if err != nil {
		t.Fatalf("Valid: %v", err)
	}
	return ok
}

// suspendOn leases task (targeted) and releases it suspended on cond.
func suspendOn(t *testing.T, s *memlog.Store, task string, cond *noeta.Wake) {
	t.Helper()
	l := mustLease(t, s, eventlog.LeaseRequest{Task: task})
	if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: cond, Reason: "waiting"}); err != nil {
		t.Fatalf("Release(%s, suspended): %v", task, err)
	}
}

func wakePtr(w noeta.Wake) *noeta.Wake { return &w }

func TestDispatcherFIFOAndQueues(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "x", eventlog.EnqueueOptions{Queue: "gpu"})
	mustEnqueue(t, s, "b", eventlog.EnqueueOptions{Queue: eventlog.DefaultQueue})
	mustEnqueue(t, s, "c", eventlog.EnqueueOptions{})

	var got []string
	for range 3 {
		got = append(got, mustLease(t, s, eventlog.LeaseRequest{}).Task)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("default queue order %v, want %v", got, want)
	}
	_, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w"})
	wantErr(t, err, eventlog.ErrNoReadyTask)
	if l := mustLease(t, s, eventlog.LeaseRequest{Queue: "gpu"}); l.Task != "x" {
		t.Fatalf("gpu queue gave %s", l.Task)
	}
}

func TestDispatcherQueueChoice(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "root", eventlog.EnqueueOptions{Queue: "q1"})
	tests := []struct {
		task string
		opts eventlog.EnqueueOptions
		want string
	}{
		{"inherits", eventlog.EnqueueOptions{Parent: "root"}, "q1"},
		{"explicit", eventlog.EnqueueOptions{Parent: "root", Queue: "q2"}, "q2"},
		{"orphan", eventlog.EnqueueOptions{Parent: "nobody"}, eventlog.DefaultQueue},
		{"plain", eventlog.EnqueueOptions{}, eventlog.DefaultQueue},
	}
	for _, tt := range tests {
		mustEnqueue(t, s, tt.task, tt.opts)
		if got := inspect(t, s, tt.task).Queue; got != tt.want {
			t.Errorf("%s: queue %q, want %q", tt.task, got, tt.want)
		}
	}
	// The queue is fixed at creation, also through a forced enqueue.
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "plain"})
	mustEnqueue(t, s, "plain", eventlog.EnqueueOptions{Queue: "other"})
	if got := inspect(t, s, "plain").Queue; got != eventlog.DefaultQueue {
		t.Fatalf("queue changed to %q", got)
	}
	if valid(t, s, l) {
		t.Fatal("forced enqueue left the lease live")
	}
}

func TestDispatcherReserved(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "r", eventlog.EnqueueOptions{Reserved: true})
	mustEnqueue(t, s, "u", eventlog.EnqueueOptions{})
	// A repeated enqueue of a ready task changes nothing.
	mustEnqueue(t, s, "r", eventlog.EnqueueOptions{Reserved: false})
	if !inspect(t, s, "r").Reserved {
		t.Fatal("enqueue of a ready task dropped its reservation")
	}
	if l := mustLease(t, s, eventlog.LeaseRequest{}); l.Task != "u" {
		t.Fatalf("untargeted lease took %s", l.Task)
	}
	_, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w"})
	wantErr(t, err, eventlog.ErrNoReadyTask)
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "r", Queue: "elsewhere"})
	if st := inspect(t, s, "r"); st.Reserved || st.Status != eventlog.DispatchLeased {
		t.Fatalf("after targeted lease: %+v", st)
	}
	// Once claimed the reservation is gone: a yield makes it leasable by anyone.
	if err := s.Yield(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, s, eventlog.LeaseRequest{}); l.Task != "r" {
		t.Fatalf("untargeted lease took %s", l.Task)
	}
}

func TestDispatcherReadyEnqueueKeepsPosition(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	if l := mustLease(t, s, eventlog.LeaseRequest{}); l.Task != "a" {
		t.Fatalf("got %s, want a", l.Task)
	}
}

func TestDispatcherTargetedNotReady(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "leased", eventlog.EnqueueOptions{})
	mustLease(t, s, eventlog.LeaseRequest{Task: "leased"})
	mustEnqueue(t, s, "susp", eventlog.EnqueueOptions{})
	suspendOn(t, s, "susp", nil)
	mustEnqueue(t, s, "term", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "term"})
	if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{"unknown", "leased", "susp", "term"} {
		_, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w", Task: task, Wait: true})
		wantErr(t, err, eventlog.ErrNoReadyTask)
	}
}

func TestDispatcherLeaseFields(t *testing.T) {
	s, clk := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	l1 := mustLease(t, s, eventlog.LeaseRequest{Worker: "alice"})
	if l1.ID == "" || l1.Task != "t" || l1.Generation != 1 || l1.Worker != "alice" || !l1.Expires.Equal(dispT0.Add(dispTTL)) || l1.Wake != nil {
		t.Fatalf("first lease %+v", l1)
	}
	if err := s.Yield(context.Background(), l1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	l2 := mustLease(t, s, eventlog.LeaseRequest{Worker: "bob", TTL: 5 * time.Second})
	if l2.ID == l1.ID || l2.Generation != 2 || !l2.Expires.Equal(dispT0.Add(6*time.Second)) {
		t.Fatalf("second lease %+v", l2)
	}
	st := inspect(t, s, "t")
	if st.LeaseID != l2.ID || st.Generation != 2 || st.Worker != "bob" || !st.Expires.Equal(l2.Expires) {
		t.Fatalf("state %+v", st)
	}
	// Heartbeat extends by the lease's own TTL, not the default.
	clk.Advance(time.Second)
	exp, err := s.Heartbeat(context.Background(), l2)
	if err != nil || !exp.Equal(dispT0.Add(7*time.Second)) {
		t.Fatalf("Heartbeat = %v, %v", exp, err)
	}
}

func TestDispatcherInvalidArguments(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	good := mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
	bad := good
	bad.Task = "no/slash"
	tests := []struct {
		name string
		call func() error
	}{
		{"Enqueue task", func() error { return s.Enqueue(ctx, "", eventlog.EnqueueOptions{}) }},
		{"Enqueue parent", func() error { return s.Enqueue(ctx, "p", eventlog.EnqueueOptions{Parent: "a b"}) }},
		{"Lease worker", func() error { _, err := s.Lease(ctx, eventlog.LeaseRequest{}); return err }},
		{"Lease task", func() error { _, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: "é"}); return err }},
		{"Lease ttl", func() error {
			_, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", TTL: -time.Second})
			return err
		}},
		{"Heartbeat task", func() error { _, err := s.Heartbeat(ctx, bad); return err }},
		{"Release next", func() error { return s.Release(ctx, good, eventlog.Release{Next: eventlog.DispatchReady}) }},
		{"Release next before lease", func() error { return s.Release(ctx, eventlog.Lease{}, eventlog.Release{}) }},
		{"Release task", func() error { return s.Release(ctx, bad, eventlog.Release{Next: eventlog.DispatchTerminal}) }},
		{"Release wake_on", func() error {
			return s.Release(ctx, good, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &noeta.Wake{Kind: noeta.WakeHumanResponse}})
		}},
		{"Yield task", func() error { return s.Yield(ctx, bad) }},
		{"Fail task", func() error { return s.Fail(ctx, bad, eventlog.Failure{}) }},
		{"Wake task", func() error { _, err := s.Wake(ctx, "", noeta.ExternalWake("e")); return err }},
		{"Wake event", func() error { _, err := s.Wake(ctx, "t", noeta.Wake{Kind: "nope"}); return err }},
		{"Wake data", func() error {
			_, err := s.Wake(ctx, "t", noeta.Wake{Kind: noeta.WakeExternalEvent, EventKind: "e", Data: json.RawMessage("{")})
			return err
		}},
		{"Inspect task", func() error { _, err := s.Inspect(ctx, ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantErr(t, tt.call(), eventlog.ErrInvalidArgument) })
	}
	// None of it touched the live lease.
	if st := wantStatus(t, s, "t", eventlog.DispatchLeased); st.LeaseID != good.ID || st.PendingWakes != 0 {
		t.Fatalf("state changed: %+v", st)
	}
}

func TestDispatcherClosedAndCancelled(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	calls := func(ctx context.Context) map[string]error {
		_, errValid := s.Valid(ctx, l)
		_, errLease := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w"})
		_, errHB := s.Heartbeat(ctx, l)
		_, errWake := s.Wake(ctx, "t", noeta.ExternalWake("e"))
		_, errRS := s.RequeueStale(ctx)
		_, errIn := s.Inspect(ctx, "t")
		return map[string]error{
			"Valid":        errValid,
			"Enqueue":      s.Enqueue(ctx, "t", eventlog.EnqueueOptions{}),
			"Lease":        errLease,
			"Heartbeat":    errHB,
			"Release":      s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal}),
			"Yield":        s.Yield(ctx, l),
			"Fail":         s.Fail(ctx, l, eventlog.Failure{}),
			"Wake":         errWake,
			"RequeueStale": errRS,
			"Inspect":      errIn,
		}
	}
	for name, err := range calls(cancelled) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with cancelled ctx: %v", name, err)
		}
	}
	if !valid(t, s, l) {
		t.Fatal("cancelled calls changed the lease")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range calls(context.Background()) {
		if !errors.Is(err, eventlog.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

func TestDispatcherValid(t *testing.T) {
	s, clk := newDispatcher(t, memlog.Options{})
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
	la := mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	lb := mustLease(t, s, eventlog.LeaseRequest{Task: "b"})
	crossed := la
	crossed.Task = "b"
	noID := la
	noID.ID = ""
	tests := []struct {
		name  string
		lease eventlog.Lease
		want  bool
	}{
		{"live", la, true},
		{"other task's lease", crossed, false},
		{"no id", noID, false},
		{"unknown task", eventlog.Lease{ID: la.ID, Task: "zzz"}, false},
		{"malformed task", eventlog.Lease{ID: la.ID, Task: "a/b"}, false},
	}
	for _, tt := range tests {
		if got := valid(t, s, tt.lease); got != tt.want {
			t.Errorf("%s: Valid = %v, want %v", tt.name, got, tt.want)
		}
	}
	clk.Advance(dispTTL - time.Nanosecond)
	if !valid(t, s, lb) {
		t.Fatal("lease invalid before its expiry")
	}
	if err := s.Release(context.Background(), la, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	if valid(t, s, la) {
		t.Fatal("released lease still valid")
	}
	clk.Advance(time.Nanosecond) // now == expires: expiry is strict
	if valid(t, s, lb) {
		t.Fatal("lease valid at its expiry")
	}
}

func TestDispatcherExpiredLeaseRejected(t *testing.T) {
	clk := &frozenTimers{now: dispT0}
	s, _ := newDispatcher(t, memlog.Options{Clock: clk})
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
	if _, err := s.Wake(context.Background(), "t", noeta.ExternalWake("e")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(dispTTL)
	ctx := context.Background()
	ops := map[string]func() error{
		"Heartbeat": func() error { _, err := s.Heartbeat(ctx, l); return err },
		"Release":   func() error { return s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal}) },
		"Yield":     func() error { return s.Yield(ctx, l) },
		"Fail":      func() error { return s.Fail(ctx, l, eventlog.Failure{}) },
	}
	for name, op := range ops {
		err := op()
		wantErr(t, err, eventlog.ErrInvalidLease)
		if errors.Is(err, eventlog.ErrLeaseQuotaExceeded) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The row is left for the sweep, untouched.
	st := wantStatus(t, s, "t", eventlog.DispatchLeased)
	if st.LeaseID != l.ID || st.PendingWakes != 1 || st.Heartbeats != 0 {
		t.Fatalf("state %+v", st)
	}
	ids, err := s.RequeueStale(ctx)
	if err != nil || !slices.Equal(ids, []string{"t"}) {
		t.Fatalf("RequeueStale = %v, %v", ids, err)
	}
}

func TestDispatcherHeartbeatCap(t *testing.T) {
	const max = 3
	for _, withWake := range []bool{false, true} {
		t.Run(fmt.Sprintf("matched=%v", withWake), func(t *testing.T) {
			s, clk := newDispatcher(t, memlog.Options{HeartbeatMax: max})
			ctx := context.Background()
			mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
			ev := noeta.HumanResponseWake("h")
			ev.Decision = "approve"
			if withWake {
				suspendOn(t, s, "t", wakePtr(noeta.HumanResponseWake("h")))
				if ok, err := s.Wake(ctx, "t", ev); !ok || err != nil {
					t.Fatalf("Wake = %v, %v", ok, err)
				}
				// The store stamps when the answer arrived.
				ev.ReceivedAt = clk.Now().UTC().Truncate(time.Millisecond)
			}
			l := mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
			for i := 1; i <= max; i++ {
				clk.Advance(time.Second)
				exp, err := s.Heartbeat(ctx, l)
				if err != nil {
					t.Fatalf("heartbeat %d: %v", i, err)
				}
				if !exp.Equal(clk.Now().Add(dispTTL)) {
					t.Fatalf("heartbeat %d: expiry %v", i, exp)
				}
				if n := inspect(t, s, "t").Heartbeats; n != i {
					t.Fatalf("heartbeat %d: count %d", i, n)
				}
			}
			_, err := s.Heartbeat(ctx, l)
			wantErr(t, err, eventlog.ErrLeaseQuotaExceeded)
			wantErr(t, err, eventlog.ErrInvalidLease)
			if valid(t, s, l) {
				t.Fatal("lease live after the cap")
			}
			st := inspect(t, s, "t")
			if st.Heartbeats != 0 || st.ReclaimCount != 0 || st.LeaseID != "" {
				t.Fatalf("counters not reset: %+v", st)
			}
			if withWake {
				if st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !st.MatchedWake.Equal(ev) || st.Reason != "" {
					t.Fatalf("state %+v", st)
				}
				if l2 := mustLease(t, s, eventlog.LeaseRequest{}); l2.Wake == nil || !l2.Wake.Equal(ev) {
					t.Fatalf("redelivery %+v", l2.Wake)
				}
			} else if st.Status != eventlog.DispatchSuspended || st.Reason != eventlog.ReasonLeaseQuotaExceeded || st.WakeOn != nil {
				t.Fatalf("state %+v", st)
			}
		})
	}
}

func TestDispatcherWakeMatchAndConsume(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	mustEnqueue(t, s, "p", eventlog.EnqueueOptions{})
	suspendOn(t, s, "p", wakePtr(noeta.SubtaskCompletedWake("c1")))
	st := wantStatus(t, s, "p", eventlog.DispatchSuspended)
	if st.Reason != "waiting" || st.WakeOn == nil || st.WakeOn.SubtaskID != "c1" {
		t.Fatalf("state %+v", st)
	}

	// A non-matching wake is buffered.
	if ok, err := s.Wake(ctx, "p", noeta.SubtaskCompletedWake("c2")); ok || err != nil {
		t.Fatalf("Wake(c2) = %v, %v", ok, err)
	}
	ev := noeta.SubtaskCompletedWake("c1")
	ev.Data = json.RawMessage(`{"result":"ok"}`)
	if ok, err := s.Wake(ctx, "p", ev); !ok || err != nil {
		t.Fatalf("Wake(c1) = %v, %v", ok, err)
	}
	st = wantStatus(t, s, "p", eventlog.DispatchReady)
	if st.WakeOn != nil || st.Reason != "" || st.PendingWakes != 1 || st.MatchedWake == nil || !st.MatchedWake.Equal(ev) {
		t.Fatalf("state %+v", st)
	}

	l := mustLease(t, s, eventlog.LeaseRequest{})
	if l.Wake == nil || !l.Wake.Equal(ev) {
		t.Fatalf("lease wake %+v", l.Wake)
	}
	l.Wake.Data[0] = 'X' // the lease holds a copy
	if st := inspect(t, s, "p"); !st.MatchedWake.Equal(ev) {
		t.Fatal("lease aliased the stored wake")
	}

	// Mismatched consumption changes nothing.
	other := noeta.SubtaskCompletedWake("c1") // same identity, different bytes
	err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &other})
	wantErr(t, err, eventlog.ErrWakeMismatch)
	if !valid(t, s, l) || !inspect(t, s, "p").MatchedWake.Equal(ev) {
		t.Fatal("mismatched release changed the task")
	}

	// Consuming release clears it; the buffered c2 matches the next wait at once.
	consumed := ev.Clone()
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: wakePtr(noeta.SubtaskCompletedWake("c2")), ConsumedWake: &consumed}); err != nil {
		t.Fatal(err)
	}
	st = wantStatus(t, s, "p", eventlog.DispatchReady)
	if st.PendingWakes != 0 || st.MatchedWake == nil || st.MatchedWake.SubtaskID != "c2" {
		t.Fatalf("state %+v", st)
	}

	// No matched wake stored: a consumed wake is a mismatch.
	l = mustLease(t, s, eventlog.LeaseRequest{})
	c2 := noeta.SubtaskCompletedWake("c2")
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, ConsumedWake: &c2}); err != nil {
		t.Fatal(err)
	}
	l = func() eventlog.Lease {
		mustEnqueue(t, s, "p", eventlog.EnqueueOptions{})
		return mustLease(t, s, eventlog.LeaseRequest{})
	}()
	err = s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &c2})
	wantErr(t, err, eventlog.ErrWakeMismatch)
	wantStatus(t, s, "p", eventlog.DispatchLeased)
}

func TestDispatcherUnconsumedWakeRedelivered(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	suspendOn(t, s, "t", wakePtr(noeta.ExternalWake("e")))
	ev := noeta.ExternalWake("e")
	if ok, _ := s.Wake(ctx, "t", ev); !ok {
		t.Fatal("no match")
	}
	l := mustLease(t, s, eventlog.LeaseRequest{})
	// Suspending without consuming: ready again, wake kept for the next lease.
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: wakePtr(noeta.ExternalWake("f")), Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	st := wantStatus(t, s, "t", eventlog.DispatchReady)
	if st.WakeOn != nil || st.Reason != "" || !st.MatchedWake.Equal(ev) {
		t.Fatalf("state %+v", st)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if l.Wake == nil || !l.Wake.Equal(ev) {
		t.Fatalf("redelivery %+v", l.Wake)
	}
	// Yield and a retryable Fail keep it too.
	if err := s.Yield(ctx, l); err != nil {
		t.Fatal(err)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if err := s.Fail(ctx, l, eventlog.Failure{Retryable: true}); err != nil {
		t.Fatal(err)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if l.Wake == nil || !l.Wake.Equal(ev) {
		t.Fatalf("after yield and fail: %+v", l.Wake)
	}
	// A terminal release keeps an unconsumed wake and drops the buffer.
	if _, err := s.Wake(ctx, "t", noeta.ExternalWake("g")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	st = wantStatus(t, s, "t", eventlog.DispatchTerminal)
	if st.Reason != "done" || st.PendingWakes != 0 || !st.MatchedWake.Equal(ev) {
		t.Fatalf("state %+v", st)
	}
}

func TestDispatcherEarlyWakesInArrivalOrder(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{})
	first := noeta.ExternalWake("h")
	first.Data = []byte(`"first"`)
	second := noeta.ExternalWake("h")
	second.Data = []byte(`"second"`)
	for _, ev := range []noeta.Wake{noeta.ExternalWake("x"), first, second} {
		if ok, err := s.Wake(ctx, "t", ev); ok || err != nil {
			t.Fatalf("Wake on a leased task = %v, %v", ok, err)
		}
	}
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: wakePtr(noeta.ExternalWake("h"))}); err != nil {
		t.Fatal(err)
	}
	st := wantStatus(t, s, "t", eventlog.DispatchReady)
	if !st.MatchedWake.Equal(first) || st.PendingWakes != 2 {
		t.Fatalf("state %+v", st)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: wakePtr(noeta.ExternalWake("h")), ConsumedWake: &first}); err != nil {
		t.Fatal(err)
	}
	if st := wantStatus(t, s, "t", eventlog.DispatchReady); !st.MatchedWake.Equal(second) || st.PendingWakes != 1 {
		t.Fatalf("state %+v", st)
	}
	// Release(suspended) with no condition stays suspended whatever is buffered.
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, ConsumedWake: &second}); err != nil {
		t.Fatal(err)
	}
	if st := wantStatus(t, s, "t", eventlog.DispatchSuspended); st.PendingWakes != 1 || st.MatchedWake != nil {
		t.Fatalf("state %+v", st)
	}
}

func TestDispatcherWakeTargets(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	_, err := s.Wake(ctx, "ghost", noeta.ExternalWake("e"))
	wantErr(t, err, eventlog.ErrNotFound)
	if _, err := s.Inspect(ctx, "ghost"); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Wake created a row: %v", err)
	}

	mustEnqueue(t, s, "ready", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "term", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "term"})
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{"ready", "term"} {
		for i := 1; i <= 2; i++ {
			if ok, err := s.Wake(ctx, task, noeta.ExternalWake("e")); ok || err != nil {
				t.Fatalf("Wake(%s) = %v, %v", task, ok, err)
			}
			if n := inspect(t, s, task).PendingWakes; n != i {
				t.Fatalf("%s: %d pending, want %d", task, n, i)
			}
		}
	}
	wantStatus(t, s, "term", eventlog.DispatchTerminal)
}

func TestDispatcherFail(t *testing.T) {
	tests := []struct {
		name       string
		failures   []eventlog.Failure
		wantStatus eventlog.DispatchStatus
		wantReason string
		wantTries  int
		wantEnding string
	}{
		{"retry", []eventlog.Failure{{Retryable: true, Reason: "x"}}, eventlog.DispatchReady, "", 1, ""},
		// At the cap, ready for one lease that records the end.
		{"cap", []eventlog.Failure{{Retryable: true}, {Retryable: true}, {Retryable: true}}, eventlog.DispatchReady, "", 3, eventlog.ReasonMaxAttemptsExceeded},
		{"cap with reason", []eventlog.Failure{{Retryable: true}, {Retryable: true}, {Retryable: true, Reason: "boom"}}, eventlog.DispatchReady, "", 3, eventlog.ReasonMaxAttemptsExceeded + ": boom"},
		// The ending lease failed too: ready for another, with the reason
		// given up with; never terminal without the end in the log.
		{"cap, then the ending lease", []eventlog.Failure{{Retryable: true}, {Retryable: true}, {Retryable: true, Reason: "boom"}, {Retryable: true, Reason: "again"}}, eventlog.DispatchReady, "", 4, eventlog.ReasonMaxAttemptsExceeded + ": boom"},
		{"fatal", []eventlog.Failure{{Reason: "bad input"}}, eventlog.DispatchTerminal, "bad input", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newDispatcher(t, memlog.Options{MaxFailAttempts: 3})
			ctx := context.Background()
			mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
			for _, f := range tt.failures {
				l := mustLease(t, s, eventlog.LeaseRequest{})
				if _, err := s.Wake(ctx, "t", noeta.ExternalWake("e")); err != nil {
					t.Fatal(err)
				}
				if err := s.Fail(ctx, l, f); err != nil {
					t.Fatal(err)
				}
			}
			st := wantStatus(t, s, "t", tt.wantStatus)
			if st.Reason != tt.wantReason || st.FailAttempts != tt.wantTries || st.Ending != tt.wantEnding || st.LeaseID != "" || st.Heartbeats != 0 {
				t.Fatalf("state %+v", st)
			}
			wantPending := len(tt.failures)
			if tt.wantStatus == eventlog.DispatchTerminal {
				wantPending = 0
			}
			if st.PendingWakes != wantPending {
				t.Fatalf("%d pending, want %d", st.PendingWakes, wantPending)
			}
		})
	}
}

func TestDispatcherFailAttemptsNeverReset(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{MaxFailAttempts: 2})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{})
	if err := s.Fail(ctx, l, eventlog.Failure{Retryable: true}); err != nil {
		t.Fatal(err)
	}
	// Progress of every kind, and a forced revival, leave the count alone.
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if _, err := s.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	if n := inspect(t, s, "t").FailAttempts; n != 1 {
		t.Fatalf("fail attempts %d", n)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if err := s.Fail(ctx, l, eventlog.Failure{Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if st := wantStatus(t, s, "t", eventlog.DispatchReady); st.Ending != eventlog.ReasonMaxAttemptsExceeded {
		t.Fatalf("at the cap: %+v, want ready for an ending lease", st)
	}
}

func TestDispatcherForcedEnqueue(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{Queue: "q"})
	mustEnqueue(t, s, "u", eventlog.EnqueueOptions{Queue: "q"})
	suspendOn(t, s, "t", wakePtr(noeta.ExternalWake("e")))
	if ok, _ := s.Wake(ctx, "t", noeta.ExternalWake("e")); !ok {
		t.Fatal("no match")
	}
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
	if _, err := s.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, l, eventlog.Failure{Retryable: true}); err != nil {
		t.Fatal(err)
	}
	l = mustLease(t, s, eventlog.LeaseRequest{Task: "t"})
	if _, err := s.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wake(ctx, "t", noeta.ExternalWake("late")); err != nil {
		t.Fatal(err)
	}

	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{Reserved: true})
	if valid(t, s, l) {
		t.Fatal("forced enqueue left the lease live")
	}
	_, err := s.Heartbeat(ctx, l)
	wantErr(t, err, eventlog.ErrInvalidLease)
	st := wantStatus(t, s, "t", eventlog.DispatchReady)
	want := eventlog.DispatchState{
		Task: "t", Status: eventlog.DispatchReady, Queue: "q", Reserved: true,
		PendingWakes: 1, Generation: 3, Worker: "w1", FailAttempts: 1,
	}
	if fmt.Sprintf("%+v", st) != fmt.Sprintf("%+v", want) {
		t.Fatalf("state\n got %+v\nwant %+v", st, want)
	}
	// Reserved: only a targeted lease takes it.
	if l := mustLease(t, s, eventlog.LeaseRequest{Queue: "q"}); l.Task != "u" {
		t.Fatalf("untargeted lease took %s", l.Task)
	}
	if l := mustLease(t, s, eventlog.LeaseRequest{Task: "t"}); l.Generation != 4 || l.Wake != nil {
		t.Fatalf("lease %+v", l)
	}
}

func TestDispatcherExpiryRequeuesAutomatically(t *testing.T) {
	s, clk := newDispatcher(t, memlog.Options{ReclaimMax: 3})
	ctx := context.Background()
	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	suspendOn(t, s, "t", wakePtr(noeta.ExternalWake("e")))
	ev := noeta.ExternalWake("e")
	if ok, _ := s.Wake(ctx, "t", ev); !ok {
		t.Fatal("no match")
	}

	l := mustLease(t, s, eventlog.LeaseRequest{})
	clk.Advance(dispTTL - time.Second)
	wantStatus(t, s, "t", eventlog.DispatchLeased)
	clk.Advance(time.Second)
	st := wantStatus(t, s, "t", eventlog.DispatchReady)
	if st.ReclaimCount != 1 || st.LeaseID != "" || !st.MatchedWake.Equal(ev) {
		t.Fatalf("state %+v", st)
	}
	if valid(t, s, l) {
		t.Fatal("requeued lease still valid")
	}

	// A heartbeat is progress: the count starts over.
	l = mustLease(t, s, eventlog.LeaseRequest{})
	if inspect(t, s, "t").ReclaimCount != 1 {
		t.Fatal("lease reset the reclaim count")
	}
	clk.Advance(dispTTL / 2)
	if _, err := s.Heartbeat(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n := inspect(t, s, "t").ReclaimCount; n != 0 {
		t.Fatalf("reclaim count %d after heartbeat", n)
	}
	// The old expiry passes without effect: the heartbeat moved it.
	clk.Advance(dispTTL / 2)
	if !valid(t, s, l) {
		t.Fatal("lease lost at its pre-heartbeat expiry")
	}

	// Three reclaims reach the cap; the fourth lease is the ending one,
	// and when it expires too the next one is an ending lease again: the
	// task does not end until its end is in its log.
	for i := 1; i <= 4; i++ {
		clk.Advance(dispTTL)
		if n := wantStatus(t, s, "t", eventlog.DispatchReady).ReclaimCount; n != i {
			t.Fatalf("reclaim %d: count %d", i, n)
		}
		if l := mustLease(t, s, eventlog.LeaseRequest{}); (l.Ending != "") != (i >= 3) {
			t.Fatalf("lease after reclaim %d: Ending %q", i, l.Ending)
		}
	}
	clk.Advance(dispTTL)
	st = wantStatus(t, s, "t", eventlog.DispatchReady)
	if st.Ending != eventlog.ReasonStaleReclaimExceeded || !st.MatchedWake.Equal(ev) || st.ReclaimCount != 5 {
		t.Fatalf("state %+v", st)
	}
}

func TestDispatcherReclaimResets(t *testing.T) {
	// Each progress step after one reclaim brings the count back to 0.
	steps := map[string]func(*memlog.Store, eventlog.Lease) error{
		"release": func(s *memlog.Store, l eventlog.Lease) error {
			return s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended})
		},
		"yield": func(s *memlog.Store, l eventlog.Lease) error { return s.Yield(context.Background(), l) },
		"fail": func(s *memlog.Store, l eventlog.Lease) error {
			return s.Fail(context.Background(), l, eventlog.Failure{Retryable: true})
		},
		"enqueue": func(s *memlog.Store, l eventlog.Lease) error {
			return s.Enqueue(context.Background(), l.Task, eventlog.EnqueueOptions{})
		},
	}
	for name, step := range steps {
		t.Run(name, func(t *testing.T) {
			s, clk := newDispatcher(t, memlog.Options{})
			mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
			mustLease(t, s, eventlog.LeaseRequest{})
			clk.Advance(dispTTL)
			l := mustLease(t, s, eventlog.LeaseRequest{})
			if n := inspect(t, s, "t").ReclaimCount; n != 1 {
				t.Fatalf("reclaim count %d", n)
			}
			if err := step(s, l); err != nil {
				t.Fatal(err)
			}
			if n := inspect(t, s, "t").ReclaimCount; n != 0 {
				t.Fatalf("reclaim count %d", n)
			}
		})
	}
}

func TestDispatcherRequeueStale(t *testing.T) {
	clk := &frozenTimers{now: dispT0}
	s, _ := newDispatcher(t, memlog.Options{Clock: clk, ReclaimMax: 2})
	ctx := context.Background()
	for _, task := range []string{"a", "b", "c", "d"} {
		mustEnqueue(t, s, task, eventlog.EnqueueOptions{})
	}
	// c is one reclaim from the cap; d's lease is long.
	lc := mustLease(t, s, eventlog.LeaseRequest{Task: "c"})
	clk.Advance(dispTTL)
	if ids, err := s.RequeueStale(ctx); err != nil || !slices.Equal(ids, []string{"c"}) {
		t.Fatalf("RequeueStale = %v, %v", ids, err)
	}
	if valid(t, s, lc) {
		t.Fatal("swept lease still valid")
	}
	// Leased in the order d, c, b, a; the result follows row insertion.
	mustLease(t, s, eventlog.LeaseRequest{Task: "d", TTL: time.Hour})
	for _, task := range []string{"c", "b", "a"} {
		mustLease(t, s, eventlog.LeaseRequest{Task: task})
	}
	clk.Advance(dispTTL - time.Nanosecond)
	if ids, _ := s.RequeueStale(ctx); len(ids) != 0 {
		t.Fatalf("swept unexpired leases %v", ids)
	}
	clk.Advance(time.Nanosecond)
	ids, err := s.RequeueStale(ctx)
	// c reached the cap: requeued once more, for a lease that records
	// its end.
	if err != nil || !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("RequeueStale = %v, %v", ids, err)
	}
	if st := wantStatus(t, s, "c", eventlog.DispatchReady); st.Ending != eventlog.ReasonStaleReclaimExceeded {
		t.Fatalf("c: %+v", st)
	}
	wantStatus(t, s, "d", eventlog.DispatchLeased)
	if ids, _ := s.RequeueStale(ctx); len(ids) != 0 {
		t.Fatalf("second sweep %v", ids)
	}
}

func TestDispatcherTimers(t *testing.T) {
	t.Run("fires at the deadline with the condition", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		cond := noeta.TimerWake(dispT0.Add(10 * time.Second))
		suspendOn(t, s, "t", &cond)
		clk.Advance(10*time.Second - time.Nanosecond)
		wantStatus(t, s, "t", eventlog.DispatchSuspended)
		clk.Advance(time.Minute) // fires late: the wake still says the deadline
		st := wantStatus(t, s, "t", eventlog.DispatchReady)
		if st.MatchedWake == nil || !st.MatchedWake.Equal(cond) || st.WakeOn != nil || st.Reason != "" {
			t.Fatalf("state %+v", st)
		}
		l := mustLease(t, s, eventlog.LeaseRequest{})
		if !l.Wake.Equal(cond) {
			t.Fatalf("lease wake %+v", l.Wake)
		}
	})
	t.Run("due at suspend", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		l := mustLease(t, s, eventlog.LeaseRequest{})
		clk.Advance(5 * time.Second)
		for _, at := range []time.Duration{5 * time.Second, time.Second} {
			cond := noeta.TimerWake(dispT0.Add(at))
			if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
				t.Fatal(err)
			}
			st := wantStatus(t, s, "t", eventlog.DispatchReady)
			if !st.MatchedWake.Equal(cond) {
				t.Fatalf("matched %+v", st.MatchedWake)
			}
			l = mustLease(t, s, eventlog.LeaseRequest{})
			consumed := cond
			if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchTerminal, ConsumedWake: &consumed}); err != nil {
				t.Fatal(err)
			}
			mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
			l = mustLease(t, s, eventlog.LeaseRequest{})
		}
	})
	t.Run("buffered early event wins", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		l := mustLease(t, s, eventlog.LeaseRequest{})
		early := noeta.TimerWake(dispT0.Add(time.Hour))
		if _, err := s.Wake(context.Background(), "t", early); err != nil {
			t.Fatal(err)
		}
		cond := noeta.TimerWake(dispT0.Add(10 * time.Second))
		if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
			t.Fatal(err)
		}
		if st := wantStatus(t, s, "t", eventlog.DispatchReady); !st.MatchedWake.Equal(early) {
			t.Fatalf("matched %+v", st.MatchedWake)
		}
		// The timer was never installed: nothing happens at its deadline.
		l = mustLease(t, s, eventlog.LeaseRequest{})
		clk.Advance(20 * time.Second)
		if !valid(t, s, l) {
			t.Fatal("stray timer")
		}
	})
	t.Run("woken first, timer ignored", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		cond := noeta.TimerWake(dispT0.Add(time.Minute))
		suspendOn(t, s, "t", &cond)
		ev := noeta.TimerWake(dispT0.Add(2 * time.Minute))
		if ok, _ := s.Wake(context.Background(), "t", ev); !ok {
			t.Fatal("later timer event did not match")
		}
		l := mustLease(t, s, eventlog.LeaseRequest{})
		consumed := ev
		if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended, ConsumedWake: &consumed}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
		if st := wantStatus(t, s, "t", eventlog.DispatchSuspended); st.MatchedWake != nil {
			t.Fatalf("old timer fired: %+v", st)
		}
	})
	t.Run("forced enqueue stops it", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		cond := noeta.TimerWake(dispT0.Add(time.Minute))
		suspendOn(t, s, "t", &cond)
		mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
		l := mustLease(t, s, eventlog.LeaseRequest{})
		if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchSuspended}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
		if st := wantStatus(t, s, "t", eventlog.DispatchSuspended); st.MatchedWake != nil {
			t.Fatalf("stopped timer fired: %+v", st)
		}
	})
	t.Run("close stops timers", func(t *testing.T) {
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
		mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
		cond := noeta.TimerWake(dispT0.Add(time.Minute))
		suspendOn(t, s, "a", &cond)
		mustLease(t, s, eventlog.LeaseRequest{Task: "b"})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		clk.Advance(time.Hour) // nothing may run, or panic, after close
	})
}

func TestDispatcherLeaseWait(t *testing.T) {
	t.Run("woken by enqueue on its queue", func(t *testing.T) {
		s, _ := newDispatcher(t, memlog.Options{})
		got := make(chan eventlog.Lease, 1)
		errs := make(chan error, 1)
		go func() {
			l, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w", Queue: "q", Wait: true})
			if err != nil {
				errs <- err
				return
			}
			got <- l
		}()
		time.Sleep(10 * time.Millisecond) // let it block (the test is correct either way)
		mustEnqueue(t, s, "other", eventlog.EnqueueOptions{})
		mustEnqueue(t, s, "mine", eventlog.EnqueueOptions{Queue: "q"})
		select {
		case l := <-got:
			if l.Task != "mine" {
				t.Fatalf("waiter got %s", l.Task)
			}
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken")
		}
		wantStatus(t, s, "other", eventlog.DispatchReady)
	})
	t.Run("woken by a wake and by expiry", func(t *testing.T) {
		// One waiter at a time, each step right whatever the scheduler does:
		// the waiter may block before the wake (or the expiry) or arrive after
		// it. Two waiters released together by a wake and a clock advance could
		// legally both get "a" (a lease granted at the frozen clock expires with
		// the same advance that expires "b"'s), which made the old form of this
		// test fail under load.
		s, clk := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
		mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
		suspendOn(t, s, "a", wakePtr(noeta.ExternalWake("e")))
		mustLease(t, s, eventlog.LeaseRequest{Task: "b"})
		wait := func() <-chan eventlog.Lease {
			got := make(chan eventlog.Lease, 1)
			go func() {
				l, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w", Wait: true})
				if err != nil {
					t.Error(err)
					close(got)
					return
				}
				got <- l
			}()
			return got
		}
		receive := func(got <-chan eventlog.Lease, want string) eventlog.Lease {
			t.Helper()
			select {
			case l, ok := <-got:
				if !ok {
					t.FailNow()
				}
				if l.Task != want {
					t.Fatalf("waiter got %s, want %s", l.Task, want)
				}
				return l
			case <-time.After(5 * time.Second):
				t.Fatalf("waiter not woken for %s", want)
			}
			return eventlog.Lease{}
		}

		woken := wait()
		time.Sleep(10 * time.Millisecond) // let it block (the test is correct either way)
		if _, err := s.Wake(context.Background(), "a", noeta.ExternalWake("e")); err != nil {
			t.Fatal(err)
		}
		la := receive(woken, "a")
		// "a" goes back to sleep so that the expiry below can only free "b".
		if err := s.Release(context.Background(), la, eventlog.Release{Next: eventlog.DispatchSuspended, ConsumedWake: la.Wake, WakeOn: wakePtr(noeta.ExternalWake("e2")), Reason: "waiting"}); err != nil {
			t.Fatal(err)
		}

		expired := wait()
		time.Sleep(10 * time.Millisecond) // let it block (the test is correct either way)
		clk.Advance(dispTTL)
		receive(expired, "b")
	})
	t.Run("ctx", func(t *testing.T) {
		s, _ := newDispatcher(t, memlog.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Wait: true})
		wantErr(t, err, context.DeadlineExceeded)
	})
	t.Run("close", func(t *testing.T) {
		s, _ := newDispatcher(t, memlog.Options{})
		errs := make(chan error, 1)
		go func() {
			_, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w", Wait: true})
			errs <- err
		}()
		time.Sleep(10 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			wantErr(t, err, eventlog.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not released by Close")
		}
	})
	t.Run("no wait", func(t *testing.T) {
		s, _ := newDispatcher(t, memlog.Options{})
		mustEnqueue(t, s, "r", eventlog.EnqueueOptions{Reserved: true})
		_, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: "w"})
		wantErr(t, err, eventlog.ErrNoReadyTask)
	})
}

func TestDispatcherConcurrentLeases(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	const tasks, workers = 200, 16
	for i := range tasks {
		mustEnqueue(t, s, fmt.Sprintf("t%03d", i), eventlog.EnqueueOptions{})
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := s.Lease(context.Background(), eventlog.LeaseRequest{Worker: fmt.Sprint("w", w)})
				if errors.Is(err, eventlog.ErrNoReadyTask) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[l.Task]++
				mu.Unlock()
				if err := s.Release(context.Background(), l, eventlog.Release{Next: eventlog.DispatchTerminal}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != tasks {
		t.Fatalf("%d tasks leased, want %d", len(seen), tasks)
	}
	for task, n := range seen {
		if n != 1 {
			t.Fatalf("%s leased %d times", task, n)
		}
	}
}

func TestDispatcherInspectCopies(t *testing.T) {
	s, _ := newDispatcher(t, memlog.Options{})
	ctx := context.Background()
	_, err := s.Inspect(ctx, "nope")
	wantErr(t, err, eventlog.ErrNotFound)

	mustEnqueue(t, s, "t", eventlog.EnqueueOptions{})
	cond := noeta.GroupCompletedWake("g", []string{"a", "b"})
	suspendOn(t, s, "t", &cond)
	cond.SubtaskIDs[0] = "mutated by caller"
	st := inspect(t, s, "t")
	if st.WakeOn.SubtaskIDs[0] != "a" {
		t.Fatal("Release kept the caller's wake")
	}
	st.WakeOn.SubtaskIDs[0] = "mutated by inspector"
	if inspect(t, s, "t").WakeOn.SubtaskIDs[0] != "a" {
		t.Fatal("Inspect returned an internal pointer")
	}
	ev := noeta.GroupCompletedWake("g", []string{"a", "b"})
	if ok, _ := s.Wake(ctx, "t", ev); !ok {
		t.Fatal("no match")
	}
	ev.SubtaskIDs[1] = "mutated by waker"
	st = inspect(t, s, "t")
	if st.MatchedWake.SubtaskIDs[1] != "b" {
		t.Fatal("Wake kept the caller's event")
	}
	st.MatchedWake.SubtaskIDs[1] = "x"
	if inspect(t, s, "t").MatchedWake.SubtaskIDs[1] != "b" {
		t.Fatal("Inspect returned an internal pointer")
	}
}

// countingClock is a ManualClock that counts the timers still armed (neither
// stopped nor fired), to check that transitions and Close leave none behind.
type countingClock struct {
	*memlog.ManualClock
	mu    sync.Mutex
	armed int
}

func (c *countingClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.armed++
	c.mu.Unlock()
	var once sync.Once
	done := func() bool {
		settled := false
		once.Do(func() {
			c.mu.Lock()
			c.armed--
			c.mu.Unlock()
			settled = true
		})
		return settled
	}
	stop := c.ManualClock.AfterFunc(d, func() {
		if done() {
			f()
		}
	})
	return func() bool { return stop() && done() }
}

func (c *countingClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed
}

func TestDispatcherTimerHygiene(t *testing.T) {
	clk := &countingClock{ManualClock: memlog.NewManualClock(dispT0)}
	s, _ := newDispatcher(t, memlog.Options{Clock: clk})
	ctx := context.Background()
	armed := func(want int) {
		t.Helper()
		if got := clk.Armed(); got != want {
			t.Fatalf("%d timers armed, want %d", got, want)
		}
	}
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	armed(1)
	for range 3 {
		if _, err := s.Heartbeat(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	armed(1) // each heartbeat replaces the expiry timer
	if err := s.Yield(ctx, l); err != nil {
		t.Fatal(err)
	}
	armed(0)
	l = mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	cond := noeta.TimerWake(dispT0.Add(time.Minute))
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	armed(1) // the lease timer went, the deadline timer came
	if ok, _ := s.Wake(ctx, "a", noeta.TimerWake(dispT0.Add(time.Hour))); !ok {
		t.Fatal("no match")
	}
	armed(0)
	mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	mustLease(t, s, eventlog.LeaseRequest{Task: "b"})
	armed(2)
	clk.Advance(dispTTL) // both expire, the requeue arms nothing
	armed(0)
	mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	suspendOn(t, s, "b", &cond)
	armed(2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	armed(0)
}

// TestDispatcherSystemClock runs the timer paths on the wall clock, where
// callbacks come from other goroutines (run it under -race).
func TestDispatcherSystemClock(t *testing.T) {
	s, err := memlog.New(memlog.Options{LeaseTTL: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	waitFor := func(task string, want eventlog.DispatchStatus) eventlog.DispatchState {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := inspect(t, s, task)
			if st.Status == want {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %s, want %s", task, st.Status, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	mustEnqueue(t, s, "exp", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "tmr", eventlog.EnqueueOptions{})
	mustLease(t, s, eventlog.LeaseRequest{Task: "exp"})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "tmr", TTL: time.Minute})
	cond := noeta.TimerWake(time.Now().Add(10 * time.Millisecond))
	if err := s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	if st := waitFor("exp", eventlog.DispatchReady); st.ReclaimCount != 1 {
		t.Fatalf("exp: %+v", st)
	}
	if st := waitFor("tmr", eventlog.DispatchReady); !st.MatchedWake.Equal(cond) {
		t.Fatalf("tmr: %+v", st)
	}
	// A waiter woken by a lease running out on its own.
	mustLease(t, s, eventlog.LeaseRequest{Task: "exp"})
	mustLease(t, s, eventlog.LeaseRequest{Task: "tmr"})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.Lease(wctx, eventlog.LeaseRequest{Worker: "w", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Task != "exp" && got.Task != "tmr" {
		t.Fatalf("waiter got %+v", got)
	}
}

// earlyClock delivers timers longer than 2s one second early, as if the wall
// clock jumped back after they were set.
type earlyClock struct{ *memlog.ManualClock }

func (c earlyClock) AfterFunc(d time.Duration, f func()) func() bool {
	if d > 2*time.Second {
		d -= time.Second
	}
	return c.ManualClock.AfterFunc(d, f)
}

func TestDispatcherEarlyTimerRearms(t *testing.T) {
	clk := earlyClock{memlog.NewManualClock(dispT0)}
	s, _ := newDispatcher(t, memlog.Options{Clock: clk})
	mustEnqueue(t, s, "a", eventlog.EnqueueOptions{})
	mustEnqueue(t, s, "b", eventlog.EnqueueOptions{})
	l := mustLease(t, s, eventlog.LeaseRequest{Task: "a"})
	cond := noeta.TimerWake(dispT0.Add(8 * time.Second))
	suspendOn(t, s, "b", &cond)

	clk.Advance(7 * time.Second) // b's timer comes early
	wantStatus(t, s, "b", eventlog.DispatchSuspended)
	clk.Advance(time.Second - time.Nanosecond)
	wantStatus(t, s, "b", eventlog.DispatchSuspended)
	clk.Advance(time.Nanosecond)
	if st := wantStatus(t, s, "b", eventlog.DispatchReady); !st.MatchedWake.Equal(cond) {
		t.Fatalf("b: %+v", st)
	}

	clk.Advance(dispTTL - time.Second - 8*time.Second) // a's expiry timer comes early
	if !valid(t, s, l) {
		t.Fatal("lease requeued before it expired")
	}
	clk.Advance(time.Second)
	if st := wantStatus(t, s, "a", eventlog.DispatchReady); st.ReclaimCount != 1 {
		t.Fatalf("a: %+v", st)
	}
}
