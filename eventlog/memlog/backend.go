package memlog

import "github.com/noeta-go/noeta/eventlog"

// Backend is a store and a waiting index as the backend of a host (package
// host's Backend): one process, nothing kept past it.
type Backend struct {
	Store *Store
	Index *WaitingIndex
}

// NewBackend opens a store of opts and an empty waiting index.
func NewBackend(opts Options) (*Backend, error) {
	s, err := New(opts)
	if err != nil {
		return nil, err
	}
	return &Backend{Store: s, Index: NewWaitingIndex()}, nil
}

// Log is the store's event log.
func (b *Backend) Log() eventlog.EventLog { return b.Store }

// Dispatcher is the store's dispatcher.
func (b *Backend) Dispatcher() eventlog.Dispatcher { return b.Store }

// Content is the store's content store.
func (b *Backend) Content() eventlog.ContentStore { return b.Store }

// Waiting is the waiting index.
func (b *Backend) Waiting() eventlog.WaitingIndex { return b.Index }

// Close closes the store.
func (b *Backend) Close() error { return b.Store.Close() }
