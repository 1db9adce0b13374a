package jetstream

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestTailCacheOneStatePerTask: writers take a task's state and lock it
// afterwards, as Create, Emit and EmitBatch do, while a cache of two states
// over eight tasks evicts on nearly every get and collections run. If the
// cache ever made a second state for a task whose first one a writer holds
// or is about to lock (as an eviction of "entries whose mutex is free"
// would: the window between get and Lock), two writers of one task would be
// inside its lock at once, and inside counts them.
func TestTailCacheOneStatePerTask(t *testing.T) {
	const tasks, writers, rounds = 8, 16, 3000
	var (
		c      tailCache
		inside [tasks]atomic.Int32
		broken atomic.Int32
		made   atomic.Int32
		wg     sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				k := (w*7 + i*13) % tasks
				ts := c.get(fmt.Sprint("task-", k), 2)
				runtime.Gosched() // let evictions happen between get and Lock
				ts.mu.Lock()
				if !ts.known {
					ts.known = true
					made.Add(1)
				}
				if inside[k].Add(1) != 1 {
					broken.Add(1)
				}
				runtime.Gosched()
				inside[k].Add(-1)
				ts.mu.Unlock()
				if w == 0 && i%100 == 0 {
					runtime.GC() // lets unreachable evicted states go
				}
			}
		})
	}
	wg.Wait()
	if n := broken.Load(); n > 0 {
		t.Fatalf("%d times two writers of one task held its lock at once: the cache made a second state while the first was in use", n)
	}
	if made.Load() <= tasks {
		t.Errorf("only %d states were ever made for %d tasks: the test did not see states evicted and made again", made.Load(), tasks)
	}
}

// TestTailCacheBounded: a Log that touched 20,000 tasks with a cache of
// 64 keeps 64 states and, once collected, few evicted ones (before the
// cache was bounded it kept all 20,000, about 240 B each).
func TestTailCacheBounded(t *testing.T) {
	const size, touched = 64, 20000
	var c tailCache
	for i := range touched {
		c.get(fmt.Sprint("task-", i), size)
		if i%1000 == 999 {
			runtime.GC()
		}
	}
	cached, evicted := c.stats()
	if cached != size {
		t.Errorf("%d states cached, want %d", cached, size)
	}
	// Collected every 1,000 gets, so what the weak side holds is at most
	// the evictions since the last sweep that found them collected.
	if evicted > 2*1000+size {
		t.Errorf("%d evicted states still tracked after %d tasks touched: the weak side is not swept", evicted, touched)
	}
	// A task touched again after eviction and collection starts unknown:
	// its next append re-reads the tail.
	runtime.GC()
	if ts := c.get("task-0", size); ts.known {
		t.Error("an evicted task's state came back known")
	}
}

// TestTailCacheConfig: a negative size is refused by name; zero is the default.
func TestTailCacheConfig(t *testing.T) {
	if _, err := (Config{TailCache: -1}).withDefaults(); err == nil || !strings.Contains(err.Error(), "Config.TailCache is -1") {
		t.Errorf("TailCache -1: error %v, want one naming Config.TailCache", err)
	}
	c, err := Config{}.withDefaults()
	if err != nil || c.TailCache != DefaultTailCache {
		t.Errorf("TailCache 0: %d, %v; want %d", c.TailCache, err, DefaultTailCache)
	}
}
