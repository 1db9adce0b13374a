package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
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

// waitingHandle is the task and handle a waiting run says to approve, for
// a request named prefix.
func waitingHandle(t *testing.T, out, prefix string) (task, handle string) {
	t.Helper()
	m := regexp.MustCompile(`engine approve ([0-9A-Z]{26}) (` + regexp.QuoteMeta(prefix) + `-[0-9a-hjkmnp-tv-z]{10}) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the run does not say how to approve %s-<nonce>:\n%s", prefix, out)
	}
	return m[1], m[2]
}

// TestSubmitThenApprove: on the embedded default, a task that asks for an
// approval is answered by approve, which runs it to its end; an answer to
// anything else is refused, exit 1, and nothing is kept for later.
//
// Before: `engine approve TASK approval-call-1-0` on a submitted task that
// had asked nothing was accepted ("approved, buffered"), and the call ran,
// approved, the moment the task proposed it.
func TestSubmitThenApprove(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), workspace(t, "marker.txt")

	t.Run("before the request", func(t *testing.T) {
		id := submitExample(t, data, "06-approval-granted.yaml")
		for _, handle := range []string{"approval-call-1-0", "approval-call-1-0-0000000000"} {
			code, out, errOut := runCmd(t, "approve", id, handle, "--config", exampleConfig, "--data", data, "--workspace", ws)
			if code != exitFailed || !strings.Contains(errOut, "refused: task "+id+" has no open request "+handle) ||
				!strings.Contains(errOut, "has asked nothing under "+handle+", and no request of it is open") {
				t.Fatalf("approve %s before the request: exit %d\n%s\n%s", handle, code, out, errOut)
			}
			if strings.Contains(out, "LeaseGranted") {
				t.Errorf("a refused approve ran the task:\n%s", out)
			}
		}
		code, out, _ := runCmd(t, "inspect", id, "--data", data)
		if code != 0 || !strings.Contains(out, "dispatch  ready") || strings.Contains(out, "approval ") {
			t.Errorf("inspect after the refused answers: exit %d\n%s", code, out)
		}
	})

	t.Run("approve", func(t *testing.T) {
		// run leaves it waiting and says how to answer it.
		code, out, _ := runCmd(t, "run", example("06-approval-granted.yaml"), "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitWaiting {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		if !strings.Contains(out, " --data "+data) {
			t.Errorf("run's approve line lacks --data %s:\n%s", data, out)
		}
		id, handle := waitingHandle(t, out, "approval-call-1-0")
		// The old shape of handle, and a guessed nonce, are refused, naming
		// the open request.
		for _, wrong := range []string{"approval-call-1-0", "approval-call-1-0-0000000000"} {
			code, out, errOut := runCmd(t, "approve", id, wrong, "--config", exampleConfig, "--data", data, "--workspace", ws)
			if code != exitFailed || !strings.Contains(errOut, "open now: "+handle) {
				t.Fatalf("approve %s: exit %d\n%s\n%s", wrong, code, out, errOut)
			}
		}
		code, out, errOut := runCmd(t, "approve", id, handle, "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitDone {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{
			"approved: task " + id + " was waiting on " + handle + "; it is ready to run again",
			"ApprovalResolved      " + handle + " approve by cli",
			"ToolCallStarted       shell call-1-0",
			"marker.txt",
			"completed: task " + id + ` answered "listed"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("approve's output lacks %q:\n%s", want, out)
			}
		}
		// Only what happened after the answer is printed.
		if strings.Contains(out, "ApprovalRequested") || !strings.Contains(out, "TaskWoken") {
			t.Errorf("approve printed the wrong records:\n%s", out)
		}
		code, out, _ = runCmd(t, "inspect", id, "--data", data)
		if code != 0 || !strings.Contains(out, "status    terminal") || !regexp.MustCompile(`approval `+handle+` +approve by cli`).MatchString(out) {
			t.Errorf("inspect: exit %d\n%s", code, out)
		}
		// Answered already: a second answer is told so, naming the first.
		code, out, errOut = runCmd(t, "approve", id, handle, "--deny", "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitFailed || !strings.Contains(errOut, "another answer to "+handle) || !strings.Contains(errOut, "approve by cli") {
			t.Errorf("a second answer: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("deny", func(t *testing.T) {
		code, out, _ := runCmd(t, "run", example("07-approval-refused.yaml"), "--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitWaiting {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		id, handle := waitingHandle(t, out, "approval-call-1-0")
		code, out, errOut := runCmd(t, "approve", id, handle, "--deny", "--reason", "not today", "--as", "alice",
			"--config", exampleConfig, "--data", data, "--workspace", ws)
		if code != exitDone {
			t.Fatalf("approve --deny: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{
			"refused: task " + id + " was waiting on " + handle,
			"ApprovalResolved      " + handle + " deny by alice: not today",
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
		if code != exitWaiting {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		child, handle := waitingHandle(t, out, "approval-call-1-0")
		code, out, errOut := runCmd(t, "approve", child, handle, "--config", cfg, "--data", data, "--workspace", ws)
		if code != exitDone || !strings.Contains(out, `answered "parent done"`) || !strings.Contains(out, "SubtaskResultRecorded") {
			t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("errors", func(t *testing.T) {
		code, out, errOut := runCmd(t, "run", example("01-allowed-call.yaml"), "--config", exampleConfig, "--data", data, "--workspace", ws)
		m := regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)
		if code != exitDone || m == nil {
			t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
		}
		ended := m[1]
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
			{[]string{"approve", ended, "approval-call-1-0", "--timeout", "-1s"}, exitUsage, "--timeout -1s"},
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
// only answers. An answer to a task that has asked nothing is refused, with
// or without --via-ingress, and nothing is kept; an approve and a deny sent
// together on a request: one wins, the other exits 1 saying it lost.
//
// Before: the early answer was accepted ("approved, buffered") and kept in
// the row, and both racing answers exited 0.
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
	// No governance config needed to answer; nothing asked, nothing kept.
	for _, extra := range [][]string{nil, {"--via-ingress"}} {
		args := append(append([]string{"approve", id, "approval-call-1-0", "--as", "bob"}, extra...), conn...)
		code, out, errOut = runCmd(t, args...)
		if code != exitFailed || !strings.Contains(errOut, "refused: task "+id+" has no open request approval-call-1-0") {
			t.Fatalf("approve %v before the request: exit %d\n%s\n%s", extra, code, out, errOut)
		}
	}
	d := newDeployment(t, srv.ClientURL(), "remote", 1, 0)
	ds, err := d.st.Dispatch(t.Context(), id)
	if err != nil || ds.Status != eventlog.DispatchReady || ds.PendingWakes != 0 || ds.MatchedWake != nil {
		t.Errorf("the task's row: %+v %v; want ready with nothing kept", ds, err)
	}
	code, out, _ = runCmd(t, append([]string{"inspect", id}, conn...)...)
	if code != 0 || !strings.Contains(out, "status    created") && !strings.Contains(out, "dispatch  ready") {
		t.Errorf("inspect --nats: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, append([]string{"events", id}, conn...)...)
	if code != 0 || !strings.Contains(out, "TaskCreated") {
		t.Errorf("events --nats: exit %d\n%s", code, out)
	}

	// A task that asks: run leaves it waiting; then approve and deny race.
	code, out, errOut = runCmd(t, append([]string{"run", example("06-approval-granted.yaml"), "--config", exampleConfig, "--workspace", workspace(t)}, conn...)...)
	if code != exitWaiting {
		t.Fatalf("run --nats: exit %d\n%s\n%s", code, out, errOut)
	}
	task, handle := waitingHandle(t, out, "approval-call-1-0")
	type result struct {
		code     int
		out, err string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, extra := range [][]string{{"--as", "alice"}, {"--deny", "--as", "bob"}} {
		wg.Go(func() {
			<-start
			code, out, errOut := runCmd(t, append(append([]string{"approve", task, handle}, extra...), conn...)...)
			results[i] = result{code, out, errOut}
		})
	}
	close(start)
	wg.Wait()
	winner, loser := 0, 1
	if results[0].code != exitDone {
		winner, loser = 1, 0
	}
	if results[winner].code != exitDone || results[loser].code != exitFailed ||
		!strings.Contains(results[loser].err, "another answer to "+handle+" of task "+task+" came first; yours was not applied") {
		t.Fatalf("race: got %+v; want one exit 0 and one exit 1 saying it lost", results)
	}
	who := []string{"alice", "bob"}[winner]
	if !strings.Contains(results[loser].err, "by "+who) {
		t.Errorf("the loser is not told who won (%s): %s", who, results[loser].err)
	}
	ds, err = d.st.Dispatch(t.Context(), task)
	if err != nil || ds.Status != eventlog.DispatchReady || ds.MatchedWake == nil || ds.MatchedWake.Approver != who || ds.PendingWakes != 0 {
		t.Errorf("the task's row after the race: %+v %v; want ready with the winner's answer alone", ds, err)
	}
	// Through the ingress too, the answer that came second is refused.
	code, out, errOut = runCmd(t, append([]string{"approve", task, handle, "--via-ingress", "--as", "carol"}, conn...)...)
	if code != exitFailed || !strings.Contains(errOut, "came first") {
		t.Errorf("approve --via-ingress after the race: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestFollowTimeout: approve and run follow a task tree until it rests, and
// one waiting for an external event nothing sends never does; --timeout
// ends the follow, leaving the task as it is, exit 1.
//
// Before: approve and run had no deadline; only a signal stopped them (a
// concurrent approve and deny on one --data were seen hanging 8 minutes).
func TestFollowTimeout(t *testing.T) {
	// The timeout bounds the whole command, opening the data directory and
	// submitting included: at 1s a submit under the suite's own load ran
	// out before the follow began.
	t.Parallel()
	data, ws := t.TempDir(), workspace(t)
	task := writeFile(t, "wait.yaml", `agent: researcher
goal: "Ask, then wait for ever"
script:
  - tool_calls: [{tool: shell, args: {command: "ls"}}]
  - wait_external: {event_kind: never-sent}
  - finish: {answer: done}
`)
	code, out, errOut := runCmd(t, "run", task, "--config", exampleConfig, "--data", data, "--workspace", ws)
	if code != exitWaiting {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	id, handle := waitingHandle(t, out, "approval-call-1-0")
	code, out, errOut = runCmd(t, "approve", id, handle, "--timeout", "5s", "--config", exampleConfig, "--data", data, "--workspace", ws)
	if code != exitFailed || !strings.Contains(out, "interrupted: task "+id+" is left as it is (--timeout 5s reached") ||
		!strings.Contains(out, "approved: task "+id+" was waiting on "+handle) {
		t.Fatalf("approve --timeout 5s: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "run", writeFile(t, "wait2.yaml", `agent: researcher
goal: "Wait for ever"
script:
  - wait_external: {event_kind: never-sent}
`), "--timeout", "5s", "--config", exampleConfig, "--data", data, "--workspace", ws)
	if code != exitFailed || !strings.Contains(out, "is left as it is (--timeout 5s reached") {
		t.Fatalf("run --timeout 5s: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestApproveRemoteApprover: with --nats the approver is the approval
// subject's token, --as or else the NATS user; without either, or with one
// that cannot be a token, approve is a usage error saying what to pass,
// before it connects.
//
// Before: --as defaulted to cli:$USER and was sent in the body of a plain
// wake, where it proved nothing.
func TestApproveRemoteApprover(t *testing.T) {
	t.Parallel()
	id := noeta.NewTaskID()
	conn := []string{"--nats", "nats://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "pass --as NAME"},
		{[]string{"--via-ingress"}, "pass --as NAME"},
		{[]string{"--as", "cli:alice"}, `--as "cli:alice"`},
		{[]string{"--user", "a.b"}, `--as "a.b"`},
		{[]string{"--user", "bob", "--as", "x y"}, `--as "x y"`},
	} {
		code, out, errOut := runCmd(t, append(append([]string{"approve", id, "approval-call-1-0"}, tc.args...), conn...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("approve %v: exit %d, stderr %q, stdout %q; want %d and %q", tc.args, code, errOut, out, exitUsage, tc.want)
		}
	}
}

// TestApproveAfterExpiry: on the embedded default, an approval given after
// the request's deadline, with nothing running at the deadline, is refused
// (exit 1, saying it came too late); the request resolves denied by
// timeout, and the shell command never runs.
//
// Before: with no process running at the deadline nothing had expired the
// request yet, the approval reached the task first and was taken, and the
// command ran (4 of 4 tries, 6-8 s after the deadline).
func TestApproveAfterExpiry(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), workspace(t)
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "noeta.yaml", string(base)+`
approvals:
  rules:
    - name: shell-expires
      when: 'tool == "shell"'
      timeout: 1s
`)
	task := writeFile(t, "touch.yaml", `agent: researcher
goal: "Touch a file"
script:
  - tool_calls: [{tool: shell, args: {command: "touch ran.txt"}}]
  - finish: {answer: "asked"}
`)
	code, out, errOut := runCmd(t, "run", task, "--config", cfg, "--data", data, "--workspace", ws)
	if code != exitWaiting {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	id, handle := waitingHandle(t, out, "approval-call-1-0")
	// Nothing runs while the deadline passes.
	time.Sleep(1500 * time.Millisecond)
	code, out, errOut = runCmd(t, "approve", id, handle, "--config", cfg, "--data", data, "--workspace", ws)
	if code != exitFailed || !strings.Contains(errOut, "too late: "+handle+" of task "+id+" expired before this answer") {
		t.Fatalf("approve after the deadline: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "ToolCallStarted") || strings.Contains(out, "approved: task") {
		t.Errorf("approve after the deadline ran the call or said it was approved:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran.txt")); err == nil {
		t.Fatal("the shell command ran after its approval expired")
	}
	code, out, _ = runCmd(t, "inspect", id, "--data", data)
	if code != 0 || !regexp.MustCompile(`approval `+handle+` +deny by timeout`).MatchString(out) {
		t.Errorf("inspect: exit %d, want the request denied by timeout\n%s", code, out)
	}
}
