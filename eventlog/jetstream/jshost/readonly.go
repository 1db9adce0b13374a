package jshost

import (
	"context"
	"fmt"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// readOnlyLog is the log of a backend opened read-only on a remote NATS:
// the task stream's reader, every write refused.
type readOnlyLog struct{ *jetstream.Reader }

func (readOnlyLog) Create(context.Context, eventlog.Envelope) (eventlog.Envelope, error) {
	return eventlog.Envelope{}, ErrReadOnly
}

func (readOnlyLog) Emit(context.Context, eventlog.Lease, eventlog.Envelope, eventlog.EmitOptions) (eventlog.Envelope, error) {
	return eventlog.Envelope{}, ErrReadOnly
}

func (readOnlyLog) SystemEmit(context.Context, string, string, eventlog.Envelope) (eventlog.Envelope, error) {
	return eventlog.Envelope{}, ErrReadOnly
}

func (readOnlyLog) Put(context.Context, []byte, string) (noeta.ContentRef, error) {
	return noeta.ContentRef{}, ErrReadOnly
}

// Subscribe delivers nothing: a read-only process commits nothing.
func (readOnlyLog) Subscribe(h eventlog.Handler) *eventlog.Subscription {
	var none eventlog.Subscribers
	return none.Subscribe(h)
}

// readOnlyRows is the dispatcher of a backend opened read-only: its rows,
// every change refused.
type readOnlyRows struct{ *jetstream.RowReader }

func (readOnlyRows) Valid(context.Context, eventlog.Lease) (bool, error) { return false, ErrReadOnly }
func (readOnlyRows) Enqueue(context.Context, string, eventlog.EnqueueOptions) error {
	return ErrReadOnly
}
func (readOnlyRows) Lease(context.Context, eventlog.LeaseRequest) (eventlog.Lease, error) {
	return eventlog.Lease{}, ErrReadOnly
}
func (readOnlyRows) Heartbeat(context.Context, eventlog.Lease) (time.Time, error) {
	return time.Time{}, ErrReadOnly
}
func (readOnlyRows) Release(context.Context, eventlog.Lease, eventlog.Release) error {
	return ErrReadOnly
}
func (readOnlyRows) Yield(context.Context, eventlog.Lease) error { return ErrReadOnly }
func (readOnlyRows) Fail(context.Context, eventlog.Lease, eventlog.Failure) error {
	return ErrReadOnly
}
func (readOnlyRows) Wake(context.Context, string, noeta.Wake) (bool, error) {
	return false, ErrReadOnly
}
func (readOnlyRows) RequeueStale(context.Context) ([]string, error) { return nil, ErrReadOnly }

// missingWaiting is the waiting index of a read-only backend that found
// none: every call says why.
type missingWaiting struct{ err error }

func (m missingWaiting) why() error {
	if m.err != nil {
		return m.err
	}
	return fmt.Errorf("%w: the backend is not open", eventlog.ErrNoWaitingIndex)
}

func (m missingWaiting) PutWaiting(context.Context, eventlog.Waiting) error      { return m.why() }
func (m missingWaiting) DeleteWaiting(context.Context, string, string) error     { return m.why() }
func (m missingWaiting) ListWaiting(context.Context) ([]eventlog.Waiting, error) { return nil, m.why() }
func (m missingWaiting) WatchWaiting(context.Context, func(eventlog.WaitingChange)) (func(), error) {
	return nil, m.why()
}
