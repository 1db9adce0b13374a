package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/taskview"
)

// engine doctor: check a store for what the server's own recovery may have
// lost silently. It reads; it repairs nothing.

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	var configPath string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a store: every task's log dense and decodable, rows consistent with logs, content present",
		Long: `doctor checks the store of the deployment (the embedded server on --data, or
--nats) and lists every problem it finds, each naming the task and the seqs:

  stream_lost       the task stream is gone while its buckets say it existed
  stream_loss       the task stream's own counters say messages are gone
                    (a truncated or emptied message block)
  gap               a task's log is missing seqs
  corrupt           a record does not decode (its stream sequence is named)
  bad_log           a dense log a fold cannot make sense of
  tail_lost         the dispatcher's row says the task suspended or ended,
                    and its log does not: the log's last records are lost
  row_without_log   the dispatcher has a task whose log is gone
  log_without_row   a task's log has no dispatcher row (it will never run)
  content_missing   a content ref (goal, args, output, snapshot…) whose body
                    is not in the content store
  inbox_corrupt     an inbox record that does not decode
  sandbox_unavailable  the sandbox the config asks for (on by default) cannot
                    be had on this machine: every shell command and stdio MCP
                    server it should confine would be refused (--config names
                    the config; without it, the default)

The server repairs what it can when it starts (it skips a message whose
checksum fails, drops what a truncated block held); doctor reports what that
repair lost. It works on a running deployment too: a row and a log that move
while they are read are read again, never reported.

Exit status: 0 the store is clean, 1 problems were found (or the store could
not be read), 2 bad usage. --json prints one JSON object instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg *config.File
			if configPath != "" {
				var err error
				if cfg, err = govfile.Load(cmd.Context(), configPath); err != nil {
					return usageErr("%v", err)
				}
			}
			rep, err := runDoctor(cmd.Context(), g)
			if err != nil {
				return err
			}
			hostconfig.CheckSandbox(cmd.Context(), rep, cfg)
			if asJSON {
				b, err := json.Marshal(rep)
				if err != nil {
					return failErr(err)
				}
				fmt.Fprintf(g.stdout, "%s\n", b)
			} else {
				taskview.WriteDoctor(g.stdout, rep)
			}
			if !rep.Clean {
				return exitCode(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	cmd.Flags().StringVar(&configPath, "config", "", "the config whose sandbox: section to check (default: the default, sandbox on)")
	return cmd
}

// runDoctor opens the deployment read only and checks it.
func runDoctor(ctx context.Context, g *globals) (*jshost.DoctorReport, error) {
	// The host starts the server on --data (or attaches to its holder's);
	// doctor reads through its connection only, with no observer and no
	// recovery writing.
	h, err := g.open(ctx, "doctor", hostconfig.Options{ReadOnly: true})
	if errors.Is(err, jetstream.ErrStreamLost) {
		return jshost.StreamLostReport(err), nil
	}
	if err != nil {
		return nil, err
	}
	defer h.Close()
	rep, err := h.Doctor(ctx)
	if err != nil {
		return nil, failErr(err)
	}
	return rep, nil
}
