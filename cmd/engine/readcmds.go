package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// The read verbs: events, inspect, tasks. They open the data directory's
// server and read; they run no worker.

// openReadView opens a host that only reads: on the embedded default the
// server of --data (its own, or that of the process that holds it); on a
// remote NATS it only looks things up, so it works with the read-only
// permissions of deploy/nats's operator role.
func openReadView(ctx context.Context, g *globals, verb string) (*host.Host, error) {
	return g.open(ctx, verb, host.Options{ReadOnly: true})
}

// dispatchState is the dispatcher's row of task; known is false while the
// dispatcher does not know it.
func dispatchState(ctx context.Context, h *host.Host, task string) (eventlog.DispatchState, bool, error) {
	ds, err := h.Dispatch(ctx, task)
	if errors.Is(err, eventlog.ErrNotFound) {
		return ds, false, nil
	}
	return ds, err == nil, err
}

func taskArg(id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func newEventsCmd(g *globals) *cobra.Command {
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "events TASK",
		Short: "Print a task's records: its log, then its inbox",
		Long: `events prints every record of TASK: its log in order, then the records of
its inbox (subtask results handed to it). With --follow it keeps printing the
task's new records until the task ends. --json prints each record as the
CloudEvents JSON object it is stored as, one per line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := taskArg(args[0]); err != nil {
				return err
			}
			rv, err := openReadView(cmd.Context(), g, "events")
			if err != nil {
				return err
			}
			defer rv.Close()
			if err := printEvents(cmd.Context(), rv, args[0], follow, asJSON, g.stdout); err != nil {
				return err
			}
			if cmd.Context().Err() != nil {
				return nil // interrupted while following
			}
			state, _, err := rv.Fold(cmd.Context(), args[0])
			if err != nil {
				return failErr(damagedHint(err))
			}
			ds, known, err := dispatchState(cmd.Context(), rv, args[0])
			if err != nil {
				return failErr(err)
			}
			return tailCheck(cmd.Context(), rv, state, ds, known)
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new records until the task ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one CloudEvents JSON object per record per line")
	return cmd
}

// followPoll is how often events --follow looks for new records.
const followPoll = 200 * time.Millisecond

func printEvents(ctx context.Context, st *host.Host, task string, follow, asJSON bool, w io.Writer) error {
	envs, err := st.Events(ctx, task, 0)
	if err != nil {
		if errors.Is(err, eventlog.ErrNotFound) {
			return noTask(ctx, st, task)
		}
		return failErr(damagedHint(err))
	}
	if len(envs) == 0 {
		return noTask(ctx, st, task)
	}
	start := envs[0].Time
	print := func(env eventlog.Envelope) error {
		if asJSON {
			b, err := jetstream.CloudEvent(env)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(w, timeline.EventLine(env, env.Time.Sub(start).Seconds()))
		return err
	}
	seen := map[string]bool{}
	last := uint64(0)
	ended := false
	emit := func(batch []eventlog.Envelope) error {
		for _, env := range batch {
			if env.Seq > 0 {
				last = env.Seq
				ended = ended || noeta.IsTerminalType(env.Type)
			} else {
				if seen[env.Key] {
					continue
				}
				seen[env.Key] = true
			}
			if err := print(env); err != nil {
				return err
			}
		}
		return nil
	}
	if err := emit(envs); err != nil {
		return failErr(err)
	}
	for {
		inbox, err := st.Inbox(ctx, task)
		if err != nil {
			return failErr(err)
		}
		if err := emit(inbox); err != nil {
			return failErr(err)
		}
		if !follow || ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
		more, err := st.Events(ctx, task, last)
		if err != nil {
			return failErr(err)
		}
		if err := emit(more); err != nil {
			return failErr(err)
		}
	}
}

func newInspectCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect TASK",
		Short: "Print a task's folded state: status, governance counters, pending approvals",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := taskArg(args[0]); err != nil {
				return err
			}
			st, err := openReadView(cmd.Context(), g, "inspect")
			if err != nil {
				return err
			}
			defer st.Close()
			// The fold reads from the newest snapshot on; the whole log is
			// read first, so a hole before the snapshot is not folded over.
			if _, err := st.Events(cmd.Context(), args[0], 0); err != nil {
				if errors.Is(err, eventlog.ErrNotFound) {
					return noTask(cmd.Context(), st, args[0])
				}
				return failErr(damagedHint(err))
			}
			state, note, err := st.Fold(cmd.Context(), args[0])
			if note != "" {
				fmt.Fprintln(g.stderr, "engine: note:", note)
			}
			if err != nil {
				if errors.Is(err, eventlog.ErrNotFound) {
					return failErr(fmt.Errorf("no task %s in this deployment", args[0]))
				}
				return failErr(err)
			}
			ds, known, err := dispatchState(cmd.Context(), st, args[0])
			if err != nil {
				return failErr(err)
			}
			if asJSON {
				out := struct {
					State      *engine.State           `json:"state"`
					Dispatcher *eventlog.DispatchState `json:"dispatcher,omitempty"`
				}{State: state}
				if known {
					out.Dispatcher = &ds
				}
				b, err := json.MarshalIndent(out, "", "  ")
				if err != nil {
					return failErr(err)
				}
				fmt.Fprintf(g.stdout, "%s\n", b)
			} else {
				printState(g.stdout, state, ds, known)
			}
			return tailCheck(cmd.Context(), st, state, ds, known)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the folded state and the dispatcher's row as JSON")
	return cmd
}

func printState(w io.Writer, s *engine.State, ds eventlog.DispatchState, known bool) {
	// Each line is built whole and escaped whole (termsafe.Line): a reason,
	// an approver or a goal with a newline or an escape sequence in it
	// stays in its line and shows what it holds.
	line := func(format string, args ...any) {
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf(format, args...)))
	}
	line("task      %s", s.Task)
	line("agent     %s", s.Agent)
	if s.Parent != "" {
		line("parent    %s (root %s, depth %d)", s.Parent, s.Root, s.Depth)
	}
	line("goal      %s", timeline.Goal(s.Goal, s.GoalRef))
	status := "status    " + string(s.Status)
	if s.Reason != "" {
		status += ": " + s.Reason
	}
	if s.Guard != "" {
		status += " (guard " + s.Guard + ")"
	}
	line("%s", status)
	if s.WakeOn != nil {
		line("waits on  %s", timeline.Wake(s.WakeOn))
	}
	if s.Answer != nil || s.AnswerRef != nil {
		a := timeline.Cut(string(s.Answer), 200)
		if s.AnswerRef != nil {
			a = timeline.Ref(*s.AnswerRef)
		}
		line("answer    %s", a)
	}
	line("log       %d records, lease generation %d, turn %d", s.LastSeq, s.LeaseGen, s.Turn.N)
	if known {
		d := "dispatch  " + string(ds.Status)
		if ds.Worker != "" {
			d += " (worker " + ds.Worker + ")"
		}
		line("%s", d)
	}
	g := s.Governance
	line("governance")
	line("  iterations %d, tool calls %d, subtasks %d, cost $%g, tokens in %d out %d",
		g.Iterations, g.ToolCalls, g.SpawnedSubtasks, g.CostUSD, g.InputTokens, g.OutputTokens)
	if t := g.Tree(); t.CostUSD != g.CostUSD || t.ToolCalls != g.ToolCalls || g.Allotment != nil {
		// What the budgets compare (ADR 0054): the subtasks' spend and
		// reservations with the task's own, and the share it was given.
		fmt.Fprintf(w, "  tree: cost $%g, tool calls %d (ended subtasks $%g and %d, %d running)%s\n",
			t.CostUSD, t.ToolCalls, g.SubtaskCostUSD, g.SubtaskToolCalls, len(g.Reserved), timeline.Allotment(g.Allotment))
	}
	for _, d := range g.Denials {
		who := d.Guard
		if who == "" {
			who = "-"
		}
		line("  refused  %-22s guard %-12s %s %s: %s", d.Type, who, d.Tool+d.Agent, d.CallID, d.Reason)
	}
	for _, a := range g.Approvals {
		line("  approval %-22s %s by %s %s", a.Handle, a.Decision, a.Approver, a.Reason)
	}
	handles := make([]string, 0, len(g.PendingApprovals))
	for h := range g.PendingApprovals {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	for _, h := range handles {
		pa := g.PendingApprovals[h]
		line("  PENDING  %-22s %s (guard %s: %s)", h, timeline.ApprovalWhat(pa), pa.Guard, pa.Reason)
		if pa.Quorum > 1 || len(pa.Rules) > 0 || !pa.ExpiresAt.IsZero() || pa.Refused > 0 {
			line("           rules %v, approved by %v (%d of %d), %d refused answers, expires %s",
				pa.Rules, pa.Approvers, len(pa.Approvers), max(pa.Quorum, 1), pa.Refused, expiresString(pa.ExpiresAt))
		}
	}
	for _, r := range g.SubtaskResults {
		line("  subtask  %s %s", r.SubtaskID, r.Status)
	}
}

func newTasksCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tasks",
		Short: "List the tasks of the deployment, most recently active first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openReadView(cmd.Context(), g, "tasks")
			if err != nil {
				return err
			}
			defer st.Close()
			sums, err := st.Tasks(cmd.Context())
			if err != nil {
				return failErr(err)
			}
			fmt.Fprintf(g.stdout, "%-26s  %-10s  %7s  %s\n", "TASK", "DISPATCH", "RECORDS", "LAST RECORD")
			var damaged []error
			if err := st.CheckStream(cmd.Context()); err != nil {
				damaged = append(damaged, err)
			}
			for _, s := range sums {
				status := "-"
				if ds, known, err := dispatchState(cmd.Context(), st, s.Task); err == nil && known {
					status = string(ds.Status)
				}
				fmt.Fprintf(g.stdout, "%-26s  %-10s  %7d  %s\n", s.Task, status, s.LastSeq, s.LastTime.Format(time.RFC3339))
				// The listing reads only each log's last record; a hole
				// before it shows only to a read of the whole log.
				if _, err := st.Events(cmd.Context(), s.Task, 0); err != nil {
					if !eventlog.IsDamage(err) {
						return failErr(err)
					}
					damaged = append(damaged, err)
				}
			}
			if len(damaged) > 0 {
				return failErr(damagedHint(errors.Join(damaged...)))
			}
			return nil
		},
	}
}

// damagedHint points a damaged store's error at engine doctor.
func damagedHint(err error) error {
	if eventlog.IsDamage(err) || errors.Is(err, jetstream.ErrStreamLoss) {
		return fmt.Errorf("%w\nthe store is damaged: 'engine doctor' lists everything it lost", err)
	}
	return err
}

// tailCheck compares the dispatcher's row with the folded log: a row that
// says the task suspended or ended while the log does not is a log that lost
// its last records, which nothing in the log itself shows.
func tailCheck(ctx context.Context, st *host.Host, state *engine.State, ds eventlog.DispatchState, known bool) error {
	if !known || state.LastSeq == 0 {
		return nil
	}
	envs, err := st.Events(ctx, state.Task, state.LastSeq-1)
	if err != nil || len(envs) == 0 {
		return nil
	}
	again, ok, err := dispatchState(ctx, st, state.Task)
	if err != nil || !ok || again.Status != ds.Status || again.Generation != ds.Generation {
		return nil // the task moved while it was read
	}
	if f, bad := host.RowAgainstLog(state.Task, ds, state, envs[len(envs)-1]); bad {
		return failErr(damagedHint(fmt.Errorf("%w: task %s: seq %s: %s", eventlog.ErrGap, f.Task, f.Seqs, f.Detail)))
	}
	return nil
}

// noTask reports a task with no log: unknown, or — when the dispatcher has a
// row for it — a log the store lost.
func noTask(ctx context.Context, st *host.Host, task string) error {
	if ds, known, err := dispatchState(ctx, st, task); err == nil && known {
		return failErr(damagedHint(fmt.Errorf("%w: task %s: seq 1-: the dispatcher has the task (%s, lease generation %d) and the stream has no record of it: its whole log is lost",
			eventlog.ErrGap, task, ds.Status, ds.Generation)))
	}
	return failErr(fmt.Errorf("no task %s in this deployment", task))
}

func expiresString(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
