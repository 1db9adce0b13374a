package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// The helpers' file descriptors: the spec (init only) and the status pipe.
const (
	specFD   = 3
	statusFD = 4
)

// fail reports a set-up failure on the status pipe and exits: the program
// never runs.
func fail(format string, args ...any) {
	report(Status{Error: fmt.Sprintf(format, args...)})
	os.Exit(125)
}

var statusMu sync.Mutex

func report(st Status) {
	b, _ := json.Marshal(st)
	statusMu.Lock()
	defer statusMu.Unlock()
	_, _ = unix.Write(statusFD, append(b, '\n'))
}

// Run is the sandbox's first process: PID 1 of its namespaces, with
// their capabilities. It sets the namespaces and the skeleton of the
// tool's root up, then reads the call's spec (a helper started ahead of
// a call waits there), finishes the root, confines itself, starts the
// tool and watches the tree until the tool's main process exits, then
// ends what is left and exits with its status.
func Run() {
	unix.CloseOnExec(specFD)
	unix.CloseOnExec(statusFD)
	// The signals on which the Go runtime would end this process are set
	// back to the kernel's default, which the kernel never delivers to
	// the first process of a PID namespace from inside it: the tool cannot
	// end its own watcher and leave the call unaccounted. (Caught by
	// os/signal instead, each costs a round trip to the runtime's signal
	// thread, half a millisecond of every call; ignored, they would stay
	// ignored in the tool across exec.) A fault of this process's own is
	// forced by the kernel and still ends it.
	for _, sig := range fatalSignals {
		if err := defaultSignal(sig); err != nil {
			fail("reset %v: %v", sig, err)
		}
	}

	// Mounts made here stay here; then a /proc of this PID namespace, in
	// which the engine and every process outside are not.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make the mounts private: %v", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fail("mount /proc: %v", err)
	}
	sys, err := skeleton()
	if err != nil {
		fail("build the sandbox's root: %v", err)
	}
	// Decoding a spec the first time costs the decoder's set-up; paid
	// here, it is paid before the call when the helper was started ahead.
	var warm Wire
	_ = json.Unmarshal(warmSpec, &warm)
	// Two processors are all this process uses, and each more is threads
	// the runtime may want (its collector's among them) while a tree
	// holds every pid of the namespace: the reserve is sized for two.
	runtime.GOMAXPROCS(2)
	reserveThreads(reservedThreads)

	w, err := readSpec()
	if err != nil {
		fail("%v", err)
	}
	if w.Version != Version {
		fail("the helper binary speaks version %d of the spec, the engine %d: install the noeta-sandbox built with this engine", Version, w.Version)
	}
	if len(w.Argv) == 0 {
		fail("the spec has no program")
	}
	// A hard bound on the tree, whoever runs the engine: the namespace's
	// own pid_max (Linux 6.14), so that no more than that many processes
	// and threads can exist in it at once. RLIMIT_NPROC does not bound an
	// engine running as root (the kernel exempts the host's root user),
	// and the first process's count alone, every 20ms, let a fork bomb
	// take every pid of the host in between. On an older kernel the write
	// fails and the count and RLIMIT_NPROC remain. Once a namespace's pids
	// have wrapped, the kernel hands out none below reservedPids again, so
	// the bound counts from there: a call that has started a few hundred
	// short-lived processes must still have its limit's worth.
	pidMax := reservedPids + w.Limits.Processes*4 + 64
	_ = os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(pidMax)), 0)
	proxyDir, err := newRoot(w, sys)
	if err != nil {
		fail("build the sandbox's root: %v", err)
	}
	_ = unix.Sethostname([]byte("sandbox"))
	if err := loopbackUp(); err != nil {
		fail("bring up the loopback: %v", err)
	}
	env := w.Env
	if w.Proxy != "" {
		addr, err := relay(fmt.Sprintf("/proc/self/fd/%d/%s", proxyDir, filepath.Base(w.Proxy)))
		if err != nil {
			fail("start the egress relay: %v", err)
		}
		url := "http://" + addr
		env = append(env, "HTTP_PROXY="+url, "HTTPS_PROXY="+url, "http_proxy="+url, "https_proxy="+url,
			"ALL_PROXY="+url, "all_proxy="+url, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	}
	cwd := w.Dir
	if w.Cwd != "" {
		cwd = w.Cwd
	}
	path := w.Argv[0]
	if !strings.Contains(path, "/") {
		p, err := lookPath(path, env)
		if err != nil {
			fail("%v", err)
		}
		path = p
	}

	// Confine this process, every thread of it, and so whatever it starts.
	ruleset, rulesetFlags, err := rulesetFD(w)
	if err != nil {
		fail("build the Landlock ruleset: %v", err)
	}
	if err := setLimits(w); err != nil {
		fail("set the limits: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		fail("drop the capabilities: %v", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		fail("set no_new_privs: %v", err)
	}
	if err := ll.AllThreadsLandlockRestrictSelf(ruleset, rulesetFlags); err != nil {
		fail("enforce Landlock: %v", err)
	}
	_ = unix.Close(ruleset)
	if err := loadSeccomp(w.Seccomp); err != nil {
		fail("load the seccomp filter: %v", err)
	}

	// Reap every child, the tool's orphans included: as PID 1 they are ours,
	// and a zombie would count against the process limit. What the orphans
	// used of the processor counts against the CPU limit.
	exited := make(chan syscall.WaitStatus, 1)
	reaped := make(chan struct{}, 1)
	var reapedCPU atomic.Int64 // clock ticks
	// Nothing of this process is the tool's to open: not its descriptors
	// (the status pipe, the egress socket's directory) through
	// /proc/1/fd, not its memory, though both run as one uid.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail("make the first process undumpable: %v", err)
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fail("open /dev/null: %v", err)
	}
	toolPID, tool, err := startTool(path, w.Argv, env, cwd)
	if err != nil {
		fail("exec %s: %v", path, err)
	}
	// The tool's standard input, output and error are the tool's alone
	// now: its output ends when its tree does, not when this process does.
	for fd := range 3 {
		_ = unix.Dup3(null, fd, 0)
	}
	_ = unix.Close(null)
	// The first process counts processes and ends the tree past the limit;
	// the kernel's count, a backstop that holds a bomb even between two
	// looks, is of the threads of the namespace's user, this process's
	// among them: set on the tool only (the tree inherits it), never on
	// this process, whose runtime must always be able to start a thread.
	// The tool has not forked yet (it is exec'ing); should it have, the
	// count still ends the tree.
	nproc := uint64(w.Limits.Processes)*4 + 64
	if err := unix.Prlimit(toolPID, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: nproc, Max: nproc}, nil); err != nil {
		fail("limit the processes: %v", err)
	}
	// Open files likewise: the tool's own, never this process's, whose
	// relay and /proc reads need descriptors whatever the tool holds.
	files := uint64(w.Limits.OpenFiles)
	if err := unix.Prlimit(toolPID, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: files, Max: files}, nil); err != nil {
		fail("limit the open files: %v", err)
	}
	go func() {
		for {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(-1, &ws, 0, &ru)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			if pid == toolPID {
				exited <- ws
				continue // and reap on, for endTree
			}
			reapedCPU.Add((ru.Utime.Nano() + ru.Stime.Nano()) / (1e9 / clockTicks))
			select {
			case reaped <- struct{}{}:
			default:
			}
		}
	}()

	var wall <-chan time.Time
	if w.Limits.WallMS > 0 {
		wall = time.After(time.Duration(w.Limits.WallMS) * time.Millisecond)
	}
	// look ends the tree past any of its limits, naming the limit; it
	// sets when the next look prompted by an orphan's end may come.
	var nextLook time.Time
	look := func() {
		start := time.Now()
		// The reaped CPU first: a process reaped during the scan is then
		// missed until the next look rather than counted twice (once in
		// /proc, once reaped), which could end a tree wrongly.
		reapedTicks := reapedCPU.Load()
		u, ok := treeUsage(w.Limits.Processes)
		switch {
		case !ok:
			// Blind, it cannot hold the tree to its limits: end it.
			report(Status{Error: "the sandbox could not read its /proc"})
			tool.endTree(137)
		case u.processes > w.Limits.Processes:
			report(Status{Limit: "processes"})
			tool.endTree(137)
		case w.Limits.Memory > 0 && u.rss > w.Limits.Memory:
			report(Status{Limit: "memory"})
			tool.endTree(137)
		case w.Limits.CPUSeconds > 0 && u.cpu+reapedTicks > w.Limits.CPUSeconds*clockTicks:
			report(Status{Limit: "cpu"})
			tool.endTree(137)
		}
		nextLook = start.Add(max(time.Millisecond, 10*time.Since(start)))
	}
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case ws := <-exited:
			// The tool may end between two looks with its tree past the
			// process limit (a shell exits as soon as a fork of its fails):
			// one more look names the limit.
			if u, ok := treeUsage(w.Limits.Processes); ok && u.processes > w.Limits.Processes {
				report(Status{Limit: "processes"})
				tool.endTree(137)
			}
			// A process ended by RLIMIT_FSIZE gets SIGXFSZ; a shell reports
			// a child's as 128 plus the signal.
			if ws.Signaled() && ws.Signal() == syscall.SIGXFSZ || ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGXFSZ) {
				report(Status{Limit: "file_size"})
			}
			if ws.Signaled() {
				tool.endTree(128 + int(ws.Signal()))
			}
			tool.endTree(ws.ExitStatus())
		case <-wall:
			report(Status{Limit: "wall"})
			tool.endTree(137)
		case <-reaped:
			// Orphans of the tree are ending, as a fork bomb's do by the
			// hundred: look now rather than at the next tick, so the tree
			// is ended a process or two past its limit, not twenty
			// milliseconds of forks past it. Once a millisecond at most,
			// and a tenth of the time at most however long a look over a
			// large limit takes: this process's CPU is not the tool's.
			if time.Now().Before(nextLook) {
				continue
			}
			look()
		case <-tick.C:
			look()
		}
	}
}

