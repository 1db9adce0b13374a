package hostconfig

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// The fleet of the waiting benchmark: fleetTasks tasks of which
// fleetWaiting wait for a person.
const (
	fleetTasks   = 100_000
	fleetWaiting = 1_000
)

// BenchmarkWaitingFleet times Host.Waiting, the read behind engine
// approvals, and the one-task listing the engine reconciles with, over a store of fleetTasks tasks (submitted: a log and a
// dispatcher row each) of which fleetWaiting have an index entry. Building
// the store takes minutes; NOETA_BENCH_FLEET names a data directory to
// build it in once and keep, for later runs and for timing the CLI on it:
//
//	NOETA_BENCH_FLEET=/tmp/fleet go test -run '^$' -bench WaitingFleet -benchtime 20x ./host/
//	time engine approvals --data /tmp/fleet --json > /dev/null
func BenchmarkWaitingFleet(b *testing.B) {
	data := os.Getenv("NOETA_BENCH_FLEET")
	if data == "" {
		data = b.TempDir()
	}
	ctx := context.Background()
	cfg, err := config.Load(ctx, "../examples/noeta.yaml")
	if err != nil {
		b.Fatal(err)
	}
	h, err := Open(ctx, Options{DataDir: data, Config: cfg, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if err := buildFleet(ctx, b, h); err != nil {
		b.Fatal(err)
	}
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ws, err := h.Waiting(ctx)
			if err != nil || len(ws) != fleetWaiting {
				b.Fatalf("Waiting: %d entries, %v; want %d", len(ws), err, fleetWaiting)
			}
		}
	})
	// What the engine's reconcile reads on every segment: one task's
	// entries.
	ws, err := h.Waiting(ctx)
	if err != nil {
		b.Fatal(err)
	}
	task := ws[len(ws)/2].Task
	b.Run("one-task", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			got, err := h.WaitingIndex().ListTaskWaiting(ctx, task)
			if err != nil || len(got) != 1 {
				b.Fatalf("ListTaskWaiting: %d entries, %v; want 1", len(got), err)
			}
		}
	})
}

// buildFleet submits tasks until the store holds fleetTasks and puts the
// index entries of every (fleetTasks/fleetWaiting)th one.
func buildFleet(ctx context.Context, b *testing.B, h *Host) error {
	have, err := h.Tasks(ctx)
	if err != nil {
		return err
	}
	if n := len(have); n < fleetTasks {
		b.Logf("submitting %d tasks", fleetTasks-n)
		start := time.Now()
		var (
			next atomic.Int64
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		next.Store(int64(n))
		for range 16 {
			wg.Go(func() {
				for next.Add(1) <= fleetTasks {
					_, err := h.Submit(ctx, host.Submission{Agent: "researcher", Goal: "g", Script: []byte(`[{"finish":{"answer":"x"}}]`), Queue: "bench-idle"})
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return errs[0]
		}
		b.Logf("submitted in %v", time.Since(start).Round(time.Second))
		if have, err = h.Tasks(ctx); err != nil {
			return err
		}
	}
	ws, err := h.Waiting(ctx)
	if err != nil {
		return err
	}
	if len(ws) == fleetWaiting {
		return nil
	}
	at := time.Now().Add(-time.Hour)
	for i := 0; i < fleetWaiting; i++ {
		task := have[i*(len(have)/fleetWaiting)].Task
		w := eventlog.Waiting{Task: task, Handle: fmt.Sprintf("approval-call_%d-abcdefghjk", i), Kind: eventlog.WaitingApproval,
			Seq: 4, Agent: "researcher", Goal: "g", Action: "tool_call", Tool: "shell",
			Args: []byte(`{"command":"rm -rf /var/tmp/build-cache"}`), Guard: "approve-shell", Reason: "shell needs a person",
			MayAnswer: "members of sre", RequestedAt: at.Add(time.Duration(i) * time.Second)}
		if err := h.WaitingIndex().PutWaiting(ctx, w); err != nil {
			return err
		}
	}
	return nil
}
