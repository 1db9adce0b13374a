package jetstream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestLeaseWatcherIgnoresReleases: the leases watcher reads a row only for a
// lease that ended without its row moving on (the server's expiry marker,
// a purged key), not for every lease released normally. Before, each
// release's key delete cost every watcher a row read; at a million releases
// the watcher fell behind and its subscription's queue held 212 MiB of the
// engine's heap (docs/scale.md). An expired lease is still requeued at once.
func TestLeaseWatcherIgnoresReleases(t *testing.T) {
	// No pass but the one at open: with a 1s TTL the passes run every
	// second, and one would requeue the expired lease before the watcher.
	d := openReconciling(t, connect(t, singleURL), 1, uniquePrefix(t, singleURL), time.Hour)
	ctx := t.Context()
	for i := range 20 {
		task := noeta.NewTaskID()
		mustEnqueue(t, d, task, eventlog.EnqueueOptions{})
		l := mustLease(t, d, eventlog.LeaseRequest{Worker: fmt.Sprint("w", i), Task: task})
		if err := d.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"}); err != nil {
			t.Fatal(err)
		}
	}
	// One lease left to expire: its marker is what the watcher acts on.
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{})
	mustLease(t, d, eventlog.LeaseRequest{Worker: "gone", Task: task})
	waitFor(t, 10*dispatcherTestTTL, "the expired lease requeued by the watcher", func() error {
		st, err := d.Inspect(ctx, task)
		if err != nil {
			return err
		}
		if st.Status != eventlog.DispatchReady {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	// The releases' deletes reach the watcher before the later expiry
	// marker; give a late one a moment anyway.
	time.Sleep(100 * time.Millisecond)
	if got := d.Stats().WatchedEnds; got != 1 {
		t.Errorf("the watcher acted on %d lease ends, want 1 (the expiry, not the 20 releases)", got)
	}
}