// startTool starts the tool at a lower priority than this process, which
// must keep the processor it needs to watch the tree: from a thread of its
// own whose priority is lowered first (a thread's, on Linux, and what a
// fork inherits); nothing may raise its priority again.
//
// The thread then stays, to end the tree when told: Landlock gives each
// thread restricted on its own (AllThreadsLandlockRestrictSelf) a domain
// of its own, and with signals scoped a thread may signal only processes
// of its own domain or of one nested in it. The tool's is this thread's;
// a signal from any other of this process's threads is refused, and
// kill(-1) then reports success having killed nothing (the kernel drops a
// refusal when signalling every process), so the tree would run on until
// this process exited. The thread checks once that it can signal the
// tool, and the call fails closed if not. The kill runs at the tool's
// lower priority, which a tree at the same priority can delay by a slice
// per running process: bounded by the process limit, and the first kill
// stops its forking.
func startTool(path string, argv, env []string, dir string) (int, *toolThread, error) {
	type started struct {
		pid int
		err error
	}
	ch := make(chan started, 1)
	t := &toolThread{end: make(chan int)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this process
		if err := unix.Setpriority(unix.PRIO_PROCESS, 0, toolNice); err != nil {
			ch <- started{err: fmt.Errorf("priority: %w", err)}
			return
		}
		pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: []uintptr{0, 1, 2}})
		if err == nil {
			if kerr := unix.Kill(pid, 0); kerr != nil {
				// A tree this process cannot signal is one it cannot end:
				// the caller fails, and the namespace's end takes the tool.
				ch <- started{err: fmt.Errorf("signal the tool: %w", kerr)}
				return
			}
		}
		ch <- started{pid, err}
		if err != nil {
			return
		}
		endTree(<-t.end)
	}()
	r := <-ch
	return r.pid, t, r.err
}

