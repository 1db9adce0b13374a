package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/sandboxinit"
)

// ErrUnavailable is wrapped by New, and by Command of a Sandbox that is not
// there, when this kernel or this process cannot confine a process as the
// package promises. Nothing then runs unconfined in its place.
var ErrUnavailable = errors.New("sandbox: unavailable")

// mainCalled is set by Main in a program that is not a sandbox helper: New
// refuses to work without it, since re-executing a binary whose main never
// hands over to Main would start the program itself inside the sandbox.
var mainCalled atomic.Bool

// Main hands over to the sandbox's helper when the program was started as
// one, and never returns then. Otherwise it returns at once, and New may
// be used. Call it first thing in main (and in TestMain), before anything
// reads flags or starts goroutines of its own.
func Main() {
	if len(os.Args) > 0 && os.Args[0] == sandboxinit.Name {
		sandboxinit.Run()
	}
	mainCalled.Store(true)
}

// Options configure a Sandbox.
type Options struct {
	// Executable is the binary started as the sandbox's helpers: one whose
	// main calls Main first. Default: $NOETA_SANDBOX_HELPER, else
	// noeta-sandbox beside the running binary (cmd/noeta-sandbox, small, so a call does not pay a large
	// program's start-up twice) when it is there, else the running binary
	// itself (/proc/self/exe, which still works if the file was replaced).
	Executable string
	// ProbeTimeout bounds the probe New runs. Default 10s.
	ProbeTimeout time.Duration
}

// Sandbox starts confined processes. It is safe for concurrent use.
type Sandbox struct {
	exe     string
	support Support
	filter  []sandboxinit.Insn // the seccomp filter every process gets

	mu     sync.Mutex
	spare  *spare // the next call's helper, started ahead
	closed bool
	// systemPaths are the paths every helper binds whatever the policy
	// (sandboxinit.SystemPaths), checked before a helper started ahead
	// takes a call.
	systemPaths []string
}

// Support is what the kernel offers, as New found it.
type Support struct {
	// LandlockABI is the Landlock ABI version (0: none).
	LandlockABI int
	// Seccomp says whether seccomp filters can be installed.
	Seccomp bool
	// UserNamespaces says whether this process may create user namespaces.
	UserNamespaces bool
}

// minLandlockABI is the oldest Landlock the sandbox accepts: ABI 3 is the
// first that controls truncation, without which a tool could truncate a
// file it may only read (a system binary, for an engine running as root).
const minLandlockABI = 3

// New probes the kernel and returns a Sandbox, or an error wrapping
// ErrUnavailable that names what is missing. The probe runs a real
// confined process (/bin/true), so a refusal that only shows at run time
// (a user namespace forbidden by policy, a /proc that cannot be mounted)
// is found here, at start-up, and not at a tool call.
func New(ctx context.Context, opts Options) (*Sandbox, error) {
	if !mainCalled.Load() {
		return nil, fmt.Errorf("%w: the program's main did not call sandbox.Main first", ErrUnavailable)
	}
	if opts.Executable == "" {
		opts.Executable = defaultExecutable()
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 10 * time.Second
	}
	s := &Sandbox{exe: opts.Executable, support: probeKernel(), systemPaths: sandboxinit.SystemPaths()}
	var missing []string
	if !s.support.UserNamespaces {
		missing = append(missing, "user namespaces (this process may not create them)")
	}
	if s.support.LandlockABI < minLandlockABI {
		missing = append(missing, fmt.Sprintf("Landlock ABI %d or later (the kernel has %d)", minLandlockABI, s.support.LandlockABI))
	}
	if !s.support.Seccomp {
		missing = append(missing, "seccomp filters")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the kernel lacks %s", ErrUnavailable, strings.Join(missing, ", "))
	}
	var err error
	if s.filter, err = seccompFilter(); err != nil {
		return nil, fmt.Errorf("%w: build the seccomp filter: %v", ErrUnavailable, err)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	defer cancel()
	if err := s.probe(pctx); err != nil {
		return nil, fmt.Errorf("%w: a confined /bin/true failed: %v", ErrUnavailable, err)
	}
	return s, nil
}

// HelperName is the sandbox's helper binary, looked for beside the running
// one; HelperEnv, when set, names the helper wherever it is installed
// (/usr/libexec/noeta-sandbox, say).
const (
	HelperName = "noeta-sandbox"
	HelperEnv  = "NOETA_SANDBOX_HELPER"
)

func defaultExecutable() string {
	if helper := os.Getenv(HelperEnv); helper != "" {
		return helper
	}
	if self, err := os.Executable(); err == nil {
		helper := filepath.Join(filepath.Dir(self), HelperName)
		if fi, err := os.Stat(helper); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return helper
		}
	}
	return "/proc/self/exe"
}

