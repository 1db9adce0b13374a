package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type shellOut struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timed_out"`
}

func decodeShell(t *testing.T, res Result) shellOut {
	t.Helper()
	var out shellOut
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	return out
}

func cmdArgs(command string, timeout ...float64) string {
	m := map[string]any{"command": command}
	if len(timeout) > 0 {
		m["timeout_seconds"] = timeout[0]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestShellArgs(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{ShellTimeout: 10 * time.Second}, "shell")
	for _, tt := range []struct{ name, args, want string }{
		{"no command", `{}`, "shell: args.command is required"},
		{"empty command", `{"command":"  "}`, "shell: args.command must not be empty"},
		{"command not a string", `{"command":["ls"]}`, "shell: args.command must be a string, not an array"},
		{"zero timeout", `{"command":"true","timeout_seconds":0}`, "shell: args.timeout_seconds must be > 0, not 0"},
		{"negative timeout", `{"command":"true","timeout_seconds":-1}`, "shell: args.timeout_seconds must be > 0, not -1"},
		{"timeout over the max", `{"command":"true","timeout_seconds":11}`, "shell: args.timeout_seconds 11 is over the maximum of 10"},
		{"timeout not a number", `{"command":"true","timeout_seconds":"5"}`, "shell: args.timeout_seconds must be a number, not a string"},
		{"unknown argument", `{"command":"true","cwd":"/"}`, `shell: unknown argument "cwd" (want command, timeout_seconds)`},
		{"not an object", `"ls"`, "shell: args must be a JSON object, not a string"},
	} {
		t.Run(tt.name, func(t *testing.T) { mustFail(t, shell, ws, tt.args, tt.want) })
	}
}

func TestShellRuns(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "hello.txt"), "hi")
	shell := builtin(t, BuiltinConfig{}, "shell")

	res := mustOK(t, shell, ws, cmdArgs("echo out; echo err >&2; cat hello.txt"), nil)
	if out := decodeShell(t, res); out != (shellOut{ExitCode: 0, Stdout: "out\nhi", Stderr: "err\n"}) {
		t.Fatalf("got %+v", out)
	}

	res = mustFail(t, shell, ws, cmdArgs("echo partial; exit 3"), "exit status 3")
	if out := decodeShell(t, res); out.ExitCode != 3 || out.Stdout != "partial\n" || out.TimedOut {
		t.Fatalf("exit 3: %+v", out)
	}
	if res.Error != "exit status 3" {
		t.Fatalf("Error = %q", res.Error)
	}

	res = mustFail(t, shell, ws, cmdArgs("kill -TERM $$"), "signal: terminated")
	if out := decodeShell(t, res); out.ExitCode != -1 || out.TimedOut {
		t.Fatalf("signalled: %+v", out)
	}

	// It runs in the workspace, as a real subprocess, with stdin closed.
	res = mustOK(t, shell, ws, cmdArgs(`pwd; echo "$HOME"; cat; echo touched > made.txt`), nil)
	real, _ := filepath.EvalSymlinks(ws)
	out := decodeShell(t, res)
	if lines := strings.Split(out.Stdout, "\n"); len(lines) < 2 || (lines[0] != ws && lines[0] != real) || lines[1] != ws {
		t.Fatalf("pwd and HOME: %q, want %s", out.Stdout, ws)
	}
	if got := readFile(t, filepath.Join(ws, "made.txt")); got != "touched\n" {
		t.Fatalf("made.txt = %q", got)
	}
}

// Not parallel: it sets an environment variable of the test process.
func TestShellEnvironment(t *testing.T) {
	t.Setenv("NOETA_TEST_SECRET", "hunter2")
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{}, "shell")
	out := decodeShell(t, mustOK(t, shell, ws, cmdArgs("env"), nil))
	if strings.Contains(out.Stdout, "hunter2") {
		t.Fatalf("the engine's environment leaked: %s", out.Stdout)
	}
	vars := map[string]string{}
	for line := range strings.Lines(out.Stdout) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		vars[k] = v
	}
	if vars["HOME"] != ws || vars["LANG"] != "C" || vars["PATH"] != os.Getenv("PATH") {
		t.Fatalf("env: %v", vars)
	}
	for k := range vars {
		switch k {
		case "HOME", "LANG", "PATH", "PWD", "SHLVL", "_", "OLDPWD":
		default:
			t.Errorf("unexpected variable %s in %v", k, vars)
		}
	}
}

