package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

func newApprovalsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List every request waiting for a person across the deployment: approvals and questions",
		Long: `approvals lists every open approval and question of the deployment, oldest
first, from the waiting index the engines keep current (no task's log is
read): the task and its agent, what it asks to do (the action, tool and
arguments, cut), the guard and its reason, how long it has waited, when it
expires, and who may answer (with the quorum's progress). Answer with
'engine approve TASK HANDLE'.

--json prints one JSON array of the index's entries.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rv, err := openReadView(cmd.Context(), g, "approvals")
			if err != nil {
				return err
			}
			defer rv.Close()
			ws, err := rv.Waiting(cmd.Context())
			if errors.Is(err, jetstream.ErrWaitingCut) {
				fmt.Fprintf(g.stderr, "engine: note: %v; the oldest are shown\n", err)
			} else if err != nil {
				return failErr(err)
			}
			if asJSON {
				if ws == nil {
					ws = []eventlog.Waiting{}
				}
				b, err := json.MarshalIndent(ws, "", "  ")
				if err != nil {
					return failErr(err)
				}
				_, err = fmt.Fprintf(g.stdout, "%s\n", b)
				return err
			}
			printWaiting(g.stdout, ws, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as one JSON array")
	return cmd
}

// printWaiting prints one line per request and an indented line of its
// handle, guard and who may answer. Every line is made terminal-safe
// whole (termsafe.Line): a question, a reason or arguments come from a
// model or a tool, and an escape sequence, a bidi override or a newline in
// them could redraw what the person deciding reads.
func printWaiting(w io.Writer, ws []eventlog.Waiting, now time.Time) {
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
