package host

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta/eventlog"
)

// Waiting returns every request a person must answer across the fleet,
// oldest first, from the backend's waiting index: no log is read. Past the
// index's listing bound it may return the oldest entries with an error
// saying so (jetstream.ErrWaitingCut).
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
	return fmt.Errorf("%w: the backend keeps none", ErrNoWaitingIndex)
}