func TestShellOutputCap(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{OutputCap: 64 << 10}, "shell")

	res := mustOK(t, shell, ws, cmdArgs(`head -c 1048576 /dev/zero | tr '\0' a; echo small >&2`), nil)
	out := decodeShell(t, res)
	if len(out.Stdout) != 64<<10 || strings.Trim(out.Stdout, "a") != "" || !out.Truncated || out.Stderr != "small\n" {
		t.Fatalf("1 MB of stdout: len %d truncated %v stderr %q", len(out.Stdout), out.Truncated, out.Stderr)
	}
	res = mustOK(t, shell, ws, cmdArgs(`head -c 1048576 /dev/zero | tr '\0' b >&2`), nil)
	if out := decodeShell(t, res); len(out.Stderr) != 64<<10 || out.Stdout != "" || !out.Truncated {
		t.Fatalf("1 MB of stderr: len %d truncated %v", len(out.Stderr), out.Truncated)
	}
	res = mustOK(t, shell, ws, cmdArgs(`head -c 65536 /dev/zero | tr '\0' c`), nil)
	if out := decodeShell(t, res); len(out.Stdout) != 64<<10 || out.Truncated {
		t.Fatalf("exactly the cap: len %d truncated %v", len(out.Stdout), out.Truncated)
	}
	// A cut through a character drops the broken character.
	small := builtin(t, BuiltinConfig{OutputCap: 5}, "shell")
	res = mustOK(t, small, ws, cmdArgs(`printf 'ééé'`), nil)
	if out := decodeShell(t, res); out.Stdout != "éé" || !out.Truncated {
		t.Fatalf("cut character: %q truncated %v", out.Stdout, out.Truncated)
	}
}

// Not parallel, so that the allocation count is this test's own.
func TestShellOutputMemoryBounded(t *testing.T) {
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{OutputCap: 64 << 10}, "shell")
	const printed = 64 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n := strconv.Itoa(printed)
	res := mustOK(t, shell, ws, cmdArgs("head -c "+n+" /dev/zero | tr '\\0' a; head -c "+n+" /dev/zero | tr '\\0' b >&2"), nil)
	runtime.ReadMemStats(&after)
	out := decodeShell(t, res)
	if len(out.Stdout) != 64<<10 || len(out.Stderr) != 64<<10 || !out.Truncated {
		t.Fatalf("got %d and %d bytes, truncated %v", len(out.Stdout), len(out.Stderr), out.Truncated)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("printed %d MiB, allocated %d KiB", 2*printed>>20, alloc>>10)
	if alloc > 2<<20 {
		t.Fatalf("a call that printed %d MiB allocated %d KiB; want it bounded by the cap", 2*printed>>20, alloc>>10)
	}
}

func TestShellTimeoutKillsTheProcessTree(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{ShellTimeout: 10 * time.Second}, "shell")
	start := time.Now()
	res := mustFail(t, shell, ws, cmdArgs(`echo $$; sleep 30 & sleep 30; wait`, 0.5), "shell: timed out after 500ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 0.5s timeout returned after %v", d)
	}
	out := decodeShell(t, res)
	if !out.TimedOut || out.ExitCode != -1 {
		t.Fatalf("got %+v", out)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(out.Stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", out.Stdout, err)
	}
	wantGroupGone(t, pgid)
}

func TestShellDefaultTimeout(t *testing.T) {
	t.Parallel()
	shell := builtin(t, BuiltinConfig{ShellTimeout: 300 * time.Millisecond}, "shell")
	res := mustFail(t, shell, t.TempDir(), cmdArgs(`sleep 30`), "timed out after 300ms")
	if out := decodeShell(t, res); !out.TimedOut {
		t.Fatalf("got %+v", out)
	}
	// A timeout too short to start the shell in is still a timeout.
	res = mustFail(t, shell, t.TempDir(), cmdArgs(`true`, 1e-12), "timed out after 0s")
	if out := decodeShell(t, res); !out.TimedOut || out.ExitCode != -1 {
		t.Fatalf("got %+v", out)
	}
}

