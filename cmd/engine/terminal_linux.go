package main

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal: it answers the ioctl that
// reads terminal attributes (/dev/null, a character device too, does not).
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
