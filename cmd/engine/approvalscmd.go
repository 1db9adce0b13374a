package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/taskview"
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

--json prints one JSON object per entry per line.`,
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
				return failIf(taskview.WriteWaitingJSON(g.stdout, ws))
			}
			taskview.WriteWaiting(g.stdout, ws, time.Now())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per entry per line")
	return cmd
}
