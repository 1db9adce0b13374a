package main

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta/hostconfig"

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
			return failIf(taskview.WriteTasks(cmd.Context(), st, g.stdout))
		},
	}
}
