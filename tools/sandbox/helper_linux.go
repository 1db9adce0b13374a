package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main hands over to the sandbox's helpers when the program was started as
// one, and never returns then. Otherwise it returns at once, and New may
// be used. Call it first thing in main (and in TestMain), before anything
// reads flags or starts goroutines of its own.
func Main() {
	switch os.Args[0] {
	case initName:
		runInit()
	case execName:
		runExec()
	}
	mainCalled.Store(true)
}

// The helpers' file descriptors: the spec (init only) and the status pipe.
const (
	specFD   = 3
	statusFD = 4
)

// specEnv carries the spec from the first process to the second, whose
// environment the tool's replaces at exec.
const specEnv = "NOETA_SANDBOX_SPEC"

// fail reports a set-up failure on the status pipe and exits: the program
// never runs.
func fail(format string, args ...any) {
	report(status{Error: fmt.Sprintf(format, args...)})
	os.Exit(125)
}

var statusMu sync.Mutex

func report(st status) {
	b, _ := json.Marshal(st)
	statusMu.Lock()
	defer statusMu.Unlock()
	_, _ = unix.Write(statusFD, append(b, '\n'))
}

// runInit is the sandbox's first process: PID 1 of its namespaces, with
// their capabilities. It sets the namespaces up, starts the second process
// and watches the tree until the tool's main process exits, then exits with
// its status, which ends everything else in the PID namespace.
func runInit() {
	spec := os.NewFile(specFD, "spec")
	body, err := io.ReadAll(io.LimitReader(spec, maxWire+1))
	_ = spec.Close()
	if err != nil || len(body) > maxWire {
		fail("read the spec: %v (%d bytes)", err, len(body))
	}
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		fail("decode the spec: %v", err)
	}
	if w.Version != wireVersion {
		fail("the helper binary speaks version %d of the spec, the engine %d: install the noeta-sandbox built with this engine", wireVersion, w.Version)
	}
	unix.CloseOnExec(statusFD)

	// Mounts made here stay here; then a /proc of this PID namespace, in
	// which the engine and every process outside are not.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make the mounts private: %v", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fail("mount /proc: %v", err)
	}
	for _, p := range w.Hide {
		if err := hide(p); err != nil {
			fail("hide %s: %v", p, err)
		}
	}
	_ = unix.Sethostname([]byte("sandbox"))
	if err := loopbackUp(); err != nil {
		fail("bring up the loopback: %v", err)
	}
	env := w.Env
	if w.Proxy != "" {
		addr, err := relay(w.Proxy)
		if err != nil {
			fail("start the egress relay: %v", err)
		}
		url := "http://" + addr
		env = append(env, "HTTP_PROXY="+url, "HTTPS_PROXY="+url, "http_proxy="+url, "https_proxy="+url,
			"ALL_PROXY="+url, "all_proxy="+url, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	}
	w.Env = env
	next, _ := json.Marshal(w)

	// Reap every child, the tool's orphans included: as PID 1 they are ours,
	// and a zombie would count against the process limit.
	exited := make(chan syscall.WaitStatus, 1)
	cwd := w.Dir
	if w.Cwd != "" {
		cwd = w.Cwd
	}
	toolPID, err := syscall.ForkExec("/proc/self/exe", []string{execName}, &syscall.ProcAttr{
		Dir:   cwd,
		Env:   []string{specEnv + "=" + string(next)},
		Files: []uintptr{0, 1, 2, ^uintptr(0), statusFD},
	})
	if err != nil {
		fail("start the confined process: %v", err)
	}
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			if pid == toolPID {
				exited <- ws
				return
			}
		}
	}()

	var wall <-chan time.Time
	if w.Limits.WallMS > 0 {
		wall = time.After(time.Duration(w.Limits.WallMS) * time.Millisecond)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case ws := <-exited:
			// A process ended by RLIMIT_CPU or RLIMIT_FSIZE gets SIGXCPU or
			// SIGXFSZ; a shell reports a child's as 128 plus the signal.
			sig := syscall.Signal(-1)
			if ws.Signaled() {
				sig = ws.Signal()
			} else if ws.Exited() && ws.ExitStatus() > 128 {
				sig = syscall.Signal(ws.ExitStatus() - 128)
			}
			switch sig {
			case syscall.SIGXCPU:
				report(status{Limit: "cpu"})
			case syscall.SIGXFSZ:
				report(status{Limit: "file_size"})
			}
			if ws.Signaled() {
				os.Exit(128 + int(ws.Signal()))
			}
			os.Exit(ws.ExitStatus())
		case <-wall:
			report(status{Limit: "wall"})
			os.Exit(137)
		case <-tick.C:
			n, rss := treeUsage(w.Limits.Processes)
			if n > w.Limits.Processes {
				report(status{Limit: "processes"})
				os.Exit(137)
			}
			if w.Limits.Memory > 0 && rss > w.Limits.Memory {
				report(status{Limit: "memory"})
				os.Exit(137)
			}
		}
	}
}

