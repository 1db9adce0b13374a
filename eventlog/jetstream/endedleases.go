package jetstream

import (
	"hash/maphash"
	"sync"
	"time"
)

// endedLeases remembers the lease keys this Dispatcher deleted after their
// row moved on (a release, a takeover), so the leases watcher can pass over
// the expiry marker the server writes for each such key one TTL later: that
// lease cannot be named by its row again (lease ids are unique), and a row
// read per marker made the watcher fall behind a busy fleet's releases
// (docs/scale.md). Two generations, each at most max keys and turned over
// after keep, bound the memory; a key forgotten early only costs the read.
// Keys are kept as 64-bit hashes (8 bytes, not a 53-byte string): at a
// million tasks the strings were most of what the engine's memory grew by.
// A collision passes over one lease's expiry, which the reconciler requeues.
type endedLeases struct {
	mu        sync.Mutex
	seed      maphash.Seed
	cur, prev map[uint64]struct{}
	since     time.Time
	keep      time.Duration
	max       int
}

func newEndedLeases(keep time.Duration, max int) *endedLeases {
	return &endedLeases{seed: maphash.MakeSeed(), cur: map[uint64]struct{}{}, prev: map[uint64]struct{}{}, since: time.Now(), keep: keep, max: max}
}

// add remembers key.
func (e *endedLeases) add(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.cur) >= e.max || time.Since(e.since) > e.keep {
		e.prev, e.cur, e.since = e.cur, make(map[uint64]struct{}, len(e.cur)), time.Now()
	}
	e.cur[maphash.String(e.seed, key)] = struct{}{}
}

// take reports whether key was remembered, and forgets it.
func (e *endedLeases) take(key string) bool {
	h := maphash.String(e.seed, key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.cur[h]; ok {
		delete(e.cur, h)
		return true
	}
	if _, ok := e.prev[h]; ok {
		delete(e.prev, h)
		return true
	}
	return false
}
