package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/buildinfo"
	"github.com/noeta-go/noeta/taskview"
)

// cancel, content and version: a task ended by hand, a content-store body
// read back, and which build this is.

func newCancelCmd(g *globals) *cobra.Command {
	var reason string
	var tree bool
	cmd := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a task (with --tree, every task below it too)",
		Long: `cancel ends TASK with a TaskCancelled record carrying --reason, and with
--tree every task below it as well (TASK first, so it spawns nothing more).
A task that has ended already is left as it is. It prints the tasks it
cancelled, one per line, and exits 0; 1 when the task does not exist or the
log cannot be written; 2 for bad usage.`,
		Example: `  engine cancel 01J9Z3K7Q4M8X2V6B5N0C1D2E3 --tree --reason "wrong repository"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := taskArg(args[0]); err != nil {
				return err
			}
			h, err := g.open(cmd.Context(), "cancel", hostconfig.Options{})
			if err != nil {
				return err
			}
			defer h.Close()
			done, err := h.Cancel(cmd.Context(), args[0], reason, tree)
			for _, id := range done {
				fmt.Fprintln(g.stdout, id)
			}
			if errors.Is(err, eventlog.ErrNotFound) && len(done) == 0 {
				return failErr(taskview.NoTask(cmd.Context(), h, args[0]))
			}
			if err != nil {
				return failErr(err)
			}
			if len(done) == 0 {
				fmt.Fprintf(g.stderr, "engine: task %s had ended already; nothing was cancelled\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "cancelled with engine cancel", "why, recorded in TaskCancelled")
	cmd.Flags().BoolVar(&tree, "tree", false, "cancel every task below TASK too")
	return cmd
}

func newContentCmd(g *globals) *cobra.Command {
	var field string
	var raw bool
	cmd := &cobra.Command{
		Use:   "content REF | content TASK SEQ",
		Short: "Print a body the content store holds: by its sha256, or the one a record refers to",
		Long: `content prints a body that a record keeps in the content store instead of
inline (a model's raw response, its long words, a large tool output or
argument): by REF, its sha256 (64 hex digits, sha256: in front or not), or
as TASK SEQ, the body the record at SEQ of TASK refers to (the seq the
timeline shows as #N); when that record refers to several, --field names
which (such as response_ref or text_ref). The bytes pass through the
terminal-safe escaping like every other output; --raw writes them as they
are, for a file or a pipe.`,
		Example: `  engine content 01J9Z3K7Q4M8X2V6B5N0C1D2E3 12 --field response_ref
  engine content sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 --raw > body.json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var seq uint64
			if len(args) == 2 {
				if err := taskArg(args[0]); err != nil {
					return err
				}
				n, err := strconv.ParseUint(args[1], 10, 64)
				if err != nil || n == 0 {
					return usageErr("SEQ %q: want a record's seq, 1 or more", args[1])
				}
				seq = n
			} else if field != "" {
				return usageErr("--field names a field of a record: give TASK SEQ")
			}
			h, err := openReadView(cmd.Context(), g, "content")
			if err != nil {
				return err
			}
			defer h.Close()
			out := g.stdout
			if raw {
				out = g.rawOut
			}
			err = taskview.Content(cmd.Context(), h, args, seq, field, out)
			if errors.Is(err, taskview.ErrBadArgument) {
				return usageErr("%v", err)
			}
			return failIf(err)
		},
	}
	cmd.Flags().StringVar(&field, "field", "", "with TASK SEQ: which of the record's refs (such as response_ref)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the bytes as they are, not escaped for a terminal")
	return cmd
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the build: module version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read()
			if !asJSON {
				fmt.Fprintln(g.stdout, "engine", in)
				return nil
			}
			b, err := json.Marshal(in)
			if err != nil {
				return failErr(err)
			}
			fmt.Fprintf(g.stdout, "%s\n", b)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build as one JSON object")
	return cmd
}