// toolThread is the thread the tool was started from.
type toolThread struct{ end chan int }

// endTree has the tool's thread end the tree and exit with code; it does
// not return.
func (t *toolThread) endTree(code int) {
	t.end <- code
	select {}
}

// endTree kills every other process of the namespace until none is left
// (its reaper takes the dead), then exits with code: what the kernel does
// once the namespace's init exits, but a tree that is still forking was
// seen to take the kernel seconds to bring down that way. It runs on the
// tool's thread (startTool).
func endTree(code int) {
	for range 2000 {
		if err := unix.Kill(-1, unix.SIGKILL); errors.Is(err, unix.ESRCH) {
			// Nothing of the tool's is left: the engine may go on.
			report(Status{Exit: &code})
			break
		}
		time.Sleep(time.Millisecond)
	}
	os.Exit(code)
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// allThreads makes a system call on every thread of the process: the
// credentials and no_new_privs it sets are each thread's own, and the Go
// runtime may start the tool from any of them.
func allThreads(nr, a1, a2, a3 uintptr) error {
	// Six arguments, the last zero: prctl reads all five of its own.
	if _, _, errno := psx.Syscall6(nr, a1, a2, a3, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// usage is what the tree holds and has used.
type usage struct {
	processes int
	rss       int64 // bytes
	cpu       int64 // clock ticks, the waited-for children's included
}

// treeUsage reads the processes of this PID namespace but its init from
// /proc/<pid>/stat. Over maxProcs it stops at the count: the tree is ended
// anyway, and a fork bomb's thousands of processes are not read.
func treeUsage(maxProcs int) (usage, bool) {
	var u usage
	d, err := os.Open("/proc")
	if err != nil {
		return u, false
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return u, false
	}
	var pids []string
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != 1 {
			pids = append(pids, name)
		}
	}
	u.processes = len(pids)
	if u.processes > maxProcs {
		return u, true
	}
	page := int64(os.Getpagesize())
	for _, name := range pids {
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command, whose name may hold anything:
		// state is the first, utime the 12th, stime, cutime, cstime the
		// next three, rss the 22nd.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 22 {
			continue
		}
		for _, k := range []int{11, 12, 13, 14} {
			if v, err := strconv.ParseInt(f[k], 10, 64); err == nil {
				u.cpu += v
			}
		}
		if v, err := strconv.ParseInt(f[21], 10, 64); err == nil {
			u.rss += v * page
		}
	}
	return u, true
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
// the engine's egress proxy on its Unix socket: the one way out. Written on
// the system calls rather than package net, which would link the C
// library's resolver into the helper and slow every call's start.
//
// At most relayConns connections at once (the proxy admits fewer); one
// over is closed at once. A connection ends when the proxy's side does:
// the proxy drops a client that says nothing, and a tunnel ends with its
// destination, so a tool holding connections open holds nothing of this
// process's for long.
func relay(sock string) (string, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "", err
	}
	if err := unix.Listen(ln, relayConns); err != nil {
		return "", err
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return "", err
	}
	addr, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return "", fmt.Errorf("the relay's address is %T", sa)
	}
	slots := make(chan struct{}, relayConns)
	go func() {
		for {
			// A blocking accept holds one thread for the call; the
			// connections are non-blocking, on the runtime's poller.
			c, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			if err != nil {
				return
			}
			in := os.NewFile(uintptr(c), "relay")
			select {
			case slots <- struct{}{}:
			default:
				_ = in.Close()
				continue
			}
			go func() {
				defer func() { <-slots }()
				defer in.Close()
				out, err := dialUnix(sock)
				if err != nil {
					return
				}
				defer out.Close()
				back := make(chan struct{})
				go func() { _, _ = io.Copy(out, in); shutdownWrite(out) }()
				go func() { _, _ = io.Copy(in, out); close(back) }()
				<-back // the proxy's side ended: so does the connection
			}()
		}
	}()
	return fmt.Sprintf("127.0.0.1:%d", addr.Port), nil
}

