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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
