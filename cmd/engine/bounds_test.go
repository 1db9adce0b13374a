package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rssCeiling is the most memory (peak RSS) an engine process may use to read
// any input up to the stated limits, however it is shaped.
const rssCeiling = 256 << 20

// helperArgsEnv carries the arguments of TestHelperEngine, JSON-encoded.
const helperArgsEnv = "NOETA_ENGINE_HELPER_ARGS"

// TestHelperEngine is not a test of its own: run by hostileRun as a fresh
// process, it is the engine command with the arguments of helperArgsEnv,
// and then writes its peak RSS (VmHWM) to stdout. VmHWM, not the rusage a
// parent gets: on Linux a child's ru_maxrss starts at its parent's RSS at
// the time of the exec, here the whole test binary's. In a normal test run
// it returns at once.
func TestHelperEngine(t *testing.T) {
	enc := os.Getenv(helperArgsEnv)
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, args, io.Discard, os.Stderr)
	stop()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			fmt.Println(l)
		}
	}
	os.Exit(code)
}

// hostileRun runs the engine command with args in dir, in a fresh process,
// and returns its exit code, its stderr and its peak RSS. A process still
// running after a minute (the old code on a FIFO, or on /dev/zero) is sent
// SIGINT, then killed, and the test fails: none of these inputs may hold a
// command.
func hostileRun(t *testing.T, dir string, args ...string) (int, string, int64) {
	t.Helper()
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEngine$")
	cmd.Env = append(os.Environ(), helperArgsEnv+"="+string(enc))
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		t.Errorf("engine %s: still running after a minute", strings.Join(args, " "))
	}
	var kb int64 = -1
	for l := range strings.SplitSeq(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	if kb < 0 {
		t.Errorf("engine %s: no VmHWM reported; stdout %q", strings.Join(args, " "), out.String())
	}
	return cmd.ProcessState.ExitCode(), errb.String(), kb << 10
}

