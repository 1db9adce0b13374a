package main

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/hostconfig"

	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/examples/demo"
)

func newDemoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run every example task and show what each governance path does",
		Long: `demo runs every example task of examples/ (embedded in the binary) under the
examples' noeta.yaml, each in a fresh temporary workspace holding a README.md,
on the embedded server (in a temporary data directory unless --data is
given). It answers approvals from its own table (05 and 06 approve, 07
denies), prints each task's timeline under a heading, then a summary. It
exits 0 when every example ended as expected, else 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), g) },
	}
}

func runDemo(ctx context.Context, g *globals) error {
	if err := g.check(); err != nil {
		return err
	}
	cfg, err := demo.Config()
	if err != nil {
		return failErr(err)
	}
	tmp, err := os.MkdirTemp("", "noeta-demo-")
	if err != nil {
		return failErr(err)
	}
	defer os.RemoveAll(tmp)
	data := g.data
	if data == "" {
		data = filepath.Join(tmp, "data")
	} else if data, err = g.dataDir(); err != nil {
		return err
	}
	if !g.conn.embedded() {
		data = ""
	}
	// The demo runs tasks, so it runs its config's observers like run does
	// (examples/noeta.yaml has none today, and the demo's output stays its
	// own). Its own pool is never started: each example runs in a pool of
	// its own, on its own queue and workspace (runExample).
	h, err := g.open(ctx, "demo", hostconfig.Options{DataDir: data, Config: cfg, Workers: g.workers, Deferred: true, Workspace: tmp, Verb: "demo", Stdout: g.stdout})
	if err != nil {
		return err
	}
	defer h.Close()

	w := g.stdout
	on := "an embedded NATS JetStream in " + data
	if !g.conn.embedded() {
		on = "NATS JetStream at " + h.Describe()
	}
	fmt.Fprintf(w, "noeta demo: every example of examples/ under examples/noeta.yaml, on %s\n", on)
	where := ""
	if g.data != "" || !g.conn.embedded() {
		where = h.Flags()
	}
	results, err := demo.Run(ctx, h, tmp, demo.Options{Workers: g.workers, Approver: approvals.LocalApprover(), Out: w, Msgs: g.stderr, Where: where})
	if err != nil {
		return failErr(err)
	}
	failed := demo.WriteSummary(w, results)
	if !demo.WriteVerdict(w, len(results), failed, ctx.Err() != nil) {
		return exitCode(exitFailed)
	}
	return nil
}
