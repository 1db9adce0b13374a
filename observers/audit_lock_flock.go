//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package observers

import (
	"os"
	"syscall"
)

// auditLockFile takes an exclusive, non-blocking flock on f, held until f is
// closed.
func auditLockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
