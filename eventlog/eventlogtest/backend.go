// Package eventlogtest is the contract suite of the eventlog seams. Every
// backend runs it from its own tests with one call:
//
//	func TestSuite(t *testing.T) { eventlogtest.RunSuite(t, factory) }
//
// Each case runs as a parallel subtest on a fresh backend from the factory and
// uses its own task ids, so one embedded server can serve them all. Backends
// cannot opt out of a behaviour: the only knobs ([Backend.Advance], the caps a
// backend was configured with) are test mechanics.
package eventlogtest

import (
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// Backend is one fresh, isolated instance of a backend under test.
type Backend struct {
	Log        eventlog.EventLog
	Dispatcher eventlog.Dispatcher
	Content    eventlog.ContentStore

	// Close closes every seam of the instance; afterwards every method returns
	// eventlog.ErrClosed. The factory also registers cleanup with t.Cleanup, so
	// calling Close in a case is optional and must be idempotent.
	Close func() error

	// Advance moves the instance's clock forward by d and returns after the
	// backend has acted on everything that fell due (expired leases requeued,
	// timers fired). A backend on the wall clock leaves it nil and the suite
	// sleeps instead, then polls for the outcome.
	Advance func(d time.Duration)

	// LeaseTTL is the TTL the suite asks for when a case needs leases to expire;
	// a wall-clock backend sets the shortest its liveness mechanism honours.
	LeaseTTL time.Duration

	// The dispatcher caps the instance was configured with.
	HeartbeatMax    int
	ReclaimMax      int
	MaxFailAttempts int
	// Restart closes this instance and returns a new one on the same store
	// (the dispatcher and log opened again, as a process restarting would:
	// a JetStream backend on the same streams and buckets, memlog a Store
	// reopened on the same memory). Every backend has one: no case is
	// skipped.
	Restart func(t *testing.T) Backend

	// MaxPendingWakes is the row's buffer cap; 0 means
	// eventlog.DefaultMaxPendingWakes.
	MaxPendingWakes int
}

// Factory returns a fresh backend for one subtest and registers its cleanup
// with t.Cleanup.
type Factory func(t *testing.T) Backend
