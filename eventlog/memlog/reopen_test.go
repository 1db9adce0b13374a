package memlog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// TestReopen: a Store reopened on its memory finds the logs, the content and
// the dispatcher's rows as they were, the ready queue in its order; the old
// handle is closed for good, and its subscriptions do not follow.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	s, clk := newDispatcher(t, memlog.Options{})
	task := noeta.NewTaskID()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, env); err != nil {
		t.Fatal(err)
	}
	ref, err := s.Put(ctx, []byte("body"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	oldSub := 0
	s.Subscribe(func(context.Context, eventlog.Envelope) error { oldSub++; return nil })
	// Three ready tasks in order, one leased, one suspended with a buffered wake.
	ready := []string{noeta.NewTaskID(), noeta.NewTaskID(), noeta.NewTaskID()}
	for _, id := range ready {
		mustEnqueue(t, s, id, eventlog.EnqueueOptions{})
	}
	mustEnqueue(t, s, task, eventlog.EnqueueOptions{Reserved: true})
	held := mustLease(t, s, eventlog.LeaseRequest{Task: task})
	susp := noeta.NewTaskID()
	mustEnqueue(t, s, susp, eventlog.EnqueueOptions{Reserved: true})
	sl := mustLease(t, s, eventlog.LeaseRequest{Task: susp})
	cond := noeta.ExternalWake("ci")
	if err := s.Release(ctx, sl, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wake(ctx, susp, noeta.ExternalWake("other")); err != nil {
		t.Fatal(err)
	}
	before, err := s.Inspect(ctx, susp)
	if err != nil {
		t.Fatal(err)
	}

	ns, err := s.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })

	// The old handle is closed, and cannot be reopened again.
	if _, err := s.Read(ctx, task, 0); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Read on the old handle: got %v, want ErrClosed", err)
	}
	if ok, err := s.Valid(ctx, held); ok || !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Valid on the old handle: got %v %v, want ErrClosed", ok, err)
	}
	if _, err := s.Reopen(); err == nil {
		t.Error("a second Reopen of the old handle succeeded: two open Stores on one memory")
	}

	// What the memory held is there.
	if recs, err := ns.Read(ctx, task, 0); err != nil || len(recs) != 1 {
		t.Errorf("Read after reopen: %d records, %v; want the one created", len(recs), err)
	}
	if b, err := ns.Get(ctx, ref); err != nil || string(b) != "body" {
		t.Errorf("Get after reopen: %q, %v", b, err)
	}
	if ok, err := ns.Valid(ctx, held); !ok || err != nil {
		t.Errorf("the lease held before the reopen: live %v, %v; want live", ok, err)
	}
	if after, err := ns.Inspect(ctx, susp); err != nil || after.Status != before.Status || after.PendingWakes != before.PendingWakes {
		t.Errorf("Inspect after reopen: %+v, %v; want %+v", after, err, before)
	}
	for _, want := range ready {
		l := mustLease(t, ns, eventlog.LeaseRequest{})
		if l.Task != want {
			t.Fatalf("ready order after reopen: got %s, want %s", l.Task, want)
		}
	}

	// The old subscription does not follow; a new one does.
	newSub := 0
	ns.Subscribe(func(context.Context, eventlog.Envelope) error { newSub++; return nil })
	rec, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Emit(ctx, held, rec, eventlog.EmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if oldSub != 0 || newSub == 0 {
		t.Errorf("deliveries of an emit after the reopen: old subscription %d (want 0), new %d (want some)", oldSub, newSub)
	}

	// The lease's expiry was armed again: past its TTL it is requeued.
	clk.Advance(dispTTL)
	if st, err := ns.Inspect(ctx, task); err != nil || st.Status != eventlog.DispatchReady || st.ReclaimCount != 1 {
		t.Errorf("the held lease after its TTL: %+v, %v; want requeued", st, err)
	}
}

// TestReopenBlockedLease: a Lease blocked on the old handle returns
// ErrClosed, and a task enqueued on the new one is not lost to it.
func TestReopenBlockedLease(t *testing.T) {
	ctx := context.Background()
	s, _ := newDispatcher(t, memlog.Options{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Wait: true})
		done <- err
	}()
	ns, err := s.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	if err := <-done; !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("blocked Lease on the old handle: got %v, want ErrClosed", err)
	}
	task := noeta.NewTaskID()
	mustEnqueue(t, ns, task, eventlog.EnqueueOptions{})
	if l := mustLease(t, ns, eventlog.LeaseRequest{}); l.Task != task {
		t.Fatalf("leased %s, want %s", l.Task, task)
	}
}
