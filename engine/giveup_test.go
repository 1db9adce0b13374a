package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/tools"
)

// cappedBackends are the backends with the attempt cap a deployment has by
// default (3), so a task that fails every segment reaches it.
func cappedBackends(t *testing.T) []backend {
	const ttl = 2 * time.Second
	s, err := memlog.New(memlog.Options{LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	prefix := fmt.Sprintf("e%d", prefixes.Add(1))
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{Prefix: prefix, LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return []backend{
		{name: "memlog", log: s, disp: s, content: s, ttl: ttl},
		{name: "jetstream", log: log, disp: disp, content: log, ttl: ttl, nc: nc, prefix: prefix},
	}
}

// failingPolicy fails every turn with an error that is not the task's
// fault: the segment fails as retryable.
type failingPolicy struct{ asked *atomic.Int64 }

func (p failingPolicy) Decide(context.Context, noeta.PolicyInput) (noeta.Decision, error) {
	p.asked.Add(1)
	return noeta.Decision{}, errors.New("the model server is unreachable")
}

// TestRetriesExhaustedRecorded: a task whose every segment fails as
// retryable ends with a TaskFailed in its log naming why, once the
// dispatcher's attempt cap is reached; the dispatcher's row and the log
// agree, so doctor's tail check finds nothing. Before, the dispatcher
// ended the task in its row alone: the log had no terminal record, the
// failed notification never fired, and events and doctor reported the
// row's reason as a log that had lost its end.
func TestRetriesExhaustedRecorded(t *testing.T) {
	for _, b := range cappedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			var asked atomic.Int64
			h := newHarness(t, b, echoAgentDoc, func(c *engine.Config) {
				c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return failingPolicy{&asked}, nil }
				// A failed policy call is not run again under its lease
				// (its client retries, and what it spent is not recorded):
				// the retries must not change the count.
				c.SegmentRetries, c.SegmentRetryPause = 2, 10*time.Millisecond
			})
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "g"})
			if err != nil {
				t.Fatal(err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			envs := h.log(id)
			last := envs[len(envs)-1]
			if last.Type != noeta.TypeTaskFailed {
				t.Fatalf("the log ends with %s, want TaskFailed\n%s", last.Type, h.dump(id))
			}
			tf := payload[noeta.TaskFailed](t, envs, noeta.TypeTaskFailed)
			if !strings.HasPrefix(tf.Error, eventlog.ReasonMaxAttemptsExceeded+": ") || !strings.Contains(tf.Error, "the model server is unreachable") {
				t.Errorf("TaskFailed error %q, want the cap and the last failure", tf.Error)
			}
			if n := asked.Load(); n != 3 {
				t.Errorf("the policy was asked %d times, want 3 (the cap; a failed policy call is not run again under its lease; the ending lease asks nothing)", n)
			}
			h.waitReleased(id, eventlog.DispatchTerminal)
			ds, err := b.disp.Inspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Reason != st.Reason || ds.Ending != "" {
				t.Errorf("dispatcher reason %q ending %q, want the log's %q and none", ds.Reason, ds.Ending, st.Reason)
			}
			if f, bad := jshost.RowAgainstLog(id, ds, st, last); bad {
				t.Errorf("doctor's tail check reports %+v", f)
			}
		})
	}
}

// flakyLog fails its first fails reads, as a store between leader
// elections does ("no response from stream").
type flakyLog struct {
	engine.Log
	fails *atomic.Int64
}

func (l flakyLog) Read(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: no response from stream")
	}
	return l.Log.Read(ctx, task, after)
}

