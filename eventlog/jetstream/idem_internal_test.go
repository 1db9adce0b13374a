package jetstream

import (
	"context"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

type liveRegistry struct{}

func (liveRegistry) Valid(context.Context, eventlog.Lease) (bool, error) { return true, nil }

// TestIdempotentRetryFindsALateEarlierAttempt: an earlier attempt with the same
// key whose publish timed out lands after the retry read the tail. The retry's
// publish is refused, and it must return that earlier record as the original
// instead of writing a second one.
func TestIdempotentRetryFindsALateEarlierAttempt(t *testing.T) {
	ctx := t.Context()
	l, err := Open(ctx, embeddedConn(t), Config{Registry: liveRegistry{}})
	if err != nil {
		t.Fatal(err)
	}
	task := noeta.NewTaskID()
	genesis, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "t", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if _, err := l.Create(ctx, genesis); err != nil {
		t.Fatal(err)
	}
	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}
	first, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "t", noeta.TurnStarted{Turn: 1})
	if _, err := l.Emit(ctx, lease, first, eventlog.EmitOptions{}); err != nil {
		t.Fatal(err)
	}

	// The "earlier attempt": the record an Emit with key K would have written,
	// published behind the Log's back so its cached tail is now stale and no
	// idempotency entry exists.
	ts := l.state(task)
	late, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "t", noeta.TurnStarted{Turn: 2})
	late, _ = eventlog.PrepareRecord(task, late)
	late.ID, late.Time, late.Seq, late.LeaseGen = noeta.NewID(), l.cfg.Now(), ts.tail.seq+1, 1
	msg, err := encode(l.subj.log(task), late, meta{leaseID: lease.ID, baseline: ts.tail.baseline, idemKey: "K"})
	if err != nil {
		t.Fatal(err)
	}
	if _, wrong, err := l.publish(ctx, msg, ts.tail.streamSeq); err != nil || wrong {
		t.Fatalf("publishing the late attempt: wrong=%v err=%v", wrong, err)
	}

	retry, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "t", noeta.TurnStarted{Turn: 2})
	got, err := l.Emit(ctx, lease, retry, eventlog.EmitOptions{IdempotencyKey: "K"})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got.ID != late.ID || got.Seq != late.Seq {
		t.Errorf("retry returned %s seq %d, want the earlier attempt %s seq %d", got.ID, got.Seq, late.ID, late.Seq)
	}
	envs, err := l.Read(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(envs); n != 4 { // genesis, LeaseGranted, turn 1, the late attempt
		t.Errorf("log has %d records, want 4 (no second write for key K)", n)
	}
	// And the key now resolves from its entry.
	again, err := l.Emit(ctx, lease, retry, eventlog.EmitOptions{IdempotencyKey: "K"})
	if err != nil || again.ID != late.ID {
		t.Errorf("second retry: got %s, %v; want %s", again.ID, err, late.ID)
	}
}
