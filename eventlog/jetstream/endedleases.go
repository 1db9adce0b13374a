package jetstream

import (
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
type endedLeases struct {
	mu        sync.Mutex
	cur, prev map[string]struct{}
	since     time.Time
	keep      time.Duration
	max       int
}

func newEndedLeases(keep time.Duration, max int) *endedLeases {
	return &endedLeases{cur: map[string]struct{}{}, prev: map[string]struct{}{}, since: time.Now(), keep: keep, max: max}
}

// add remembers key.
func (e *endedLeases) add(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.cur) >= e.max || time.Since(e.since) > e.keep {
		e.prev, e.cur, e.since = e.cur, make(map[string]struct{}, len(e.cur)), time.Now()
	}
	e.cur[key] = struct{}{}
}

// take reports whether key was remembered, and forgets it.
func (e *endedLeases) take(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.cur[key]; ok {
		delete(e.cur, key)
		return true
	}
	if _, ok := e.prev[key]; ok {
		delete(e.prev, key)
		return true
	}
	return false
}
