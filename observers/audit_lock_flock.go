//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package observers

import (
	"os"
	"syscall"
)

// auditLockFile waits for an exclusive flock on f: the writers of one audit
// file, in this process or others, take turns.
func auditLockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

// auditUnlockFile releases it.
func auditUnlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
