// Package memlog is the in-memory backend of every eventlog seam: the event
// log, the inbox, the content store and the dispatcher, in one [Store].
//
// It is the executable definition of the contracts in package eventlog (it
// passes eventlogtest.RunSuite whole) and it is meant to be run: a
// single-process deployment can use it, with nothing persisted across a
// restart. Time comes from an injectable [Clock], so tests can drive lease
// expiry and timers without sleeping. The dispatcher's transitions are
// package dispatchrow's, the same JetStream's dispatcher runs; this package
// keeps the rows in memory.
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
type Store struct {
	opts   Options
	clock  Clock
	closed atomic.Bool
	done   chan struct{}

	mu    sync.RWMutex // guards tasks (the map, not the logs)
	tasks map[string]*taskLog
	subs  eventlog.Subscribers

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
	s := &Store{opts: o, clock: o.Clock, done: make(chan struct{}), tasks: map[string]*taskLog{}}
	s.content.init()
	s.disp.init(s)
	return s, nil
}

// Close stops the Store's timers and wakes blocked Lease calls; every method
// then returns eventlog.ErrClosed. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.disp.close()
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
