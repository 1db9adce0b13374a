package mcp

import (
	"runtime"
	"syscall"
)

// serverProcAttr is how a stdio server starts: leading a process group of its
// own (so that stopping it stops what it spawned, npx's node for one), and
// with SIGKILL as its parent-death signal, so that it does not outlive an
// engine that is killed without a chance to stop it.
//
// The kernel sends the parent-death signal when the thread that forked the
// child exits: the goroutine that starts the server holds its OS thread
// until the server has exited (see startProcess).
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func lockThread() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
