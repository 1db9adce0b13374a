package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
)

// slowTask is a task file of n echo calls, each followed by a 0.2 s sleep.
func slowTask(t *testing.T, name string, n int) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "agent: worker\ngoal: %q\nscript:\n", name)
	for i := range n {
		fmt.Fprintf(&b, "  - tool_calls: [{tool: echo, args: {text: \"%s %d\"}}, {tool: sleep, args: {seconds: 0.2}}]\n", name, i)
	}
	b.WriteString("  - finish: {answer: done}\n")
	return writeFile(t, name+".yaml", b.String())
}

// TestSecondRunOnOneDataDirIsRefused: two engine run on one --data started
// 0.3 s apart. Reproduction of the defect: both started their own
// nats-server on the same store, both printed "completed" and exited 0, and
// afterwards engine tasks failed with "jetstream: no message": one task's
// whole log was gone. Now the second is refused at once (exit 2, naming the
// holder), and the first's log is whole.
func TestSecondRunOnOneDataDirIsRefused(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	config := writeFile(t, "noeta.yaml", serveConfig)
	first := startEngine(t, "run", slowTask(t, "first", 15), "--config", config, "--data", data, "--workspace", workspace(t))
	waitFor(t, time.Minute, "the first run to hold the data directory", func() bool {
		h, ok := jshost.ReadHolder(data)
		return ok && h.URL != ""
	})
	start := time.Now()
	code, _, errOut := runCmd(t, "run", slowTask(t, "second", 15), "--config", config, "--data", data, "--workspace", workspace(t))
	if took := time.Since(start); code != exitUsage || took > 30*time.Second {
		t.Fatalf("second run: exit %d after %v, want 2 at once\n%s", code, took, errOut)
	}
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if !strings.Contains(errOut, "in use by engine run (pid "+pid) {
		t.Errorf("the refusal does not name the holder (engine run, pid %s):\n%s", pid, errOut)
	}
	if code := first.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, first.stderr)
	}
	code, out, errOut := runCmd(t, "tasks", "--data", data)
	if code != 0 || strings.Count(out, "completed") != 1 {
		t.Fatalf("tasks: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	code, out, errOut = runCmd(t, "events", id, "--data", data, "--json")
	if code != 0 {
		t.Fatalf("events: exit %d\n%s", code, errOut)
	}
	checkDense(t, id, out)
}

// checkDense checks that a task's --json events are its log, seq 1 to n
// without a gap, ending in TaskCompleted.
func checkDense(t *testing.T, id, out string) {
	t.Helper()
	want := 1
	last := ""
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, `"subject":"`+id+`"`) || strings.Contains(line, `"inboxkey"`) {
			continue
		}
		i := strings.Index(line, `"sequence":`)
		if i < 0 {
			continue
		}
		n, err := strconv.Atoi(strings.Trim(strings.SplitN(line[i+len(`"sequence":`):], ",", 2)[0], `"}`))
		if err != nil {
			t.Fatalf("bad sequence in %s", line)
		}
		if n != want {
			t.Fatalf("task %s: seq %d follows %d", id, n, want-1)
		}
		want++
		last = line
	}
	if want < 3 || !strings.Contains(last, "noeta.TaskCompleted") {
		t.Fatalf("task %s: %d records, last %s", id, want-1, last)
	}
}

