package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// noBodies is a content store that has lost every body: FoldTask then
// folds from genesis, as it does for a task without a snapshot.
type noBodies struct{}

func (noBodies) Get(context.Context, noeta.ContentRef) ([]byte, error) {
	return nil, eventlog.ErrNotFound
}

// BenchmarkFoldEndedTask is what a reader of an ended task pays (FoldTask:
// the latest snapshot, its body and the records after it) for tasks of a
// number of echo turns, from the snapshot the task ended with and from
// genesis: what a snapshot saves whoever folds the task later, to weigh
// against the write it costs the run.
func BenchmarkFoldEndedTask(b *testing.B) {
	for _, bk := range benchBackends() {
		for _, turns := range []int{5, 20, 50, 100, 200} {
			be := bk.mk(b)
			h := newHarness(b, be, benchConfig, func(c *engine.Config) {
				c.SnapshotEvery = 1 << 20 // the terminal snapshot only
				c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return loopPolicy{turns}, nil }
			})
			id := h.submit("agent: bench\ngoal: g\nscript: [{finish: {answer: x}}]\n")
			lease, err := be.disp.Lease(context.Background(), eventlog.LeaseRequest{Worker: "bench", Task: id, TTL: be.ttl})
			if err != nil {
				b.Fatal(err)
			}
			if out, err := h.eng.RunLease(context.Background(), lease); err != nil || out.Status != noeta.StatusTerminal {
				b.Fatalf("task ended %+v: %v", out, err)
			}
			for _, from := range []struct {
				name string
				cs   interface {
					Get(context.Context, noeta.ContentRef) ([]byte, error)
				}
			}{{"snapshot", be.content}, {"genesis", noBodies{}}} {
				b.Run(fmt.Sprintf("%s/turns=%d/%s", bk.name, turns, from.name), func(b *testing.B) {
					ctx := context.Background()
					for b.Loop() {
						s, note, err := engine.FoldTask(ctx, be.log, from.cs, id)
						if err != nil || s.Status != noeta.StatusTerminal || (note == "") != (from.name == "snapshot") {
							b.Fatalf("fold: %v %q", err, note)
						}
					}
				})
			}
		}
	}
}
