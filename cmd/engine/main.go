// Command engine runs agent tasks under governance on an embedded NATS
// JetStream server: nothing needs to be installed or configured but a
// governance config (noeta.yaml) and a task file.
//
//	engine run TASKFILE [--config noeta.yaml] [--approvals ask|approve|deny|leave] [--json]
//	engine demo
//
// run submits the task file's task, runs it with a pool of workers, prints its
// timeline (or, with --json, one CloudEvents JSON object per record) as it
// happens, and exits 0 when the task completed, 1 when it failed or was
// cancelled, 2 for bad usage or a bad config or task file, and 3 when the task
// waits for an approval nobody gave. demo runs every example task of
// examples/ and sums up what each one showed.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
