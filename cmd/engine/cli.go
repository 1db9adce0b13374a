package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/internal/buildinfo"
	"github.com/noeta-go/noeta/internal/settings"
	"github.com/noeta-go/noeta/internal/termsafe"
)

// Exit codes (DESIGN.md §7).
const (
	exitDone    = 0 // the task completed
	exitFailed  = 1 // the task failed or was cancelled, or the run could not go on
	exitUsage   = 2 // bad usage, a bad config or task file
	exitWaiting = 3 // the task waits for an approval
)

// exitError ends a command with a code; err, if set, is printed first.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErr is a bad-usage or bad-config error: exit 2.
func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// failErr is a run that could not go on (the server would not start, the
// log is unreachable): exit 1. An error that already carries its exit code
// (a busy data directory is bad usage) keeps it.
func failErr(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitFailed, err: err}
}

// failIf is failErr(err), and nil for nil.
func failIf(err error) error {
	if err == nil {
		return nil
	}
	return failErr(err)
}

// exitCode is a result without a message to print.
func exitCode(code int) error {
	if code == exitDone {
		return nil
	}
	return &exitError{code: code}
}

// globals are the flags every verb takes.
type globals struct {
	data    string
	workers int
	conn    connOpts
	stdout  io.Writer
	stderr  io.Writer
	// rawOut and rawErr are stdout and stderr without the terminal-safe
	// escaping: for bytes a verb was asked to write as they are (content
	// --raw) and for its own drawing (bench's bar, which is \r and digits).
	rawOut, rawErr io.Writer
	// lookupEnv reads the environment (os.LookupEnv; tests replace it).
	lookupEnv func(string) (string, bool)
	// sources says where each setting came from, once resolved.
	sources settings.Sources
}

// dataDir is --data made absolute, ./.noeta by default.
func (g *globals) dataDir() (string, error) {
	data := g.data
	if data == "" {
		data = ".noeta"
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return "", usageErr("--data: %v", err)
	}
	// A directory that does not exist yet is made by the embedded server;
	// a file in its place (or on its path) is a mistake of the command line.
	switch fi, err := os.Stat(abs); {
	case err == nil && !fi.IsDir():
		return "", usageErr("--data %s is not a directory", data)
	case errors.Is(err, syscall.ENOTDIR):
		return "", usageErr("--data %s: a parent of it is not a directory", data)
	}
	return abs, nil
}

// logger is where the engine, the dispatcher and the observers report what the
// log cannot hold (a lost lease, a failed handoff): warnings and errors on
// stderr.
func (g *globals) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// maxWorkers bounds --workers. Each worker is a goroutine with its own
// consumer and lease traffic on NATS; 100000 of them took 12 s and 2 GB to
// start before failing. A host that needs more concurrency than this runs
// more engine processes (docs/adr/0018).
const maxWorkers = 1024

func (g *globals) check() error {
	if g.workers < 1 || g.workers > maxWorkers {
		return usageErr("--workers is %d; it must be from 1 to %d (run more engine processes for more)", g.workers, maxWorkers)
	}
	return g.conn.check()
}

// run is the whole command: it parses args, runs the verb and returns the
// exit code. It prints to stdout and stderr only.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, stdout, stderr, os.LookupEnv)
}

// runEnv is run with the environment read through lookupEnv.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	// Everything a verb prints passes through termsafe: the records, the
	// waiting index, a tool's error and a model's question come from
	// outside, and an escape sequence or bidi override in them would reach
	// the terminal. The escapes of a rune are JSON escapes of the same rune,
	// so --json stays JSON that decodes to what was recorded.
	rawOut, rawErr := stdout, stderr
	safeOut, safeErr := termsafe.NewWriter(stdout), termsafe.NewWriter(stderr)
	defer func() { _ = safeOut.Flush(); _ = safeErr.Flush() }()
	stdout, stderr = safeOut, safeErr
	root, g := newRootCmd(safeOut, safeErr, lookupEnv)
	g.rawOut, g.rawErr = rawOut, rawErr
	// cobra reads os.Args when given nil: run's arguments are its caller's
	// alone, even none.
	root.SetArgs(append([]string{}, args...))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitDone
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "engine:", ee.err)
		}
		return ee.code
	}
	// Cobra's own: an unknown verb or flag, a missing or extra argument.
	fmt.Fprintf(stderr, "engine: %v\nRun 'engine --help' for usage.\n", err)
	return exitUsage
}

