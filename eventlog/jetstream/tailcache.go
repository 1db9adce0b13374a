package jetstream

import (
	"container/list"
	"sync"
	"weak"
)

// DefaultTailCache is how many tasks' tails a Log keeps when
// Config.TailCache is zero: four times the most tasks one process runs at
// once (host.MaxWorkers), so a segment's appends find their tail; a task
// that comes back after 4,096 others re-reads its tail in one get, which is
// also what a task leased by another process costs. It was 16,384 (ADR
// 0041); a million-task run showed the extra 12,288 entries (about 4 MiB)
// as most of what the engine's memory grew by between 10,000 tasks and a
// million, for a saving of one read per resume.
const DefaultTailCache = 4096

// tailCache holds the taskState of the tasks a Log appended to most
// recently, at most max of them. A task that falls out re-reads its tail
// from the stream on its next append, which the cache already allows: a
// tail may be stale, and a stale one fails its compare-and-set.
//
// What it must never do is hand out a second taskState for a task while a
// writer still holds (or is about to lock) the first: two writers of one
// task in one Log would no longer be serialised. The callers take a
// taskState and lock it afterwards, without telling the cache when they are
// done, so the cache cannot know from its own books whether an entry is in
// use. It asks the garbage collector instead: an evicted taskState is kept
// by a weak pointer, and the same object is handed out again for as long
// as anything can still reach it; a new one is made only once the old one
// is unreachable, when nobody can hold or lock it (ADR 0041).
//
// The zero value is ready to use: the first get sizes it.
type tailCache struct {
	mu     sync.Mutex
	max    int
	byTask map[string]*list.Element // of *cachedTail
	order  list.List                // front: most recently used
	// evicted are the states that left the cache and may still be held by
	// a writer; an entry whose pointer went nil is swept away.
	evicted map[string]weak.Pointer[taskState]
	sweepAt int
}

type cachedTail struct {
	task string
	ts   *taskState
}

// get returns the one taskState of task, making it room (and making one)
// if it is not cached. max sizes a cache's first use.
func (c *tailCache) get(task string, max int) *taskState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTask == nil {
		c.max = max
		c.byTask = map[string]*list.Element{}
		c.evicted = map[string]weak.Pointer[taskState]{}
		c.sweepAt = max
	}
	if e := c.byTask[task]; e != nil {
		c.order.MoveToFront(e)
		return e.Value.(*cachedTail).ts
	}
	var ts *taskState
	if w, ok := c.evicted[task]; ok {
		// Still reachable: a writer may hold it, so it stays the one.
		ts = w.Value()
		delete(c.evicted, task)
	}
	if ts == nil {
		ts = &taskState{}
	}
	c.byTask[task] = c.order.PushFront(&cachedTail{task: task, ts: ts})
	for c.order.Len() > c.max {
		c.evict()
	}
	return ts
}

// evict moves the least recently used state to the weak side.
func (c *tailCache) evict() {
	e := c.order.Back()
	ct := c.order.Remove(e).(*cachedTail)
	delete(c.byTask, ct.task)
	c.evicted[ct.task] = weak.Make(ct.ts)
	if len(c.evicted) < c.sweepAt {
		return
	}
	for task, w := range c.evicted {
		if w.Value() == nil {
			delete(c.evicted, task)
		}
	}
	// What is still reachable waits for a later collection; sweeping again
	// only once the weak side has doubled keeps the sweeps' cost constant
	// per eviction.
	c.sweepAt = max(c.max, 2*len(c.evicted))
}

// stats returns how many states are cached and how many evicted ones are
// still tracked, swept or not.
func (c *tailCache) stats() (cached, evicted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), len(c.evicted)
}
