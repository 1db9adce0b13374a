package engine_test

import (
	"context"
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
				t.Errorf("the policy was asked %d times, want 3 (the cap; the ending lease asks nothing)", n)
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
