package tools

import (
	"runtime"
	"syscall"
)

// toolProcAttr is how a tool's subprocess starts: leading a process group of
// its own (so that a timeout or a cancel kills its children with it), and
// with SIGKILL as its parent-death signal, so that it does not outlive an
// engine that is killed (SIGKILL, OOM) without a chance to end it.
//
// The kernel sends the parent-death signal when the thread that forked the
// child exits, not the process: the caller must hold its OS thread from the
// start to the wait (lockThread), or the Go runtime may end that thread under
// a running child. The signal reaches only the direct child, and is not
// inherited by its own children: a grandchild still in the group lives on
// after an engine SIGKILL (a timeout or a cancel still kills the whole
// group), and one that leaves the group with setsid escapes both.
func toolProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// lockThread wires the calling goroutine to its OS thread until the returned
// function is called; see toolProcAttr.
func lockThread() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
