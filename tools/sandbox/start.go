package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/noeta-go/noeta/internal/sandboxinit"
)

// ErrClosed is returned by Start on a closed Sandbox.
var ErrClosed = errors.New("sandbox: closed")

// Stdio is a confined process's standard input, output and error: files
// the caller owns (pipes, mostly) and may close once Start returned. Nil
// is the null device.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// Process is a process started by Start.
type Process struct {
	sb   *Sandbox // whose next helper starts when this process ends
	sp   *spare
	call *call
	// plain: an unconfined process (a scope with the sandbox disabled).
	plain bool

	// The helper's status, read as it comes (read): ended is closed when
	// it said the tree is gone and with which code (exit), or when the
	// status ended without saying so.
	read  chan struct{}
	ended chan struct{}
	exit  *int
}

// State is how a process started by Start ended.
type State struct {
	code   int            // -1: ended by a signal
	signal syscall.Signal // when code is -1
}

func stateOf(ps *os.ProcessState) State {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return State{code: -1, signal: ws.Signal()}
	}
	return State{code: ps.ExitCode()}
}

// ExitCode is the exit code, or -1 when a signal ended the process.
func (s State) ExitCode() int { return s.code }

// Exited says whether the process exited (not ended by a signal).
func (s State) Exited() bool { return s.code >= 0 }

// Success says whether the process exited with code 0.
func (s State) Success() bool { return s.code == 0 }

func (s State) String() string {
	if s.code < 0 {
		return "signal: " + s.signal.String()
	}
	return "exit status " + strconv.Itoa(s.code)
}

// Start starts spec under p, as Command and Cmd.Start would, but on a
// helper started ahead of the call when there is one: its namespaces
// made, its runtime up and the part of the root every call shares built,
// it only has the call's own part to do. When the process ends, the next
// call's helper is started. The context kills the process if it ends
// first.
//
// A helper started ahead is used only while what it copied of the engine
// still holds: the engine's mount table unchanged since (no mount
// made or taken away under it) and the system paths it bound still the
// same files (an /etc/passwd replaced by a rename is a new file its bind
// does not show); else it is discarded and a new one started.
func (s *Sandbox) Start(ctx context.Context, p Policy, spec Spec, stdio Stdio) (*Process, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	w, c, err := s.prepare(p, spec)
	if err != nil {
		return nil, err
	}
	body, err := encodeSpec(w)
	if err != nil {
		c.stopProxy()
		return nil, err
	}
	files, closeNull, err := stdio.files()
	if err != nil {
		c.stopProxy()
		return nil, err
	}
	defer closeNull()
	// A helper that died before it got the spec (killed with the thread
	// that started it, say) is replaced once.
	for attempt := 0; ; attempt++ {
		sp, err := s.take()
		if err != nil {
			c.stopProxy()
			return nil, err
		}
		err = sendSpec(sp.spec, body, files)
		_ = sp.spec.Close()
		if err == nil {
			pr := &Process{sb: s, sp: sp, call: c, read: make(chan struct{}), ended: make(chan struct{})}
			go pr.readStatus()
			go pr.watch(ctx)
			return pr, nil
		}
		sp.discard()
		if attempt == 1 {
			c.stopProxy()
			return nil, fmt.Errorf("sandbox: hand the call to its helper: %w", err)
		}
	}
}

// Pid is the process's id: the sandbox's first process, whose end ends
// every process of the sandbox.
func (p *Process) Pid() int { return p.sp.proc.Pid }

// Wait waits for the process to end: confined, until its helper said
// every process of the tree is gone (what is left of the helper, its
// namespaces' teardown, goes on unwaited for) or exited.
func (p *Process) Wait() (State, error) {
	if !p.plain {
		select {
		case <-p.ended:
			if p.exit != nil {
				return State{code: *p.exit}, nil
			}
		case <-p.sp.done:
		}
	}
	<-p.sp.done
	if p.sp.waitErr != nil {
		return State{code: -1, signal: syscall.SIGKILL}, p.sp.waitErr
	}
	return stateOf(p.sp.state), nil
}

// readStatus reads the helper's status lines until it said the tree is
// gone or the pipe ended (the helper exited).
func (p *Process) readStatus() {
	defer close(p.read)
	defer close(p.ended)
	defer p.sp.status.Close()
	sc := bufio.NewScanner(io.LimitReader(p.sp.status, sandboxinit.MaxStatus))
	for sc.Scan() {
		var st sandboxinit.Status
		if json.Unmarshal(sc.Bytes(), &st) != nil {
			continue
		}
		p.call.note(st)
		if st.Exit != nil {
			p.exit = st.Exit
			return
		}
	}
}