// hide covers path in this mount namespace: a directory with an empty
// read-only tmpfs, a file with /dev/null bound read-only. A path that does
// not exist has nothing to hide.
func hide(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if fi.IsDir() {
		return unix.Mount("tmpfs", path, "tmpfs", flags, "size=4k,mode=0555")
	}
	if err := unix.Mount("/dev/null", path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
}

// treeUsage counts the processes of this PID namespace but its init, and
// sums their resident memory. Over maxProcs it stops at the count: the tree
// is ended anyway, and a fork bomb's thousands of processes are not read.
func treeUsage(maxProcs int) (n int, rss int64) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 0
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	var pids []string
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != 1 {
			pids = append(pids, name)
		}
	}
	n = len(pids)
	if n > maxProcs {
		return n, 0
	}
	page := int64(os.Getpagesize())
	for _, name := range pids {
		b, err := os.ReadFile("/proc/" + name + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				rss += pages * page
			}
		}
	}
	return n, rss
}

// loopbackUp brings up lo, the network namespace's only interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// relay listens on the sandbox's loopback and carries every connection to
// the engine's egress proxy on its Unix socket: the one way out.
func relay(sock string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return ln.Addr().String(), nil
}

// runExec is the sandbox's second process: on the one thread that will
// exec the tool it sets the limits, drops every capability, sets
// no_new_privs, enforces Landlock and the seccomp filter, and executes the
// tool, which inherits all of them and can undo none.
func runExec() {
	runtime.LockOSThread() // the credentials below are this thread's
	var w wire
	if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &w); err != nil {
		fail("decode the spec: %v", err)
	}
	unix.CloseOnExec(statusFD)
	path := w.Argv[0]
	if !strings.Contains(path, "/") {
		p, err := lookPath(path, w.Env)
		if err != nil {
			fail("%v", err)
		}
		path = p
	}
	filter, err := seccompFilter()
	if err != nil {
		fail("build the seccomp filter: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		fail("drop the capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("set no_new_privs: %v", err)
	}
	if err := restrictFiles(w); err != nil {
		fail("enforce Landlock: %v", err)
	}
	if err := loadSeccomp(filter); err != nil {
		fail("load the seccomp filter: %v", err)
	}
	// Nothing but stdin, stdout and stderr reaches the tool.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fail("mark descriptors close-on-exec: %v", err)
	}
	// Last, as little Go as possible runs under them: a small address
	// space limit could fail the runtime's own next allocation.
	if err := setLimits(w); err != nil {
		fail("set the limits: %v", err)
	}
	err = syscall.Exec(path, w.Argv, w.Env)
	fail("exec %s: %v", path, err)
}

// lookPath finds name in the PATH of env, as a shell would.
func lookPath(name string, env []string) (string, error) {
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// toolNice is the scheduling priority of a tool's processes.
const toolNice = 10

// setLimits sets the per-process resource limits the tool inherits.
func setLimits(w wire) error {
	l := w.Limits
	set := func(res int, cur, max uint64) error {
		return unix.Setrlimit(res, &unix.Rlimit{Cur: cur, Max: max})
	}
	// SIGXCPU at the limit, SIGKILL a second later for a process that
	// ignores it.
	if err := set(unix.RLIMIT_CPU, uint64(l.CPUSeconds), uint64(l.CPUSeconds)+1); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	// The tree's resident memory is what the first process holds to the
	// limit; a process's writable private memory is also capped, at twice
	// the limit, so that one growing faster than the first process looks
	// is stopped all the same. Not the address space: runtimes such as
	// V8 and Go reserve far more of it than they ever use.
	if err := set(unix.RLIMIT_DATA, uint64(2*l.Memory), uint64(2*l.Memory)); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	// Counted per user namespace: the tree's own processes (for an engine
	// running as root the kernel does not apply it, and the first
	// process's count is the bound).
	// The first process counts processes and ends the tree past the limit;
	// the kernel's count, a backstop, is of threads (the first process's
	// own among them), so it has room above: a bomb is held to it even
	// before the first process looks.
	nproc := uint64(l.Processes)*4 + 64
	if err := set(unix.RLIMIT_NPROC, nproc, nproc); err != nil {
		return fmt.Errorf("processes: %w", err)
	}
	if err := set(unix.RLIMIT_FSIZE, uint64(l.FileSize), uint64(l.FileSize)); err != nil {
		return fmt.Errorf("file size: %w", err)
	}
	if err := set(unix.RLIMIT_NOFILE, uint64(l.OpenFiles), uint64(l.OpenFiles)); err != nil {
		return fmt.Errorf("open files: %w", err)
	}
	if err := set(unix.RLIMIT_CORE, 0, 0); err != nil {
		return fmt.Errorf("core: %w", err)
	}
	// The tool yields the processor to the engine and to the first process
	// that watches it: a spinning or forking tree cannot starve either.
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, toolNice); err != nil {
		return fmt.Errorf("priority: %w", err)
	}
	return nil
}

// dropCapabilities leaves the thread with no capability, none to regain:
// the securebits make uid 0 ordinary across exec, the bounding set is
// emptied, and the effective, permitted, inheritable and ambient sets are
// cleared.
func dropCapabilities() error {
	// linux/securebits.h: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off) and
	// NO_CAP_AMBIENT_RAISE, each with its lock.
	const (
		secbitNoroot              = 1 << 0
		secbitNorootLocked        = 1 << 1
		secbitNoSetuidFixup       = 1 << 2
		secbitNoSetuidFixupLocked = 1 << 3
		secbitKeepCapsLocked      = 1 << 5
		secbitNoAmbientRaise      = 1 << 6
		secbitNoAmbientRaiseLock  = 1 << 7
	)
	const bits = secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoAmbientRaise | secbitNoAmbientRaiseLock
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("bounding set: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}
