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

// The new root is built on a tmpfs mounted where the tool would not look
// anyway (/tmp of this mount namespace); it becomes / at the end.
const rootDir = "/tmp"

// opener collects the binds a root needs: it opens each path (O_PATH,
// before the new root hides the old one), follows a link to show what it
// points at too, and remembers the links to make.
type opener struct {
	binds []bind
	links [][2]string // path, target
}

func (o *opener) add(path string, attr uint64, required bool) error {
	dir, rel := hostPath(path)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !required && errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dir, rel, buf)
		if err != nil {
			return &os.PathError{Op: "readlink", Path: path, Err: err}
		}
		target := string(buf[:n])
		o.links = append(o.links, [2]string{path, target})
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		// What a link points at is shown too (Debian's /bin is
		// usr/bin, /etc/localtime a zoneinfo file).
		return addTarget(target, attr, &o.binds)
	}
	fd, err := unix.Openat(dir, rel, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	o.binds = append(o.binds, bind{path: path, attr: attr, fd: fd})
	return nil
}

// hostTmp is an O_PATH descriptor of the host's /tmp, opened before the
// new root's tmpfs covers it (skeleton): a path of the call's under /tmp
// (a workspace, the egress socket) is opened through it.
var hostTmp = -1

// hostPath is where to open a host path from: under /tmp, relative to the
// host's /tmp once the new root covers it.
func hostPath(path string) (dir int, rel string) {
	if hostTmp >= 0 && (path == rootDir || strings.HasPrefix(path, rootDir+"/")) {
		rel = strings.TrimPrefix(path[len(rootDir):], "/")
		if rel == "" {
			rel = "."
		}
		return hostTmp, rel
	}
	return unix.AT_FDCWD, path
}

