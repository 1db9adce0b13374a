package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/timeline"
)

// submit and approve: the verbs that hand work to whatever runs the tasks
// (engine serve on a cluster).

func newSubmitCmd(g *globals) *cobra.Command {
	var config, queue string
	cmd := &cobra.Command{
		Use:   "submit TASKFILE",
		Short: "Submit a task file's task and print its id",
		Long: `submit creates the task of TASKFILE, makes it ready, prints its id on
stdout and exits 0: it runs nothing. With --nats, a serve process of the
deployment runs it (on --queue, the default queue if not given). With the
embedded default, it waits in the data directory for a process that serves
it: engine serve on the same --data. (engine approve runs a task tree only
once the task has asked for an approval: it answers nothing else.)

The task's agent must be one of the governance config's (--config, default
noeta.yaml in the working directory); the processes that run it govern it by
their own config.`,
		Example: `  id=$(engine submit task.yaml --config noeta.yaml --nats nats://127.0.0.1:4222 --user engine)
  engine events "$id" --follow --nats nats://127.0.0.1:4222 --user engine`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return submitTask(cmd.Context(), g, config, queue, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.StringVar(&queue, "queue", "", "ready queue of the task (default: the default queue)")
	return cmd
}

func submitTask(ctx context.Context, g *globals, config, queue, taskPath string) error {
	if err := g.conn.check(); err != nil {
		return err
	}
	if queue != "" {
		if err := eventlog.ValidateQueue("--queue", queue); err != nil {
			return usageErr("%v", err)
		}
	}
	cfg, err := governance(ctx, config)
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
	// Nothing runs here: a client, of the data directory's holder if it
	// has one.
	h, err := g.open(ctx, "submit", hostconfig.Options{Config: cfg, Queue: queue})
	if err != nil {
		return err
	}
	defer h.Close()
	sub.Queue = queue
	id, err := h.Submit(ctx, sub)
	if err != nil {
		return failErr(fmt.Errorf("submit %s: %w", taskPath, err))
	}
	fmt.Fprintln(g.stdout, id)
	fmt.Fprintf(g.stderr, "engine: submitted task %s (%s, agent %s) to queue %s, %s\n", id, taskPath, tf.Agent, queueName(queue), h.Where())
	if _, attached := h.Attached(); h.Embedded() && !attached {
		fmt.Fprintf(g.stderr, "engine: it runs when a process serves %s: engine serve --config %s --data %s\n", h.DataDir(), cfg.Path, h.DataDir())
	}
	return nil
}

type approveOpts struct {
	// answer is engine answer's TEXT: the reply to a question or a park.
	answer     *string
	deny       bool
	reason     string
	as         string
	config     string
	workspace  string
	viaIngress bool
	timeout    time.Duration
}

func newApproveCmd(g *globals) *cobra.Command {
	var o approveOpts
	cmd := &cobra.Command{
		Use:   "approve TASK HANDLE",
		Short: "Answer a task's approval request: approve it, or refuse it with --deny",
		Long: `approve answers the approval request HANDLE of TASK (the handle a waiting
run prints, such as approval-call-1-0-7kq3m9x2vd): approve, or with --deny
refuse, the exact action that was asked for, as --as (default cli:$USER; with --nats the NATS user),
with --reason.

It answers only a request that is open now: its ApprovalRequested is in the
task's log and nothing has answered it. A handle the task has not asked
under (a typo, the wrong task, a request not made yet: handles end in a
nonce drawn when the request is made, so none can be known before) is
refused, naming the requests that are open, and exits 1; nothing is kept
for later. So is an answer to a request another answer won (an approve and
a deny sent together: one wins, the other is told it lost).

With --nats it only answers: a serve process runs the task, and approve
exits 0. With the embedded default (no --nats), nothing else would run the
task, so approve also runs its task tree to the next rest on --workers
workers, printing the timeline of what happens, and exits like run: 0 the
task completed, 1 it failed, 3 it waits for another approval. That needs the
governance config (--config, default noeta.yaml in the working directory).
--timeout bounds the whole command (0, the default: no limit); SIGINT or
SIGTERM stops it at any point, leaving the task as it is.

With --nats it answers on the approver's own approval subject,
<prefix>.approve.<approver>.<p>.<task>, where the approver is --as, by
default the NATS user (--user): deploy/nats's approver role lets each
approver's user publish only under its own name, so the broker vouches for
who answered (a plain wake carrying an answer is refused by the engine on a
remote NATS). It needs no more than that role's permissions: it reads the
task's row, refuses a handle the task is not suspended on now, publishes,
and watches the row until a serve process's dispatcher has applied an
answer, saying so if another answer came first. --via-ingress is kept as a
name for the same path.

An invalid task id or handle exits 2; a task that does not exist or has
ended, a handle that is not open, and a lost race exit 1.`,
		Example: `  engine approve 01J9Z3K7Q4M8X2V6B5N0C1D2E3 approval-call-1-0-7kq3m9x2vd --data .noeta
  engine approve 01J9Z3K7Q4M8X2V6B5N0C1D2E3 approval-call-1-0-7kq3m9x2vd --deny --reason "not on Fridays" --nats nats://127.0.0.1:4222 --user alice`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return approveTask(cmd.Context(), g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.deny, "deny", false, "refuse the request instead of approving it")
	f.StringVar(&o.reason, "reason", "", "why, recorded with the answer")
	f.BoolVar(&o.viaIngress, "via-ingress", false, "with --nats: the same as without it (kept for scripts: an answer goes on the approver's approval subject)")
	o.bindFlags(f)
	return cmd
}

// bindFlags binds the flags approve and answer share.
func (o *approveOpts) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.as, "as", "", "who answers, recorded as the approver (default cli:$USER; with --nats your NATS user, --user)")
	f.StringVar(&o.config, "config", "", "governance config (default "+defaultConfig+"; needed without --nats, where the task runs here)")
	f.StringVar(&o.workspace, "workspace", ".", "without --nats: the directory the file and shell tools work in")
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long, leaving the task as it is (0: no limit; SIGINT stops it too)")
}

func newAnswerCmd(g *globals) *cobra.Command {
	var o approveOpts
	cmd := &cobra.Command{
		Use:   "answer TASK HANDLE TEXT",
		Short: "Answer a task's question (or release a parked task) with TEXT",
		Long: `answer replies TEXT to the question HANDLE of TASK (the handle a waiting
run prints, such as question-1): the task's model reads TEXT as the human's
answer, and the log and the timeline record it as an answer, with who gave
it (--as, default cli:$USER; with --nats the NATS user). A park's handle
takes a reply the same way. An approval request is answered by engine
approve instead. Everything else is as engine approve: on the embedded
default answer runs the task tree to its next rest and exits like run; with
--nats it answers on the approver's approval subject.`,
		Example: `  engine answer 01J9Z3K7Q4M8X2V6B5N0C1D2E3 question-1 "the file is config/prod.yaml"`,
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.answer = &args[2]
			return approveTask(cmd.Context(), g, o, args[0], args[1])
		},
	}
	o.bindFlags(cmd.Flags())
	return cmd
}

