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
// The engines of one process share one (Config.Fresh): a task is created
// by one (a host's Submit) and run by another (its pool's). Bounded in
// entries and in the bytes of each: a task created here and leased by
// another process is never taken, and falls out, the oldest first. The
// zero value is ready to use; it is safe for concurrent use.
type FreshTasks struct {
	mu    sync.Mutex
	envs  map[string]eventlog.Envelope
	order []string // oldest first; may name tasks taken since
}

// Bounds of FreshTasks: a genesis past freshMaxPayload (a long goal kept
// inline) is read back as before.
const (
	freshMax        = 1024
	freshMaxPayload = 8 << 10
)

// put keeps env, the genesis of a task as the log stored it.
func (f *FreshTasks) put(env eventlog.Envelope) {
	if len(env.Payload) > freshMaxPayload || env.Seq != 1 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.envs == nil {
		f.envs = map[string]eventlog.Envelope{}
	}
	if _, ok := f.envs[env.Task]; !ok {
		f.order = append(f.order, env.Task)
	}
	f.envs[env.Task] = env
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

// take returns the genesis of task and forgets it, if the lease is the
// task's first: a later lease reads the log.
func (f *FreshTasks) take(lease eventlog.Lease) (eventlog.Envelope, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ok := f.envs[lease.Task]
	if ok {
		delete(f.envs, lease.Task)
	}
	return env, ok && lease.Generation == 1
}