// Executable is the binary the sandbox starts as its helpers.
func (s *Sandbox) Executable() string { return s.exe }

// Support returns what the kernel offers.
func (s *Sandbox) Support() Support { return s.support }

func (s *Sandbox) probe(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "noeta-sandbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := s.Command(ctx, Policy{Limits: Limits{Wall: time.Minute}}, Spec{Argv: []string{"/bin/true"}, Dir: dir})
	if err != nil {
		return err
	}
	var stderr strings.Builder
	c.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := c.Start(); err != nil {
		c.Finish()
		return err
	}
	werr := c.Wait()
	rep := c.Finish()
	switch {
	case rep.SetupError != "":
		return errors.New(rep.SetupError)
	case ctx.Err() != nil:
		return ctx.Err()
	case werr != nil:
		return fmt.Errorf("%v (stderr %q)", werr, stderr.String())
	}
	return nil
}

// Spec is the process to start.
type Spec struct {
	// Argv is the program and its arguments; a program without a slash is
	// looked up in the PATH of Env.
	Argv []string
	// Env is the whole environment of the program (nothing of the engine's
	// is added, but the proxy's variables when the policy allows egress).
	Env []string
	// Dir is the one directory the process may write beside the policy's
	// Write, the workspace, and its working directory unless Cwd is set.
	Dir string
	// Cwd, when set, is the working directory instead; the process may
	// read it.
	Cwd string
}

// Report is how a confined process ended, beyond its exit status.
type Report struct {
	// SetupError is set when the sandbox could not be set up and the
	// program never ran (fail closed): what went wrong.
	SetupError string
	// Limit names the limit the tree was ended for: "processes",
	// "memory", "wall", "cpu" or "file_size". Empty: none.
	Limit string
	// Egress is what the process asked the egress proxy for.
	Egress []noeta.Egress
	// Unreported: the sandbox's first process ended without saying how
	// the tree ended (it crashed, was killed, or gave up ending the tree),
	// so the exit status or signal is its own, not the program's. A
	// caller that killed it knows why.
	Unreported bool
}

// Cmd is a confined process: an exec.Cmd (set Stdin, Stdout and Stderr,
// then Start and Wait it as any other, or hand it to what expects one)
// whose Finish, after Wait, tells how the sandbox saw it end. Every Cmd
// starts its helper when it starts; Sandbox.Start takes one started ahead.
type Cmd struct {
	*exec.Cmd
	*call

	statusW, specChild *os.File
	plain              bool
}

// call is what the engine holds for one confined process beside the
// process: the status pipe's read end and the egress proxy.
type call struct {
	status    *os.File
	proxy     *Proxy
	proxyLn   net.Listener
	proxyDir  string
	proxyDone chan struct{}
	finish    sync.Once
	report    Report
	// ended: the helper said the tree is gone (a status with Exit).
	ended bool
}

