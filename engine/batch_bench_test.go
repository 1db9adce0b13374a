package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/policy"
)

// unbatched hides a log's EmitBatch: the engine then writes every record
// with its own append and waits for each, as it did before batches.
type unbatched struct {
	engine.Log
	eventlog.Subscriber
	eventlog.TaskIndex
}

// BenchmarkDurableWaits runs the 20-call scripted task (20 turns of one echo
// call, then a finish) with one worker on the embedded single node (sync
// always), one task after another, and reports tasks/s and the writes to the
// task stream the engine waited for per tool call (waits/call), for:
// "before": every record its own append; "sequential": EmitBatch writing
// one record after another; "packed": EmitBatch as the log chooses by
// default, one message holding the batch (ADR 0040); "atomic": EmitBatch as
// one JetStream atomic batch. The modes run in the same process on the same
// server (ADR 0038, docs/benchmarks.md). BenchmarkDurableWaitsR3 does the
// same on a 3-node cluster it starts, with R3 streams.
func BenchmarkDurableWaits(b *testing.B) {
	benchDurableWaits(b, natsURL, 1)
}

func BenchmarkDurableWaitsR3(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Shutdown()
	benchDurableWaits(b, cl.ClientURL(), 3)
}

func benchDurableWaits(b *testing.B, url string, replicas int) {
	var steps string
	for i := range 20 {
		steps += fmt.Sprintf("  - tool_calls: [{tool: echo, args: {i: %d}}]\n", i)
	}
	tf, err := policy.ParseTaskFile("bench.yaml", []byte("agent: bench\ngoal: twenty calls\nscript:\n"+steps+"  - finish: {answer: done}\n"))
	if err != nil {
		b.Fatal(err)
	}
	script, _ := json.Marshal(tf.Script)
	for _, mode := range []struct {
		name   string
		mode   jetstream.BatchMode
		hidden bool
	}{
		{"before", jetstream.BatchSequential, true},
		{"sequential", jetstream.BatchSequential, false},
		{"packed", jetstream.BatchAuto, false},
		{"atomic", jetstream.BatchAtomic, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			be := jsBackendAt(b, 30*time.Second, url, replicas, mode.mode)
			js := be.log.(*jetstream.Log)
			if mode.hidden {
				be.log = unbatched{Log: be.log, Subscriber: be.log, TaskIndex: be.log}
			}
			h := newHarness(b, be, benchConfig)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan string, 1)
			pool := h.eng.NewPool("bench", 1)
			for _, w := range pool.Workers {
				w.OnSegment = func(out engine.Outcome, err error) {
					if err == nil && out.Status == noeta.StatusTerminal {
						done <- out.Task
					}
				}
			}
			go pool.Run(ctx)
			waits0 := js.DurableWaits()
			b.ResetTimer()
			for range b.N {
				if _, err := h.eng.Submit(ctx, engine.Submission{Agent: "bench", Goal: "g", Script: script}); err != nil {
					b.Fatal(err)
				}
				<-done
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(float64(js.DurableWaits()-waits0)/float64(20*b.N), "waits/call")
		})
	}
}
