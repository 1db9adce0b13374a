package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureDeadLetterStream creates the dead-letter stream of prefix
// (DeadLetterStreamConfig) on nc if it does not exist, and refuses one that
// exists with other settings (ErrConfigMismatch). OpenFeed does the same; this
// is for a process allowed to create streams (an engine) to run at start, so
// that observer workers, whose NATS user may look the stream up but not create
// it (deploy/nats), find it in place.
func EnsureDeadLetterStream(ctx context.Context, nc *nats.Conn, prefix string, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	_, err = ensureStream(ctx, js, DeadLetterStreamConfig(prefix, replicas))
	return err
}
