package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/gateway"
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
'engine approve TASK HANDLE'. Then the MCP tool definitions that changed
upstream and are refused until an operator accepts them (engine gateway pin).

--json prints one JSON object per entry per line; a tool pin to review is an
object of "kind": "tool_pin".`,
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
			pins, err := gateway.PinsToReview(cmd.Context(), rv.Conn(), g.conn.prefix)
			if err != nil {
				// The requests are shown whatever: a role that may not
				// read the pins' bucket sees them without the pins.
				fmt.Fprintf(g.stderr, "engine: note: the tool pins to review could not be read: %v\n", err)
			}
			if asJSON {
				if err := taskview.WriteWaitingJSON(g.stdout, ws); err != nil {
					return failErr(err)
				}
				return failIf(gateway.WritePinsToReview(g.stdout, pins, true))
			}
			taskview.WriteWaiting(g.stdout, ws, time.Now())
			return failIf(gateway.WritePinsToReview(g.stdout, pins, false))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per entry per line")
	return cmd
}
