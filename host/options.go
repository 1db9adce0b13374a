package host

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tools"
)

// Defaults of [Options].
const (
	// DefaultPrefix is the prefix of a deployment's subjects, streams and
	// buckets, on the backends that have them.
	DefaultPrefix = "noeta"
	// MaxWorkers bounds Options.Workers: each worker is a goroutine with
	// its own lease traffic; a host that needs more runs more processes
	// (docs/adr/0018).
	MaxWorkers = 1024
)

var (
	// ErrBadOptions marks options that cannot work; the message names the
	// option.
	ErrBadOptions = errors.New("host: bad options")
	// ErrReadOnly: the host's backend only reads.
	ErrReadOnly = errors.New("host: opened read-only")
	// ErrNotRunning: the call needs a host that runs tasks.
	ErrNotRunning = errors.New("host: runs no tasks")
	// ErrNoWaitingIndex: the backend has no waiting index.
	ErrNoWaitingIndex = eventlog.ErrNoWaitingIndex
)

// optionError is an ErrBadOptions whose message is only what is wrong.
type optionError struct{ msg string }

func (e *optionError) Error() string        { return e.msg }
func (e *optionError) Is(target error) bool { return target == ErrBadOptions }

func badOption(format string, args ...any) error {
	return &optionError{fmt.Sprintf(format, args...)}
}

// Options say what a host runs over its backend. They hold values, not
// files: the caller composes them (package hostconfig builds them from
// noeta.yaml).
type Options struct {
	// Governance is the agents, their guards and budgets. Required to run
	// or submit tasks; a host that only reads needs none.
	Governance *guards.Config
	// Approvals are the rules of who may answer what (nil: anyone may
	// answer, one answer decides).
	Approvals *approvals.Policy
	// Guards are added to every agent's guard stack, beside the
	// governance's.
	Guards []guards.Guard
	// Rates counts the calls of the agents' rate limits. Every process
	// that runs the deployment's tasks must share it: on NATS, the
	// deployment's bucket (hostconfig opens it). nil: a counter in this
	// process, on a backend no other process writes to (one that routes
	// answers, [AnswerRouter], is shared, and a host on it with rate
	// limits and no Rates is refused).
	Rates guards.RateCounter
	// Tools are the tools the host's tasks may call. Required to run
	// tasks: there is no default, so that nothing (a shell) runs
	// unconfined because a caller forgot to say otherwise.
	Tools *tools.Registry
	// Observers run in process over every record this process commits,
	// each behind its own bounded queue. The host runs and drains them;
	// the caller closes what they hold (files, exporters) after Close.
	Observers []observers.Observer
	// Policies decide each turn (default: a task's script, or, for a task
	// without one, its agent's model of Models).
	Policies engine.PolicyResolver
	// Models decide the tasks of an agent submitted without a script, by
	// agent name. A client, which decides nothing, names the agents that
	// have a model with a nil policy: Submit accepts a task without a
	// script for them, and a runner elsewhere decides it.
	Models map[string]engine.Policy
	// Meter receives the pool's measures (nil: none kept but the host's
	// own counters).
	Meter Meter

	// Workers is the size of the worker pool (0: a client, which runs no
	// task, no observer and no ChildLifecycle).
	Workers int
	// Deferred leaves the pool stopped until Start: a process that must
	// check something before any task runs (approve refuses an answer to
	// nothing before it runs the tree).
	Deferred bool
	// Queue is the ready queue the pool works and Submit submits to
	// (eventlog.DefaultQueue).
	Queue string
	// Workspace is the directory the file and shell tools and the hooks
	// work in (the working directory).
	Workspace string
	// Actor names this process in its records and leases
	// (engine@<host>:<pid>).
	Actor string
	// SegmentRetries and SegmentRetryPause: how often, and after what
	// first pause, a segment that fails retryably runs again under its
	// lease before the failure counts toward the task's attempts
	// (engine.Config, whose defaults 0 takes).
	SegmentRetries    int
	SegmentRetryPause time.Duration
	// Skip turns off parts a host that runs tasks would run: where
	// observer-workers run them instead.
	Skip Skip
	// ReadOnly makes a host that only reads, even on a backend that may
	// write: it submits, cancels and answers in process nothing
	// (ErrReadOnly), and runs nothing.
	ReadOnly bool

	// Logger reports what the log cannot hold: a lost lease, a failed
	// handoff, an observer that fell behind (discarded if nil).
	Logger *slog.Logger
}

// Skip names the parts a host that runs tasks leaves to other processes.
type Skip struct {
	// ChildLifecycle: an observer-worker with --observers child hands
	// finished subtasks to their parents.
	ChildLifecycle bool
}

// Meter receives what the pool measures: Prometheus, OpenTelemetry or
// anything else the caller keeps its metrics in.
type Meter interface {
	// Leased counts a lease taken; LeaseFailed a lease request that failed
	// (and is retried).
	Leased()
	LeaseFailed()
	// Segment counts a segment ended, by outcome (suspended, terminal,
	// lease_lost, failed, stopped), and how long it ran.
	Segment(outcome string, took time.Duration)
}

// withDefaults checks o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Actor == "" {
		o.Actor = engine.DefaultActor()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers < 0 || o.Workers > MaxWorkers {
		return o, badOption("workers is %d; it must be from 0 to %d (run more processes for more)", o.Workers, MaxWorkers)
	}
	if o.Queue != "" {
		if err := eventlog.ValidateQueue("queue", o.Queue); err != nil {
			return o, badOption("%v", err)
		}
	}
	if o.ReadOnly && o.Workers > 0 {
		return o, badOption("a read-only host runs no workers")
	}
	if o.Workers > 0 && o.Governance == nil {
		return o, badOption("a host that runs tasks needs a governance config (Options.Governance)")
	}
	if o.Workers > 0 && o.Tools == nil {
		return o, badOption("a host that runs tasks needs its tools (Options.Tools: a tools.Registry; hostconfig builds the configured one)")
	}
	if o.Workspace == "" {
		o.Workspace = "."
	}
	ws, err := filepath.Abs(o.Workspace)
	if err != nil {
		return o, badOption("workspace: %v", err)
	}
	o.Workspace = ws
	return o, nil
}
