package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta/eventlog"
)

// putWaiting writes entries into the waiting index of the data directory,
// as an engine would.
func putWaiting(t *testing.T, data string, ws ...eventlog.Waiting) {
	t.Helper()
	h, err := hostconfig.Open(t.Context(), hostconfig.Options{DataDir: data, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, w := range ws {
		if err := h.WaitingIndex().PutWaiting(t.Context(), w); err != nil {
			t.Fatal(err)
		}
	}
}

// TestApprovalsVerb: engine approvals lists the index's entries, oldest
// first, with what a person needs to decide; --json is one object per
// line (docs/cli.md); an empty index prints nothing; bad usage exits 2.
func TestApprovalsVerb(t *testing.T) {
	data := t.TempDir()
	code, out, errb := runCmd(t, "approvals", "--data", data, "--json")
	if code != 0 || out != "" {
		t.Fatalf("approvals --json of an empty deployment: exit %d\n%s\n%s", code, out, errb)
	}
	code, out, _ = runCmd(t, "approvals", "--data", data)
	if code != 0 || !strings.Contains(out, "nothing waits") {
		t.Fatalf("approvals of an empty deployment: exit %d\n%s", code, out)
	}
	now := time.Now()
	putWaiting(t, data,
		eventlog.Waiting{Task: "01JTASKAPPROVALAAAAAAAAAAAA", Handle: "approval-call_1-abcdefghjk", Kind: eventlog.WaitingApproval,
			Agent: "ops", Action: "tool_call", Tool: "shell", Args: json.RawMessage(`{"cmd":"rm -rf /tmp/x"}`),
			Guard: "approve-shell", Reason: "shell needs a person", MayAnswer: "members of sre",
			Quorum: 2, Approvals: []string{"alice"}, RequestedAt: now.Add(-3 * time.Minute), ExpiresAt: now.Add(time.Hour)},
		eventlog.Waiting{Task: "01JTASKQUESTIONBBBBBBBBBBBB", Handle: "question-2", Kind: eventlog.WaitingQuestion,
			Agent: "writer", Question: "which tone?", RequestedAt: now.Add(-time.Hour)},
	)
	code, out, errb = runCmd(t, "approvals", "--data", data)
	if code != 0 {
		t.Fatalf("approvals: exit %d\n%s\n%s", code, out, errb)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[1], "01JTASKQUESTIONBBBBBBBBBBBB") {
		t.Fatalf("approvals: want a header and two lines per request, the oldest first:\n%s", out)
	}
	for _, want := range []string{"question", "asks: which tone?", "handle question-2", "1h",
		"tool_call shell {\"cmd\":\"rm -rf /tmp/x\"}", "3m", "in 59m", "guard approve-shell: shell needs a person",
		"may answer: members of sre", "1 of 2 approvals (alice)", "handle approval-call_1-abcdefghjk"} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals: no %q in\n%s", want, out)
		}
	}
	code, out, _ = runCmd(t, "approvals", "--data", data, "--json")
	ws, err := jsonLines[eventlog.Waiting](out)
	if err != nil || code != 0 || len(ws) != 2 || ws[1].Tool != "shell" || ws[1].Quorum != 2 {
		t.Fatalf("approvals --json: exit %d, %v\n%s", code, err, out)
	}
	if code, _, errb := runCmd(t, "approvals", "extra", "--data", data); code != exitUsage {
		t.Fatalf("approvals with an argument: exit %d, want %d\n%s", code, exitUsage, errb)
	}
}

// TestApprovalsEndToEnd: a task that asks for an approval appears in
// engine approvals with what it asks (written by the engine, read from the
// index), and leaves it once answered.
func TestApprovalsEndToEnd(t *testing.T) {
	data := t.TempDir()
	ws := workspace(t)
	code, out, errb := runCmd(t, "run", example("07-approval-refused.yaml"), "--config", exampleConfig,
		"--data", data, "--workspace", ws, "--approvals", "leave")
	if code != exitWaiting {
		t.Fatalf("run: exit %d, want %d\n%s\n%s", code, exitWaiting, out, errb)
	}
	code, out, errb = runCmd(t, "approvals", "--data", data, "--json")
	ws1, err := jsonLines[eventlog.Waiting](out)
	if err != nil || code != 0 || len(ws1) != 1 {
		t.Fatalf("approvals --json while the task waits: exit %d, %v\n%s\n%s", code, err, out, errb)
	}
	w := ws1[0]
	if w.Kind != eventlog.WaitingApproval || w.Agent != "researcher" || w.Tool != "shell" || !strings.Contains(string(w.Args), "date") ||
		w.Guard == "" || w.Reason == "" || w.Goal != "Print the date" || w.RequestedAt.IsZero() {
		t.Fatalf("the entry: %+v", w)
	}
	code, out, _ = runCmd(t, "approvals", "--data", data)
	if code != 0 || !strings.Contains(out, w.Task) || !strings.Contains(out, "handle "+w.Handle) || !strings.Contains(out, "tool_call shell") {
		t.Fatalf("approvals: exit %d\n%s", code, out)
	}
	code, out, errb = runCmd(t, "approve", w.Task, w.Handle, "--deny", "--reason", "not today", "--config", exampleConfig,
		"--data", data, "--workspace", ws)
	if code != 0 {
		t.Fatalf("approve --deny: exit %d\n%s\n%s", code, out, errb)
	}
	code, out, _ = runCmd(t, "approvals", "--data", data, "--json")
	if code != 0 || out != "" {
		t.Fatalf("approvals after the answer: exit %d\n%s", code, out)
	}
}
