package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The new root's mount attributes: what is bound read-only, what read-write
// (never set-uid, never a device), and the device files (their own nodes,
// so not nodev).
const (
	attrRO  = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrRW  = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrDev = unix.MOUNT_ATTR_NOSUID
)

// bind is one path of the host the new root shows, at the same place.
type bind struct {
	path string
	attr uint64
	fd   int // O_PATH, opened before the new root hides the old one
}

// newRoot makes the sandbox's file system: an empty root in which only the
// paths the tool may use appear, each bound from the host at its own path
// (read-only but the workspace and the policy's write paths, all without
// set-uid and devices), a read-only /proc of this PID namespace, the few
// device files, and nothing else. Landlock still governs what it may do
// with them; what is not there it cannot reach at all, whatever Landlock
// leaves to the kernel (a Unix socket of the host's, a file's mode and
// owner, which Landlock does not govern). It returns an O_PATH descriptor
// of the directory of the egress socket, for the relay, which has no path
// in the new root.
func newRoot(w Wire) (proxyDir int, err error) {
	proxyDir = -1
	var binds []bind
	var links [][2]string // path, target: the symbolic links among the system's paths
	add := func(path string, attr uint64, required bool) error {
		fi, err := os.Lstat(path)
		if err != nil {
			if !required && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			links = append(links, [2]string{path, target})
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			// What a link points at is shown too (Debian's /bin is
			// usr/bin, /etc/localtime a zoneinfo file).
			return addTarget(target, attr, &binds)
		}
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		binds = append(binds, bind{path: path, attr: attr, fd: fd})
		return nil
	}
	for _, p := range systemDirs {
		if err := add(p, attrRO, false); err != nil {
			return -1, fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, p := range systemEtc {
		if err := add(p, attrRO, false); err != nil {
			return -1, fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, p := range devices {
		if err := add(p, attrDev, false); err != nil {
			return -1, fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, p := range w.Read {
		if err := add(p, attrRO, false); err != nil {
			return -1, fmt.Errorf("read %s: %w", p, err)
		}
	}
	if w.Cwd != "" {
		if err := add(w.Cwd, attrRO, true); err != nil {
			return -1, fmt.Errorf("the working directory %s: %w", w.Cwd, err)
		}
	}
	for _, p := range w.Write {
		if err := add(p, attrRW, false); err != nil {
			return -1, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := add(w.Dir, attrRW, true); err != nil {
		return -1, fmt.Errorf("the workspace %s: %w", w.Dir, err)
	}
	// The hidden paths must be there, each on a path that cannot be moved:
	// a secret moved by an earlier call from under its cover would be
	// shown by the next.
	for _, p := range w.Hide {
		if _, err := os.Lstat(p); err != nil {
			return -1, fmt.Errorf("a path to hide, %s: %w (moved by an earlier call?)", p, err)
		}
	}
	if w.Proxy != "" {
		if proxyDir, err = unix.Open(filepath.Dir(w.Proxy), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return -1, fmt.Errorf("the egress socket: %w", err)
		}
	}

	// The new root is built on a tmpfs mounted where the tool would not
	// look anyway (/tmp of this mount namespace); the binds come from the
	// descriptors opened above, which still name the host's paths.
	const root = "/tmp"
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return -1, fmt.Errorf("mount the new root: %w", err)
	}
	// Binds of the broadest paths first, so that a narrower one (a write
	// path inside a read path) lands on top.
	slices.SortStableFunc(binds, func(a, b bind) int { return strings.Count(a.path, "/") - strings.Count(b.path, "/") })
	binds = dedupe(binds)
	for _, b := range binds {
		target := filepath.Join(root, b.path)
		if err := mkTarget(b.fd, target); err != nil {
			return -1, fmt.Errorf("%s: %w", b.path, err)
		}
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(b.fd), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return -1, fmt.Errorf("bind %s: %w", b.path, err)
		}
		if err := unix.MountSetattr(-1, target, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: b.attr}); err != nil {
			return -1, fmt.Errorf("restrict %s: %w", b.path, err)
		}
		_ = unix.Close(b.fd)
	}
	for _, l := range links {
		target := filepath.Join(root, l[0])
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return -1, err
		}
		if err := os.Symlink(l[1], target); err != nil {
			return -1, fmt.Errorf("link %s: %w", l[0], err)
		}
	}
	for _, l := range [][2]string{{"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}} {
		_ = os.MkdirAll(filepath.Join(root, "/dev"), 0o755)
		_ = os.Symlink(l[1], filepath.Join(root, l[0]))
	}
	for _, p := range w.Hide {
		if err := hide(root, p, binds); err != nil {
			return -1, fmt.Errorf("hide %s: %w", p, err)
		}
	}
	// A /proc of this PID namespace, read-only: through it root (the
	// engine's uid, for an engine run as root) could otherwise write the
	// host's sysctls and sysrq.
	proc := filepath.Join(root, "/proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return -1, err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.MountSetattr(-1, proc, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return -1, fmt.Errorf("make /proc read-only: %w", err)
	}
	if err := unix.MountSetattr(-1, root, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return -1, fmt.Errorf("make the new root read-only: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return -1, err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return -1, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return -1, fmt.Errorf("detach the old root: %w", err)
	}
	return proxyDir, unix.Chdir("/")
}

// addTarget adds what a system link points at, when it is a real path.
func addTarget(target string, attr uint64, binds *[]bind) error {
	fd, err := unix.Open(target, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // a dangling link shows nothing
	}
	*binds = append(*binds, bind{path: filepath.Clean(target), attr: attr, fd: fd})
	return nil
}

// mkTarget makes the mount point for the bind of fd: a directory for a
// directory, an empty file for anything else.
func mkTarget(fd int, target string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// hide covers path in the new root — a directory with an empty read-only
// tmpfs, a file with /dev/null bound read-only — and pins every directory
// between it and the bind that shows it (each bound onto itself, a mount
// point, which cannot be renamed), so that no call can move it from under
// its cover. A path no bind shows has nothing to hide.
func hide(root, path string, binds []bind) error {
	var under string
	for _, b := range binds {
		if path == b.path || strings.HasPrefix(path, b.path+"/") {
			if len(b.path) > len(under) {
				under = b.path
			}
		}
	}
	if under == "" {
		return nil
	}
	target := filepath.Join(root, path)
	fi, err := os.Stat(target)
	if err != nil {
		return err
	}
	for dir := filepath.Dir(path); len(dir) > len(under); dir = filepath.Dir(dir) {
		d := filepath.Join(root, dir)
		if err := unix.Mount(d, d, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pin %s: %w", dir, err)
		}
	}
	if fi.IsDir() {
		return unix.Mount("tmpfs", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
	}
	if err := unix.Mount("/dev/null", target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.MountSetattr(-1, target, 0, &unix.MountAttr{Attr_set: attrRO})
}

// dedupe drops the binds that would show nothing new: a path under a
// broader bind of the same kind, with no bind of another kind between
// (Debian's /bin is /usr/bin, already shown by /usr). Every mount costs the
// call's start and its end. binds is sorted broadest first.
func dedupe(binds []bind) []bind {
	kept := binds[:0]
	for _, b := range binds {
		var under *bind
		for i := range kept {
			k := &kept[i]
			if (b.path == k.path || strings.HasPrefix(b.path, k.path+"/")) && (under == nil || len(k.path) >= len(under.path)) {
				under = k
			}
		}
		if under != nil && under.attr == b.attr {
			_ = unix.Close(b.fd)
			continue
		}
		kept = append(kept, b)
	}
	return kept
}
