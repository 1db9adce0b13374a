package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// shellTool runs {"command": c, "timeout_seconds"?: n} as ShellPath -c c, a
// real subprocess in the workspace, and returns {"exit_code", "stdout",
// "stderr", "truncated", "timed_out"}.
//
//   - The subprocess leads a process group of its own. When the call's
//     timeout fires, or its context ends, the whole group is killed, so
//     children and grandchildren die with the shell. Whatever the group still
//     holds when the shell exits on its own is killed too: a call leaves no
//     process behind (one that escaped with setsid excepted; its output is
//     then abandoned after a short grace).
//   - On Linux the shell has SIGKILL as its parent-death signal: an engine
//     killed outright (SIGKILL, the OOM killer) takes the shell with it, so a
//     command's later steps (sleep 2; touch x) do not run. The signal reaches
//     the shell only: a background grandchild (sleep 2 && touch x &) lives on
//     in that case, as does one that called setsid.
//   - stdin is /dev/null; the environment is PATH (the engine's), HOME (the
//     workspace) and LANG=C, nothing else of the engine's.
//   - stdout and stderr are each kept up to the output cap and drained past
//     it, so a command that prints without end costs no more memory than the
//     cap; "truncated" says whether either was cut. Bytes that are not UTF-8
//     become U+FFFD.
//   - A non-zero exit status is a failed result with Error "exit status N"; a
//     timeout is a failed result with "timed_out": true and exit_code -1. An
//     ended context is an error, and the partial output is dropped.
type shellTool struct {
	path      string
	timeout   time.Duration
	outputCap int
	// confine, when set, starts every command in the sandbox (package
	// sandbox) under the calling agent's policy.
	confine Confiner
}

// Confiner starts a tool's process confined, under the policy of scope (the
// calling agent): *sandbox.Scoped.
type Confiner interface {
	Start(ctx context.Context, scope string, spec sandbox.Spec, stdio sandbox.Stdio) (*sandbox.Process, error)
}

const (
	// shellWaitDelay bounds the wait for a killed shell to be reaped.
	shellWaitDelay = 2 * time.Second
	// pipeGrace is how long output is still read after the process group
	// is gone, for a process that left the group holding the pipes.
	pipeGrace = time.Second
)

func (shellTool) Name() string    { return "shell" }
func (shellTool) Risk() RiskLevel { return RiskHigh }
func (shellTool) Edits() bool     { return false }
func (shellTool) Description() string {
	return "Runs a shell command in the workspace and returns its exit code, stdout and stderr."
}
func (t shellTool) InputSchema() json.RawMessage { return shellSchema(t.timeout.Seconds()) }

type shellArgs struct {
	Command        string   `json:"command" args:"required"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

type shellOutput struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timed_out"`
}