// Kill ends the process and, confined, every process of its sandbox; an
// unconfined process's whole group.
func (p *Process) Kill() error {
	if p.plain {
		err := unix.Kill(-p.sp.proc.Pid, unix.SIGKILL)
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return err
	}
	err := p.sp.proc.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Finish releases what the sandbox held for the process and returns its
// report, as Cmd.Finish. Call it after Wait; later calls return the same
// report.
func (p *Process) Finish() Report {
	if p.plain {
		return Report{}
	}
	<-p.read
	return p.call.done()
}

// watch kills the process when ctx ends first; it ends with the process,
// and starts the next call's helper then: not earlier, where it would
// take the processor from this call's own start.
func (p *Process) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
		_ = p.Kill()
		<-p.sp.done
	case <-p.sp.done:
	}
	if p.sb != nil {
		p.sb.replenish()
	}
}

// startPlain starts spec outside any sandbox, for a scope whose policy
// disables it: a process group of its own, dying with the engine's thread
// that started it, as every tool process does.
func startPlain(ctx context.Context, spec Spec, stdio Stdio) (*Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("sandbox: no program to run")
	}
	files, closeNull, err := stdio.files()
	if err != nil {
		return nil, err
	}
	defer closeNull()
	dir := spec.Dir
	if spec.Cwd != "" {
		dir = spec.Cwd
	}
	path := spec.Argv[0]
	if !strings.Contains(path, "/") {
		// As os/exec would: the engine's PATH.
		if path, err = exec.LookPath(path); err != nil {
			return nil, err
		}
	}
	sp := launch(func() (*os.Process, error) {
		return os.StartProcess(path, spec.Argv, &os.ProcAttr{Dir: dir, Env: spec.Env, Files: files, Sys: plainProcAttr()})
	}, nil)
	<-sp.ready
	if sp.err != nil {
		return nil, sp.err
	}
	pr := &Process{sp: sp, plain: true}
	go pr.watch(ctx)
	return pr, nil
}

// files is the three descriptors, the null device for a nil one; the
// returned function closes what files opened.
func (s Stdio) files() ([]*os.File, func(), error) {
	var null *os.File
	pick := func(f *os.File) (*os.File, error) {
		if f != nil {
			return f, nil
		}
		if null == nil {
			var err error
			if null, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
				return nil, err
			}
		}
		return null, nil
	}
	closeNull := func() {
		if null != nil {
			_ = null.Close()
		}
	}
	out := make([]*os.File, 3)
	for i, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
		var err error
		if out[i], err = pick(f); err != nil {
			closeNull()
			return nil, nil, err
		}
	}
	return out, closeNull, nil
}

// spare is a helper process: started ahead of a call (or at once, when
// none is ready), it makes its namespaces and the shared part of the
// root, then waits for a spec on its spec socket.
type spare struct {
	spec   *os.File // the engine's end of the spec socket
	status *os.File // the status pipe's read end
	proc   *os.Process

	ready chan struct{} // closed once started, or once it failed to (err)
	err   error
	done  chan struct{} // closed once the process was reaped
	state *os.ProcessState
	// waitErr is what reaping it returned.
	waitErr error

	// mounts is the engine's mount table, opened before the start: a raw
	// descriptor, never on the runtime's poller, whose epoll would take the
	// change event before fit looks.
	mounts int
	paths  []string // the shared paths it binds
	system []fileID // and what they were before the start
}

// take returns a helper for a call: the one started ahead when it is
// still fit for one, else a new one.
func (s *Sandbox) take() (*spare, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	sp := s.spare
	s.spare = nil
	s.mu.Unlock()
	if sp != nil {
		<-sp.ready
		if sp.err == nil && sp.fit() {
			return sp, nil
		}
		sp.discard()
	}
	sp = s.startSpare()
	<-sp.ready
	if sp.err != nil {
		return nil, sp.err
	}
	return sp, nil
}

// replenish starts a helper for the next call when none is waiting.
func (s *Sandbox) replenish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.spare == nil {
		s.spare = s.startSpare()
	}
}

// startSpare starts a helper; it is ready (or failed) when sp.ready is
// closed.
func (s *Sandbox) startSpare() *spare {
	var specMine, specChild, statusR, statusW, null *os.File
	prepare := func(sp *spare) error {
		var err error
		// Opened before the start: a mount made or taken away after this
		// is seen at the take (the file's priority event), and so is one
		// between this and the start, needlessly but safely.
		if sp.mounts, err = unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			sp.mounts = -1
			return fmt.Errorf("sandbox: the engine's mount table: %w", err)
		}
		sp.paths = s.systemPaths
		sp.system = identify(sp.paths)
		if specMine, specChild, err = specSocket(); err != nil {
			return err
		}
		sp.spec = specMine
		if statusR, statusW, err = os.Pipe(); err != nil {
			return err
		}
		sp.status = statusR
		null, err = os.OpenFile(os.DevNull, os.O_RDWR, 0)
		return err
	}
	exe := s.exe
	return launch(func() (*os.Process, error) {
		return os.StartProcess(exe, []string{sandboxinit.Name}, &os.ProcAttr{
			Dir: "/", Env: []string{},
			Files: []*os.File{null, null, null, specChild, statusW},
			Sys:   initProcAttr(),
		})
	}, func(sp *spare, started bool) error {
		if !started {
			return prepare(sp)
		}
		for _, f := range []*os.File{specChild, statusW, null} {
			if f != nil {
				_ = f.Close()
			}
		}
		return nil
	})
}

