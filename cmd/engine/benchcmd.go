package main

import (
	"context"
	"os"

	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/termsafe"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/loadgen"
)

// benchOpts are engine bench's own flags.
type benchOpts struct {
	tasks, calls int
	mix          string
	json         bool
	// idle lists the suspended-task populations to measure at (scale mode).
	idle    string
	probes  int
	restart bool
	// serverPID and serverDir name the nats-server of --nats, whose RSS and
	// store size the scale mode reads at each level.
	serverPID int
	serverDir string
	// profile is where the scale mode writes its profiles.
	profile string
}

func newBenchCmd(g *globals) *cobra.Command {
	var o benchOpts
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate load: N scripted tasks of M tool calls each, and measure",
		Long: `bench runs --tasks scripted tasks of --calls tool calls each with a pool of
--workers, on the embedded server (a temporary data directory unless --data)
or on --nats, and measures: tasks/s and records/s; fenced-append latency
(a probe task appending under its own lease while the load runs); wake to
lease (an answered approval, a sent external event or a finished subtask to
the LeaseGranted of the task it woke); commit to in-process observer lag;
the durable waits (writes to the task stream the engine waited for) per
tool call, and those that went in group commits (on the embedded server,
many tasks' writes in one atomic batch); the CPU time and peak RSS of this process (with the embedded server, server
included).

--mix gives the share of the calls that are denied by a rule, that need an
approval (answered at once by the bench), that spawn a subtask, and that
wait for an external event (sent by the bench as soon as the task
suspends): deny=0.1,approve=0.1,spawn=0.05,wait=0.05.

--idle 1000,10000,100000 is the scale mode: it grows a population of
suspended tasks (each created, leased, suspended on an external event: three
records and a dispatcher row) to each level in turn and measures there, in
the same run: fenced-append and wake-to-lease latency over --probes samples,
RSS, and data-directory bytes per task; --restart then reopens the host and
times the restart and the first resumed task.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.tasks, "tasks", 100, "tasks to run")
	f.IntVar(&o.calls, "calls", 20, "tool calls (script steps) per task")
	f.StringVar(&o.mix, "mix", "", "shares of the calls: deny=F,approve=F,spawn=F,wait=F (the rest are plain calls)")
	f.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	f.StringVar(&o.idle, "idle", "", "scale mode: suspended-task populations to measure at, comma-separated and rising")
	f.IntVar(&o.probes, "probes", 200, "scale mode: appends and wakes timed at each level")
	f.BoolVar(&o.restart, "restart", false, "scale mode: restart the host after the last level (with --nats, the engine only) and time it")
	f.IntVar(&o.serverPID, "server-pid", 0, "scale mode with --nats: the nats-server's pid, to read its RSS at each level")
	f.StringVar(&o.serverDir, "server-dir", "", "scale mode with --nats: the nats-server's store directory, to read its size at each level")
	f.StringVar(&o.profile, "profile", "", "scale mode: write a CPU profile of each level's appends and a heap profile after it to this directory")
	return cmd
}

func runBench(ctx context.Context, g *globals, o benchOpts) error {
	mix, err := loadgen.ParseMix(o.mix)
	if err != nil {
		return usageErr("%v", err)
	}
	// The bar is drawn on the terminal itself: the escaping writer would
	// show its \r as an escape (and is no terminal to ask).
	progress, bar := g.stderr, termsafe.IsTerminalWriter(g.rawErr)
	if bar {
		progress = g.rawErr
	}
	lo := loadgen.Options{
		Tasks: o.tasks, Calls: o.calls, Mix: mix, Probes: o.probes, Restart: o.restart,
		ServerPID: o.serverPID, ServerDir: o.serverDir, Profile: o.profile,
		Workers: g.workers, Progress: progress, Bar: bar, Quiet: o.json,
	}
	if err := lo.Check(g.conn.embedded()); err != nil {
		return usageErr("%v", err)
	}
	if lo.Levels, err = loadgen.ParseLevels(o.idle); err != nil {
		return usageErr("%v", err)
	}
	cfg, err := loadgen.Config(o.calls)
	if err != nil {
		return failErr(err)
	}
	opts := hostconfig.Options{Config: cfg, Workers: g.workers, Name: "bench"}
	if g.conn.embedded() && g.data == "" {
		dir, err := os.MkdirTemp("", "noeta-bench-")
		if err != nil {
			return failErr(err)
		}
		defer os.RemoveAll(dir)
		opts.DataDir = dir
	}
	h, err := g.open(ctx, "bench", opts)
	if err != nil {
		return err
	}
	defer func() { h.Close() }()
	lo.Target = h.Where()
	lo.Reopen = func(ctx context.Context, dir string) (*hostconfig.Host, error) {
		opts.DataDir = dir
		return g.open(ctx, "bench", opts)
	}
	res, h2, err := loadgen.Run(ctx, h, lo)
	h = h2
	if err != nil {
		return failErr(err)
	}
	return res.Write(g.stdout, o.json)
}
