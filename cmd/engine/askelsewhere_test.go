package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAskStopsWhenAnsweredElsewhere: while run --approvals ask prompts on
// the terminal, the request is answered by engine approve from another
// process; the prompt stops and the run goes on without any input. Before,
// the prompt kept waiting for a line on stdin that nobody would type, and
// a late "y" there would have been sent as an answer to a request already
// closed.
func TestAskStopsWhenAnsweredElsewhere(t *testing.T) {
	r := startAsk(t, exampleConfig)
	data, req, out, errb, code := r.data, r.req, &r.out, &r.errb, r.code

	c, o, e := runCmd(t, "approve", req[0], req[1], "--reason", "from another terminal", "--data", data)
	if c != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", c, o, e)
	}
	select {
	case c := <-code:
		if c != exitDone {
			t.Fatalf("run: exit %d, want %d\n%s\n%s", c, exitDone, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("run still prompts a minute after the request was answered elsewhere\n%s\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "no longer open") {
		t.Errorf("the prompt does not say why it stopped:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "approve by") || !strings.Contains(out.String(), "from another terminal") {
		t.Errorf("the timeline lacks the answer given elsewhere:\n%s", out.String())
	}
}

// TestAskStaysOpenWhileTheQuorumGrows: under a quorum of two, another
// approver's vote given elsewhere counts toward the request, which stays
// open: the task wakes for a moment and suspends on it again, and the
// terminal must still be asked. Before, the prompt was closed as soon as
// the task was not suspended on the handle, and never asked again: the run
// waited for an answer nobody was asked for.
func TestAskStaysOpenWhileTheQuorumGrows(t *testing.T) {
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "noeta.yaml", string(base)+"\napprovals:\n  rules:\n    - name: two-for-shell\n      when: 'tool == \"shell\"'\n      quorum: 2\n")
	r := startAsk(t, cfg)
	data, req, out, errb, code, pw := r.data, r.req, &r.out, &r.errb, r.code, r.pw

	if c, o, e := runCmd(t, "approve", req[0], req[1], "--as", "cli:someone-else", "--reason", "one of two", "--config", cfg, "--data", data); c != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", c, o, e)
	}
	// The vote is counted and the task suspends again on the same request;
	// the prompt is still the one to answer it.
	deadline := time.Now().Add(time.Minute)
	// (run's own timeline waits while it prompts: read the log from here.)
	counted := func() bool {
		_, o, _ := runCmd(t, "events", req[0], "--data", data)
		return strings.Contains(o, "ApprovalCounted") && strings.Count(o, "TaskSuspended") >= 2
	}
	for !counted() {
		if time.Now().After(deadline) {
			t.Fatalf("the vote given elsewhere was not counted\n%s\n%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(4 * openPollForTest) // let a wrong watcher close the prompt (the test is right either way)
	if strings.Contains(errb.String(), "no longer open") {
		t.Fatalf("the prompt was closed while its request was open\n%s", errb.String())
	}
	if _, err := io.WriteString(pw, "y\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != exitDone {
			t.Fatalf("run: exit %d, want %d\n%s\n%s", c, exitDone, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("run still waits a minute after the second approval was typed\n%s\n%s", out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "ApprovalResolved") {
		t.Errorf("the timeline lacks the resolution:\n%s", out.String())
	}
}

// openPollForTest is host's openPoll, the watcher's period.
const openPollForTest = 250 * time.Millisecond

// askRun is a run --approvals ask on a terminal nobody types on (pw types),
// started by startAsk and stopped at its first prompt.
type askRun struct {
	data      string
	req       [2]string // the task and handle asked about
	out, errb syncBuffer
	code      chan int
	pw        *io.PipeWriter
}

// startAsk runs 06-approval-granted.yaml under cfg with --approvals ask and
// returns once the run prompts.
func startAsk(t *testing.T, cfg string) *askRun {
	t.Helper()
	prevTerminal, prevStdin := stdinIsTerminal, stdin
	stdinIsTerminal = func() bool { return true }
	pr, pw := io.Pipe()
	stdin = pr
	t.Cleanup(func() {
		pw.Close()
		stdinIsTerminal, stdin = prevTerminal, prevStdin
	})
	r := &askRun{data: t.TempDir(), code: make(chan int, 1), pw: pw}
	prompt := regexp.MustCompile(`approval needed: task ([0-9A-Z]{26}) \([^)]*\), (\S+)\n`)
	asked := make(chan [2]string, 1)
	r.errb.watch = func(s string) {
		if m := prompt.FindStringSubmatch(s); m != nil {
			select {
			case asked <- [2]string{m[1], m[2]}:
			default:
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	ws := workspace(t)
	go func() {
		r.code <- run(ctx, []string{"run", example("06-approval-granted.yaml"), "--config", cfg,
			"--data", r.data, "--workspace", ws, "--approvals", "ask"}, &r.out, &r.errb)
	}()
	select {
	case r.req = <-asked:
	case c := <-r.code:
		t.Fatalf("run ended (exit %d) without asking\n%s\n%s", c, r.out.String(), r.errb.String())
	}
	return r
}