// Command prepares spec to run under p. The process is not started.
// The context kills the process if it ends first, as exec.CommandContext.
func (s *Sandbox) Command(ctx context.Context, p Policy, spec Spec) (*Cmd, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	w, c, err := s.prepare(p, spec)
	if err != nil {
		return nil, err
	}
	cmd := &Cmd{call: c}
	body, err := encodeSpec(w)
	if err != nil {
		cmd.stopProxy()
		return nil, err
	}
	mine, child, err := specSocket()
	if err != nil {
		cmd.stopProxy()
		return nil, err
	}
	// The spec is sent before the start: a socket holds this much without
	// a reader, more would block here, so a bigger spec is sent by a
	// goroutine that ends when the helper has read it or died (its end
	// closed: Finish closes the last copy).
	if len(body) <= 32<<10 {
		err = sendSpec(mine, body, nil)
		_ = mine.Close()
		if err != nil {
			_ = child.Close()
			cmd.stopProxy()
			return nil, err
		}
	} else {
		go func() {
			_ = sendSpec(mine, body, nil)
			_ = mine.Close()
		}()
	}
	cmd.specChild = child
	if cmd.status, cmd.statusW, err = os.Pipe(); err != nil {
		_ = child.Close()
		cmd.stopProxy()
		return nil, err
	}
	ec := exec.CommandContext(ctx, s.exe)
	ec.Args, ec.Dir, ec.Env = []string{sandboxinit.Name}, "/", []string{}
	ec.ExtraFiles = []*os.File{child, cmd.statusW}
	ec.SysProcAttr = initProcAttr()
	cmd.Cmd = ec
	return cmd, nil
}

// prepare checks spec and p and makes the helper's spec; the call holds
// the egress proxy when p allows any.
func (s *Sandbox) prepare(p Policy, spec Spec) (sandboxinit.Wire, *call, error) {
	var w sandboxinit.Wire
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return w, nil, errors.New("sandbox: no program to run")
	}
	if !filepath.IsAbs(spec.Dir) {
		return w, nil, fmt.Errorf("sandbox: the working directory %q is not absolute", spec.Dir)
	}
	if spec.Cwd != "" && !filepath.IsAbs(spec.Cwd) {
		return w, nil, fmt.Errorf("sandbox: the working directory %q is not absolute", spec.Cwd)
	}
	for _, list := range [][]string{p.Read, p.Write, p.Hide} {
		for _, path := range list {
			if !filepath.IsAbs(path) {
				return w, nil, fmt.Errorf("sandbox: policy path %q is not absolute", path)
			}
		}
	}
	// Real paths: the sandbox binds each where it really is, and a hidden
	// path (resolved by its owner) must be found under the bind that shows
	// it, whatever links the names given went through.
	spec.Dir, spec.Cwd = realPath(spec.Dir), realPath(spec.Cwd)
	p.Read, p.Write, p.Hide = realPaths(p.Read), realPaths(p.Write), realPaths(p.Hide)
	// (Checked on the real paths: a link to /usr is /usr.)
	// A workspace or a write path that is the root, or that holds the
	// system's programs or the kernel's interfaces, would undo the
	// sandbox: refused, as is reading the whole root.
	for _, path := range append([]string{spec.Dir}, p.Write...) {
		if err := writable(path); err != nil {
			return w, nil, err
		}
	}
	for _, path := range append([]string{spec.Cwd}, p.Read...) {
		if path != "" && filepath.Clean(path) == "/" {
			return w, nil, errors.New("sandbox: the whole file system may not be readable (a read path or the working directory is /)")
		}
	}
	l := p.Limits.WithDefaults()
	w = sandboxinit.Wire{Version: sandboxinit.Version, Seccomp: s.filter, Argv: spec.Argv, Env: slices.Clone(spec.Env), Dir: spec.Dir, Cwd: spec.Cwd, Read: p.Read, Write: p.Write, Hide: p.Hide}
	if spec.Cwd != "" {
		w.Read = append(slices.Clone(w.Read), spec.Cwd)
	}
	w.Limits.CPUSeconds = max(0, int64((l.CPU+time.Second-1)/time.Second))
	w.Limits.Memory, w.Limits.Processes, w.Limits.FileSize, w.Limits.OpenFiles = l.Memory, l.Processes, l.FileSize, l.OpenFiles
	w.Limits.WallMS = max(0, l.Wall.Milliseconds())

	c := &call{}
	if len(p.Allow) > 0 {
		var err error
		if c.proxy, err = NewProxy(p.Allow); err != nil {
			return w, nil, err
		}
		if c.proxyDir, err = os.MkdirTemp("", "noeta-egress-"); err != nil {
			return w, nil, fmt.Errorf("sandbox: egress socket: %w", err)
		}
		w.Proxy = filepath.Join(c.proxyDir, "egress.sock")
		if c.proxyLn, err = net.Listen("unix", w.Proxy); err != nil {
			_ = os.RemoveAll(c.proxyDir)
			return w, nil, fmt.Errorf("sandbox: egress socket: %w", err)
		}
		c.proxyDone = make(chan struct{})
		go func() {
			defer close(c.proxyDone)
			_ = c.proxy.Serve(c.proxyLn)
		}()
	}
	return w, c, nil
}