// TestSegmentRetriedUnderItsLease: a segment that fails retryably before
// asking its policy (here its log cannot be read) runs again under its
// lease, after a pause, before the failure counts toward the
// dispatcher's cap of attempts (ADR 0115). Six failed reads in a row (a few
// seconds of a stream without a leader, in the partition run) used to
// spend a task's three attempts and end it max_attempts_exceeded; now the
// task completes under its first lease and spends none. With
// SegmentRetries negative each failure is an attempt, as before, and the
// task spends some or all of its attempts.
func TestSegmentRetriedUnderItsLease(t *testing.T) {
	for _, b := range cappedBackends(t) {
		for _, c := range []struct {
			name    string
			retries int
			ends    bool // each failure spends an attempt
		}{
			{"default", 0, false},
			{"none", -1, true},
		} {
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				var fails atomic.Int64
				h := newHarness(t, b, echoAgentDoc, func(cfg *engine.Config) {
					cfg.Log = flakyLog{cfg.Log, &fails}
					cfg.SegmentRetries, cfg.SegmentRetryPause = c.retries, 10*time.Millisecond
				})
				id, err := h.eng.Submit(t.Context(), engine.Submission{Agent: "researcher", Goal: "g",
					Script: json.RawMessage(`[{"finish":{"answer":"done"}}]`)})
				if err != nil {
					t.Fatal(err)
				}
				// Enough for every attempt to fail, a segment reading the log
				// once or twice: well within the eight runs under a lease.
				fails.Store(6)
				h.start(1)
				st := h.waitStatus(id, noeta.StatusTerminal)
				h.waitReleased(id, eventlog.DispatchTerminal)
				ds, err := b.disp.Inspect(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				envs := h.log(id)
				last := envs[len(envs)-1]
				if c.ends {
					// Each failed segment is an attempt: the task spends
					// them (how many depends on how often a backend's fold
					// reads), or is given up on.
					if ds.FailAttempts == 0 && !strings.HasPrefix(st.Reason, eventlog.ReasonMaxAttemptsExceeded) {
						t.Fatalf("without retries under the lease no attempt was spent (%d failed reads left, generation %d)\n%s", fails.Load(), ds.Generation, h.dump(id))
					}
					return
				}
				if last.Type != noeta.TypeTaskCompleted {
					t.Fatalf("the log ends with %s (%q), want TaskCompleted\n%s", last.Type, st.Reason, h.dump(id))
				}
				if ds.FailAttempts != 0 || ds.Generation != 1 {
					t.Errorf("the task spent %d attempts over %d leases, want none over one", ds.FailAttempts, ds.Generation)
				}
				if n := fails.Load(); n >= 0 {
					t.Errorf("%d of the store's failures were never met: the test proves nothing", n+1)
				}
				for _, env := range envs[1:] {
					if env.LeaseGen != 1 {
						t.Errorf("record %d (%s) written under lease generation %d, want 1", env.Seq, env.Type, env.LeaseGen)
					}
				}
			})
		}
	}
}

// TestWakeRecoveryEndRecorded: a lease whose wake fits nothing in the
// task's log (here a timer the task never set, while it waits on an
// approval) ends the task, and the end is recorded: a TaskFailed naming
// the wake, and the dispatcher's row agrees with the log. Before, the
// segment failed as not retryable and the dispatcher ended the task in its
// row alone, with no terminal record.
func TestWakeRecoveryEndRecorded(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	fd := &forgingDispatcher{Dispatcher: b.disp, forged: map[string]noeta.Wake{}}
	b.disp = fd
	h := newHarness(t, b, pathsConfig, withGuards(gate("tool_call")))
	h.start(1)
	ctx := context.Background()
	id := h.submit(nowApproval)
	h.waitFor(id, "the request", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended })
	h.waitReleased(id, eventlog.DispatchSuspended)
	fd.mu.Lock()
	fd.forged[id] = noeta.TimerWake(time.Unix(1e9, 0).UTC())
	fd.mu.Unlock()
	if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	st := h.waitStatus(id, noeta.StatusTerminal)
	envs := h.log(id)
	if last := envs[len(envs)-1]; last.Type != noeta.TypeTaskFailed {
		t.Fatalf("the log ends with %s, want TaskFailed\n%s", last.Type, h.dump(id))
	}
	if !strings.HasPrefix(st.Reason, engine.ErrWakeRecovery.Error()) {
		t.Errorf("TaskFailed error %q, want it to start %q", st.Reason, engine.ErrWakeRecovery.Error())
	}
	h.waitReleased(id, eventlog.DispatchTerminal)
	ds, err := b.disp.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if f, bad := jshost.RowAgainstLog(id, ds, st, envs[len(envs)-1]); bad || ds.Reason != st.Reason {
		t.Errorf("dispatcher reason %q (log %q); doctor's tail check %+v", ds.Reason, st.Reason, f)
	}
}

// unwritableEnd is a log that refuses the first n TaskFailed records, as a
// store unavailable for a moment does.
type unwritableEnd struct {
	logOfBackend
	refuse atomic.Int64
}

type logOfBackend = interface {
	engine.Log
	eventlog.Subscriber
	eventlog.TaskIndex
}

