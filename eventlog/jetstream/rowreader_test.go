package jetstream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestRowReader: a RowReader sees the rows a Dispatcher writes.
func TestRowReader(t *testing.T) {
	ctx := context.Background()
	d := openDispatcher(t, singleURL, 1, dispatcherTestPrefix)
	task := noeta.NewTaskID()
	if err := d.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "rowreader"}); err != nil {
		t.Fatal(err)
	}
	rr, err := jetstream.OpenRowReader(ctx, connect(t, singleURL), dispatcherTestPrefix)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rr.Inspect(ctx, task)
	want, _ := d.Inspect(ctx, task)
	if err != nil || got.Status != eventlog.DispatchReady || got.Queue != "rowreader" || got != want {
		t.Errorf("RowReader.Inspect = %+v %v, the Dispatcher says %+v", got, err, want)
	}
	if _, err := rr.Inspect(ctx, noeta.NewTaskID()); !errors.Is(err, eventlog.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	if _, err := jetstream.OpenRowReader(ctx, connect(t, singleURL), "nosuchprefix"); !errors.Is(err, jetstream.ErrStreamMissing) {
		t.Errorf("missing bucket: %v", err)
	}
}
