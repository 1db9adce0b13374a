package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/internal/buildinfo"
)

// TestVersion: engine version, --version and version --json say the same
// build.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := buildinfo.Read()
	code, out, _ := runCmd(t, "version")
	if code != exitDone || out != "engine "+want.String()+"\n" || !strings.Contains(out, want.GoVersion) {
		t.Errorf("version: %d %q", code, out)
	}
	code, flag, _ := runCmd(t, "--version")
	if code != exitDone || flag != out {
		t.Errorf("--version: %d %q, want %q", code, flag, out)
	}
	code, js, _ := runCmd(t, "version", "--json")
	var got buildinfo.Info
	if code != exitDone || json.Unmarshal([]byte(js), &got) != nil || got != want || strings.Count(js, "\n") != 1 {
		t.Errorf("version --json: %d %q", code, js)
	}
}

// TestRunReadsOnlyItsArguments: run given no arguments is bare engine,
// whatever the process was started with (cobra reads os.Args when handed
// nil). Not parallel: it changes os.Args while it runs.
func TestRunReadsOnlyItsArguments(t *testing.T) {
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = append(append([]string{}, saved...), "no-such-verb")
	code, _, errOut := runCmd(t)
	if code != exitUsage || strings.Contains(errOut, "no-such-verb") || !strings.Contains(errOut, "approvals") {
		t.Errorf("run with no arguments, the process started with an extra one: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestVerbsListedAndSuggested: bare engine names every verb; a typo is
// bad usage with the verbs it is close to; completion scripts are there
// for the shells people use.
func TestVerbsListedAndSuggested(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCmd(t)
	if code != exitUsage {
		t.Errorf("bare engine: exit %d", code)
	}
	root, _ := newRootCmd(os.Stdout, os.Stderr, os.LookupEnv)
	for _, c := range root.Commands() {
		if !c.Hidden && !strings.Contains(errOut, c.Name()) {
			t.Errorf("bare engine does not name %s:\n%s", c.Name(), errOut)
		}
	}
	for _, v := range []string{"answer", "cancel", "content", "version", "completion", "tasks", "approvals", "token", "bench"} {
		if !regexp.MustCompile(`\b` + v + `\b`).MatchString(errOut) {
			t.Errorf("bare engine does not name %s", v)
		}
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tsks"}, `unknown verb "tsks" for "engine"; did you mean tasks?`},
		{[]string{"aprove", "x", "y"}, "did you mean approve?"},
		{[]string{"inpsect"}, "did you mean inspect?"},
		{[]string{"frobnicate"}, `unknown verb "frobnicate" for "engine"`},
		{[]string{"policy", "replya"}, `unknown verb "replya" for "engine policy"; did you mean replay?`},
		{[]string{"audit", "verfy", "x"}, "did you mean verify?"},
	}
	for _, tt := range tests {
		code, _, errOut := runCmd(t, tt.args...)
		if code != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := runCmd(t, "completion", sh)
		if code != exitDone || !strings.Contains(out, "engine") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, %d bytes, %s", sh, code, len(out), errOut)
		}
	}
	// Flag values complete too: tasks --status offers the status words.
	code, out, _ := runCmd(t, "__complete", "tasks", "--status", "")
	if code != exitDone || !strings.Contains(out, "waiting\n") || !strings.Contains(out, "cancelled\n") {
		t.Errorf("tasks --status completion: %d %q", code, out)
	}
}

// TestReadVerbsMakeNoDataDirectory: a verb that reads or answers, pointed
// at a data directory that does not exist, says so and exits 1, and leaves
// no directory behind.
func TestReadVerbsMakeNoDataDirectory(t *testing.T) {
	t.Parallel()
	const id = "01J9Z3K7Q4M8X2V6B5N0C1D2E3"
	for _, args := range [][]string{
		{"tasks"}, {"approvals"}, {"doctor"}, {"events", id}, {"inspect", id}, {"cancel", id},
		{"content", id, "1"}, {"approve", id, "approval-x", "--config", exampleConfig},
		{"answer", id, "question-1", "yes", "--config", exampleConfig},
	} {
		data := filepath.Join(t.TempDir(), "nothing-here")
		code, _, errOut := runCmd(t, append(args, "--data", data)...)
		if code != exitFailed || !strings.Contains(errOut, "no data directory "+data) {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("%v made %s (%v)", args, data, err)
		}
	}
}

// TestTasksCancelAnswerContent: on one data directory, tasks lists with
// status words and filters (table and JSON lines), cancel ends a waiting
// task, answer replies to a question (recorded and shown as an answer),
// content prints a body the content store holds.
func TestTasksCancelAnswerContent(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	longGoal := "Summarise " + strings.Repeat("the quarterly report ", 300)
	question := writeFile(t, "question.yaml", "agent: researcher\ngoal: \"Ask a human\"\nscript:\n  - yield_for_human: {question: \"which file?\"}\n  - finish: {answer: \"thanks\"}\n")
	long := writeFile(t, "long.yaml", "agent: helper\ngoal: \""+longGoal+"\"\nscript:\n  - finish: {answer: \"short\"}\n")
	common := []string{"--config", exampleConfig, "--data", data}
	runTask := func(file string, wantCode int) string {
		t.Helper()
		code, out, errOut := runCmd(t, append([]string{"run", file, "--workspace", workspace(t)}, common...)...)
		if code != wantCode {
			t.Fatalf("run %s: exit %d\n%s\n%s", file, code, out, errOut)
		}
		m := regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no task id in:\n%s", out)
		}
		return m[1]
	}
	done := runTask(example("01-allowed-call.yaml"), exitDone)
	asked := runTask(question, exitWaiting)
	toCancel := runTask(example("06-approval-granted.yaml"), exitWaiting)
	spilled := runTask(long, exitDone)

	// The hint after exit 3 is the command that answers the question.
	code, out, _ := runCmd(t, append([]string{"run", question, "--workspace", workspace(t)}, common...)...)
	if code != exitWaiting || !strings.Contains(out, "engine answer ") || !strings.Contains(out, " question-1 TEXT --data "+data) {
		t.Errorf("the question's hint:\n%s", out)
	}

	code, out, errOut := runCmd(t, "cancel", toCancel, "--reason", "wrong repository", "--data", data)
	if code != exitDone || strings.TrimSpace(out) != toCancel {
		t.Fatalf("cancel: %d %q %q", code, out, errOut)
	}
	code, _, errOut = runCmd(t, "cancel", toCancel, "--data", data)
	if code != exitDone || !strings.Contains(errOut, "had ended already") {
		t.Errorf("cancel again: %d %q", code, errOut)
	}
	code, _, errOut = runCmd(t, "cancel", "01J9Z3K7Q4M8X2V6B5N0C1D2E3", "--data", data)
	if code != exitFailed || !strings.Contains(errOut, "no task 01J9Z3K7Q4M8X2V6B5N0C1D2E3") {
		t.Errorf("cancel an unknown task: %d %q", code, errOut)
	}

	// An approval handle is not a question's.
	code, _, errOut = runCmd(t, "answer", asked, "approval-call-1-0-abcdefghjk", "yes", "--config", exampleConfig, "--data", data)
	if code != exitUsage || !strings.Contains(errOut, "engine approve") {
		t.Errorf("answer an approval handle: %d %q", code, errOut)
	}
	code, out, errOut = runCmd(t, "answer", asked, "question-1", "the one in config/", "--as", "ops-lead", "--config", exampleConfig, "--data", data)
	if code != exitDone || !strings.Contains(out, "answered") || !strings.Contains(out, `answered "the one in config/" by ops-lead`) {
		t.Errorf("answer: %d\n%s\n%s", code, out, errOut)
	}

	code, out, errOut = runCmd(t, "tasks", "--data", data)
	if code != exitDone {
		t.Fatalf("tasks: %d %s", code, errOut)
	}
	for _, want := range []string{"TASK", "AGENT", "STATUS", "GOAL", "OUTCOME", done + "  researcher", toCancel, "cancelled", "wrong repository", "waiting", "waits on question-1", `"The README says hello."`, "bytes in the content store"} {
		if !strings.Contains(out, want) {
			t.Errorf("tasks lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCmd(t, "tasks", "--status", "cancelled,completed", "--agent", "researcher", "--since", "1h", "--json", "--data", data)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitDone || len(lines) != 3 {
		t.Fatalf("tasks --status --agent --json: %d\n%s", code, out)
	}
	for _, l := range lines {
		var row struct{ Task, Status, Agent string }
		if err := json.Unmarshal([]byte(l), &row); err != nil || row.Agent != "researcher" || (row.Status != "cancelled" && row.Status != "completed") {
			t.Errorf("row %s: %+v %v", l, row, err)
		}
	}
	code, out, errOut = runCmd(t, "tasks", "--limit", "1", "--data", data)
	if code != exitDone || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "raise --limit") {
		t.Errorf("tasks --limit 1: %d\n%s\n%s", code, out, errOut)
	}
	for _, bad := range [][]string{{"--status", "terminal"}, {"--since", "yesterday"}, {"--limit", "-1"}} {
		if code, _, errOut := runCmd(t, append([]string{"tasks", "--data", data}, bad...)...); code != exitUsage {
			t.Errorf("tasks %v: %d %q", bad, code, errOut)
		}
	}

	// content: the goal kept in the content store, by TASK SEQ and by its
	// hash; a record that keeps nothing there, a bad ref.
	code, _, errOut = runCmd(t, "content", spilled, "1", "--data", data)
	if code != exitUsage || !strings.Contains(errOut, "refers to goal_ref, script_ref: name one with --field") {
		t.Errorf("content of a record of two refs: %d %s", code, errOut)
	}
	code, out, errOut = runCmd(t, "content", spilled, "1", "--field", "goal_ref", "--data", data)
	if code != exitDone || strings.TrimSpace(out) != strconvQuote(longGoal) {
		t.Errorf("content TASK 1: %d %q… %s", code, out[:min(len(out), 80)], errOut)
	}
	code, js, _ := runCmd(t, "events", spilled, "--json", "--data", data)
	m := regexp.MustCompile(`"goal_ref":\{"hash":"([0-9a-f]{64})"`).FindStringSubmatch(js)
	if code != exitDone || m == nil {
		t.Fatalf("no goal_ref in:\n%s", js)
	}
	code, out, _ = runCmd(t, "content", "sha256:"+m[1], "--raw", "--data", data)
	if code != exitDone || strings.TrimSpace(out) != strconvQuote(longGoal) {
		t.Errorf("content REF: %d %q", code, out[:min(len(out), 80)])
	}
	if code, _, errOut := runCmd(t, "content", done, "2", "--data", data); code != exitFailed || !strings.Contains(errOut, "keeps nothing in the content store") {
		t.Errorf("content of a record without refs: %d %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "content", "abc", "--data", data); code != exitUsage || !strings.Contains(errOut, "64 hex digits") {
		t.Errorf("content abc: %d %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, "content", strings.Repeat("0", 64), "--data", data); code != exitFailed || !strings.Contains(errOut, "has no body") {
		t.Errorf("content of an unknown hash: %d %q", code, errOut)
	}
}

// strconvQuote is s as the content store keeps a spilled goal: a JSON string.
func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/ (the help page, the policy reports) from what the commands print")

// TestHelpGolden: engine --help, the page that lists every verb, is the
// golden file; a verb added, removed or renamed shows in the diff.
func TestHelpGolden(t *testing.T) {
	t.Parallel()
	code, out, _ := runCmd(t, "--help")
	if code != exitDone {
		t.Fatalf("--help: exit %d", code)
	}
	golden := filepath.Join("testdata", "help.golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/engine -run TestHelpGolden -update writes it)", err)
	}
	if out != string(want) {
		t.Errorf("engine --help differs from %s (go test ./cmd/engine -run TestHelpGolden -update rewrites it):\n%s", golden, out)
	}
}

// jsonLines decodes JSON Lines, one T per line.
func jsonLines[T any](out string) ([]T, error) {
	var ts []T
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			return ts, fmt.Errorf("line %q: %w", l, err)
		}
		ts = append(ts, v)
	}
	return ts, nil
}
