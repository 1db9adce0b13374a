package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/tools/sandbox"

	"github.com/noeta-go/noeta/examples/demo"
)

// engineBin is the engine binary built from this package, for the tests
// that run it as a subprocess (serve on several "hosts").
var engineBin string

func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Whatever the test binary's stdin is, --approvals defaults to leave.
	stdinIsTerminal = func() bool { return false }
	if os.Getenv(helperArgsEnv) != "" {
		return m.Run() // a re-run of this binary as an engine (TestHelperEngine)
	}
	dir, err := os.MkdirTemp("", "noeta-engine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	engineBin = filepath.Join(dir, "engine")
	args := []string{"build", "-o", engineBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build engine:", err)
		return 1
	}
	// The sandbox's helper, for the engines these tests run in process
	// and as processes alike: without it every shell call re-executes
	// this (race-built, large) binary.
	helper := filepath.Join(dir, sandbox.HelperName)
	build = exec.Command("go", "build", "-o", helper, "../noeta-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static: it starts faster
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build noeta-sandbox:", err)
		return 1
	}
	os.Setenv(sandbox.HelperEnv, helper)
	return m.Run()
}

// syncBuffer is a bytes.Buffer that the command's goroutines may write
// concurrently (the timeline, and log lines from workers).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// watch, if set, is called with everything written so far after each
	// write.
	watch func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	s := b.buf.String()
	watch := b.watch
	b.mu.Unlock()
	if watch != nil {
		watch(s)
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runCmd runs the command with a generous deadline and returns its exit
// code, stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out, errb syncBuffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

const exampleConfig = "../../examples/noeta.yaml"

// hasOut reports whether out contains want, where <nonce> in want stands for
// the nonce that ends an approval handle.
func hasOut(out, want string) bool {
	if !strings.Contains(want, "<nonce>") {
		return strings.Contains(out, want)
	}
	re := strings.ReplaceAll(regexp.QuoteMeta(want), "<nonce>", "[0-9a-hjkmnp-tv-z]{10}")
	return regexp.MustCompile(re).MatchString(out)
}

func example(name string) string { return filepath.Join("../../examples", name) }

// workspace is a fresh workspace holding a README.md and the given files.
func workspace(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range append([]string{"README.md"}, files...) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("# test\nhello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDemo(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCmd(t, "demo", "--data", t.TempDir())
	if code != exitDone {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		// every guard that decided, with its reason
		"ToolCallDenied        guard=budget  echo call-1-1: max_tool_calls",
		"ToolCallDenied        guard=permission  write_file call-1-0: ",
		"ToolCallDenied        guard=rules  shell call-1-0: destructive shell command",
		"ApprovalRequested     guard=repetition  approval-call-1-2-<nonce> echo call-1-2",
		"ApprovalRequested     guard=permission  approval-call-1-0-<nonce> shell call-1-0 {\"command\":\"ls\"}",
		// the approvals and the refusal, by the command line
		"ApprovalResolved      approval-call-1-2-<nonce> approve by cli",
		"ApprovalResolved      approval-call-1-0-<nonce> approve by cli",
		"ApprovalResolved      approval-call-1-0-<nonce> deny by cli",
		// the approved call ran in the demo's workspace
		`"stdout":"README.md\n"`,
		"all 8 examples ended as expected",
	} {
		if !hasOut(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n := strings.Count(out, "SubtaskSpawned"); n != 3 {
		t.Errorf("%d SubtaskSpawned lines, want 3", n)
	}
	if n := strings.Count(out, "SubtaskResultRecorded"); n != 3 {
		t.Errorf("%d SubtaskResultRecorded lines, want 3", n)
	}
	if n := len(regexp.MustCompile(`(?m)^\s+[0-9.]+s  child .*TaskCompleted`).FindAllString(out, -1)); n != 3 {
		t.Errorf("%d children completed, want 3", n)
	}
	for name := range demo.Cases {
		base := strings.TrimSuffix(name, ".yaml")
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(base) + `\s.*completed, as expected`).MatchString(out) {
			t.Errorf("summary has no line for %s ending as expected", base)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
}

func TestRunExitCodes(t *testing.T) {
	failing := writeFile(t, "fail.yaml", `agent: researcher
goal: "Give up"
script:
  - tool_calls: [{tool: echo, args: {text: trying}}]
  - fail: {error: "could not do it"}
`)
	question := writeFile(t, "question.yaml", `agent: researcher
goal: "Ask a human"
script:
  - yield_for_human: {question: "which file?"}
  - finish: {answer: "thanks"}
`)
	denyFinish := writeFile(t, "budget.yaml", `agent: frugal
goal: "Spend too much"
script:
  - tool_calls: [{tool: echo, args: {text: a}}]
    cost_usd: 0.5
  - finish: {answer: done}
`)
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		wantOut   []string
		wantNoOut []string
	}{
		{"allowed call", []string{example("01-allowed-call.yaml")}, exitDone,
			[]string{"TaskCompleted         answer \"The README says hello.\"", "completed: task "}, nil},
		{"approval left waiting", []string{example("06-approval-granted.yaml"), "--approvals", "leave"}, exitWaiting,
			[]string{"waiting for approval: task ", "handle approval-call-1-0-<nonce>\n", `shell call-1-0 {"command":"ls"}`, "guard permission: ", "engine approve "},
			[]string{"ToolCallStarted"}},
		{"approval left waiting by default without a terminal", []string{example("06-approval-granted.yaml")}, exitWaiting,
			[]string{"approvals leave", "handle approval-call-1-0-<nonce>\n"}, nil},
		{"approval granted", []string{example("06-approval-granted.yaml"), "--approvals", "approve"}, exitDone,
			[]string{"approval-call-1-0-<nonce> approve by cli", "ToolCallStarted       shell call-1-0", "marker.txt"}, nil},
		{"approval refused", []string{example("07-approval-refused.yaml"), "--approvals", "deny"}, exitDone,
			[]string{"approval-call-1-0-<nonce> deny by " + approvals.LocalApprover() + ": refused from the command line", `answer "no date, the approver said no"`},
			[]string{"ToolCallStarted"}},
		{"repetition approved", []string{example("05-repetition-approval.yaml"), "--approvals=approve"}, exitDone,
			[]string{"guard=repetition", "approval-call-1-2-<nonce> approve by cli"}, nil},
		{"fan-out", []string{example("08-fan-out.yaml"), "--workers", "2"}, exitDone,
			[]string{"subtask_group_completed", `answer "1, 2 and 3"`}, nil},
		{"script fails", []string{failing}, exitFailed,
			[]string{"TaskFailed            could not do it", "failed: task "}, nil},
		{"budget denial does not fail the task", []string{denyFinish}, exitDone,
			[]string{"cost=$0.5"}, nil},
		{"waiting for a human answer", []string{question}, exitWaiting,
			[]string{"waiting for a human: task ", "handle question-1", "waiting_human: which file?"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run"}, tc.args...)
			args = append(args, "--config", exampleConfig, "--data", t.TempDir(), "--workspace", workspace(t, "marker.txt"))
			code, out, errOut := runCmd(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !hasOut(out, w) {
					t.Errorf("stdout lacks %q", w)
				}
			}
			for _, w := range tc.wantNoOut {
				if strings.Contains(out, w) {
					t.Errorf("stdout has %q", w)
				}
			}
			if strings.Contains(errOut, "level=") {
				t.Errorf("the engine logged warnings:\n%s", errOut)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			}
		})
	}
}

func TestRunUsageErrors(t *testing.T) {
	badConfig := writeFile(t, "noeta.yaml", `agents:
  researcher:
    tools: [echo]
    colour: red
`)
	badTask := writeFile(t, "task.yaml", `agent: researcher
goal: "x"
script:
  - tool_calls: [{tool: echo, args: "not a mapping"}]
`)
	unknownAgent := writeFile(t, "agent.yaml", `agent: nobody
goal: "x"
script:
  - finish: {answer: 1}
`)
	ok := example("01-allowed-call.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"unknown config key", []string{"run", ok, "--config", badConfig},
			[]string{badConfig + ":4: agents.researcher.colour: unknown key"}},
		{"unreadable config", []string{"run", ok, "--config", "/nonexistent/noeta.yaml"},
			[]string{"--config", "/nonexistent/noeta.yaml"}},
		{"no config and no noeta.yaml here", []string{"run", ok},
			[]string{"--config FILE", "no noeta.yaml in the working directory"}},
		{"missing task file", []string{"run", "/nonexistent/task.yaml", "--config", exampleConfig},
			[]string{"task file", "/nonexistent/task.yaml"}},
		{"invalid task file", []string{"run", badTask, "--config", exampleConfig},
			[]string{badTask + ":4: script[0].tool_calls[0].args: must be a mapping"}},
		{"agent not in the config", []string{"run", unknownAgent, "--config", exampleConfig},
			[]string{`agent: "nobody" is not an agent of`, "researcher"}},
		{"unknown flag", []string{"run", ok, "--config", exampleConfig, "--colour"},
			[]string{"unknown flag: --colour"}},
		{"bad approvals", []string{"run", ok, "--config", exampleConfig, "--approvals", "maybe"},
			[]string{`--approvals "maybe"`}},
		{"no workers", []string{"run", ok, "--config", exampleConfig, "--workers", "0"},
			[]string{"--workers is 0"}},
		{"workspace is not a directory", []string{"run", ok, "--config", exampleConfig, "--workspace", exampleConfig},
			[]string{"--workspace", "is not a directory"}},
		{"no task file", []string{"run", "--config", exampleConfig}, []string{"accepts 1 arg(s), received 0"}},
		{"two task files", []string{"run", ok, ok, "--config", exampleConfig}, []string{"accepts 1 arg(s), received 2"}},
		{"unknown verb", []string{"frobnicate"}, []string{`unknown verb "frobnicate"`}},
		{"no verb", nil, []string{"name a verb"}},
		{"demo takes no arguments", []string{"demo", "now"}, []string{`unknown command "now"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			code, out, errOut := runCmd(t, append(tc.args, "--data", data)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitUsage, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			// Bad usage is refused before anything starts.
			if entries, _ := os.ReadDir(data); len(entries) != 0 {
				t.Errorf("the data directory was used: %v", entries)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"demo", "-h"}} {
		code, out, _ := runCmd(t, args...)
		if code != exitDone || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, output:\n%s", args, code, out)
		}
	}
}

// TestJSON checks every line of --json: a CloudEvent of the tree, and the log
// records of each task dense from 1.
func TestJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCmd(t, "run", example("08-fan-out.yaml"), "--json",
		"--config", exampleConfig, "--data", t.TempDir(), "--workspace", workspace(t))
	if code != exitDone {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "completed: task ") {
		t.Errorf("stderr lacks the outcome:\n%s", errOut)
	}
	seqs := map[string][]uint64{}
	inbox := map[string][]string{}
	var root string
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ce map[string]any
		if err := json.Unmarshal([]byte(line), &ce); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, line)
		}
		typ, _ := ce["type"].(string)
		subject, _ := ce["subject"].(string)
		if ce["specversion"] != "1.0" || !strings.HasPrefix(typ, "noeta.") || subject == "" || ce["id"] == "" || ce["time"] == "" {
			t.Fatalf("line %d lacks a CloudEvents attribute: %s", i+1, line)
		}
		if i == 0 {
			root = subject
			if typ != "noeta.TaskCreated" {
				t.Errorf("first line is %s, want the root's TaskCreated", typ)
			}
		}
		if cid := ce["correlationid"]; cid != root {
			t.Errorf("line %d: correlationid %v, want the root %s", i+1, cid, root)
		}
		if _, ok := ce["data"].(map[string]any); !ok {
			t.Errorf("line %d: data is not an object: %s", i+1, line)
		}
		if key, ok := ce["inboxkey"].(string); ok {
			if _, has := ce["sequence"]; has {
				t.Errorf("line %d: an inbox record with a sequence: %s", i+1, line)
			}
			inbox[subject] = append(inbox[subject], key)
			continue
		}
		s, _ := ce["sequence"].(string)
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("line %d: sequence %v: %v", i+1, ce["sequence"], err)
		}
		seqs[subject] = append(seqs[subject], n)
	}
	if len(seqs) != 4 {
		t.Errorf("records of %d tasks, want the root and its 3 subtasks", len(seqs))
	}
	for task, list := range seqs {
		for i, n := range list {
			if n != uint64(i+1) {
				t.Errorf("task %s: sequences %v are not dense from 1", task, list)
				break
			}
		}
	}
	if len(inbox[root]) != 3 {
		t.Errorf("root inbox records %v, want 3", inbox[root])
	}
	if want := 18; len(seqs[root]) != want {
		t.Errorf("root has %d records, want %d", len(seqs[root]), want)
	}
}

// TestAsk answers approvals on "the terminal" (stdin replaced).
func TestAsk(t *testing.T) {
	defer func(r func() bool) { stdinIsTerminal = r }(stdinIsTerminal)
	defer func(r io.Reader) { stdin = r }(stdin)
	for _, tc := range []struct {
		name, input string
		args        []string
		code        int
		want        string
	}{
		{"yes", "y\n", []string{"--approvals", "ask"}, exitDone, "approval-call-1-0-<nonce> approve by " + approvals.LocalApprover() + ": answered on the terminal"},
		{"no", "n\n", []string{"--approvals", "ask"}, exitDone, "approval-call-1-0-<nonce> deny by " + approvals.LocalApprover() + ": answered on the terminal"},
		{"empty answer is no", "\n", []string{"--approvals", "ask"}, exitDone, "approval-call-1-0-<nonce> deny by cli"},
		{"no input leaves it waiting", "", []string{"--approvals", "ask"}, exitWaiting, "waiting for approval"},
		{"ask is the default on a terminal", "yes\n", nil, exitDone, "approve by cli"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin = strings.NewReader(tc.input)
			stdinIsTerminal = func() bool { return true }
			args := append([]string{"run", example("06-approval-granted.yaml"), "--config", exampleConfig,
				"--data", t.TempDir(), "--workspace", workspace(t)}, tc.args...)
			code, out, errOut := runCmd(t, args...)
			if code != tc.code || !hasOut(out, tc.want) {
				t.Fatalf("exit %d (want %d), stdout lacks %q?\nstdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, out, errOut)
			}
			for _, w := range []string{"approval needed: task ", `shell call-1-0 {"command":"ls"}`, "guard permission: ", "approve? [y/N]"} {
				if !strings.Contains(errOut, w) {
					t.Errorf("prompt lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestInterruptAndShutdown cancels a run while its task waits on a timer and
// checks that the command ends quickly and says where the task was left.
func TestInterruptAndShutdown(t *testing.T) {
	t.Parallel()
	timer := writeFile(t, "timer.yaml", `agent: researcher
goal: "Wait a long time"
script:
  - wait_timer: {seconds: 3600}
  - finish: {answer: late}
`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var cancelled time.Time
	var once sync.Once
	out := &syncBuffer{watch: func(s string) {
		if strings.Contains(s, "TaskSuspended") {
			once.Do(func() { cancelled = time.Now(); cancel() })
		}
	}}
	var errb syncBuffer
	code := run(ctx, []string{"run", timer, "--config", exampleConfig, "--data", t.TempDir(), "--workspace", workspace(t)}, out, &errb)
	took := time.Since(cancelled)
	if code != exitFailed || !strings.Contains(out.String(), "interrupted: task ") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, &errb)
	}
	t.Logf("from cancel to return (follower stop, pool, dispatcher, log, connection, server): %v", took)
	if took > 30*time.Second {
		t.Errorf("shutting down took %v", took)
	}
}
