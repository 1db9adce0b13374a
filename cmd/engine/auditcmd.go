package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/observers"
)

func newAuditCmd(g *globals) *cobra.Command {
	audit := &cobra.Command{
		Use:   "audit",
		Short: "Work with audit trails",
		Args:  unknownVerb,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("name a verb: audit verify FILE")
		},
	}
	audit.AddCommand(&cobra.Command{
		Use:   "verify FILE",
		Short: "Check an audit file's hash chains and name the first broken record",
		Long: `verify reads a JSON Lines audit trail (observer-worker --audit-file), recomputes
every record's hash, checks that each record's prev is the hash of its task's
previous record and that each task's log records come once each, in order.

Exit codes: 0 every chain is intact; 1 a record is broken (the first one is
named, with its line, task and seq); 2 the file cannot be read (it must be
a regular file; a line longer than 1 MiB is a broken record).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := observers.VerifyAuditFileContext(cmd.Context(), args[0])
			if err != nil && cmd.Context().Err() != nil {
				return failErr(errors.New("audit verify: interrupted"))
			}
			if err != nil {
				return usageErr("audit verify: %v", err)
			}
			// A broken record's task, key or reason quotes the file's bytes.
			fmt.Fprintln(g.stdout, termsafe.Line(rep.String()))
			if !rep.OK() {
				return exitCode(exitFailed)
			}
			return nil
		},
	})
	return audit
}
