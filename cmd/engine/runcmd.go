package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/timeline"
)

// stdin is where --approvals ask reads its answers.
var stdin io.Reader = os.Stdin

// stdinIsTerminal decides the default of --approvals.
var stdinIsTerminal = func() bool { return termsafe.IsTerminal(os.Stdin.Fd()) }

// defaultConfig is the config run reads when --config is not given.
const defaultConfig = "noeta.yaml"

type runOpts struct {
	config    string
	json      bool
	approvals string
	workspace string
	timeout   time.Duration
}

func newRunCmd(g *globals) *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:   "run TASKFILE",
		Short: "Run a task file to its end, printing its timeline",
		Long: `run submits the task of TASKFILE, runs it and its subtasks with a pool of
workers on the embedded server, and prints every record of the task tree as
it is committed: guard verdicts with their reasons, approvals, subtasks.

With --nats, the pool runs on that NATS beside any serve processes, which may
take some of the tree's segments (their records are printed once the tree
comes to rest). run runs the ChildLifecycle observer over what it commits,
as serve --child and observer-worker --observers child do over theirs: a
subtask's result reaches its parent whichever process ran the subtask.

Exit codes: 0 the task completed; 1 it failed or was cancelled; 2 bad usage,
config or task file; 3 the task waits for an approval (with --approvals
leave, the default when stdin is not a terminal): its id and the approval's
handle are printed. --timeout bounds the run (0, the default: no limit);
SIGINT or SIGTERM stops it too, leaving the task as it is (exit 1).`,
		Example: `  engine run examples/01-allowed-call.yaml --config examples/noeta.yaml
  engine run task.yaml --approvals approve --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTask(cmd.Context(), g, o, args[0], cmd.Flags().Changed("approvals"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.BoolVar(&o.json, "json", false, "print one CloudEvents JSON object per committed record per line, instead of the timeline")
	f.StringVar(&o.approvals, "approvals", "", "how to answer approval requests: ask, approve, deny or leave (default ask on a terminal, else leave)")
	f.StringVar(&o.workspace, "workspace", ".", "directory the file and shell tools work in")
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long, leaving the task as it is (0: no limit; SIGINT stops it too)")
	return cmd
}

func runTask(ctx context.Context, g *globals, o runOpts, taskPath string, approvalsSet bool) error {
	if err := g.check(); err != nil {
		return err
	}
	ctx, cancel, err := withTimeout(ctx, o.timeout)
	if err != nil {
		return err
	}
	defer cancel()
	mode := timeline.Leave
	if stdinIsTerminal() {
		mode = timeline.Ask
	}
	if approvalsSet {
		m, err := parseApprovalMode(o.approvals)
		if err != nil {
			return err
		}
		mode = m
	}
	cfg, err := governance(ctx, o.config)
	if err != nil {
		return err
	}
	tf, sub, err := loadTask(ctx, taskPath, cfg)
	if err != nil {
		return err
	}
	if g.conn.embedded() {
		// The local user: who can read the data directory.
		sub.SubmittedBy = approvals.LocalApprover()
	}
	workspace, err := absDir("--workspace", o.workspace)
	if err != nil {
		return err
	}
	h, err := g.open(ctx, "run", hostconfig.Options{
		Config: cfg, Workers: g.workers, Workspace: workspace, Verb: "run", Stdout: g.stdout,
	})
	if err != nil {
		return err
	}
	defer h.Close()

	id := noeta.NewTaskID()
	p := timeline.NewPrinter(id, g.stdout, g.stderr, o.json, mode, approvals.LocalApprover())
	if mode == timeline.Ask {
		p.Answers = bufio.NewReader(stdin)
	}
	header := fmt.Sprintf("task %s: %s (agent %s); config %s, workspace %s, %s, %d workers, approvals %s\n",
		id, taskPath, tf.Agent, cfg.Path, workspace, h.Where(), g.workers, mode)
	out, err := p.Run(ctx, h.Host, sub, timeline.RunOptions{Header: header, Source: taskPath, Flags: h.Flags()})
	if err != nil {
		return failErr(err)
	}
	return exitCode(restCode(out))
}

// governance loads the governance config at path, or noeta.yaml in the
// working directory when path is empty; a mistake is bad usage.
func governance(ctx context.Context, path string) (*config.File, error) {
	cfg, err := govfile.Governance(ctx, path, defaultConfig)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return cfg, nil
}

// loadTask reads a task file whose agent must be one of cfg's, and returns
// it with its submission; a mistake is bad usage.
func loadTask(ctx context.Context, taskPath string, cfg *config.File) (policy.TaskFile, host.Submission, error) {
	tf, sub, err := govfile.Task(ctx, taskPath, cfg)
	if err != nil {
		return tf, sub, usageErr("%v", err)
	}
	return tf, sub, nil
}
