package memlog

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time source of a Store: record times, lease expiry, timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, on a goroutine of the clock's choosing, after d.
	// The returned stop func cancels it and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// ManualClock is a clock that moves only when told to, for deterministic tests
// of expiry, reclaim and timers. Functions scheduled with AfterFunc run on the
// goroutine that calls Advance, in deadline order, never from inside AfterFunc
// itself (so a caller holding a lock cannot deadlock on its own callback).
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	pending map[uint64]manualTimer
}

type manualTimer struct {
	at  time.Time
	seq uint64
	f   func()
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, pending: map[uint64]manualTimer{}}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; a d <= 0 runs at the next Advance.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.pending[id] = manualTimer{at: c.now.Add(d), seq: id, f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.pending[id]
		delete(c.pending, id)
		return ok
	}
}

// Advance moves the clock forward by d and runs every function now due, in
// deadline order (ties in scheduling order), including ones scheduled by those
// functions while they run, as long as they are due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due []manualTimer
		for _, t := range c.pending {
			if !t.at.After(c.now) {
				due = append(due, t)
			}
		}
		if len(due) == 0 {
			c.mu.Unlock()
			return
		}
		sort.Slice(due, func(i, j int) bool {
			if !due[i].at.Equal(due[j].at) {
				return due[i].at.Before(due[j].at)
			}
			return due[i].seq < due[j].seq
		})
		next := due[0]
		delete(c.pending, next.seq)
		c.mu.Unlock()
		next.f()
	}
}
