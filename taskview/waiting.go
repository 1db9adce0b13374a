package taskview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// WriteWaitingJSON is the waiting list as engine approvals --json prints
// it: one JSON object per entry per line (docs/cli.md), nothing when none
// wait.
func WriteWaitingJSON(w io.Writer, ws []eventlog.Waiting) error {
	enc := json.NewEncoder(w)
	for _, e := range ws {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// WriteWaiting prints one line per request and an indented line of its
// handle, guard and who may answer. Every line is made terminal-safe
// whole (termsafe.Line): a question, a reason or arguments come from a
// model or a tool, and an escape sequence, a bidi override or a newline in
// them could redraw what the person deciding reads.
func WriteWaiting(w io.Writer, ws []eventlog.Waiting, now time.Time) {
	if len(ws) == 0 {
		fmt.Fprintln(w, "nothing waits for a person")
		return
	}
	fmt.Fprintf(w, "%-26s  %-12s  %-8s  %6s  %-9s  %s\n", "TASK", "AGENT", "KIND", "AGE", "EXPIRES", "WHAT")
	for _, e := range ws {
		expires := "-"
		if !e.ExpiresAt.IsZero() {
			if d := e.ExpiresAt.Sub(now); d > 0 {
				expires = "in " + shortDuration(d)
			} else {
				expires = "due"
			}
		}
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("%-26s  %-12s  %-8s  %6s  %-9s  %s", e.Task, timeline.Cut(e.Agent, 12), e.Kind,
			shortDuration(now.Sub(e.RequestedAt)), expires, waitingWhat(e))))
		var detail []string
		detail = append(detail, "handle "+e.Handle)
		if e.Guard != "" || e.Reason != "" {
			detail = append(detail, fmt.Sprintf("guard %s: %s", orDash(e.Guard), timeline.Cut(e.Reason, 120)))
		}
		if who := waitingWho(e); who != "" {
			detail = append(detail, who)
		}
		fmt.Fprintln(w, termsafe.Line("    "+strings.Join(detail, " · ")))
	}
}

// waitingWhat is what a request asks: the action, tool and arguments (cut)
// of an approval, the question of a question.
func waitingWhat(e eventlog.Waiting) string {
	if e.Kind == eventlog.WaitingQuestion {
		return "asks: " + timeline.Cut(e.Question, 100)
	}
	var b strings.Builder
	b.WriteString(orDash(e.Action))
	switch {
	case e.Tool != "":
		b.WriteString(" " + e.Tool)
	case e.Child != "":
		b.WriteString(" agent " + e.Child)
	}
	if len(e.Args) > 0 {
		b.WriteString(" " + timeline.Cut(string(e.Args), 80))
	}
	return b.String()
}

// waitingWho says who may answer and how far a quorum has come.
func waitingWho(e eventlog.Waiting) string {
	var parts []string
	if e.MayAnswer != "" {
		parts = append(parts, "may answer: "+timeline.Cut(e.MayAnswer, 80))
	} else if len(e.Rules) > 0 {
		parts = append(parts, "rules: "+strings.Join(e.Rules, ", "))
	}
	if e.Quorum > 1 {
		q := fmt.Sprintf("%d of %d approvals", len(e.Approvals), e.Quorum)
		if len(e.Approvals) > 0 {
			q += " (" + strings.Join(e.Approvals, ", ") + ")"
		}
		parts = append(parts, q)
	}
	return strings.Join(parts, " · ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDuration is d in its largest unit: 45s, 12m, 3h, 2d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// WriteDoctor writes a store's doctor report: a line per problem, each
// escaped whole (a detail may quote a damaged record's bytes), the
// sandbox's state, and a summary.
func WriteDoctor(w io.Writer, r *jshost.DoctorReport) {
	for _, p := range r.Problems {
		line := p.Kind
		if p.Task != "" {
			line += " task " + p.Task
		}
		if p.Seqs != "" {
			line += " seq " + p.Seqs
		}
		if p.StreamSeq != 0 {
			line += " stream seq " + strconv.FormatUint(p.StreamSeq, 10)
		}
		// A detail may quote a damaged record's bytes.
		fmt.Fprintln(w, termsafe.Line(line+": "+p.Detail))
	}
	if sb := r.Sandbox; sb != nil {
		switch {
		case !sb.Enabled:
			fmt.Fprintf(w, "sandbox: disabled by the config (%s): tools run unconfined\n", strings.Join(sb.Disabled, ", "))
		case sb.Available:
			fmt.Fprintf(w, "sandbox: available (Landlock ABI %d, seccomp, user namespaces)\n", sb.LandlockABI)
		}
	}
	if r.Clean {
		fmt.Fprintf(w, "clean: %d tasks, %d records, %d dispatcher rows\n", r.Tasks, r.Records, r.Rows)
		return
	}
	fmt.Fprintf(w, "%d problem(s) in %d tasks, %d records, %d dispatcher rows\n", len(r.Problems), r.Tasks, r.Records, r.Rows)
}
