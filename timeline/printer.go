package timeline

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/termsafe"
)

// Mode is how a Printer answers approval requests.
type Mode string

const (
	Ask     Mode = "ask"     // prompt y/N on the terminal
	Approve Mode = "approve" // approve every request
	Deny    Mode = "deny"    // refuse every request
	Leave   Mode = "leave"   // answer nothing: the tree comes to rest waiting
)

// ParseMode reads a mode as `--approvals` takes it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Ask, Approve, Deny, Leave:
		return m, nil
	}
	return "", fmt.Errorf("--approvals %q: want ask, approve, deny or leave", s)
}

// Printer prints one task tree's records as a watch delivers them — the
// timeline, or JSON lines — and answers approval requests as its mode says.
type Printer struct {
	w    *host.Watch
	root string
	out  io.Writer // the timeline, or JSON lines
	msgs io.Writer // prompts and notes
	json bool

	mode     Mode
	approver string
	// ApproveReason and DenyReason are recorded with the Approve and Deny
	// modes' answers.
	ApproveReason, DenyReason string
	// Answers is where Ask reads its answers, a line each; none leaves
	// every request waiting.
	Answers *bufio.Reader
	start   time.Time

	// ask's read of a line, in flight: a read of the terminal cannot be
	// interrupted, so a prompt that ends before its line comes (the request
	// was answered elsewhere) leaves it here, stale, and the next prompt
	// throws that line away rather than take it as its own answer. The
	// goroutine of a read ends when the line (or the end of input) comes;
	// at most one is in flight. Owned by the goroutine that runs the watch.
	pending chan lineRead
	stale   bool
}

type lineRead struct {
	text string
	err  error
}

// NewPrinter prints the tree of root to out (with asJSON one CloudEvents
// JSON object per record per line), its prompts and notes to msgs, and
// answers its approval requests as mode says, in approver's name.
func NewPrinter(root string, out, msgs io.Writer, asJSON bool, mode Mode, approver string) *Printer {
	return &Printer{
		root: root, out: out, msgs: msgs, json: asJSON,
		mode: mode, approver: approver,
		ApproveReason: "approved from the command line (--approvals approve)",
		DenyReason:    "refused from the command line (--approvals deny)",
		start:         time.Now(),
	}
}

// Root is the task whose tree the printer prints.
func (p *Printer) Root() string { return p.root }

// Watch starts watching the tree of the printer's root on h; fromNow
// prints only what is committed from now on.
func (p *Printer) Watch(ctx context.Context, h *host.Host, fromNow bool) error {
	opts := host.WatchOptions{
		FromNow:  fromNow,
		OnRecord: p.print,
		OnNote:   func(msg string) { fmt.Fprintf(p.msgs, "engine: %s\n", msg) },
	}
	if p.mode != Leave {
		opts.OnApproval = p.answer
	}
	w, err := h.Watch(ctx, p.root, opts)
	if err != nil {
		return err
	}
	p.w = w
	return nil
}

// Follow prints the tree's records until it comes to rest.
func (p *Printer) Follow(ctx context.Context) (host.Rest, error) {
	defer p.w.Stop()
	return p.w.Wait(ctx)
}

// RunOptions say what [Printer.Run] writes besides the tree's records.
type RunOptions struct {
	// Header is written once the tree is watched, before the task is
	// submitted; not with JSON lines.
	Header string
	// Source names the task's file in a failed submission's error.
	Source string
	// Flags reach the deployment again, for the outcome ([WriteOutcome]).
	Flags string
}

// Run submits sub as the printer's root task on h and prints its tree
// until it comes to rest, answering its approvals as the printer's mode
// says, then writes the outcome: to the output with the timeline, to the
// messages with JSON lines, which stay JSON.
func (p *Printer) Run(ctx context.Context, h *host.Host, sub host.Submission, o RunOptions) (host.Rest, error) {
	if err := p.Watch(ctx, h, false); err != nil {
		return host.Rest{}, err
	}
	outcome := p.out
	if p.json {
		outcome = p.msgs
	} else {
		fmt.Fprint(p.out, o.Header)
	}
	sub.ID = p.root
	if _, err := h.Submit(ctx, sub); err != nil {
		p.w.Stop()
		return host.Rest{}, fmt.Errorf("submit %s: %w", o.Source, err)
	}
	out, err := p.Follow(ctx)
	if err != nil {
		return out, err
	}
	WriteOutcome(outcome, p.root, o.Flags, out)
	return out, nil
}

func (p *Printer) print(env eventlog.Envelope) {
	if p.json {
		body, err := jetstream.CloudEvent(env)
		if err != nil {
			fmt.Fprintf(p.msgs, "engine: record %s of task %s: %v\n", env.ID, env.Task, err)
			return
		}
		body = append(body, '\n')
		_, _ = p.out.Write(body)
		return
	}
	// One record, one line: a newline in any field is escaped with the rest.
	role := Role(env.Task == p.root, p.w.Depth(env.Task))
	fmt.Fprintln(p.out, Line(env, env.Time.Sub(p.start).Seconds(), role))
}

