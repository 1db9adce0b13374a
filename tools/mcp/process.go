package mcp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// stderrTail is how much of a stdio server's stderr is kept, for errors:
// the end, which is where a crashing program says why.
const stderrTail = 4 << 10

// process is a stdio server's running command. Its pipes are os.Pipe pairs
// of our own, not exec's: exec.Cmd.Wait would close the stdout pipe while
// the MCP client still reads the server's last response from it.
type process struct {
	cmd *exec.Cmd
	// confined is the sandbox's view of a confined server; report is how
	// it saw it end, set before exited is closed.
	confined *sandbox.Cmd
	report   sandbox.Report
	stdin    *os.File // our end: the server reads it
	stdout   *os.File // our end: the server writes it
	stderr   *tail
	// exited is closed once the command has exited; waitErr is its status.
	exited  chan struct{}
	waitErr error
	// drained is closed once stderr has reached EOF.
	drained chan struct{}
}

// startProcess starts argv. The goroutine that starts it holds its OS thread
// until the command exits, which is what makes the parent-death signal
// (serverProcAttr) fire when the engine dies and not when the Go runtime
// retires a thread.
//
// With confine set, the process starts in the sandbox under scope's policy,
// the workspace its writable directory and dir (when set) its working one.
func startProcess(argv, env []string, dir string, confine Confiner, scope, workspace string) (*process, error) {
	var confined *sandbox.Cmd
	if confine != nil {
		ws, err := filepath.Abs(cmp.Or(workspace, "."))
		if err != nil {
			return nil, err
		}
		cwd := ""
		if dir != "" {
			if cwd, err = filepath.Abs(dir); err != nil {
				return nil, err
			}
		}
		if confined, err = confine.Command(context.Background(), scope, sandbox.Spec{Argv: argv, Env: env, Dir: ws, Cwd: cwd}); err != nil {
			return nil, fmt.Errorf("refused: %w", err)
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	var cmd *exec.Cmd
	if confined != nil {
		cmd = confined.Cmd
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Dir = env, dir
		cmd.SysProcAttr = serverProcAttr()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	p := &process{cmd: cmd, confined: confined, stdin: inW, stdout: outR, stderr: &tail{max: stderrTail},
		exited: make(chan struct{}), drained: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		unlock := lockThread()
		defer unlock()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		if confined != nil {
			p.report = confined.Finish()
		}
		close(p.exited)
	}()
	err = <-started
	closeAll(inR, outW, errW) // the child's ends: it has its own copies
	if err != nil {
		closeAll(inW, outR, errR)
		if confined != nil {
			confined.Finish()
		}
		return nil, err
	}
	go func() {
		defer close(p.drained)
		_, _ = io.Copy(p.stderr, errR)
		_ = errR.Close()
	}()
	return p, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// kill ends the server's whole process group with SIGKILL and waits for the
// command to exit and its stderr to close.
func (p *process) kill() {
	pgid := p.cmd.Process.Pid // it leads its group (Setpgid)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
	// The leader is gone; a child that was still in the group got the
	// signal too. Kill again for one forked in between, then wait for the
	// last writer of stderr.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.drained
}

// exitedAlready reports whether the command has exited.
func (p *process) exitedAlready() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// describe says how the command ended (if it has) and what it last wrote to
// stderr, for an error.
func (p *process) describe() string {
	var parts []string
	if p.exitedAlready() {
		var ee *exec.ExitError
		switch {
		case p.waitErr == nil:
			parts = append(parts, "exited with status 0")
		case errors.As(p.waitErr, &ee):
			parts = append(parts, ee.ProcessState.String())
		default:
			parts = append(parts, p.waitErr.Error())
		}
	}
	if p.exitedAlready() {
		if e := p.report.SetupError; e != "" {
			parts = append(parts, "the sandbox could not be set up: "+e)
		}
		if l := p.report.Limit; l != "" {
			parts = append(parts, "ended by the sandbox's "+l+" limit")
		}
	}
	if s := p.stderr.String(); s != "" {
		parts = append(parts, fmt.Sprintf("stderr: %q", s))
	}
	return strings.Join(parts, "; ")
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if t.cut && s != "" {
		s = "…" + s
	}
	return s
}
