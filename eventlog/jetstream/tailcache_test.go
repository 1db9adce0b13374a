package jetstream_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestTailCacheEvictionKeepsAppendsExact: 16 writers append through one Log
// to 24 tasks while its tail cache holds 3, so states are evicted (and
// collected) all the time. Every append must land once, each log must stay
// dense, and the Log must have waited for exactly one publish per record:
// two live states of one task would let two of its writers race their
// compare-and-sets, and the loser's retry would be an extra wait.
func TestTailCacheEvictionKeepsAppendsExact(t *testing.T) {
	const tasks, writers, perWriter = 24, 16, 40
	ctx := t.Context()
	l := openLog(t, singleURL, 1, jetstream.Config{TailCache: 3})
	ids := make([]string, tasks)
	leases := make([]eventlog.Lease, tasks)
	for i := range ids {
		ids[i] = create(t, l)
		leases[i] = eventlog.Lease{ID: noeta.NewID(), Task: ids[i], Generation: 1, Worker: "w"}
	}
	before := l.DurableWaits()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := (w*5 + i*7) % tasks
				turn := w*perWriter + i + 1 // unique over the run
				env, err := eventlog.NewEnvelope(ids[k], eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: turn})
				if err == nil {
					_, err = l.Emit(ctx, leases[k], env, eventlog.EmitOptions{})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("turn %d on task %d: %w", turn, k, err))
					mu.Unlock()
					return
				}
				if w == 0 && i%8 == 0 {
					runtime.GC()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d appends failed, first: %v", len(errs), errs[0])
	}
	seen := map[int]int{}
	records := 0
	for k, task := range ids {
		envs, err := l.Read(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range envs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("task %d: record %d has seq %d: the log is not dense", k, i, e.Seq)
			}
			if e.Type == noeta.TypeTurnStarted {
				p, _, err := e.Decode()
				if err != nil {
					t.Fatal(err)
				}
				seen[p.(*noeta.TurnStarted).Turn]++
			}
		}
		records += len(envs) - 1 // all but TaskCreated, written before
	}
	for turn := 1; turn <= writers*perWriter; turn++ {
		if seen[turn] != 1 {
			t.Errorf("turn %d landed %d times, want once", turn, seen[turn])
		}
	}
	// One LeaseGranted per task and one record per append, one wait each.
	if got, want := l.DurableWaits()-before, uint64(records); got != want {
		t.Errorf("%d durable waits for %d records: appends of one task raced each other", got, want)
	}
}
