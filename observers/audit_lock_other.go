//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package observers

import "os"

// auditLockFile is a no-op where flock is not available: one writer per
// file is then the operator's to ensure.
func auditLockFile(*os.File) error { return nil }

func auditUnlockFile(*os.File) error { return nil }
