//go:build !linux

package nats_test

import "os/exec"

// dieWithTest: only Linux has a parent-death signal; elsewhere a cut-short
// run may leave its processes behind.
func dieWithTest(*exec.Cmd) {}