// dialUnix connects to the Unix socket at path, non-blocking once
// connected.
func dialUnix(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "egress"), nil
}

// shutdownWrite ends f's sending side: the proxy reads the end of the
// request while the answer can still come back.
func shutdownWrite(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
}

// relayConns bounds the relay's connections at once.
const relayConns = 64

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

// reservedPids is the kernel's RESERVED_PIDS: the pids a namespace never
// hands out again once its pids have wrapped.
const reservedPids = 300

// toolNice is the scheduling priority of a tool's processes.
const toolNice = 10

// setLimits sets the resource limits the first process and the tool share.
// Not the processor time and the memory: this process, which watches the
// tree for the whole call, would spend its own share of them, and the Go
// runtime reserves memory beyond any small limit; the first process holds
// the tree to both instead (treeUsage).
func setLimits(w Wire) error {
	l := w.Limits
	set := func(res int, cur, max uint64) error {
		return unix.Setrlimit(res, &unix.Rlimit{Cur: cur, Max: max})
	}
	if err := set(unix.RLIMIT_FSIZE, uint64(l.FileSize), uint64(l.FileSize)); err != nil {
		return fmt.Errorf("file size: %w", err)
	}
	if err := set(unix.RLIMIT_CORE, 0, 0); err != nil {
		return fmt.Errorf("core: %w", err)
	}
	return nil
}

