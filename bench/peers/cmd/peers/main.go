// Command peers runs a 20-step durable run side by side on noeta-go,
// Temporal and DBOS on this machine, and reports runs/s, latency per run,
// CPU per run and memory for each (see ../../README.md).
//
//	peers [-rounds 3] [-seconds 10] [-conc 1,64] [-systems noeta,dbos,temporal]
//	peers one -system S -conc N ...   (one measurement, run by the above)
//	peers fsync [-dir D] [-n 1000]    (the disk's write+fsync latency)
//	peers noeta-phases [-n 50] [-tap] [-records]   (where a noeta run's time goes)
//	peers merge [-max-other C] a.json b.json  (medians over several sittings)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "one":
			return runOne(ctx, args[1:], stdout, stderr)
		case "fsync":
			return runFsync(ctx, args[1:], stdout, stderr)
		case "merge":
			return runMerge(ctx, args[1:], stdout, stderr)
		case "noeta-phases":
			return runPhases(ctx, args[1:], stdout, stderr)
		}
	}
	return runAll(ctx, args, stdout, stderr)
}