// skeleton starts the sandbox's file system with what every sandbox
// shows, whatever its policy: an empty root on a tmpfs with the system's
// program and library directories, the few files of /etc a tool needs and
// the device files, each bound from the host at its own path, read-only
// but the devices, all without set-uid. It needs nothing of the call, so a
// helper started ahead of one builds it while it waits. It returns the
// binds made.
func skeleton() ([]bind, error) {
	var o opener
	for _, p := range systemDirs {
		if err := o.add(p, attrRO, false); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, p := range systemEtc {
		if err := o.add(p, attrRO, false); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	for _, p := range devices {
		if err := o.add(p, attrDev, false); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	var err error
	if hostTmp, err = unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("open %s: %w", rootDir, err)
	}
	if err := unix.Mount("tmpfs", rootDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return nil, fmt.Errorf("mount the new root: %w", err)
	}
	binds, err := mountBinds(nil, o.binds)
	if err != nil {
		return nil, err
	}
	if err := makeLinks(o.links); err != nil {
		return nil, err
	}
	for _, l := range [][2]string{{"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}} {
		_ = os.MkdirAll(filepath.Join(rootDir, "/dev"), 0o755)
		_ = os.Symlink(l[1], filepath.Join(rootDir, l[0]))
	}
	return binds, nil
}

// newRoot finishes the sandbox's file system on the skeleton (whose binds
// are sys): the paths the policy lets the tool use appear, each bound
// from the host at its own path (read-only but the workspace and the
// policy's write paths), the hidden paths are covered, a read-only /proc
// of this PID namespace is mounted, and the root is made read-only and
// becomes /. Landlock still governs what the tool may do with what it
// sees; what is not there it cannot reach at all, whatever Landlock leaves
// to the kernel (a Unix socket of the host's, a file's mode and owner,
// which Landlock does not govern). It returns an O_PATH descriptor of the
// directory of the egress socket, for the relay, which has no path in the
// new root.
func newRoot(w Wire, sys []bind) (proxyDir int, err error) {
	proxyDir = -1
	var o opener
	for _, p := range w.Read {
		if err := o.add(p, attrRO, false); err != nil {
			return -1, fmt.Errorf("read %s: %w", p, err)
		}
	}
	if w.Cwd != "" {
		if err := o.add(w.Cwd, attrRO, true); err != nil {
			return -1, fmt.Errorf("the working directory %s: %w", w.Cwd, err)
		}
	}
	for _, p := range w.Write {
		if err := o.add(p, attrRW, false); err != nil {
			return -1, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := o.add(w.Dir, attrRW, true); err != nil {
		return -1, fmt.Errorf("the workspace %s: %w", w.Dir, err)
	}
	// The hidden paths must be there, each on a path that cannot be moved:
	// a secret moved by an earlier call from under its cover would be
	// shown by the next.
	for _, p := range w.Hide {
		var st unix.Stat_t
		if dir, rel := hostPath(p); unix.Fstatat(dir, rel, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return -1, fmt.Errorf("a path to hide, %s: missing (moved by an earlier call?)", p)
		}
	}
	if w.Proxy != "" {
		dir, rel := hostPath(filepath.Dir(w.Proxy))
		if proxyDir, err = unix.Openat(dir, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return -1, fmt.Errorf("the egress socket: %w", err)
		}
	}
	binds, err := mountBinds(sys, o.binds)
	if err != nil {
		return -1, err
	}
	// Nothing more is opened from the host.
	if hostTmp >= 0 {
		_ = unix.Close(hostTmp)
		hostTmp = -1
	}
	if err := makeLinks(o.links); err != nil {
		return -1, err
	}
	for _, p := range w.Hide {
		if err := hide(rootDir, p, binds); err != nil {
			return -1, fmt.Errorf("hide %s: %w", p, err)
		}
	}
	// A /proc of this PID namespace, read-only: through it root (the
	// engine's uid, for an engine run as root) could otherwise write the
	// host's sysctls and sysrq.
	proc := filepath.Join(rootDir, "/proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return -1, err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.MountSetattr(-1, proc, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return -1, fmt.Errorf("make /proc read-only: %w", err)
	}
	if err := unix.MountSetattr(-1, rootDir, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return -1, fmt.Errorf("make the new root read-only: %w", err)
	}
	if err := unix.Chdir(rootDir); err != nil {
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

// mountBinds mounts the binds of add in the new root, on top of those of
// made, and returns all that were mounted: the broadest first, so that a
// narrower one (a write path inside a read path) lands on top, and none
// that would show nothing new (dedupe). It closes every descriptor of add.
func mountBinds(made, add []bind) ([]bind, error) {
	defer func() {
		for _, b := range add {
			if b.fd >= 0 {
				_ = unix.Close(b.fd)
			}
		}
	}()
	slices.SortStableFunc(add, func(a, b bind) int { return strings.Count(a.path, "/") - strings.Count(b.path, "/") })
	all := slices.Clip(made)
	for i := range add {
		b := &add[i]
		if under := deepest(all, b.path); under != nil && under.attr == b.attr {
			continue
		}
		target := filepath.Join(rootDir, b.path)
		if err := mkTarget(b.fd, target); err != nil {
			return nil, fmt.Errorf("%s: %w", b.path, err)
		}
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(b.fd), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return nil, fmt.Errorf("bind %s: %w", b.path, err)
		}
		if err := unix.MountSetattr(-1, target, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: b.attr}); err != nil {
			return nil, fmt.Errorf("restrict %s: %w", b.path, err)
		}
		_ = unix.Close(b.fd)
		b.fd = -1
		all = append(all, *b)
	}
	return all, nil
}

// deepest is the bind of binds that shows path and is deepest: what the
// tool sees at path.
func deepest(binds []bind, path string) *bind {
	var under *bind
	for i := range binds {
		k := &binds[i]
		if (path == k.path || strings.HasPrefix(path, k.path+"/")) && (under == nil || len(k.path) >= len(under.path)) {
			under = k
		}
	}
	return under
}

// makeLinks makes the symbolic links among the shown paths, where nothing
// is shown yet.
func makeLinks(links [][2]string) error {
	for _, l := range links {
		target := filepath.Join(rootDir, l[0])
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l[1], target); err != nil {
			return fmt.Errorf("link %s: %w", l[0], err)
		}
	}
	return nil
}

// addTarget adds what a system link points at, when it is a real path.
func addTarget(target string, attr uint64, binds *[]bind) error {
	dir, rel := hostPath(target)
	fd, err := unix.Openat(dir, rel, unix.O_PATH|unix.O_CLOEXEC, 0)
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
