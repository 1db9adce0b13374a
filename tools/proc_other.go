//go:build !linux

package tools

import "syscall"

// toolProcAttr is how a tool's subprocess starts: leading a process group of
// its own, so that a timeout or a cancel kills its children with it. Only
// Linux has a parent-death signal: elsewhere a child outlives an engine that
// is killed without a chance to end it.
func toolProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// lockThread does nothing where there is no parent-death signal.
func lockThread() (unlock func()) { return func() {} }
