package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// RowReader reads the dispatcher's rows without being a Dispatcher: it looks
// the tasks bucket up and reads keys, nothing else, so a process whose NATS
// user may only read (deploy/nats's operator role) can inspect where a task
// stands.
type RowReader struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string
}

// OpenRowReader binds to the tasks bucket of prefix ("noeta" if empty),
// which a Dispatcher must have created (ErrStreamMissing otherwise).
func OpenRowReader(ctx context.Context, nc *nats.Conn, prefix string) (*RowReader, error) {
	if prefix == "" {
		prefix = "noeta"
	}
	if err := noeta.ValidateToken("prefix", prefix, 32); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	bucket := DispatcherConfig{Prefix: prefix}.tasksBucket()
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s (a Dispatcher creates it): %w", ErrStreamMissing, bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: bucket %s: %w", bucket, err)
	}
	return &RowReader{kv: kv, js: js, bucket: bucket}, nil
}

// Inspect returns the dispatcher's state of task, as Dispatcher.Inspect does.
// ErrNotFound if the dispatcher does not know the task.
func (r *RowReader) Inspect(ctx context.Context, task string) (eventlog.DispatchState, error) {
	if err := validTaskID("task", task); err != nil {
		return eventlog.DispatchState{}, err
	}
	e, err := r.kv.Get(ctx, task)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return eventlog.DispatchState{}, fmt.Errorf("%w: task %q is unknown to the dispatcher", eventlog.ErrNotFound, task)
	}
	if err != nil {
		return eventlog.DispatchState{}, fmt.Errorf("jetstream: dispatcher row %s: %w", task, err)
	}
	row, err := decodeRow(task, e.Value())
	if err != nil {
		return eventlog.DispatchState{}, err
	}
	return row.State(task), nil
}

// Tasks lists the tasks the dispatcher has a row for, in key order.
//
// The keys come from the bucket stream's subjects, not from a key watcher:
// a watcher waits until it has been handed as many messages as the stream
// counted, and a row whose message the server can no longer load (flipped
// bytes in its block) is counted and never handed, so the listing never
// ended. The subjects still name such a row, and its Inspect then reports
// it.
func (r *RowReader) Tasks(ctx context.Context) ([]string, error) {
	keys, err := rowKeys(ctx, r.js, r.bucket)
	if err != nil {
		return nil, fmt.Errorf("jetstream: dispatcher rows: %w", err)
	}
	slices.Sort(keys)
	return keys, nil
}

// rowKeys lists the task ids that have a message in the rows bucket, from
// the bucket stream's subjects (see RowReader.Tasks for why not a watcher).
func rowKeys(ctx context.Context, js jetstream.JetStream, bucket string) ([]string, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + bucket + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if k, ok := strings.CutPrefix(subj, prefix); ok && noeta.ValidateTaskID(k) == nil {
			out = append(out, k)
		}
	}
	return out, nil
}
