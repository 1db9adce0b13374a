package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// ErrNoWaitingIndex: a read-only host on a remote NATS found no waiting
// index bucket (no engine of this version has run on the prefix yet).
var ErrNoWaitingIndex = errors.New("host: the deployment has no waiting index")

// openWaiting opens the fleet's waiting index: created if missing by a host
// that may write (its engines write it), bound read-only otherwise. A
// read-only host without the bucket opens anyway; Waiting then says why it
// has nothing.
func (h *Host) openWaiting(ctx context.Context, readOnly bool) error {
	cfg := jetstream.WaitingConfig{Prefix: h.opts.Prefix, Replicas: h.opts.Replicas, Logger: h.logger}
	if !readOnly {
		x, err := jetstream.OpenWaitingIndex(ctx, h.nc, cfg)
		if err != nil {
			return fmt.Errorf("open the waiting index: %w", settingsHint(err))
		}
		h.waiting = x
		return nil
	}
	x, err := jetstream.BindWaitingIndex(ctx, h.nc, cfg)
	switch {
	case errors.Is(err, jetstream.ErrStreamMissing):
		h.waitingErr = fmt.Errorf("%w: %w", ErrNoWaitingIndex, err)
		return nil
	case err != nil:
		return fmt.Errorf("open the waiting index: %w", err)
	}
	h.waiting = x
	return nil
}

// waitingSeam is the index for engine.Config.Waiting: a nil interface, not
// a nil pointer in one, when there is none.
func (h *Host) waitingSeam() eventlog.WaitingIndex {
	if h.waiting == nil {
		return nil
	}
	return h.waiting
}

// WaitingIndex is the host's waiting index (nil when a read-only host found
// none); its engines write it.
func (h *Host) WaitingIndex() *jetstream.WaitingIndex { return h.waiting }

// Waiting returns every request a person must answer across the fleet,
// oldest first, from the waiting index: no log is read. Past the index's
// listing bound it returns the oldest entries with an error wrapping
// jetstream.ErrWaitingCut.
func (h *Host) Waiting(ctx context.Context) ([]eventlog.Waiting, error) {
	if h.waiting == nil {
		return nil, h.noWaiting()
	}
	return h.waiting.ListWaiting(ctx)
}

// WatchWaiting calls fn with every open request, a marker (a zero
// WaitingChange), then each change, until ctx ends or stop is called (see
// eventlog.WaitingIndex).
func (h *Host) WatchWaiting(ctx context.Context, fn func(eventlog.WaitingChange)) (stop func(), err error) {
	if h.waiting == nil {
		return nil, h.noWaiting()
	}
	return h.waiting.WatchWaiting(ctx, fn)
}

func (h *Host) noWaiting() error {
	if h.waitingErr != nil {
		return h.waitingErr
	}
	return fmt.Errorf("%w: the host is not open", ErrNoWaitingIndex)
}
