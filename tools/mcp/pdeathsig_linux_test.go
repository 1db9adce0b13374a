package mcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// engineEnv makes the test binary an engine (runEngine) that starts the
// fault server and waits to be killed.
const engineEnv = "NOETA_MCP_ENGINE"

// TestServerDiesWithTheEngine: a stdio server must not outlive an engine
// that is SIGKILLed, even one that does not exit when its stdin closes.
// The engine is this test binary re-run as a child (runEngine); the server
// writes its pid to a file, the test kills the engine and waits for the
// server to be gone.
func TestServerDiesWithTheEngine(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	engine := exec.Command(exe)
	engine.Env = append(os.Environ(), engineEnv+"="+dir)
	engine.Stdout, engine.Stderr = os.Stderr, os.Stderr
	if err := engine.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			break
		}
		if t.Context().Err() != nil {
			_ = engine.Process.Kill()
			t.Fatal("the server never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Kill the engine once its server has been listed, so that the kill
	// comes while the source holds the session.
	for {
		if _, err := os.Stat(filepath.Join(dir, "listed")); err == nil {
			break
		}
		if t.Context().Err() != nil {
			_ = engine.Process.Kill()
			t.Fatal("the engine never listed the tools")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := engine.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()
	for alive(pid) {
		if t.Context().Err() != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the server %d outlived the engine", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// runEngine starts a lingering fault server through a Source, says so, and
// waits to be killed.
func runEngine(dir string) {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := faultServerConfig(exe, "lingerer", "ok", map[string]string{
		"NOETA_MCP_PIDFILE": filepath.Join(dir, "pid"), "NOETA_MCP_LINGER": "1"})
	s := New(srv, Options{})
	if _, err := s.Tools(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(dir, "listed"), nil, 0o600); err != nil {
		os.Exit(1)
	}
	select {}
}
