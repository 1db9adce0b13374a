//go:build !linux

package mcp

import "syscall"

// serverProcAttr is how a stdio server starts: leading a process group of its
// own. Only Linux has a parent-death signal: elsewhere a server outlives an
// engine that is killed without a chance to stop it.
func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func lockThread() (unlock func()) { return func() {} }
