//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

// isTerminal cannot tell here; --approvals defaults to leave, and ask must
// be asked for.
func isTerminal(uintptr) bool { return false }