// hostileFiles writes the inputs of TestHostileInputs into dir.
func hostileFiles(t *testing.T, dir string) {
	t.Helper()
	write := func(name string, body []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const mib = 1 << 20
	write("noeta.yaml", []byte("agents:\n  a:\n    tools: [echo]\n"))
	// Task files for an agent the config does not have: the file is read
	// and parsed whole, then refused, before any server starts.
	head := "agent: nobody\ngoal: g\nscript:\n- finish:\n    answer: "
	pad := func(s string, n int) string { return s + strings.Repeat("x", max(0, n-len(s))) }
	write("task-scalar.yaml", []byte(pad(head+"\"", mib-2)+"\"\n"))
	write("task-big.yaml", []byte(pad(head, mib+1)))
	// As many indicators as the node check allows, the rest one scalar.
	k := (200_000 - 8) / 5
	write("task-flow.yaml", []byte(pad(head+"["+strings.Repeat("a,", k-10), mib-2)+"]\n"))
	write("task-nulls.yaml", []byte(head+"\n"+strings.Repeat("      -\n", k-20)))
	write("task-flow-10mb.yaml", []byte("["+strings.Repeat("a,", 5*mib)+"a]"))
	write("task-deep.yaml", []byte(strings.Repeat("[", mib/2)+strings.Repeat("]", mib/2)))
	write("task-bomb.yaml", []byte("agent: nobody\ngoal: g\nscript:\n- finish:\n    answer:\n"+
		"      a: &a [x,x,x,x,x,x,x,x,x,x]\n      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"+
		"      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"+
		"      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n      h: [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"))
	write("task.yaml", []byte("agent: a\ngoal: g\nscript:\n- finish: {answer: done}\n"))
	// Configs at the limits.
	kc := (100_000 - 8) / 5
	write("config-tools.yaml", []byte("agents:\n  a:\n    tools: ["+strings.Repeat("echo,", kc-10)+"echo]\n"))
	write("config-bomb.yaml", []byte("rules:\n  - match_tool: echo\n    action: deny\n    match_arg:\n      path: x\n      equals:\n"+
		"        a: &a [x,x,x,x,x,x,x,x,x,x]\n        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n        c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"+
		"        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n        e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n        f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"+
		"        g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n        h: [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"))
	write("config-keys.yaml", []byte(pad("agents:\n  a:\n    budget: {max_iterations: 1}\n# ", mib-1)+"\n"))
	write("config-big.yaml", []byte(pad("agents: {}\n# ", mib+1)))
	// Serve configs.
	write("serve-big.yaml", []byte(pad("workers: 2\n# ", 64<<10+1)))
	write("serve-flow.yaml", []byte("["+strings.Repeat("a,", 32<<10-2)+"a]"))
	// Audit trails: one endless line, and many short ones.
	write("audit-long-line.jsonl", bytes.Repeat([]byte("x"), 20*mib))
	write("audit-lines.jsonl", bytes.Repeat([]byte("{}\n"), 200_000))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestHostileInputs runs the engine binary on every file it reads — task
// file, --config, --serve-config, audit verify — given as a device, a FIFO,
// a directory, an oversized file, and adversarial YAML up to the limits
// (long flow lists, nulls, deep nesting, an alias bomb), and holds each run
// to exit 2 with a message naming the problem, and to a peak RSS under 256
// MB.
//
// Reproduction (before): `engine run /dev/zero`, `--config /dev/zero` and
// `engine audit verify /dev/zero` grew to ~24 GB until the kernel killed
// them; a FIFO blocked them in open(2), deaf to SIGINT and SIGTERM; a 10 MB
// YAML flow list cost 1.1 GB.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hostileFiles(t, dir)
	data := filepath.Join(dir, "data")
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"task /dev/zero", []string{"run", "/dev/zero"}, exitUsage, "task file: read /dev/zero: not a regular file (a character device)"},
		{"task FIFO", []string{"run", "fifo"}, exitUsage, "task file: read fifo: not a regular file (a FIFO)"},
		{"task directory", []string{"run", "dir"}, exitUsage, "task file: read dir: not a regular file (a directory)"},
		{"task /dev/stdin", []string{"run", "/dev/stdin"}, exitUsage, "not a regular file"},
		{"task over 1 MiB", []string{"run", "task-big.yaml"}, exitUsage, "task-big.yaml: file too large: over the limit of 1 MiB"},
		{"task 1 MiB scalar", []string{"run", "task-scalar.yaml"}, exitUsage, `agent: "nobody" is not an agent`},
		{"task flow list at the node limit", []string{"run", "task-flow.yaml"}, exitUsage, `agent: "nobody" is not an agent`},
		{"task nulls at the node limit", []string{"run", "task-nulls.yaml"}, exitUsage, `agent: "nobody" is not an agent`},
		{"task 10 MB flow list", []string{"run", "task-flow-10mb.yaml"}, exitUsage, "over the limit of 1 MiB"},
		{"task deep nesting", []string{"run", "task-deep.yaml"}, exitUsage, "too many YAML nodes"},
		{"task alias bomb", []string{"run", "task-bomb.yaml"}, exitUsage, "expands to more than 200000 values"},
		{"config /dev/zero", []string{"run", "task.yaml", "--config", "/dev/zero"}, exitUsage, "--config: read /dev/zero: not a regular file (a character device)"},
		{"config FIFO", []string{"run", "task.yaml", "--config", "fifo"}, exitUsage, "--config: read fifo: not a regular file (a FIFO)"},
		{"config directory", []string{"run", "task.yaml", "--config", "dir"}, exitUsage, "not a regular file (a directory)"},
		{"config over 1 MiB", []string{"run", "task.yaml", "--config", "config-big.yaml"}, exitUsage, "over the limit of 1 MiB"},
		{"config 10 MB flow list", []string{"run", "task.yaml", "--config", "task-flow-10mb.yaml"}, exitUsage, "over the limit of 1 MiB"},
		{"config alias bomb", []string{"run", "task.yaml", "--config", "config-bomb.yaml"}, exitUsage, "config-bomb.yaml:8: rules[0].match_arg.equals.e[7][0][7][0]: the document is too large"},
		{"config tools at the node limit", []string{"run", "task-scalar.yaml", "--config", "config-tools.yaml"}, exitUsage, `agent: "nobody" is not an agent`},
		{"config 1 MiB", []string{"run", "task-scalar.yaml", "--config", "config-keys.yaml"}, exitUsage, `agent: "nobody" is not an agent`},
		{"serve config /dev/zero", []string{"serve", "--serve-config", "/dev/zero", "--print-config"}, exitUsage, "--serve-config: read /dev/zero: not a regular file"},
		{"serve config FIFO", []string{"serve", "--serve-config", "fifo", "--print-config"}, exitUsage, "a FIFO"},
		{"serve config directory", []string{"serve", "--serve-config", "dir", "--print-config"}, exitUsage, "a directory"},
		{"serve config over 64 KiB", []string{"serve", "--serve-config", "serve-big.yaml", "--print-config"}, exitUsage, "over the limit of 64 KiB"},
		{"serve config flow list", []string{"serve", "--serve-config", "serve-flow.yaml", "--print-config"}, exitUsage, "want a mapping of settings"},
		{"audit /dev/zero", []string{"audit", "verify", "/dev/zero"}, exitUsage, "audit verify: observers: audit verify: read /dev/zero: not a regular file"},
		{"audit FIFO", []string{"audit", "verify", "fifo"}, exitUsage, "a FIFO"},
		{"audit directory", []string{"audit", "verify", "dir"}, exitUsage, "a directory"},
		{"audit 20 MiB line", []string{"audit", "verify", "audit-long-line.jsonl"}, exitFailed, ""},
		{"audit 200000 lines", []string{"audit", "verify", "audit-lines.jsonl"}, exitFailed, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, errOut, rss := hostileRun(t, dir, append(tt.args, "--data", data)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %.600q; want exit %d and %q", code, errOut, tt.code, tt.want)
			}
			if rss > rssCeiling {
				t.Errorf("peak RSS %d MB, over the ceiling of %d MB", rss>>20, rssCeiling>>20)
			}
			t.Logf("peak RSS %d MB", rss>>20)
		})
	}
}

