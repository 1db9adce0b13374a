package engine

import (
	"sync"

	"github.com/noeta-go/noeta/eventlog"
)

// FreshTasks holds the genesis of tasks an engine created whose first
// lease no segment has taken yet (ADR 0113). At generation 1 the log holds
// the genesis and nothing else: only a lease's holder appends after it,
// and this lease is the first. So that segment folds the genesis in hand
// and reads only what follows it, one look at the tail, instead of the
// snapshot lookup and the whole log.
//
// The engines of one process may share one (Config.Fresh): a task is
// created by one (a host's Submit) and run by another (its pool's). Each
// genesis is kept with the log it was written to, and only a segment on
// that same log takes it: engines on other logs may name the same task.
// Bounded in entries and in the bytes of each: a task created here and
// leased by another process is never taken, and falls out, the oldest
// first. The zero value is ready to use; it is safe for concurrent use.
type FreshTasks struct {
	mu    sync.Mutex
	envs  map[string]freshGenesis
	order []string // oldest first; may name tasks taken since
}

// freshGenesis is a genesis and the log that stored it.
type freshGenesis struct {
	log Log
	env eventlog.Envelope
}

// Bounds of FreshTasks: a genesis past freshMaxPayload (a long goal kept
// inline) is read back as before.
const (
	freshMax        = 1024
	freshMaxPayload = 8 << 10
)

// put keeps env, the genesis of a task as log stored it.
func (f *FreshTasks) put(log Log, env eventlog.Envelope) {
	if len(env.Payload) > freshMaxPayload || env.Seq != 1 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.envs == nil {
		f.envs = map[string]freshGenesis{}
	}
	if _, ok := f.envs[env.Task]; !ok {
		f.order = append(f.order, env.Task)
	}
	f.envs[env.Task] = freshGenesis{log: log, env: env}
	// Every task kept is named in order, so this ends.
	for len(f.envs) > freshMax {
		delete(f.envs, f.order[0])
		f.order = f.order[1:]
	}
	if len(f.order) > 2*freshMax {
		// Mostly tasks taken since: keep the names of those still kept.
		live := make([]string, 0, len(f.envs))
		seen := make(map[string]bool, len(f.envs))
		for _, t := range f.order {
			if _, ok := f.envs[t]; ok && !seen[t] {
				seen[t] = true
				live = append(live, t)
			}
		}
		f.order = live
	}
}

// take returns the genesis of the lease's task and forgets it, if the
// lease is the task's first and the genesis was written to log: any other
// segment reads the log.
func (f *FreshTasks) take(log Log, lease eventlog.Lease) (eventlog.Envelope, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.envs[lease.Task]
	if !ok {
		return eventlog.Envelope{}, false
	}
	delete(f.envs, lease.Task)
	if lease.Generation != 1 || !sameLog(g.log, log) {
		return eventlog.Envelope{}, false
	}
	return g.env, true
}

// sameLog reports whether a and b are the same log; a log whose value
// cannot be compared (== panics on it) is never the same as any.
func sameLog(a, b Log) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a != nil && a == b
}
