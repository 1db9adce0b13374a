package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// WakePublisher delivers wakes through the wake ingress (WakeSubject): a
// durable publish that whichever Dispatcher of the prefix consumes applies
// to the task's row. It is how a process that holds no Dispatcher — an
// observer worker, whose NATS account may publish to wake subjects but not
// touch the dispatcher's buckets — wakes a task.
type WakePublisher struct {
	js     jetstream.JetStream
	prefix string
}

// NewWakePublisher returns the publisher of prefix ("noeta" if empty) on nc.
func NewWakePublisher(nc *nats.Conn, prefix string) (*WakePublisher, error) {
	if prefix == "" {
		prefix = "noeta"
	}
	if err := noeta.ValidateToken("prefix", prefix, 32); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &WakePublisher{js: js, prefix: prefix}, nil
}

// Wake publishes event for task and returns once the wake stream holds it.
// matched is always false: whether it matched is decided later, by the
// Dispatcher that applies it.
func (w *WakePublisher) Wake(ctx context.Context, task string, event noeta.Wake) (bool, error) {
	if err := validTaskID("task", task); err != nil {
		return false, err
	}
	if err := event.Validate(); err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %w", eventlog.ErrInvalidArgument, task, err)
	}
	body, err := noeta.Canonical(event)
	if err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %v", eventlog.ErrInvalidArgument, task, err)
	}
	if _, err := w.js.Publish(ctx, WakeSubject(w.prefix, task), body); err != nil {
		return false, fmt.Errorf("jetstream: publish wake for %s: %w", task, err)
	}
	return false, nil
}
