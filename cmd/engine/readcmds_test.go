package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestReadVerbs runs a task with an approval, then reads it back with tasks,
// inspect and events from the same data directory.
func TestReadVerbs(t *testing.T) {
	data := t.TempDir()
	code, out, errb := runCmd(t, "run", example("07-approval-refused.yaml"), "--config", exampleConfig,
		"--data", data, "--workspace", workspace(t), "--approvals", "deny")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errb)
	}
	id := regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)[1]

	code, out, errb = runCmd(t, "tasks", "--data", data)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "completed") {
		t.Errorf("tasks: exit %d\n%s\n%s", code, out, errb)
	}

	code, out, errb = runCmd(t, "inspect", id, "--data", data)
	for _, want := range []string{"status    terminal", "approval approval-call-1-0", "deny by cli", "refused  ApprovalResolved"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect: exit %d, no %q in\n%s\n%s", code, want, out, errb)
		}
	}
	code, out, _ = runCmd(t, "inspect", id, "--data", data, "--json")
	var st struct {
		State struct {
			Status     string `json:"status"`
			Governance struct {
				Approvals []struct{ Decision string } `json:"approvals"`
			} `json:"governance"`
		} `json:"state"`
		Dispatcher struct{ Status string } `json:"dispatcher"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st.State.Status != "terminal" || len(st.State.Governance.Approvals) != 1 || st.Dispatcher.Status != "terminal" {
		t.Errorf("inspect --json: exit %d %v %+v\n%s", code, err, st, out)
	}

	code, out, _ = runCmd(t, "events", id, "--data", data)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 14 || !strings.Contains(lines[9], "ApprovalResolved") || !strings.Contains(lines[13], "TaskCompleted") {
		t.Errorf("events: exit %d, %d lines\n%s", code, len(lines), out)
	}
	code, out, _ = runCmd(t, "events", id, "--data", data, "--json", "--follow")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		var ce map[string]any
		if err := json.Unmarshal([]byte(l), &ce); err != nil || ce["subject"] != id || ce["sequence"] != strings.TrimSpace(strings.Split(strings.Split(l, `"sequence":"`)[1], `"`)[0]) {
			t.Errorf("events --json line %d: %v %s", i, err, l)
		}
	}
	if code != 0 || len(lines) != 14 {
		t.Errorf("events --json --follow of an ended task: exit %d, %d lines", code, len(lines))
	}

	for _, args := range [][]string{{"inspect", "NOPE", "--data", data}, {"events", "NOPE", "--data", data}} {
		if code, _, errb := runCmd(t, args...); code != 1 || !strings.Contains(errb, "no task NOPE") {
			t.Errorf("%v: exit %d %s", args, code, errb)
		}
	}
	if code, _, _ := runCmd(t, "inspect", "a.b", "--data", data); code != 2 {
		t.Errorf("inspect of a bad id: exit %d, want 2", code)
	}
}
