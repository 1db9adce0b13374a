// Package memlog is the in-memory backend of every eventlog seam: the event
// log, the inbox, the content store and the dispatcher, in one [Store].
//
// It is the executable definition of the contracts in package eventlog (it
// passes eventlogtest.RunSuite whole) and it is meant to be run: a
// single-process deployment can use it, with nothing persisted across a
// restart of the process. Within a process, [Store.Reopen] restarts a Store
// on its memory, as a process restarts against a server. Time comes from an
// injectable [Clock], so tests can drive lease expiry and timers without
// sleeping. The dispatcher's transitions are package dispatchrow's, the
// same JetStream's dispatcher runs; this package keeps the rows in memory.
package memlog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// Defaults, as in the reference dispatcher.
const (
	DefaultLeaseTTL        = 30 * time.Second
	DefaultHeartbeatMax    = 360
	DefaultReclaimMax      = 3
	DefaultMaxFailAttempts = 3
)

// Options configure a Store. Zero values take the defaults.
type Options struct {
	Clock           Clock         // SystemClock if nil
	LeaseTTL        time.Duration // lease length when a LeaseRequest gives none
	HeartbeatMax    int           // heartbeats per lease before the task is released
	ReclaimMax      int           // stale reclaims in a row before the task is given up (eventlog.Lease.Ending)
	MaxFailAttempts int           // retryable failures over a task's life before it is given up
	// MaxPendingWakes bounds a task's buffer of wakes that matched nothing
	// yet; Wake past it returns eventlog.ErrTooManyWakes. Default
	// eventlog.DefaultMaxPendingWakes.
	MaxPendingWakes int
}

func (o Options) withDefaults() (Options, error) {
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"LeaseTTL", int64(o.LeaseTTL)},
		{"HeartbeatMax", int64(o.HeartbeatMax)},
		{"ReclaimMax", int64(o.ReclaimMax)},
		{"MaxFailAttempts", int64(o.MaxFailAttempts)},
		{"MaxPendingWakes", int64(o.MaxPendingWakes)},
	} {
		if f.v < 0 {
			return o, fmt.Errorf("memlog: Options.%s is negative (%d)", f.name, f.v)
		}
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.HeartbeatMax == 0 {
		o.HeartbeatMax = DefaultHeartbeatMax
	}
	if o.ReclaimMax == 0 {
		o.ReclaimMax = DefaultReclaimMax
	}
	if o.MaxFailAttempts == 0 {
		o.MaxFailAttempts = DefaultMaxFailAttempts
	}
	if o.MaxPendingWakes == 0 {
		o.MaxPendingWakes = eventlog.DefaultMaxPendingWakes
	}
	return o, nil
}

// Store implements eventlog.EventLog, eventlog.Dispatcher (and so
// eventlog.LeaseRegistry) and eventlog.ContentStore in memory. It is safe for
// concurrent use.
//
// A Store is a handle on its memory, as a process is a client of a server
// that keeps the state: [Store.Reopen] closes the handle and opens a new one
// on the same memory, which is how a restart is tested and how a program
// that keeps a Store's memory across a restart of its own parts gets one.
type Store struct {
	opts   Options
	clock  Clock
	closed atomic.Bool
	done   chan struct{}
	subs   eventlog.Subscribers // the handle's: a restart drops them

	*memory
}

// memory is what a Store keeps and a reopened Store finds again: the logs
// and inboxes, the content and the dispatcher's rows with their ready queues.
type memory struct {
	mu    sync.RWMutex // guards tasks (the map, not the logs)
	tasks map[string]*taskLog

	content contentStore
	disp    dispatcher
}

var (
	_ eventlog.EventLog     = (*Store)(nil)
	_ eventlog.Dispatcher   = (*Store)(nil)
	_ eventlog.ContentStore = (*Store)(nil)
	_ eventlog.BatchWriter  = (*Store)(nil)
)

// New returns an empty Store.
func New(opts Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: o, clock: o.Clock, done: make(chan struct{}), memory: &memory{tasks: map[string]*taskLog{}}}
	s.content.init()
	s.disp.init(s)
	return s, nil
}

// Reopen closes s (if it is not closed already) and returns a new Store on
// the same memory, with the same Options, as a process restarted against a
// server that kept its state would find it. What the memory holds survives:
// every log and inbox, the content, and the dispatcher's rows (leases,
// matched and buffered wakes, the ready queues in their order). What
// belonged to the old handle does not: its subscriptions, its blocked
// Lease calls (they return ErrClosed) and its timers, which the new Store
// arms again from the rows, so a lease that ran out while nobody was open
// is requeued, and a deadline that passed meanwhile fires, when the clock
// next delivers.
//
// Only the newest handle of a memory can be reopened: reopening an older
// one would leave two open Stores on it.
func (s *Store) Reopen() (*Store, error) {
	_ = s.Close()
	ns := &Store{opts: s.opts, clock: s.clock, done: make(chan struct{}), memory: s.memory}
	if !ns.disp.reopen(s, ns) {
		return nil, fmt.Errorf("memlog: Reopen: this Store was reopened already; reopen the newest one")
	}
	return ns, nil
}

// Close stops the Store's timers and wakes blocked Lease calls; every method
// then returns eventlog.ErrClosed. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.disp.close(s)
	return nil
}

// check returns ctx's error or ErrClosed, the first checks of every method.
func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return eventlog.ErrClosed
	}
	return nil
}