// TestClientsOfAServingDataDir: while engine serve holds a data directory,
// submit, approve and the read verbs become its clients. Reproduction of the
// defect: engine approve --data D while engine serve --data D ran started a
// second server on the same store and ran the task there, while serve's
// still showed it waiting. Now 50 tasks submitted from concurrent clients
// all run in serve, each with a dense log, and an approval given from
// another process is carried out by serve's workers.
func TestClientsOfAServingDataDir(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	config := writeFile(t, "noeta.yaml", serveConfig+`
  asker:
    tools: [echo]
    permissions: {require_approval_tools: [echo]}
`)
	srv := startEngine(t, "serve", "--config", config, "--data", data, "--workspace", workspace(t), "--http", "", "--log-format", "json")
	srv.waitLog(t, "serving", time.Minute)

	const n = 50
	task := writeFile(t, "task.yaml", "agent: worker\ngoal: g\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n  - finish: {answer: ok}\n")
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			code, out, errOut := runCmd(t, "submit", task, "--config", config, "--data", data)
			ids[i] = strings.TrimSpace(out)
			if code != 0 || noeta.ValidateTaskID(ids[i]) != nil {
				errs <- fmt.Sprintf("submit %d: exit %d %q %s", i, code, out, errOut)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	for _, id := range ids {
		waitFor(t, 2*time.Minute, "task "+id+" to end", func() bool {
			_, out, _ := runCmd(t, "inspect", id, "--data", data)
			return strings.Contains(out, "status    terminal")
		})
		_, out, _ := runCmd(t, "events", id, "--data", data, "--json")
		checkDense(t, id, out)
	}

	ask := writeFile(t, "ask.yaml", "agent: asker\ngoal: g\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n  - finish: {answer: ok}\n")
	code, out, errOut := runCmd(t, "submit", ask, "--config", config, "--data", data)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("submit: exit %d %s", code, errOut)
	}
	var handle string
	waitFor(t, time.Minute, "the approval request", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data, "--json")
		i := strings.Index(out, `"approval-`)
		if i < 0 {
			return false
		}
		handle = strings.SplitN(out[i+1:], `"`, 2)[0]
		return true
	})
	code, out, errOut = runCmd(t, "approve", id, handle, "--data", data, "--as", "tester")
	if code != 0 {
		t.Fatalf("approve: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, time.Minute, "the approved task to end in serve", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data)
		return strings.Contains(out, "status    terminal")
	})
	_, out, _ = runCmd(t, "events", id, "--data", data, "--json")
	checkDense(t, id, out)
	if !strings.Contains(out, ":"+strconv.Itoa(srv.cmd.Process.Pid)+"/w") {
		t.Errorf("the approved call did not run in serve's workers:\n%s", out)
	}
}

// TestEmbeddedServerRequiresCredentials: the embedded server accepts only
// clients with the data directory's credentials (mode 0600). Reproduction:
// it accepted anyone on loopback.
func TestEmbeddedServerRequiresCredentials(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := startEngine(t, "serve", "--config", writeFile(t, "noeta.yaml", serveConfig), "--data", data, "--http", "", "--log-format", "json")
	p.waitLog(t, "serving", time.Minute)
	h, ok := jshost.ReadHolder(data)
	if !ok || h.URL == "" || h.Verb != "serve" || h.PID != p.cmd.Process.Pid {
		t.Fatalf("holder %+v %v", h, ok)
	}
	if nc, err := nats.Connect(h.URL, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("an unauthenticated client got in")
	}
	fi, err := os.Stat(filepath.Join(data, "credentials.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials: %v %v", fi.Mode(), err)
	}
	var c struct{ User, Password string }
	if b, err := os.ReadFile(filepath.Join(data, "credentials.json")); err != nil || json.Unmarshal(b, &c) != nil {
		t.Fatalf("credentials: %v %s", err, b)
	}
	nc, err := nats.Connect(h.URL, nats.UserInfo(c.User, c.Password), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("with the credentials: %v", err)
	}
	nc.Close()
	// A credentials file others may read is refused by a client.
	if err := os.Chmod(filepath.Join(data, "credentials.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCmd(t, "tasks", "--data", data)
	if code == 0 || !strings.Contains(errOut, "chmod 600") {
		t.Errorf("tasks with a readable credentials file: exit %d\n%s", code, errOut)
	}
}

func TestDataDirNotADirectory(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "passwd", "root:x:0:0\n")
	for _, verb := range [][]string{{"tasks"}, {"run", example("01-allowed-call.yaml"), "--config", exampleConfig}} {
		code, _, errOut := runCmd(t, append(verb, "--data", file)...)
		if code != exitUsage || !strings.Contains(errOut, "is not a directory") {
			t.Errorf("%v: exit %d, %s", verb, code, errOut)
		}
	}
}

// TestDataDirFilesMustBeRegular: a FIFO in place of the lock file or the
// credentials is refused at once, never waited on.
func TestDataDirFilesMustBeRegular(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"engine.lock", "credentials.json"} {
		data := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(data, name), 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, _, errOut := runCmd(t, "tasks", "--data", data)
		if code == 0 || time.Since(start) > 30*time.Second || !strings.Contains(errOut, "not a regular file") {
			t.Errorf("%s as a FIFO: exit %d after %v\n%s", name, code, time.Since(start), errOut)
		}
	}
}
