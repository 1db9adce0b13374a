// Command observer-worker runs observers — audit, metrics, traces, live
// fan-out, the child-lifecycle handoff, user hooks — out of the engine's
// process, from JetStream durable consumers over a range of the 64
// partitions. Any number of workers can share an observer's partitions;
// each record is handled once per observer, in each task's order.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if pct, ok := gcPercent(os.LookupEnv); ok {
		debug.SetGCPercent(pct)
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// defaultGCPercent is the worker's GOGC unless the environment sets one.
// Its live heap is a few megabytes (records pass through, nothing is kept),
// so Go's default of 100 collected many times a second at 5,000 records/s:
// the collector's marking was about a sixth of the worker's CPU and it ran
// beside the records' delivery on two cores. At 400 it is a twentieth, for
// a heap a few megabytes larger (BenchmarkCommitToObserver,
// docs/benchmarks.md "Observers").
const defaultGCPercent = 400

// gcPercent is the GC percent to set: defaultGCPercent, unless GOGC is
// set, which the runtime has already applied (ok false).
func gcPercent(lookupEnv func(string) (string, bool)) (pct int, ok bool) {
	if v, set := lookupEnv("GOGC"); set && v != "" {
		return 0, false
	}
	return defaultGCPercent, true
}