func TestShellLeavesNoProcessBehind(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{}, "shell")
	start := time.Now()
	// The shell exits at once; its background child holds stdout open.
	res := mustOK(t, shell, ws, cmdArgs(`echo $$; sleep 30 &`), nil)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("returned after %v", d)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(decodeShell(t, res).Stdout))
	if err != nil {
		t.Fatal(err)
	}
	wantGroupGone(t, pgid)
}

func TestShellEscapedProcessDoesNotHang(t *testing.T) {
	t.Parallel()
	// The escaping process is this test binary itself (see
	// TestHelperEscapeGroup), so the test needs no setsid(1) on the machine.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	shell := builtin(t, BuiltinConfig{}, "shell")
	start := time.Now()
	// The shell returns once the escapee has said its pid (it touches
	// "escaped" after printing it): a fixed pause lost the race to the
	// start of a race-built binary on a loaded machine. The escapee then
	// holds the pipes for 30s; the call must not wait for it.
	cmd := fmt.Sprintf(`NOETA_TOOLS_ESCAPE_GROUP=1 '%s' -test.run='^TestHelperEscapeGroup$' & i=0; while [ ! -e escaped ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done`, exe)
	res := mustOK(t, shell, ws, cmdArgs(cmd), nil)
	if d := time.Since(start); d > 25*time.Second {
		t.Fatalf("a process holding the pipes kept the call for %v", d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(decodeShell(t, res).Stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", decodeShell(t, res).Stdout, err)
	}
	syscall.Kill(pid, syscall.SIGKILL) // it left the group, so it is ours to end
}

func TestShellHonoursContext(t *testing.T) {
	t.Parallel()
	shell := builtin(t, BuiltinConfig{}, "shell")

	ws := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := run(t, ctx, shell, ws, cmdArgs(`echo $$ > pgid; sleep 30 & sleep 30; wait`))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a cancelled call returned after %v", d)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(ws, "pgid"))))
	if err != nil {
		t.Fatal(err)
	}
	wantGroupGone(t, pgid)

	// The engine's deadline is not the tool's timeout: it ends the call
	// with an error.
	dctx, dcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer dcancel()
	if _, err := run(t, dctx, shell, t.TempDir(), cmdArgs(`sleep 30`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: got %v, want context.DeadlineExceeded", err)
	}

	done, cancel3 := context.WithCancel(t.Context())
	cancel3()
	ws3 := t.TempDir()
	if _, err := run(t, done, shell, ws3, cmdArgs(`touch ran`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("already cancelled: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws3, "ran")); err == nil {
		t.Fatal("a call with a cancelled context ran")
	}
}

func TestShellCannotStart(t *testing.T) {
	t.Parallel()
	shell := builtin(t, BuiltinConfig{ShellPath: "/nonexistent/sh"}, "shell")
	_, err := run(t, t.Context(), shell, t.TempDir(), cmdArgs("true"))
	if err == nil || !strings.Contains(err.Error(), "shell: start /nonexistent/sh") {
		t.Fatalf("got %v, want a start error", err)
	}
}

// TestHelperEscapeGroup is not a test of its own: run by
// TestShellEscapedProcessDoesNotHang as a child of the shell, it leaves the
// shell's process group with setsid(2), prints its pid and holds the shell's
// pipes open. In a normal test run it returns at once.
func TestHelperEscapeGroup(t *testing.T) {
	if os.Getenv("NOETA_TOOLS_ESCAPE_GROUP") != "1" {
		return
	}
	if _, err := syscall.Setsid(); err != nil {
		fmt.Println("setsid:", err)
		os.Exit(1)
	}
	fmt.Println(os.Getpid())
	if err := os.WriteFile("escaped", nil, 0o600); err != nil {
		fmt.Println("escaped:", err)
	}
	time.Sleep(30 * time.Second)
	os.Exit(0)
}
