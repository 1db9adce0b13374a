package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/tasklist"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/taskview"
)

// The read verbs: events, inspect, tasks. They open the data directory's
// server and read; they run no worker.

// openReadView opens a host that only reads: on the embedded default the
// server of --data (its own, or that of the process that holds it); on a
// remote NATS it only looks things up, so it works with the read-only
// permissions of deploy/nats's operator role.
func openReadView(ctx context.Context, g *globals, verb string) (*hostconfig.Host, error) {
	return g.open(ctx, verb, hostconfig.Options{ReadOnly: true})
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
			if err := taskview.Events(cmd.Context(), rv, args[0], follow, asJSON, g.stdout); err != nil {
				return failErr(err)
			}
			if cmd.Context().Err() != nil {
				return nil // interrupted while following
			}
			return failIf(taskview.CheckTail(cmd.Context(), rv, args[0]))
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new records until the task ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one CloudEvents JSON object per record per line")
	return cmd
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
			note := func(n string) { fmt.Fprintln(g.stderr, "engine: note:", n) }
			return failIf(taskview.Inspect(cmd.Context(), st, args[0], asJSON, g.stdout, note))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the folded state and the dispatcher's row as JSON")
	return cmd
}

func newTasksCmd(g *globals) *cobra.Command {
	var asJSON bool
	var since string
	var f tasklist.Filter
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List the tasks of the deployment, most recently active first",
		Long: `tasks lists the deployment's tasks, most recently active first: id, agent,
status, the last record's time, the goal and the outcome (a completed
task's answer, a failed one's error, a cancelled one's reason, the handles
a waiting one waits on). The status is one of completed, failed, cancelled,
waiting (on a person: an approval, a question, a park), suspended (on a
timer, its subtasks, an event), running, pending and unreadable (a log that
could not be folded; the reason says why). --json prints one JSON object
per task per line. Each listed task's log is read whole, so a damaged store
is reported (exit 1, naming every damage) after the list.`,
		Example: `  engine tasks --status waiting,failed --since 24h
  engine tasks --agent researcher --limit 20 --json | jq -r .task`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if f.Since, err = tasklist.ParseSince(since, time.Now()); err != nil {
				return usageErr("--%v", err)
			}
			if err := f.Check(); err != nil {
				return usageErr("%v", err)
			}
			st, err := openReadView(cmd.Context(), g, "tasks")
			if err != nil {
				return err
			}
			defer st.Close()
			return failIf(taskview.WriteTasks(cmd.Context(), st, f, asJSON, g.stdout, g.stderr))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "one JSON object per task per line")
	fl.StringSliceVar(&f.Status, "status", nil, "only tasks with these statuses: "+strings.Join(tasklist.Statuses, ", "))
	fl.StringVar(&f.Agent, "agent", "", "only the tasks of this agent")
	fl.StringVar(&since, "since", "", "only tasks active since then: a duration back from now (24h) or an RFC 3339 time")
	fl.StringVar(&f.Text, "text", "", "only tasks whose id, agent or goal contains this, in any case")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many tasks (0: all)")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(tasklist.Statuses, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