// launch starts a process from a goroutine that holds its OS thread until
// the process is reaped: the parent-death signal follows the thread that
// started the process, and a thread let go may end (with a goroutine that
// locked it) and kill the process with it. around, when set, runs before
// the start (started false; an error fails it) and after (started true).
func launch(start func() (*os.Process, error), around func(sp *spare, started bool) error) *spare {
	sp := &spare{ready: make(chan struct{}), done: make(chan struct{}), mounts: -1}
	go func() {
		defer close(sp.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var err error
		if around != nil {
			err = around(sp, false)
		}
		if err == nil {
			sp.proc, err = start()
		}
		if around != nil {
			_ = around(sp, true)
		}
		if err != nil {
			sp.err = err
			sp.closeFiles()
			close(sp.ready)
			return
		}
		close(sp.ready)
		sp.state, sp.waitErr = sp.proc.Wait()
	}()
	return sp
}

// fit says whether the helper may take a call: alive, and what it copied
// of the engine's view still the same.
func (sp *spare) fit() bool {
	select {
	case <-sp.done:
		return false
	default:
	}
	if sp.mounts < 0 {
		return false // fit is asked once; without the table, not fit
	}
	// The mount table's priority event: a mount made or taken away in the
	// engine's namespace since the file was opened.
	fds := []unix.PollFd{{Fd: int32(sp.mounts), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	_ = unix.Close(sp.mounts)
	sp.mounts = -1
	if err != nil || n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
		return false
	}
	return slices.Equal(identify(sp.paths), sp.system)
}

// discard ends a helper that will take no call and releases it.
func (sp *spare) discard() {
	<-sp.ready
	if sp.proc != nil {
		_ = sp.proc.Kill()
	}
	<-sp.done
	sp.closeFiles()
}

// closeFiles releases the engine's ends of the helper's pipes.
func (sp *spare) closeFiles() {
	for _, f := range []*os.File{sp.spec, sp.status} {
		if f != nil {
			_ = f.Close()
		}
	}
	if sp.mounts >= 0 {
		_ = unix.Close(sp.mounts)
		sp.mounts = -1
	}
}

// Close ends the helper waiting for the next call. Processes started
// before run on until they end (their contexts, their Kill). Start fails
// with ErrClosed afterwards.
func (s *Sandbox) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.closed = true
	sp := s.spare
	s.spare = nil
	s.mu.Unlock()
	if sp != nil {
		sp.discard()
	}
	return nil
}

// fileID is what a path is: the file it names and, for a link, the file
// the link leads to.
type fileID struct {
	dev, ino uint64
	mode     uint32
	target   string
	tdev     uint64
	tino     uint64
}

// identify names the files at paths (a missing path is a zero fileID).
func identify(paths []string) []fileID {
	out := make([]fileID, len(paths))
	for i, p := range paths {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			continue
		}
		id := fileID{dev: uint64(st.Dev), ino: st.Ino, mode: uint32(st.Mode)}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			id.target, _ = os.Readlink(p)
			if unix.Stat(p, &st) == nil {
				id.tdev, id.tino = uint64(st.Dev), st.Ino
			}
		}
		out[i] = id
	}
	return out
}

// specTimeout bounds handing a spec over: a live helper reads it at once.
const specTimeout = 30 * time.Second

// sendSpec sends body on the spec socket, with files (the tool's standard
// input, output and error) on its first part, then shuts the sending side:
// the helper reads to the end.
func sendSpec(f *os.File, body []byte, files []*os.File) error {
	_ = f.SetWriteDeadline(time.Now().Add(specTimeout))
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var rights []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, file := range files {
			// Not Fd, which would make the caller's file blocking.
			frc, err := file.SyscallConn()
			if err != nil {
				return err
			}
			if err := frc.Control(func(fd uintptr) { fds[i] = int(fd) }); err != nil {
				return err
			}
		}
		rights = unix.UnixRights(fds...)
	}
	first := body[:min(len(body), 16<<10)]
	var n int
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), first, rights, nil, unix.MSG_NOSIGNAL)
		return !errors.Is(serr, unix.EAGAIN)
	})
	runtime.KeepAlive(files)
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("sandbox: send the spec: %w", err)
	}
	if _, err := f.Write(body[n:]); err != nil {
		return fmt.Errorf("sandbox: send the spec: %w", err)
	}
	var shut error
	if err := rc.Control(func(fd uintptr) { shut = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return shut
}
