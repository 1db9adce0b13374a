package main

import (
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/internal/termsafe"
)

// hostile is text from outside the operator's hands — a model's question
// or arguments, a tool's output or error, a goal — that would redraw the
// terminal: erase the line, print a fake verdict in green, reverse what
// follows, hide a character and start a line of its own.
const hostileYAML = `\e[2K\r\e[32mAUTO-APPROVED\e]0;title\a \u202eexe.ls \u200b\x9b31m\nFAKE LINE`

// hostileTask runs a shell call (which needs an approval, asked on the
// terminal) whose output and error carry escape sequences, an echo of
// hostile text, and then asks a person a hostile question, so the task is
// left waiting with the question open.
const hostileTask = `
agent: researcher
goal: "` + hostileYAML + `"
script:
  - tool_calls: [{tool: shell, args: {command: "printf '\\033[2J\\033[H\\342\\200\\256` + hostileYAML + `'; printf '\\033]8;;x\\007` + hostileYAML + `' >&2; exit 3"}}]
  - tool_calls: [{tool: echo, args: {text: "` + hostileYAML + `"}}]
  - yield_for_human: {question: "` + hostileYAML + `"}
`

// TestNothingRawReachesTheTerminal feeds hostile text into every field the
// verbs print — the goal, the arguments, a tool's output and error, the
// question, an answer's reason — and runs every verb that prints them:
// run (with its y/N prompt), events, inspect, tasks, approvals, approve,
// doctor. No control byte, bidi override, invisible character or byte
// that is not UTF-8 may reach stdout or stderr. Before, they were printed
// as they came: `\e[2K\r\e[32mAUTO-APPROVED` erased the line and drew a
// verdict nobody gave, and a newline in a field drew a timeline line of its
// own. --json stays JSON that decodes to the very text recorded.
func TestNothingRawReachesTheTerminal(t *testing.T) {
	defer func(r func() bool) { stdinIsTerminal = r }(stdinIsTerminal)
	defer func(r io.Reader) { stdin = r }(stdin)
	stdinIsTerminal = func() bool { return true }
	stdin = strings.NewReader("y\n")

	data, ws := t.TempDir(), workspace(t)
	file := writeFile(t, "hostile.yaml", hostileTask)
	check := func(verb, out, errb string) {
		t.Helper()
		for name, s := range map[string]string{"stdout": out, "stderr": errb} {
			if msg := termsafe.Check(s); msg != "" {
				t.Errorf("%s: %s: %s", verb, name, msg)
			}
		}
		if strings.Contains(out, "\nFAKE LINE") || strings.Contains(errb, "\nFAKE LINE") {
			t.Errorf("%s: a newline in a field started a line of its own:\n%s\n%s", verb, out, errb)
		}
	}
	code, out, errb := runCmd(t, "run", file, "--config", exampleConfig, "--data", data, "--workspace", ws, "--approvals", "ask")
	if code != exitWaiting {
		t.Fatalf("run: exit %d, want %d\n%s\n%s", code, exitWaiting, out, errb)
	}
	check("run", out, errb)
	if !strings.Contains(out, `\u001b[2K\r\u001b[32mAUTO-APPROVED`) || !strings.Contains(errb, `\u001b[2K\r\u001b[32mAUTO-APP`) {
		t.Errorf("run: the hostile text is not shown escaped:\n%s\n%s", out, errb)
	}
	task := regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)[1]

	for _, args := range [][]string{
		{"events", task}, {"inspect", task}, {"tasks"}, {"approvals"}, {"doctor"},
	} {
		code, out, errb := runCmd(t, append(args, "--data", data)...)
		if code != exitDone && code != exitWaiting {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errb)
		}
		check(args[0], out, errb)
	}
	code, out, errb = runCmd(t, "approvals", "--data", data, "--json")
	check("approvals --json", out, errb)
	waiting, err := jsonLines[struct{ Handle, Question string }](out)
	if err != nil || code != 0 || len(waiting) != 1 {
		t.Fatalf("approvals --json: exit %d, %v\n%s", code, err, out)
	}
	if want := "\x1b[2K\r\x1b[32mAUTO-APPROVED\x1b]0;title\a \u202eexe.ls \u200b\u009b31m\nFAKE LINE"; waiting[0].Question != want {
		t.Errorf("approvals --json decodes to the question %q, want %q", waiting[0].Question, want)
	}
	// The answer's reason is recorded and printed back by every verb.
	code, out, errb = runCmd(t, "approve", task, waiting[0].Handle, "--reason", "ok\x1b[8m\u202e\nFAKE LINE", "--config", exampleConfig,
		"--data", data, "--workspace", ws)
	check("approve", out, errb)
	for _, args := range [][]string{{"events", task}, {"inspect", task}} {
		_, out, errb := runCmd(t, append(args, "--data", data)...)
		check(args[0]+" after the answer", out, errb)
	}
	code, out, errb = runCmd(t, "events", task, "--json", "--data", data)
	check("events --json", out, errb)
	for line := range strings.Lines(out) {
		if !json.Valid([]byte(line)) {
			t.Fatalf("events --json: not a JSON line: %s", line)
		}
	}
	if !strings.Contains(out, `\u001b[2K`) {
		t.Errorf("events --json: the recorded text is not in it:\n%s", out)
	}
}

// TestAuditVerifyTerminalSafe: audit verify names a broken record by its
// task and key, which are the file's bytes; before, they were printed as
// they were.
func TestAuditVerifyTerminalSafe(t *testing.T) {
	file := writeFile(t, "audit.jsonl", `{"task":"\u001b[2J\u202eT","seq":1,"hash":"x","prev":""}`+"\n")
	code, out, errb := runCmd(t, "audit", "verify", file)
	if code != exitFailed {
		t.Fatalf("audit verify: exit %d\n%s\n%s", code, out, errb)
	}
	if !strings.Contains(out, `\u001b[2J\u202eT`) {
		t.Errorf("audit verify does not name the task, escaped:\n%s", out)
	}
	for name, s := range map[string]string{"stdout": out, "stderr": errb} {
		if msg := termsafe.Check(s); msg != "" {
			t.Errorf("audit verify: %s: %s", name, msg)
		}
	}
}
