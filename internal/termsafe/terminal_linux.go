package termsafe

import "golang.org/x/sys/unix"

// IsTerminal reports whether fd is a terminal: it answers the ioctl that
// reads terminal attributes (/dev/null, a character device too, does not).
func IsTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