// answer answers an approval request as the mode says.
func (p *Printer) answer(ctx context.Context, req host.ApprovalRequest) (host.Answer, bool) {
	a := host.Answer{Approver: p.approver}
	switch p.mode {
	case Approve:
		a.Decision, a.Reason = noeta.ApprovalApprove, p.ApproveReason
	case Deny:
		a.Decision, a.Reason = noeta.ApprovalDeny, p.DenyReason
	case Ask:
		var ok bool
		if a.Decision, ok = p.ask(ctx, req); !ok {
			return a, false
		}
		a.Reason = "answered on the terminal"
	default:
		return a, false
	}
	return a, true
}

// ask prompts for an approval; ok is false when no answer came (end of
// input, or ctx ended: the request was answered elsewhere): the request is
// left as it is.
func (p *Printer) ask(ctx context.Context, req host.ApprovalRequest) (noeta.ApprovalDecision, bool) {
	pa := req.Approval
	l := termsafe.Line
	fmt.Fprintf(p.msgs, "\napproval needed: task %s (%s), %s\n  %s\n  guard %s: %s\napprove? [y/N] ",
		l(req.Task), l(req.Agent), l(req.Handle), l(ApprovalWhat(pa)), l(pa.Guard), l(pa.Reason))
	if p.Answers == nil {
		fmt.Fprintln(p.msgs, "(no input; left waiting)")
		return "", false
	}
	r, ok := p.readLine(ctx)
	if !ok {
		fmt.Fprintf(p.msgs, "\n(%v)\n", context.Cause(ctx))
		return "", false
	}
	line, err := r.text, r.err
	if err != nil && line == "" {
		fmt.Fprintln(p.msgs, "(no input; left waiting)")
		return "", false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return noeta.ApprovalApprove, true
	}
	return noeta.ApprovalDeny, true
}

// readLine reads the answer to the prompt just shown; ok is false when
// ctx ended first. A line that completes a read begun for an earlier
// prompt is not this prompt's answer: it is dropped, said, and read again.
func (p *Printer) readLine(ctx context.Context) (lineRead, bool) {
	for {
		if p.pending == nil {
			ch := make(chan lineRead, 1)
			go func(r *bufio.Reader) {
				s, err := r.ReadString('\n')
				ch <- lineRead{s, err}
			}(p.Answers)
			p.pending = ch
		}
		select {
		case <-ctx.Done():
			p.stale = true
			return lineRead{}, false
		case r := <-p.pending:
			p.pending = nil
			if p.stale {
				p.stale = false
				if r.err == nil {
					fmt.Fprintf(p.msgs, "(%q answered an earlier request, which was closed before it; answer this one again) approve? [y/N] ", strings.TrimSpace(r.text))
					continue
				}
			}
			return r, true
		}
	}
}

// WriteOutcome says how a tree came to rest, and for a task left waiting, how to
// answer it; where is the flags that reach the deployment (--data DIR or
// --nats URL), "" when the task cannot be reached again (the demo's
// temporary directory).
func WriteOutcome(w io.Writer, id, where string, out host.Rest) {
	// A detail, a reason or a question comes from a record: each field is
	// escaped on its own, so a newline in it cannot start a line.
	l := termsafe.Line
	switch out.Status {
	case host.RestCompleted:
		fmt.Fprintf(w, "completed: task %s answered %s\n", id, l(out.Detail))
	case host.RestFailed:
		if out.Guard != "" {
			fmt.Fprintf(w, "failed: task %s: %s (guard %s)\n", id, l(out.Detail), l(out.Guard))
		} else {
			fmt.Fprintf(w, "failed: task %s: %s\n", id, l(out.Detail))
		}
	case host.RestCancelled:
		fmt.Fprintf(w, "cancelled: task %s: %s\n", id, l(out.Detail))
	case host.RestWaiting:
		for _, wt := range out.Waiting {
			if wt.Approval != nil {
				fmt.Fprintf(w, "waiting for approval: task %s handle %s\n  %s\n  guard %s: %s\n",
					l(wt.Task), l(wt.Handle), l(ApprovalWhat(*wt.Approval)), l(wt.Approval.Guard), l(wt.Approval.Reason))
			} else {
				fmt.Fprintf(w, "waiting for a human: task %s handle %s (%s)\n", l(wt.Task), l(wt.Handle), l(wt.Reason))
			}
		}
		if where == "" {
			fmt.Fprintf(w, "to answer: through the host that holds the task (Host.Approve)\n")
			return
		}
		fmt.Fprintf(w, "to answer:\n")
		for _, wt := range out.Waiting {
			if wt.Approval != nil {
				fmt.Fprintf(w, "  engine approve %s %s %s   (--deny to refuse, --reason R to say why)\n", l(wt.Task), l(wt.Handle), where)
			} else {
				fmt.Fprintf(w, "  engine answer %s %s TEXT %s\n", l(wt.Task), l(wt.Handle), where)
			}
		}
	case host.RestStuck:
		fmt.Fprintf(w, "stuck: task %s: %s\n", id, l(out.Detail))
	case host.RestInterrupted:
		if where == "" {
			fmt.Fprintf(w, "interrupted: task %s is left as it is (%s)\n", id, l(out.Detail))
			return
		}
		fmt.Fprintf(w, "interrupted: task %s is left as it is (%s; %s)\n", id, l(out.Detail), where)
	}
}
