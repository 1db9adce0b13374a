package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// submitExample submits an example task to the data directory and returns
// its id.
func submitExample(t *testing.T, data, name string) string {
	t.Helper()
	code, out, errOut := runCmd(t, "submit", example(name), "--config", exampleConfig, "--data", data)
	id := strings.TrimSpace(out)
	if code != 0 || noeta.ValidateTaskID(id) != nil {
		t.Fatalf("submit: exit %d, stdout %q\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "submitted task "+id) || !strings.Contains(errOut, "engine serve --config") {
		t.Errorf("submit's note: %s", errOut)
	}
	return id
}

// TestSubmitThenApprove: on the embedded default, a submitted task that
// asks for an approval is answered by approve, which runs it to its end.
func TestSubmitThenApprove(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), workspace(t, "marker.txt")

	t.Run("approve", func(t *testing.T) {
		id := submitExample(t, data, "06-approval-granted.yaml")
		code, out, errOut := runCmd(t, "approve", id, "approval-call-1-0", "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitDone {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{
			// Submitted, never run: the answer waits for the request.
			"approved, buffered: task " + id + " is not waiting on approval-call-1-0 now (it is ready)",
			"ApprovalRequested     guard=permission  approval-call-1-0 shell call-1-0",
			"ApprovalResolved      approval-call-1-0 approve by cli",
			"ToolCallStarted       shell call-1-0",
			"marker.txt",
			"completed: task " + id + ` answered "listed"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("approve's output lacks %q:\n%s", want, out)
			}
		}
		code, out, _ = runCmd(t, "inspect", id, "--data", data)
		if code != 0 || !strings.Contains(out, "status    terminal") || !regexp.MustCompile(`approval approval-call-1-0 +approve by cli`).MatchString(out) {
			t.Errorf("inspect: exit %d\n%s", code, out)
		}
	})

	t.Run("deny", func(t *testing.T) {
		id := submitExample(t, data, "07-approval-refused.yaml")
		code, out, errOut := runCmd(t, "approve", id, "approval-call-1-0", "--deny", "--reason", "not today", "--as", "alice",
			"--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitDone {
			t.Fatalf("approve --deny: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{
			"refused, buffered: task " + id,
			"ApprovalResolved      approval-call-1-0 deny by alice: not today",
			`completed: task ` + id + ` answered "no date, the approver said no"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "ToolCallStarted") {
			t.Errorf("the refused call ran:\n%s", out)
		}
		code, out, _ = runCmd(t, "inspect", id, "--data", data)
		for _, want := range []string{"status    terminal", "deny by alice not today", "refused  ApprovalResolved"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("inspect lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("a task waiting for the answer", func(t *testing.T) {
		// run leaves it waiting and says how to answer it.
		code, out, _ := runCmd(t, "run", example("06-approval-granted.yaml"), "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitWaiting {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		m := regexp.MustCompile(`engine approve ([0-9A-Z]{26}) approval-call-1-0 --data (\S+)`).FindStringSubmatch(out)
		if m == nil || m[2] != data {
			t.Fatalf("run does not say how to approve:\n%s", out)
		}
		id := m[1]
		code, out, errOut := runCmd(t, "approve", id, "approval-call-1-0", "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitDone || !strings.Contains(out, "approved: task "+id+" was waiting on approval-call-1-0; it is ready to run again") ||
			!strings.Contains(out, "completed: task "+id) {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
		// Only what happened after the answer is printed.
		if strings.Contains(out, "ApprovalRequested") || !strings.Contains(out, "TaskWoken") {
			t.Errorf("approve printed the wrong records:\n%s", out)
		}
	})

	t.Run("a subtask's approval, followed from the root", func(t *testing.T) {
		task := writeFile(t, "nested.yaml", `agent: researcher
goal: "Delegate a risky call"
script:
  - spawn: [{agent: operator, goal: "ask", script: [{tool_calls: [{tool: shell, args: {command: "ls"}}]}, {finish: {answer: "child done"}}]}]
  - finish: {answer: "parent done"}
`)
		cfg := writeFile(t, "noeta.yaml", `agents:
  researcher:
    tools: [echo]
    permissions: {allowed_subtask_agents: [operator]}
  operator:
    tools: [shell]
`)
		code, out, _ := runCmd(t, "run", task, "--config", cfg, "--data", data, "--workspace", ws)
		m := regexp.MustCompile(`engine approve ([0-9A-Z]{26}) (approval-call-1-0) --data`).FindStringSubmatch(out)
		if code != exitWaiting || m == nil {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		code, out, errOut := runCmd(t, "approve", m[1], m[2], "--config", cfg, "--data", data, "--workspace", ws)
		if code != exitDone || !strings.Contains(out, `answered "parent done"`) || !strings.Contains(out, "SubtaskResultRecorded") {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("errors", func(t *testing.T) {
		ended := submitExample(t, data, "01-allowed-call.yaml")
		if code, out, errOut := runCmd(t, "approve", ended, "nothing-1", "--config", exampleConfig, "--data", data, "--workspace", ws); code != exitDone {
			t.Fatalf("approve of a task that asks nothing: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"approve", "a.b", "approval-call-1-0"}, exitUsage, `task id "a.b"`},
			{[]string{"approve", ended, "approval call"}, exitUsage, `handle "approval call"`},
			{[]string{"approve", ended}, exitUsage, "accepts 2 arg(s), received 1"},
			{[]string{"approve", noeta.NewTaskID(), "approval-call-1-0"}, exitFailed, "no task "},
			{[]string{"approve", ended, "approval-call-1-0"}, exitFailed, "has ended"},
			{[]string{"approve", ended, "approval-call-1-0", "--config", "/nonexistent.yaml"}, exitUsage, "--config"},
			{[]string{"submit", "/nonexistent/task.yaml"}, exitUsage, "task file"},
			{[]string{"submit", example("01-allowed-call.yaml"), "--queue", "a.b"}, exitUsage, "--queue"},
		} {
			args := append(tc.args, "--data", data)
			if tc.args[0] == "approve" {
				args = append(args, "--workspace", ws)
			}
			if !strings.Contains(strings.Join(tc.args, " "), "--config") {
				args = append(args, "--config", exampleConfig)
			}
			code, _, errOut := runCmd(t, args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
			}
		}
	})
}

// TestSubmitApproveRemote: with --nats, submit only submits and approve
// only answers; the answer waits in the dispatcher for a serve process.
func TestSubmitApproveRemote(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn := []string{"--nats", srv.ClientURL(), "--prefix", "remote"}
	code, out, errOut := runCmd(t, append([]string{"submit", example("06-approval-granted.yaml"), "--config", exampleConfig}, conn...)...)
	id := strings.TrimSpace(out)
	if code != 0 || noeta.ValidateTaskID(id) != nil || strings.Contains(errOut, "engine serve --config") {
		t.Fatalf("submit: exit %d %q\n%s", code, out, errOut)
	}
	// No governance config needed to answer.
	start := time.Now()
	code, out, errOut = runCmd(t, append([]string{"approve", id, "approval-call-1-0", "--as", "bob"}, conn...)...)
	if code != 0 || !strings.Contains(out, "approved, buffered: task "+id) || strings.Contains(out, "LeaseGranted") {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("approve --nats took %v", time.Since(start))
	d := newDeployment(t, srv.ClientURL(), "remote", 1, 0)
	ds, err := d.st.disp.Inspect(t.Context(), id)
	if err != nil || ds.Status != eventlog.DispatchReady || ds.PendingWakes != 1 {
		t.Errorf("the task's row: %+v %v; want ready with the answer buffered", ds, err)
	}
	code, out, _ = runCmd(t, append([]string{"inspect", id}, conn...)...)
	if code != 0 || !strings.Contains(out, "status    created") && !strings.Contains(out, "dispatch  ready") {
		t.Errorf("inspect --nats: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, append([]string{"events", id}, conn...)...)
	if code != 0 || !strings.Contains(out, "TaskCreated") {
		t.Errorf("events --nats: exit %d\n%s", code, out)
	}
}
