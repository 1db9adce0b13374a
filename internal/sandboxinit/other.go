//go:build !linux

package sandboxinit

import "os"

// Run: off Linux there is nothing to set up; the call fails closed.
func Run() { os.Exit(125) }