func (t shellTool) Run(ctx context.Context, call Call) (Result, error) {
	const tool = "shell"
	var a shellArgs
	if err := DecodeArgs(tool, call.Args, &a); err != nil {
		return Failf("%v", err), nil
	}
	if strings.TrimSpace(a.Command) == "" {
		return Failf("%s: args.command must not be empty", tool), nil
	}
	timeout := t.timeout
	if a.TimeoutSeconds != nil {
		s := *a.TimeoutSeconds
		if !(s > 0) {
			return Failf("%s: args.timeout_seconds must be > 0, not %v", tool, s), nil
		}
		if max := t.timeout.Seconds(); s > max {
			return Failf("%s: args.timeout_seconds %v is over the maximum of %v", tool, s, max), nil
		}
		timeout = time.Duration(s * float64(time.Second))
	}
	if err := ctxErr(ctx, tool); err != nil {
		return Result{}, err
	}
	dir, err := shellDir(call.Workspace)
	if err != nil {
		return Result{}, err
	}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Our own pipes rather than io.Writers in cmd.Stdout: then Wait returns
	// when the shell exits, not when the last holder of the pipe does, and
	// the reads can be cut off.
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", tool, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{}, fmt.Errorf("%s: %w", tool, err)
	}
	var (
		wait func() (exitState, error)
		kill func() error // the whole tree, once the shell exited
	)
	var confined *sandbox.Process
	if t.confine != nil {
		confined, err = t.confine.Start(runCtx, call.Agent, sandbox.Spec{
			Argv: []string{t.path, "-c", a.Command}, Env: shellEnv(dir), Dir: dir,
		}, sandbox.Stdio{Stdout: outW, Stderr: errW})
		outW.Close()
		errW.Close()
		if err != nil {
			outR.Close()
			errR.Close()
			if err := ctxErr(ctx, tool); err != nil {
				return Result{}, err
			}
			// Fail closed: nothing runs unconfined in its place.
			return Failf("%s: refused: %v", tool, err), nil
		}
		defer confined.Finish()
		wait = func() (exitState, error) { return confined.Wait() }
		kill = confined.Kill
	} else {
		cmd := exec.CommandContext(runCtx, t.path, "-c", a.Command)
		cmd.Dir = dir
		cmd.Env = shellEnv(dir)
		cmd.SysProcAttr = toolProcAttr()
		cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
		cmd.WaitDelay = shellWaitDelay
		cmd.Stdout, cmd.Stderr = outW, errW
		// The parent-death signal follows the forking thread: hold it until
		// the shell is reaped.
		unlock := lockThread()
		defer unlock()
		err = cmd.Start()
		outW.Close()
		errW.Close()
		if err != nil {
			outR.Close()
			errR.Close()
			if err := ctxErr(ctx, tool); err != nil {
				return Result{}, err
			}
			if runCtx.Err() != nil { // a timeout too short to start in
				res, err := Succeed(shellOutput{ExitCode: -1, TimedOut: true})
				res.OK, res.Error = false, fmt.Sprintf("%s: timed out after %v", tool, timeout)
				return res, err
			}
			return Result{}, fmt.Errorf("%s: start %s: %w", tool, t.path, err)
		}
		wait = func() (exitState, error) {
			err := cmd.Wait()
			if cmd.ProcessState == nil {
				return nil, err
			}
			return cmd.ProcessState, err
		}
		kill = func() error { return killGroup(cmd.Process.Pid) }
	}
	stdout, stderr := &capWriter{max: t.outputCap}, &capWriter{max: t.outputCap}
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(stdout, outR) })
	wg.Go(func() { io.Copy(stderr, errR) })

	ps, waitErr := wait()
	_ = kill() // the group outlives the shell; end it
	grace := time.AfterFunc(pipeGrace, func() {
		now := time.Now()
		outR.SetReadDeadline(now)
		errR.SetReadDeadline(now)
	})
	wg.Wait()
	grace.Stop()
	outR.Close()
	errR.Close()

	if err := ctxErr(ctx, tool); err != nil {
		return Result{}, err
	}
	var rep sandbox.Report
	if confined != nil {
		rep = confined.Finish()
		if rep.SetupError != "" {
			return Failf("%s: refused: the sandbox could not be set up: %s", tool, rep.SetupError), nil
		}
	}
	if ps == nil {
		return Result{}, fmt.Errorf("%s: wait: %w", tool, waitErr)
	}
	out := shellOutput{
		ExitCode:  ps.ExitCode(),
		Stdout:    stdout.text(),
		Stderr:    stderr.text(),
		Truncated: stdout.truncated() || stderr.truncated(),
		TimedOut:  runCtx.Err() != nil && !ps.Exited(),
	}
	res, err := Succeed(out)
	if err != nil {
		return Result{}, err
	}
	res.Egress = rep.Egress
	switch {
	case rep.Limit != "":
		res.OK, res.Error = false, fmt.Sprintf("%s: ended by the sandbox's %s limit", tool, rep.Limit)
	case out.TimedOut:
		res.OK, res.Error = false, fmt.Sprintf("%s: timed out after %v", tool, timeout)
	case rep.Unreported:
		res.OK, res.Error = false, fmt.Sprintf("%s: the sandbox ended without reporting how the command ended (%s)", tool, ps)
	case !ps.Success():
		res.OK, res.Error = false, ps.String()
	}
	return res, nil
}

// exitState is how the shell ended: an *os.ProcessState, or a
// sandbox.State for a confined one.
type exitState interface {
	ExitCode() int
	Exited() bool
	Success() bool
	String() string
}

// shellDir returns the workspace as an absolute directory.
func shellDir(ws string) (string, error) {
	if ws == "" {
		return "", fmt.Errorf("%w: shell: the call has no workspace", ErrNoWorkspace)
	}
	dir, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("%w: shell: %v", ErrNoWorkspace, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: shell: %v", ErrNoWorkspace, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: shell: %s is not a directory", ErrNoWorkspace, dir)
	}
	// Its real path: a sandbox shows the workspace there, and compares it
	// with the real paths of what it hides.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return dir, nil
}

// shellEnv is the whole environment of a shell call.
func shellEnv(dir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "HOME=" + dir, "LANG=C"}
}

// killGroup sends SIGKILL to the process group pgid; a group that is already
// gone is not an error.
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// capWriter keeps the first max bytes written to it and counts the rest, so
// a stream is drained without holding more than max bytes.
type capWriter struct {
	max   int
	buf   []byte
	total int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	w.total += int64(len(p))
	return len(p), nil
}

func (w *capWriter) truncated() bool { return w.total > int64(len(w.buf)) }

func (w *capWriter) text() string {
	if w.truncated() {
		return string(cutRune(w.buf))
	}
	return string(w.buf)
}