func newRootCmd(stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) (*cobra.Command, *globals) {
	g := &globals{stdout: stdout, stderr: stderr, lookupEnv: lookupEnv}
	root := &cobra.Command{
		Use:   "engine",
		Short: "Run agent tasks under governance on NATS JetStream",
		Long: `engine runs agent tasks under governance. Every task is an append-only event
log; guards allow, deny or ask a human before each tool call, subtask and
finish, and every verdict is recorded with the guard that gave it.

With no NATS server configured (no --nats), engine starts one in-process,
with JetStream storing everything under --data, and runs the ChildLifecycle
observer (a finished subtask's result to its parent) in process too. Nothing
needs to be installed. With --nats, every verb works on that server or
cluster: 'engine serve' on each host runs the tasks, observer-workers run the
observers, and the other verbs submit, answer and read.

The connection flags may also come from the environment (a flag wins):
` + envList(false) + `
Every process of one deployment must use the same --prefix, --replicas and
--lease-ttl.

Exit codes: 0 the task completed, 1 it failed or was cancelled, 2 bad usage,
config or task file, 3 it waits for an approval.`,
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          unknownVerb,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			serve := cmd.Name() == "serve"
			file := ""
			if serve {
				file = settings.FileName(cmd.Flags(), "serve-config", envServeConfig, g.lookupEnv)
			}
			src, err := applySettings(cmd, serve, file, g.lookupEnv)
			if err != nil {
				return err
			}
			g.sources = src
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(stderr)
			_ = cmd.Help()
			return usageErr("name a verb: %s", strings.Join(verbs(cmd), ", "))
		},
	}
	root.SetVersionTemplate("engine {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	pf := root.PersistentFlags()
	pf.StringVar(&g.data, "data", "", "data directory of the embedded server, without --nats (default ./.noeta; demo: a temporary directory)")
	pf.IntVar(&g.workers, "workers", 4, "engine workers in the pool")
	g.conn.nc.BindFlags(pf, "NATS server URL(s), comma-separated (default: an embedded server on --data)")
	pf.StringVar(&g.conn.prefix, "prefix", defaultPrefix, "subject, stream and bucket prefix of the deployment")
	pf.IntVar(&g.conn.replicas, "replicas", 1, "replicas of the streams and buckets: 1 on a single node, 3 on a cluster")
	pf.StringVar(&g.conn.batch, "batch", "packed", "how a turn's records are written: packed (one message per batch), sequential (one message per record), atomic (a JetStream atomic batch)")
	pf.DurationVar(&g.conn.leaseTTL, "lease-ttl", 0, "lease length, whole seconds (default 30s); the same for every process of the prefix")
	root.AddCommand(newServeCmd(g), newRunCmd(g), newSubmitCmd(g), newApproveCmd(g), newAnswerCmd(g), newCancelCmd(g),
		newAuditCmd(g), newEventsCmd(g), newInspectCmd(g), newTasksCmd(g), newContentCmd(g), newDoctorCmd(g),
		newDemoCmd(g), newToolsCmd(g), newApprovalsCmd(g), newUICmd(g), newTokenCmd(g), newBenchCmd(g),
		newPolicyCmd(g), newGatewayCmd(g), newHookCmd(g), newVersionCmd(g))
	root.InitDefaultCompletionCmd() // bash, zsh, fish, powershell
	return root, g
}

// verbs are the names of cmd's verbs, as help lists them.
func verbs(cmd *cobra.Command) []string {
	var out []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			out = append(out, c.Name())
		}
	}
	return out
}

// unknownVerb refuses an argument where a verb was wanted, suggesting the
// verbs it is close to (cobra's distance and prefix rules).
func unknownVerb(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown verb %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only where it suggests itself
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageErr("%s\nRun '%s --help' for its verbs.", msg, cmd.CommandPath())
}

// absDir makes dir absolute and checks that it is a directory.
func absDir(flag, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageErr("%s %s: %v", flag, dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", usageErr("%s: %v", flag, err)
	}
	if !fi.IsDir() {
		return "", usageErr("%s %s is not a directory", flag, dir)
	}
	return abs, nil
}