// TestAuditVerifyInterrupted: a long audit verify ends on SIGINT.
//
// Reproduction (before): the read did not look at the signal context, so
// `engine audit verify` of a large file (here a 1 TiB sparse one, which
// reads at a few GB/s) ran to its end whatever signal came.
func TestAuditVerifyInterrupted(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "huge.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(engineBin, "audit", "verify", path)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Once it has read 64 MiB it is past start-up, with its signal
	// context installed.
	for readBytes(cmd.Process.Pid) < 64<<20 {
		select {
		case <-done:
			t.Fatalf("exited before the signal: %v, %s", cmd.ProcessState, errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("still reading a minute after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != exitFailed || !strings.Contains(errb.String(), "audit verify: interrupted") {
		t.Fatalf("exit %d, stderr %q; want 1 and interrupted", code, errb.String())
	}
}

// readBytes is what process pid has read so far (/proc/pid/io rchar).
func readBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// TestUsageErrorsUpFront: mistakes of the command line or the config are
// usage errors (exit 2) found before anything starts, each named.
//
// Reproduction (before): `engine run --workers 100000` took 12 s and 2 GB
// and then failed with "context deadline exceeded" (exit 1); `--data
// /etc/passwd` exited 1 once the embedded server could not start there; a
// config naming an unknown tool (tools: [shel]) was accepted, and the run
// failed only when the agent's first task ran; a serve config reported only
// its first mistake.
func TestUsageErrorsUpFront(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := file("noeta.yaml", "agents:\n  a:\n    tools: [echo]\n")
	task := file("task.yaml", "agent: a\ngoal: g\nscript:\n- finish: {answer: done}\n")
	badTools := file("bad-tools.yaml", "agents:\n  a:\n    tools: [echo, shel]\n    permissions:\n      denied_tools: [write]\nrules:\n  - {match_tool: \"bash*\", action: deny}\n")
	serveCfg := file("serve.yaml", "workers: four\ngrace: soon\ncolour: red\nchild: maybe\nworkers: 3\n")
	data := filepath.Join(dir, "data")
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"workers over the maximum", []string{"run", task, "--config", cfg, "--workers", "100000"}, []string{"--workers is 100000; it must be from 1 to 1024"}},
		{"workers 0", []string{"run", task, "--config", cfg, "--workers", "0"}, []string{"--workers is 0; it must be from 1 to 1024"}},
		{"serve workers over the maximum", []string{"serve", "--config", cfg, "--workers", "1025"}, []string{"--workers is 1025"}},
		{"data is a file", []string{"run", task, "--config", cfg, "--data", "/etc/passwd"}, []string{"--data /etc/passwd is not a directory"}},
		{"data under a file", []string{"tasks", "--data", "/etc/passwd/x"}, []string{"--data /etc/passwd/x: a parent of it is not a directory"}},
		{"data of a read verb is a file", []string{"events", "T1", "--data", "/etc/passwd"}, []string{"--data /etc/passwd is not a directory"}},
		{"data of the demo is a file", []string{"demo", "--data", "/etc/passwd"}, []string{"--data /etc/passwd is not a directory"}},
		{"unknown tools", []string{"run", task, "--config", badTools, "--data", data}, []string{
			badTools + `:3: agents.a.tools[1]: unknown tool "shel"`,
			badTools + `:5: agents.a.permissions.denied_tools[0]: unknown tool "write"`,
			badTools + `:7: rules[0].match_tool: "bash*" matches no tool`,
		}},
		{"serve config: every mistake", []string{"serve", "--serve-config", serveCfg, "--print-config"}, []string{
			serveCfg + `: colour: unknown key (line 3`,
			serveCfg + `: workers: given twice (line 5)`,
			serveCfg + `: workers: must be a number, not "four" (line 1)`,
			serveCfg + `: grace: must be a duration such as 30s or 1m, not "soon" (line 2)`,
			serveCfg + `: child: must be true or false, not "maybe" (line 4)`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCmd(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}
