// Command engine runs agent tasks under governance on NATS JetStream: on an
// embedded server by default, so that nothing needs to be installed or
// configured but a governance config (noeta.yaml) and a task file, or on a
// NATS server or cluster (--nats) shared by any number of hosts.
//
//	engine serve [--config noeta.yaml] [--workers N] [--grace 30s] [--http ADDR]
//	engine run TASKFILE [--config noeta.yaml] [--approvals ask|approve|deny|leave] [--json] [--timeout D]
//	engine submit TASKFILE [--config noeta.yaml]
//	engine approve TASK HANDLE [--deny] [--reason R] [--as NAME] [--timeout D]
//	engine events TASK [--follow] [--json]
//	engine inspect TASK [--json]
//	engine tasks
//	engine demo
//	engine bench [--tasks N] [--calls M] [--mix deny=F,approve=F,spawn=F,wait=F] [--json] [--idle N1,N2,…]
//
// serve runs a worker pool until SIGTERM, then stops gracefully: the
// segments in hand finish within --grace. run submits the task file's task,
// runs it with a pool of workers, prints its timeline (or, with --json, one
// CloudEvents JSON object per record) as it happens, and exits 0 when the
// task completed, 1 when it failed or was cancelled, 2 for bad usage or a bad
// config or task file, and 3 when the task waits for an approval nobody gave.
// submit only submits; approve answers an approval request that is open
// now, and nothing else (and, on the embedded server, runs the task tree to
// its next rest). demo runs every
// example task of examples/ and sums up what each one showed.
//
// Every verb takes the connection flags: --nats, --creds or --user and
// --password, --tls-ca, --tls-cert, --tls-key, --prefix, --replicas,
// --lease-ttl (and their NOETA_* variables).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/noeta-go/noeta/tools/sandbox"
)

func main() {
	// First: a re-executed binary may be the sandbox's helper, not the engine.
	sandbox.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
