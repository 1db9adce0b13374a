//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package jshost

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("would block")

// flock is not implemented here: without a lock two processes could start
// two servers on one store, so the embedded default refuses to run.
func flock(*os.File) error {
	return errors.New("the embedded default locks its data directory with flock, which this system lacks; run against a NATS server with --nats")
}

func funlock(*os.File) error { return nil }
