package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// TestLeaseLostStopsTheWorker: a worker whose task is taken over while it is
// inside a long tool call learns it from its next heartbeat, stops at once
// (the call's context ends), writes nothing more and reports nothing for the
// task; the new holder records the call as interrupted and finishes.
func TestLeaseLostStopsTheWorker(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, "agents:\n  sleeper: {tools: [sleep]}\n", func(c *engine.Config) {
				c.HeartbeatEvery = 100 * time.Millisecond
			})
			id := h.submit(`
agent: sleeper
goal: sleep long
script:
  - tool_calls: [{tool: sleep, args: {seconds: 50}}]
  - finish: {answer: woke}
`)
			ctx := context.Background()
			a, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "zombie", Task: id, TTL: b.ttl})
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			go func() {
				start := time.Now()
				_, err := h.eng.RunLease(ctx, a)
				done <- result{err, time.Since(start)}
			}()
			h.waitFor(id, "the sleep to start", func(s *engine.State) bool { return s.Turn.Calls["call-1-0"] == engine.CallStarted })
			// Another process takes the task over.
			if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{Reserved: true}); err != nil {
				t.Fatal(err)
			}
			bl, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "successor", Task: id, TTL: b.ttl})
			if err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the zombie did not stop")
			}
			if !errors.Is(r.err, eventlog.ErrInvalidLease) {
				t.Fatalf("zombie ended with %v, want a lost lease", r.err)
			}
			ds, err := b.disp.Inspect(ctx, id)
			if err != nil || ds.Status != eventlog.DispatchLeased || ds.LeaseID != bl.ID {
				t.Fatalf("after the zombie stopped the dispatcher has %+v (%v); it must still be the successor's", ds, err)
			}
			before := len(h.log(id))
			if before != 5 {
				t.Fatalf("the zombie wrote after the takeover:\n%s", h.dump(id))
			}
			if _, err := h.eng.RunLease(ctx, bl); err != nil {
				t.Fatal(err)
			}
			envs := wantLog(t, h, id,
				e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallStarted"),
				e("LeaseGranted"), e("StepAttemptAbandoned"), tl("ToolCallFinished"),
				e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
			fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
			if fin.OK || fin.Error == "" {
				t.Errorf("interrupted call recorded as %+v", fin)
			}
			t.Logf("the zombie's segment ran %v in all", r.took)
		})
	}
}

// unreachable is a dispatcher whose heartbeats do not get through, as when
// the worker is cut off from NATS; everything else works.
type unreachable struct{ eventlog.Dispatcher }

func (unreachable) Heartbeat(context.Context, eventlog.Lease) (time.Time, error) {
	return time.Time{}, errors.New("nats: no servers available for connection")
}

// TestWorkerStopsWhenItsLeaseRunsOut: a worker whose renewals cannot get
// through stops before its lease expires — its tool call too — rather than
// running on while another worker may take the task.
func TestWorkerStopsWhenItsLeaseRunsOut(t *testing.T) {
	b := memBackend(t, time.Second)
	h := newHarness(t, b, "agents:\n  sleeper: {tools: [sleep]}\n", func(c *engine.Config) {
		c.Dispatcher = unreachable{b.disp}
		c.HeartbeatEvery = 100 * time.Millisecond
	})
	id := h.submit(`
agent: sleeper
goal: sleep long
script:
  - tool_calls: [{tool: sleep, args: {seconds: 50}}]
  - finish: {answer: woke}
`)
	ctx := context.Background()
	lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "cut-off", Task: id, TTL: b.ttl})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = h.eng.RunLease(ctx, lease)
	took := time.Since(start)
	if !errors.Is(err, eventlog.ErrLeaseLost) {
		t.Fatalf("RunLease = %v, want a lost lease", err)
	}
	if took > 5*time.Second {
		t.Errorf("the cut-off worker ran %v with a 1s lease", took)
	}
	// It released nothing: the lease runs out and the task is handed on.
	ds, _ := b.disp.Inspect(ctx, id)
	if ds.Status == eventlog.DispatchSuspended || ds.Status == eventlog.DispatchTerminal {
		t.Errorf("the cut-off worker released the task: %+v", ds)
	}
	t.Logf("stopped after %v", took)
}

// TestResumedPatchIsNotRepeated: a worker that stopped after a turn's
// TaskStatePatched leaves the turn open; the next one finishes it without
// writing the patch again.
func TestResumedPatchIsNotRepeated(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	h := newHarness(t, b, pathsConfig)
	id := h.submit(`
agent: boss
goal: patch then finish
script:
  - state_patch: {k: 1}
  - finish: {answer: done}
`)
	ctx := context.Background()
	lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "first", Task: id, TTL: b.ttl})
	if err != nil {
		t.Fatal(err)
	}
	// What the first worker wrote before it stopped.
	last := uint64(1)
	for _, p := range []noeta.Payload{
		noeta.TurnStarted{Turn: 1},
		noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionStatePatch},
		noeta.TaskStatePatched{Patch: []byte(`{"k":1}`)},
	} {
		env, _ := eventlog.NewEnvelope(id, eventlog.OriginEngine, "first", p)
		stored, err := b.log.Emit(ctx, lease, env, eventlog.EmitOptions{ExpectLastSeq: last})
		if err != nil {
			t.Fatal(err)
		}
		last = stored.Seq
	}
	if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	next, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "second", Task: id, TTL: b.ttl})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.RunLease(ctx, next); err != nil {
		t.Fatal(err)
	}
	wantLog(t, h, id,
		e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("TaskStatePatched"),
		e("LeaseGranted"), e("StepAttemptAbandoned"),
		e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
}
