package tools

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShellDiesWithTheEngine: a shell call's process must not outlive an
// engine that is killed outright.
//
// Reproduction (before): an engine ran the shell call `sleep 2; touch X` and
// was SIGKILLed during the sleep; the shell, reparented to init, woke up and
// created X two seconds after the engine was gone — a side effect no log
// recorded. Here the engine is this test binary re-run as a child
// (TestHelperShellEngine), which runs the call and is SIGKILLed once the
// shell has written its pid; the test then waits for that shell to be gone
// and checks that X was never made.
func TestShellDiesWithTheEngine(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	engine := exec.Command(exe, "-test.run=^TestHelperShellEngine$")
	engine.Env = append(os.Environ(), "NOETA_TOOLS_SHELL_ENGINE="+ws)
	engine.Stdout, engine.Stderr = os.Stderr, os.Stderr
	if err := engine.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(ws, "pid")
	var shellPid int
	for shellPid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			if shellPid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			break
		}
		if t.Context().Err() != nil {
			engine.Process.Kill()
			t.Fatal("the shell never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := engine.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	engine.Wait()
	// Wait until the shell is gone (or a zombie nobody reaps): only then is
	// it known whether it touched X. With the parent-death signal this is
	// at once; without it, after the sleep and the touch.
	for alive(shellPid) {
		if t.Context().Err() != nil {
			t.Fatalf("the shell %d outlived the test", shellPid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(ws, "X")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the shell's later step ran after the engine was killed (stat X: %v)", err)
	}
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestHelperShellEngine is not a test of its own: run by
// TestShellDiesWithTheEngine, it plays an engine that runs one shell call
// and is killed during it. In a normal test run it returns at once.
func TestHelperShellEngine(t *testing.T) {
	ws := os.Getenv("NOETA_TOOLS_SHELL_ENGINE")
	if ws == "" {
		return
	}
	shell := builtin(t, BuiltinConfig{}, "shell")
	run(t, t.Context(), shell, ws, cmdArgs(`echo $$ > pid.tmp && mv pid.tmp pid; sleep 2; touch X`))
	t.Fatal("the call returned; it should have been killed")
}
