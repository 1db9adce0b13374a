package memlog

import (
	"context"
	"sync"

	"github.com/noeta-go/noeta/eventlog"
)

// WaitingIndex is the in-memory eventlog.WaitingIndex: a map, and a queue
// per watcher so that a slow watcher delays only itself. It is safe for
// concurrent use.
type WaitingIndex struct {
	mu      sync.Mutex
	entries map[waitingKey][]byte
	watches map[*waitingWatch]struct{}
}

type waitingKey struct{ task, handle string }

var _ eventlog.WaitingIndex = (*WaitingIndex)(nil)

// NewWaitingIndex returns an empty index.
func NewWaitingIndex() *WaitingIndex {
	return &WaitingIndex{entries: map[waitingKey][]byte{}, watches: map[*waitingWatch]struct{}{}}
}

// PutWaiting stores w as eventlog.EncodeWaiting shapes it.
func (x *WaitingIndex) PutWaiting(ctx context.Context, w eventlog.Waiting) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, b, err := eventlog.EncodeWaiting(w)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.entries[waitingKey{w.Task, w.Handle}] = b
	x.notify(eventlog.WaitingChange{Entry: w})
	return nil
}

// DeleteWaiting removes the entry of task and handle; a missing one is no
// error.
func (x *WaitingIndex) DeleteWaiting(ctx context.Context, task, handle string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := eventlog.ValidWaitingKey(task, handle); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	k := waitingKey{task, handle}
	if _, ok := x.entries[k]; !ok {
		return nil
	}
	delete(x.entries, k)
	x.notify(eventlog.WaitingChange{Deleted: true, Entry: eventlog.Waiting{Task: task, Handle: handle}})
	return nil
}

// ListWaiting returns every entry, oldest request first.
func (x *WaitingIndex) ListWaiting(ctx context.Context) ([]eventlog.Waiting, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	x.mu.Lock()
	out := x.snapshot()
	x.mu.Unlock()
	eventlog.SortWaiting(out)
	return out, nil
}

// ListTaskWaiting returns the entries of task, oldest request first.
func (x *WaitingIndex) ListTaskWaiting(ctx context.Context, task string) ([]eventlog.Waiting, error) {
	all, err := x.ListWaiting(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, w := range all {
		if w.Task == task {
			out = append(out, w)
		}
	}
	return out, nil
}

// snapshot decodes every entry; x.mu is held.
func (x *WaitingIndex) snapshot() []eventlog.Waiting {
	out := make([]eventlog.Waiting, 0, len(x.entries))
	for k, b := range x.entries {
		// The bytes are what EncodeWaiting made: they decode.
		w, _ := eventlog.DecodeWaiting(k.task, k.handle, b)
		out = append(out, w)
	}
	return out
}

// WatchWaiting calls fn with the entries present now, the marker, then each
// change, on a goroutine of its own that stop (or the end of ctx) ends;
// stop returns once fn is no longer called. stop must not be called from fn.
func (x *WaitingIndex) WatchWaiting(ctx context.Context, fn func(eventlog.WaitingChange)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &waitingWatch{wake: make(chan struct{}, 1)}
	x.mu.Lock()
	initial := x.snapshot()
	eventlog.SortWaiting(initial)
	for _, e := range initial {
		w.queue = append(w.queue, eventlog.WaitingChange{Entry: e})
	}
	w.queue = append(w.queue, eventlog.WaitingChange{})
	x.watches[w] = struct{}{}
	x.mu.Unlock()
	w.signal()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			x.mu.Lock()
			delete(x.watches, w)
			x.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			for {
				x.mu.Lock()
				batch := w.queue
				w.queue = nil
				x.mu.Unlock()
				if len(batch) == 0 {
					break
				}
				for _, c := range batch {
					if ctx.Err() != nil {
						return
					}
					fn(c)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// notify queues c for every watcher; x.mu is held.
func (x *WaitingIndex) notify(c eventlog.WaitingChange) {
	for w := range x.watches {
		w.queue = append(w.queue, c)
		w.signal()
	}
}

// waitingWatch is one watcher's queue (guarded by the index's mu) and the
// signal that it grew.
type waitingWatch struct {
	queue []eventlog.WaitingChange
	wake  chan struct{}
}

func (w *waitingWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