func approveTask(ctx context.Context, g *globals, o approveOpts, task, handle string) error {
	if err := taskArg(task); err != nil {
		return err
	}
	if err := noeta.ValidateToken("handle", handle, 128); err != nil {
		return usageErr("%v", err)
	}
	if err := g.check(); err != nil {
		return err
	}
	ctx, cancel, err := withTimeout(ctx, o.timeout)
	if err != nil {
		return err
	}
	defer cancel()
	decision, verb := noeta.ApprovalApprove, "approved"
	if o.deny {
		decision, verb = noeta.ApprovalDeny, "refused"
	}
	reason := o.reason
	switch {
	case o.answer != nil:
		if strings.HasPrefix(handle, "approval-") {
			return usageErr("%s is an approval request: approve or refuse it with engine approve %s %s [--deny]", handle, task, handle)
		}
		if strings.TrimSpace(*o.answer) == "" {
			return usageErr("TEXT is empty: say what the answer is")
		}
		verb, reason = "answered", *o.answer
	case reason == "":
		reason = verb + " with engine approve"
	}
	if !g.conn.embedded() {
		who, err := natsApprover(o.as, g.conn.nc.User)
		if err != nil {
			return err
		}
		// With read-only permissions and one publish: what deploy/nats's
		// approver role allows.
		h, err := g.open(ctx, "approve", hostconfig.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer h.Close()
		_, err = timeline.AnswerRequest(ctx, h.Host, timeline.AnswerOptions{Task: task, Handle: handle,
			Answer: host.Answer{Decision: decision, Approver: who, Reason: reason}, Verb: verb, OnSubject: true, Out: g.stdout, Where: h.Where()})
		return failIf(err)
	}
	if o.viaIngress {
		return usageErr("--via-ingress needs --nats: on the embedded default approve answers and runs the task itself")
	}
	who := o.as
	if who == "" {
		who = approvals.LocalApprover()
	}
	// The name as it is compared and recorded (CLI:alice is cli:alice);
	// one that hides invisible characters is refused.
	name, err := approvals.Approver(who)
	if err != nil {
		return usageErr("--as: %v", err)
	}
	who = name
	// On the embedded default, approve runs the tree itself unless another
	// process holds the data directory: then it is that process's client
	// and only answers.
	data, err := g.dataDir()
	if err != nil {
		return err
	}
	runs := !jshost.DataDirHeld(data)
	var h *hostconfig.Host
	if runs {
		cfg, err := governance(ctx, o.config)
		if err != nil {
			return err
		}
		workspace, err := absDir("--workspace", o.workspace)
		if err != nil {
			return err
		}
		h, err = g.open(ctx, "approve", hostconfig.Options{Config: cfg, Workers: g.workers, Deferred: true, Workspace: workspace, Verb: "approve", Stdout: g.stdout})
		var busy *jshost.BusyError
		if errors.As(err, &busy) {
			runs = false // taken since: be its client
		} else if err != nil {
			return err
		}
	}
	if !runs {
		var cfg *config.File
		if o.config != "" {
			if cfg, err = governance(ctx, o.config); err != nil {
				return err
			}
		}
		if h, err = g.open(ctx, "approve", hostconfig.Options{Config: cfg}); err != nil {
			return err
		}
	}
	defer h.Close()
	out, err := timeline.AnswerRequest(ctx, h.Host, timeline.AnswerOptions{
		Task: task, Handle: handle, Answer: host.Answer{Decision: decision, Approver: who, Reason: reason}, Verb: verb,
		Runs: runs, Out: g.stdout, Msgs: g.stderr, Approver: approvals.LocalApprover(), Where: h.Where(), Flags: h.Flags(),
	})
	if err != nil {
		return failErr(err)
	}
	if out == nil {
		return nil
	}
	return exitCode(restCode(*out))
}

// withTimeout bounds ctx by --timeout d (0: no bound).
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc, error) {
	switch {
	case d < 0:
		return nil, nil, usageErr("--timeout %s: want 0 (no limit) or a positive duration", d)
	case d == 0:
		return ctx, func() {}, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("--timeout %s reached", d))
	return ctx, cancel, nil
}

// natsApprover is who answers on a remote NATS: --as, else the NATS user
// name (--user), as the approval subject's token. The broker lets an
// approver's user publish only under its own name (deploy/nats), so the
// default is the name the answer can go out under.
func natsApprover(as, user string) (string, error) {
	who := as
	if who == "" {
		who = user
	}
	if who == "" {
		return "", usageErr("with --nats the approver is the name your NATS user may answer under: pass --as NAME (or --user NAME, its default)")
	}
	if err := host.ValidateApprover(who); err != nil {
		return "", usageErr("--as %q: %v", who, errors.Unwrap(err))
	}
	return who, nil
}