// dropCapabilities leaves every thread with no capability, none to regain:
// the securebits make uid 0 ordinary across exec, and the effective,
// permitted, inheritable and ambient sets are cleared. The bounding set is
// left: it only bounds what an exec could grant, and with uid 0 ordinary,
// no file capabilities under no_new_privs and nothing permitted or
// inheritable, an exec grants nothing (dropping it would cost 41 calls on
// every thread, a millisecond of every call).
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
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// fatalSignals are the signals the Go runtime ends a process on (exits,
// throws or stops) when the program does not ask for them: every one the
// runtime's own working does not need (not SIGURG, its preemption, nor the
// signal its all-threads system calls use, nor SIGPROF, SIGCHLD, SIGPIPE
// or SIGWINCH, which it handles harmlessly).
var fatalSignals = []unix.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS,
	unix.SIGFPE, unix.SIGUSR1, unix.SIGSEGV, unix.SIGUSR2, unix.SIGALRM, unix.SIGTERM, unix.SIGSTKFLT,
	unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGIO,
	unix.SIGPWR, unix.SIGSYS,
}

// defaultSignal sets sig's disposition to the kernel's default behind the
// Go runtime's back (rt_sigaction with a zeroed action: SIG_DFL).
func defaultSignal(sig unix.Signal) error {
	var act [4]uint64 // struct sigaction: handler, flags, restorer, mask
	if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act[0])), 0, 8, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// warmSpec is a spec with every field set, decoded once before the real
// one arrives.
var warmSpec = []byte(`{"version":0,"argv":["x"],"env":["A=b"],"dir":"/x","read":["/x"],"write":["/x"],"hide":["/x"],"cwd":"/x","proxy":"/x","seccomp":[{"c":1,"t":1,"f":1,"k":1}],"limits":{"cpu_seconds":1,"memory":1,"processes":1,"file_size":1,"open_files":1,"wall_ms":1}}`)

// readSpec reads the call's spec from the spec socket: the engine's whole
// message until it shuts its end, whose first part carries the tool's
// standard input, output and error when the helper was started ahead of
// the call (SCM_RIGHTS); they replace this process's own.
func readSpec() (Wire, error) {
	var w Wire
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(3*4))
	var body []byte
	var fds []int
	for received := false; ; {
		var n int
		var err error
		if !received {
			var oobn int
			n, oobn, _, _, err = unix.Recvmsg(specFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err == nil {
				received = true
				if fds, err = unixRights(oob[:oobn]); err != nil {
					return w, err
				}
			}
		} else {
			n, err = unix.Read(specFD, buf)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return w, fmt.Errorf("read the spec: %w", err)
		}
		if n == 0 {
			break
		}
		if len(body)+n > MaxWire {
			return w, fmt.Errorf("the spec is over %d bytes", MaxWire)
		}
		body = append(body, buf[:n]...)
	}
	_ = unix.Close(specFD)
	switch len(fds) {
	case 0:
	case 3:
		for i, fd := range fds {
			if fd == i {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
					return w, fmt.Errorf("take the tool's descriptor %d: %w", i, err)
				}
				continue
			}
			if err := unix.Dup3(fd, i, 0); err != nil {
				return w, fmt.Errorf("take the tool's descriptor %d: %w", i, err)
			}
			_ = unix.Close(fd)
		}
	default:
		return w, fmt.Errorf("the spec carries %d descriptors, not 3", len(fds))
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return w, fmt.Errorf("decode the spec: %w", err)
	}
	return w, nil
}

// unixRights is the descriptors an SCM_RIGHTS message carried.
func unixRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("read the spec's descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, fmt.Errorf("read the spec's descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// reservedThreads is how many threads the runtime is made to start before
// the tool runs; the tool's own thread (startTool) takes one of them.
const reservedThreads = 9

// reserveThreads makes the Go runtime start n threads now, which it then
// keeps idle: a tool that fills the namespace's pids (a fork bomb up to
// pid_max) must not leave this process unable to start a thread when it
// needs one to watch, report and end the tree (the runtime aborts then,
// exit status 2, and the call's report with it). Each goroutine locks a
// thread of its own and parks, so the runtime must start another for the
// next; unlocked, the threads go to the runtime's idle list, which it
// never shrinks. (Goroutines that only slept in a system call got as few
// as three new threads of eight on a loaded machine: the runtime starts
// one only when its monitor takes the processor back in time.)
func reserveThreads(n int) {
	var locked, parked sync.WaitGroup
	release := make(chan struct{})
	for range n {
		locked.Add(1)
		parked.Go(func() {
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		})
	}
	locked.Wait()
	close(release)
	parked.Wait()
}
