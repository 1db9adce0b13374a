package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// crashLog is a log whose Emit, once armed, commits the first record of
// type typ and then stops the worker that wrote it: its context is
// cancelled and the write reports it, so the segment ends there, releases
// nothing, and its lease runs out into the next worker's hands. That is a
// worker killed right after the record became durable.
type crashLog struct {
	engine.Log
	typ     string
	armed   atomic.Bool
	crashes atomic.Int32
	cancel  atomic.Pointer[context.CancelFunc]
}

func (c *crashLog) Emit(ctx context.Context, l eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (eventlog.Envelope, error) {
	stored, err := c.Log.Emit(ctx, l, env, opts)
	if err == nil && env.Type == c.typ && c.armed.CompareAndSwap(true, false) {
		c.crashes.Add(1)
		(*c.cancel.Load())()
		return stored, context.Canceled
	}
	return stored, err
}

// runOne leases the next ready task and runs one segment of it with eng,
// waiting for a lease a crashed worker left to run out.
func runOne(t *testing.T, h *harness, eng *engine.Engine, ctx context.Context) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lease, err := h.b.disp.Lease(context.Background(), eventlog.LeaseRequest{Worker: "crash-test", TTL: h.b.ttl})
		if err == nil {
			_, _ = eng.RunLease(ctx, lease)
			return
		}
		if !errors.Is(err, eventlog.ErrNoReadyTask) || time.Now().After(deadline) {
			t.Fatalf("lease: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAnswerCrashRecovery: a worker killed right after any record of an
// answer's segment (the TaskWoken, the ApprovalCounted, ApprovalRefused or
// ApprovalResolved, the snapshot or the suspend after it) leaves a log the
// next worker finishes without repeating anything: one record per answer,
// the approver counted once, the call run once.
func TestAnswerCrashRecovery(t *testing.T) {
	points := []string{noeta.TypeTaskWoken, noeta.TypeApprovalCounted, noeta.TypeApprovalRefused,
		noeta.TypeApprovalResolved, noeta.TypeTaskSnapshot, noeta.TypeTaskSuspended}
	for _, mk := range []func(testing.TB) backend{
		func(t testing.TB) backend { return memBackend(t, 300*time.Millisecond) },
		func(t testing.TB) backend { return jsBackend(t, time.Second) },
	} {
		for _, point := range points {
			b := mk(t)
			t.Run(b.name+"/"+point, func(t *testing.T) {
				var cfg engine.Config
				h := newHarness(t, b, quorumConfig, withGuards(gate("tool_call")), withApprovals(t, quorumConfig),
					func(c *engine.Config) { cfg = *c })
				cl := &crashLog{Log: cfg.Log, typ: point}
				cfg.Log = cl
				crashing, err := engine.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				id := h.submit(nowApproval)
				runOne(t, h, h.eng, context.Background())
				handle := waitOpen(t, h, id, nil).WakeOn.Handle

				steps := []struct {
					approver string
					done     func(*engine.State) bool
				}{
					{"alice", func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 }},
					{"alice", func(s *engine.State) bool { return pendingOf(s).Refused == 1 }},
					{"bob", func(s *engine.State) bool { return s.Status == noeta.StatusTerminal }},
				}
				for _, s := range steps {
					answer(t, h, id, handle, s.approver, noeta.AuthNATS, noeta.ApprovalApprove, "ok")
					ctx, cancel := context.WithCancel(context.Background())
					cl.cancel.Store(&cancel)
					cl.armed.Store(true)
					runOne(t, h, crashing, ctx)
					cancel()
					for range 10 {
						st, err := h.eng.Inspect(context.Background(), id)
						if err == nil && s.done(st) {
							if ds, err := h.b.disp.Inspect(context.Background(), id); err == nil && (ds.Status == eventlog.DispatchSuspended || ds.Status == eventlog.DispatchTerminal) {
								break
							}
						}
						runOne(t, h, h.eng, context.Background())
					}
				}
				st := h.waitStatus(id, noeta.StatusTerminal)
				count := map[string]int{}
				for _, e := range h.log(id) {
					count[e.Type]++
				}
				if count[noeta.TypeApprovalCounted] != 1 || count[noeta.TypeApprovalRefused] != 1 || count[noeta.TypeApprovalResolved] != 1 ||
					count[noeta.TypeToolCallStarted] != 1 || string(st.Answer) != `"done"` {
					t.Fatalf("counted %d, refused %d, resolved %d, calls started %d, answer %s; want one of each and the task done\n%s",
						count[noeta.TypeApprovalCounted], count[noeta.TypeApprovalRefused], count[noeta.TypeApprovalResolved], count[noeta.TypeToolCallStarted], st.Answer, h.dump(id))
				}
				want := map[string]int32{noeta.TypeTaskWoken: 3, noeta.TypeApprovalCounted: 1, noeta.TypeApprovalRefused: 1,
					noeta.TypeApprovalResolved: 1, noeta.TypeTaskSnapshot: 3, noeta.TypeTaskSuspended: 2}[point]
				if got := cl.crashes.Load(); got != want {
					t.Fatalf("crashed %d times at %s; want %d (once per answer that writes one)", got, point, want)
				}
			})
		}
	}
}
