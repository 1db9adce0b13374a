package main

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
)

// TestAskStopsWhenAnsweredElsewhere: while run --approvals ask prompts on
// the terminal, the request is answered by engine approve from another
// process; the prompt stops and the run goes on without any input. Before,
// the prompt kept waiting for a line on stdin that nobody would type, and
// a late "y" there would have been sent as an answer to a request already
// closed.
func TestAskStopsWhenAnsweredElsewhere(t *testing.T) {
	defer func(r func() bool) { stdinIsTerminal = r }(stdinIsTerminal)
	defer func(r io.Reader) { stdin = r }(stdin)
	stdinIsTerminal = func() bool { return true }
	pr, pw := io.Pipe() // a terminal nobody types on
	defer pw.Close()
	stdin = pr

	data, ws := t.TempDir(), workspace(t)
	prompt := regexp.MustCompile(`approval needed: task ([0-9A-Z]{26}) \([^)]*\), (\S+)\n`)
	asked := make(chan [2]string, 1)
	var out, errb syncBuffer
	errb.watch = func(s string) {
		if m := prompt.FindStringSubmatch(s); m != nil {
			select {
			case asked <- [2]string{m[1], m[2]}:
			default:
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"run", example("06-approval-granted.yaml"), "--config", exampleConfig,
			"--data", data, "--workspace", ws, "--approvals", "ask"}, &out, &errb)
	}()
	var req [2]string
	select {
	case req = <-asked:
	case c := <-code:
		t.Fatalf("run ended (exit %d) without asking\n%s\n%s", c, out.String(), errb.String())
	}
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

// TestAskDropsTheLineOfAClosedPrompt: a line typed for a prompt that was
// closed (its request answered elsewhere) is not taken as the answer to the
// next request, which its typist never saw.
func TestAskDropsTheLineOfAClosedPrompt(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var msgs syncBuffer
	p := newPrinter("01JTASKAAAAAAAAAAAAAAAAAAA", io.Discard, &msgs, false, approvalsAsk)
	p.answers = bufio.NewReader(pr)
	req := host.ApprovalRequest{Task: "01JTASKAAAAAAAAAAAAAAAAAAA", Handle: "approval-1"}

	closed, cancel := context.WithCancelCause(t.Context())
	cancel(host.ErrRequestClosed)
	if _, ok := p.ask(closed, req); ok {
		t.Fatal("a prompt whose request is closed returned an answer")
	}
	type result struct {
		d  noeta.ApprovalDecision
		ok bool
	}
	next := make(chan result, 1)
	go func() {
		d, ok := p.ask(t.Context(), host.ApprovalRequest{Task: req.Task, Handle: "approval-2"})
		next <- result{d, ok}
	}()
	// The "y" meant for approval-1 completes the read the closed prompt
	// began; approval-2's answer is the next line.
	if _, err := io.WriteString(pw, "y\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, "n\n"); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if !r.ok || r.d != noeta.ApprovalDeny {
		t.Fatalf("approval-2 answered %q (ok %v), want deny: the line typed for approval-1 was taken\n%s", r.d, r.ok, msgs.String())
	}
	if !strings.Contains(msgs.String(), "answered an earlier request") {
		t.Errorf("the dropped line is not said:\n%s", msgs.String())
	}
}