func (l *unwritableEnd) Emit(ctx context.Context, lease eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) (eventlog.Envelope, error) {
	if env.Type == noeta.TypeTaskFailed && l.refuse.Add(-1) >= 0 {
		return eventlog.Envelope{}, errors.New("JetStream system temporarily unavailable")
	}
	return l.logOfBackend.Emit(ctx, lease, env, opts)
}

// TestEndRecordedAfterTheStoreCameBack: a task at the attempt cap whose
// ending lease cannot write its TaskFailed (the store unavailable for a
// moment) is not ended by the dispatcher alone: a later ending lease
// records the end, and the row and the log agree. Reproduction (the
// partition run, deploy/nats TestPartition): the task stream unavailable
// for a few seconds failed three segments and then the ending lease, and
// the dispatcher ended the task in its row while its log stayed suspended
// or running for ever.
func TestEndRecordedAfterTheStoreCameBack(t *testing.T) {
	for _, b := range cappedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			log := &unwritableEnd{logOfBackend: b.log}
			log.refuse.Store(2)
			b.log = log
			var asked atomic.Int64
			h := newHarness(t, b, echoAgentDoc, func(c *engine.Config) {
				c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return failingPolicy{&asked}, nil }
			})
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "g"})
			if err != nil {
				t.Fatal(err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			envs := h.log(id)
			if last := envs[len(envs)-1]; last.Type != noeta.TypeTaskFailed {
				t.Fatalf("the log ends with %s, want TaskFailed\n%s", last.Type, h.dump(id))
			}
			if n := log.refuse.Load(); n >= 0 {
				t.Fatalf("the end was refused %d times, want 2", 2-n)
			}
			h.waitReleased(id, eventlog.DispatchTerminal)
			ds, err := b.disp.Inspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Reason != st.Reason {
				t.Errorf("dispatcher reason %q, want the log's %q", ds.Reason, st.Reason)
			}
		})
	}
}

// TestEndClosesStartedCalls: a task given up on (Lease.Ending) while a
// call of its turn is started and not finished — its worker killed during
// the call, as a stale reclaim follows — records that call as interrupted
// before its TaskFailed, as a resumed turn does. Before, the ending lease
// wrote TaskFailed over the open call: the log said a call started and
// never said what became of it, and deploy/nats TestChaos read its one
// side effect as belonging to no recorded call.
func TestEndClosesStartedCalls(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			var kill context.CancelFunc
			var runs atomic.Int64
			crash := tools.Define(tools.Def{Name: "crash", Risk: tools.RiskLow, Run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
				runs.Add(1)
				kill()
				<-ctx.Done()
				return tools.Result{}, ctx.Err()
			}})
			h := newHarness(t, b, "agents:\n  boss: {tools: [crash]}\n", func(c *engine.Config) {
				reg, err := tools.NewRegistry(crash)
				if err != nil {
					t.Fatal(err)
				}
				c.Tools = reg
			})
			id := h.submit(`
agent: boss
goal: be given up on during a call
script:
  - tool_calls: [{tool: crash}]
  - finish: {answer: survived}
`)
			ctx := context.Background()
			lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w1", Task: id})
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			kill = cancel
			if _, err := h.eng.RunLease(wctx, lease); !errors.Is(err, context.Canceled) {
				t.Fatalf("the killed segment: %v", err)
			}
			cancel()
			// The worker is gone; the dispatcher gives up on the task, and
			// the next lease carries the end to record.
			if err := b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
				t.Fatal(err)
			}
			lease, err = b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w2", Task: id})
			if err != nil {
				t.Fatal(err)
			}
			lease.Ending = eventlog.ReasonStaleReclaimExceeded
			out, err := h.eng.RunLease(ctx, lease)
			if err != nil || out.Status != noeta.StatusTerminal {
				t.Fatalf("the ending segment: %+v, %v\n%s", out, err, h.dump(id))
			}
			envs := wantLog(t, h, id,
				e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallStarted"),
				e("LeaseGranted"), tl("ToolCallFinished"), e("TaskSnapshot"), e("TaskFailed"))
			started := payload[noeta.ToolCallStarted](t, envs, noeta.TypeToolCallStarted)
			fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
			if fin.CallID != started.CallID || fin.Tool != "crash" || fin.OK || !strings.HasPrefix(fin.Error, "interrupted") {
				t.Errorf("ToolCallFinished %+v, want call %s of crash recorded as interrupted", fin, started.CallID)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the call ran %d times, want 1", n)
			}
		})
	}
}