// encodeSpec is the helper's spec as sent, refused over the size the
// helper reads.
func encodeSpec(w sandboxinit.Wire) ([]byte, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	if len(body) > sandboxinit.MaxWire {
		return nil, fmt.Errorf("sandbox: the process's spec is %d bytes, over %d", len(body), sandboxinit.MaxWire)
	}
	return body, nil
}

// realPath resolves path's links; a path that does not resolve (missing)
// stays as given.
func realPath(path string) string {
	if path == "" {
		return ""
	}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return path
}

func realPaths(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = realPath(p)
	}
	return out
}

// systemRoots are what no workspace or write path may be, hold or lie in.
var systemRoots = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/boot", "/proc", "/sys", "/dev"}

// writable refuses a path the sandbox must not let a tool write.
func writable(path string) error {
	clean := filepath.Clean(path)
	if clean == "/" {
		return errors.New("sandbox: the workspace or a write path is /, the whole file system")
	}
	for _, r := range systemRoots {
		if clean == r || strings.HasPrefix(clean, r+"/") {
			return fmt.Errorf("sandbox: the workspace or write path %s is in %s, which a tool may not write", path, r)
		}
	}
	return nil
}

// plainCommand is a process the policy leaves unconfined (a scope with the
// sandbox disabled): it leads a process group of its own and dies with the
// engine's thread, as every tool process does, and nothing more.
func plainCommand(ctx context.Context, spec Spec) *Cmd {
	cmd := exec.CommandContext(ctx, spec.Argv[0], spec.Argv[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	if spec.Cwd != "" {
		cmd.Dir = spec.Cwd
	}
	cmd.SysProcAttr = plainProcAttr()
	return &Cmd{Cmd: cmd, plain: true}
}

// Finish releases what the sandbox held for the process and returns its
// report. Call it once the process has been waited for (or failed to
// start); later calls return the same report.
func (c *Cmd) Finish() Report {
	if c.plain {
		return Report{}
	}
	_ = c.specChild.Close()
	_ = c.statusW.Close()
	return c.call.done()
}

// done reads the status the helper left, stops the proxy and makes the
// report, once; the status pipe's writers must all be closed.
func (c *call) done() Report {
	c.finish.Do(func() {
		if c.status != nil {
			sc := bufio.NewScanner(io.LimitReader(c.status, sandboxinit.MaxStatus))
			for sc.Scan() {
				var st sandboxinit.Status
				if json.Unmarshal(sc.Bytes(), &st) == nil {
					c.note(st)
				}
			}
			_ = c.status.Close()
		}
		c.stopProxy()
		if c.proxy != nil {
			c.report.Egress = c.proxy.Summary()
		}
		c.report.Unreported = !c.ended && c.report.SetupError == ""
	})
	return c.report
}

// note takes what a status line says into the report.
func (c *call) note(st sandboxinit.Status) {
	if st.Error != "" && c.report.SetupError == "" {
		c.report.SetupError = st.Error
	}
	if st.Limit != "" && c.report.Limit == "" {
		c.report.Limit = st.Limit
	}
	if st.Exit != nil {
		c.ended = true
	}
}

func (c *call) stopProxy() {
	if c.proxy == nil {
		return
	}
	_ = c.proxy.Close()
	if c.proxyLn != nil {
		_ = c.proxyLn.Close()
	}
	if c.proxyDone != nil {
		<-c.proxyDone
	}
	if c.proxyDir != "" {
		_ = os.RemoveAll(c.proxyDir)
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(p))
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}
