package host

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/natsconn"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tools"
)

// Connection are the settings of a connection to a NATS server or cluster:
// comma-separated URLs, a credentials file or a user and password, TLS.
type Connection = natsconn.Options

// Defaults of [Options].
const (
	DefaultDataDir = ".noeta"
	DefaultPrefix  = "noeta"
	// MaxWorkers bounds Options.Workers: each worker is a goroutine with
	// its own lease traffic; a host that needs more runs more processes
	// (docs/adr/0018).
	MaxWorkers = 1024
)

var (
	// ErrBadOptions marks options that cannot work; the message names the
	// option.
	ErrBadOptions = errors.New("host: bad options")
	// ErrBusy: another process holds the data directory (see [BusyError]).
	ErrBusy = errors.New("data directory in use")
	// ErrReadOnly: the host was opened read-only and cannot write.
	ErrReadOnly = errors.New("host: opened read-only")
	// ErrNotRunning: the call needs a host that runs tasks.
	ErrNotRunning = errors.New("host: runs no tasks")
)

// optionError is an ErrBadOptions whose message is only what is wrong.
type optionError struct{ msg string }

func (e *optionError) Error() string        { return e.msg }
func (e *optionError) Is(target error) bool { return target == ErrBadOptions }

func badOption(format string, args ...any) error {
	return &optionError{fmt.Sprintf(format, args...)}
}

// Options say what a host connects to and what it runs.
type Options struct {
	// NATS is the NATS server or cluster to run on. Without a URL the host
	// starts an embedded nats-server with JetStream (sync always) on
	// DataDir.
	NATS Connection
	// DataDir is the embedded server's data directory (DefaultDataDir,
	// made absolute). Only with no NATS URL.
	DataDir string
	// Prefix names the deployment's subjects, streams and buckets
	// (DefaultPrefix); Replicas their replicas (1; 3 on a cluster);
	// LeaseTTL the leases bucket's TTL (the dispatcher's default). Every
	// process of one prefix uses the same three.
	Prefix   string
	Replicas int
	LeaseTTL time.Duration
	// Batch is how the engine's batches of records are written
	// (jetstream.BatchAuto: one message per batch, ADR 0040;
	// BatchSequential keeps one record per message). Per process.
	Batch jetstream.BatchMode

	// Config is the governance config: the agents, rules and rule sets,
	// the hooks and the observers: section. Required to run or submit
	// tasks; a read-only host needs none.
	Config *config.File

	// Guards are added to every agent's guard stack, beside the config's.
	Guards []guards.Guard
	// Tools are added to the built-in tools.
	Tools []tools.Tool
	// Observers run in process beside the config's, over every record this
	// process commits, each behind its own bounded queue.
	Observers []observers.Observer
	// Policies decide each turn (default: a task's script, or, for a task
	// without one, its agent's model from the config's models:).
	Policies engine.PolicyResolver
	// LookupEnv reads the models' API keys and expands ${VAR} in the MCP
	// servers' env and headers (os.LookupEnv).
	LookupEnv func(string) (string, bool)

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
	// Name names the NATS connection and the verb in the data directory's
	// lock ("host").
	Name string

	// ServesHTTP says the caller serves [Host.Handler] (serve --http): its
	// /metrics runs the metrics observer even without an observers.metrics
	// section, and an observers.fanout without a listener of its own is
	// served there.
	ServesHTTP bool
	// Streams guards the fanout's live streams (/tasks/{id}/events, in
	// [Host.Handler] and on observers.fanout.listen): it authenticates each
	// request and bounds the streams open at once (webui's Gate.Streams).
	// nil: they refuse every request, since a stream sends whole records.
	Streams func(http.Handler) http.Handler

	// Skip turns off parts a host that runs tasks would run: where
	// observer-workers run them instead.
	Skip Skip
	// ReadOnly opens a client that only reads: on a remote NATS it needs
	// only read permissions (deploy/nats's operator role).
	ReadOnly bool
	// RetryStart retries a start on a remote NATS that fails for a reason
	// that may pass (servers restarting, electing leaders, unreachable)
	// with backoff until it succeeds or ctx ends.
	RetryStart bool
	// Verb is the command that opened the host, for the config's observers
	// that write on stdout: "" when stdout is free (serve), else the verb
	// whose own output is there (run, approve, demo).
	Verb string
	// Stdout is where an audit sink on stdout writes (os.Stdout).
	Stdout io.Writer

	// Logger reports what the log cannot hold: a lost lease, a failed
	// handoff, an observer that fell behind (discarded if nil).
	Logger *slog.Logger
}

// Skip names the parts a host that runs tasks leaves to other processes.
type Skip struct {
	// ChildLifecycle: an observer-worker with --observers child hands
	// finished subtasks to their parents.
	ChildLifecycle bool
	// Hooks, Audit, Metrics, Trace, Fanout: the config's observers of that
	// name run elsewhere.
	Hooks, Audit, Metrics, Trace, Fanout bool
}

func (o Options) embedded() bool { return o.NATS.URL == "" }

// withDefaults checks o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Name == "" {
		o.Name = "host"
	}
	if o.Actor == "" {
		o.Actor = engine.DefaultActor()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := o.NATS.Check(); err != nil {
		return o, badOption("%v", err)
	}
	if err := noeta.ValidateToken("prefix", o.Prefix, 32); err != nil {
		return o, badOption("%v", err)
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return o, badOption("replicas is %d, want 1 to 5 (1 on a single node, 3 on a cluster)", o.Replicas)
	}
	if o.LeaseTTL != 0 && (o.LeaseTTL < time.Second || o.LeaseTTL%time.Second != 0) {
		return o, badOption("lease TTL is %v, want whole seconds, at least 1s (it is the leases bucket's TTL)", o.LeaseTTL)
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
	if o.Workers > 0 && o.Config == nil {
		return o, badOption("a host that runs tasks needs a governance config (Options.Config)")
	}
	if o.embedded() {
		if o.Replicas > 1 {
			return o, badOption("replicas %d needs a cluster: the embedded server is a single node", o.Replicas)
		}
		if o.DataDir == "" {
			o.DataDir = DefaultDataDir
		}
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return o, badOption("data directory: %v", err)
		}
		o.DataDir = abs
	} else if o.DataDir != "" {
		return o, badOption("a data directory is for the embedded server; with a NATS URL there is none")
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
