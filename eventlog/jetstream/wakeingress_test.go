package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestWakePublisher: a wake published through the ingress by a process with
// no Dispatcher is applied by the one that consumes it.
func TestWakePublisher(t *testing.T) {
	ctx := context.Background()
	d := openDispatcher(t, singleURL, 1, dispatcherTestPrefix)
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "wakepub"}); err != nil {
		t.Fatal(err)
	}
	l, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
	if err != nil {
		t.Fatal(err)
	}
	cond := noeta.SubtaskCompletedWake("child-1")
	if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_subtask"}); err != nil {
		t.Fatal(err)
	}
	wp, err := jetstream.NewWakePublisher(connect(t, singleURL), dispatcherTestPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wp.Wake(ctx, task, noeta.Wake{Kind: "nonsense"}); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("invalid wake: %v", err)
	}
	if _, err := wp.Wake(ctx, task, cond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := d.Inspect(ctx, task)
		if err == nil && ds.Status == eventlog.DispatchReady && ds.MatchedWake != nil && ds.MatchedWake.SubtaskID == "child-1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the published wake was not applied: %+v %v", ds, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
