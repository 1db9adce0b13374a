// Package hostconfig opens a host as noeta.yaml and the connection
// settings say: the JetStream backend (eventlog/jetstream/jshost), the
// sandbox, the tool registry with the configured MCP servers, the agents'
// models, the rate limits' counts in the deployment's bucket, the
// configured observers with their listeners, and the
// Prometheus registry of the process. It is the composition root the
// engine's verbs share; an embedder who wants less composes package host
// itself.
package hostconfig

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tools"
)

// Connection are the settings of a connection to a NATS server or cluster.
type Connection = jshost.Connection

// Defaults of [Options].
const (
	DefaultDataDir = jshost.DefaultDataDir
	DefaultPrefix  = jshost.DefaultPrefix
)

// Options say what a host connects to and what it runs.
type Options struct {
	// NATS is the NATS server or cluster to run on. Without a URL the host
	// starts an embedded nats-server with JetStream (sync always) on
	// DataDir.
	NATS Connection
	// DataDir is the embedded server's data directory (DefaultDataDir,
	// made absolute). Only with no NATS URL.
	DataDir string
	// Prefix, Replicas, LeaseTTL, Batch: see jshost.Options.
	Prefix   string
	Replicas int
	LeaseTTL time.Duration
	Batch    jetstream.BatchMode

	// Config is the governance config: the agents, rules and rule sets,
	// the hooks, the observers, the models, the MCP servers, the sandbox.
	// Required to run or submit tasks; a read-only host needs none.
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

	// Workers, Deferred, Queue, Workspace, Actor, SegmentRetries,
	// SegmentRetryPause: see host.Options.
	Workers           int
	Deferred          bool
	Queue             string
	Workspace         string
	Actor             string
	SegmentRetries    int
	SegmentRetryPause time.Duration
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
	// that may pass, with backoff until it succeeds or ctx ends.
	RetryStart bool
	// Verb is the command that opened the host, for the config's observers
	// that write on stdout: "" when stdout is free (serve), else the verb
	// whose own output is there (run, approve, demo).
	Verb string
	// Stdout is where an audit sink on stdout writes (os.Stdout).
	Stdout io.Writer

	// Logger reports what the log cannot hold (discarded if nil).
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

// Host is a host opened from the config: the runtime (embedded), its
// JetStream backend, and what the config made for it.
type Host struct {
	*host.Host
	opts Options
	nats *jshost.Backend
	reg  *prometheus.Registry
	obs  *observerSet
	// closeTools stops the tool sources the registry started (MCP servers)
	// and the sandbox's helper waiting for the next call.
	closeTools func()
	closeOnce  sync.Once
}

// Open connects and starts what opts ask for; on error everything started
// is shut down again. Errors of the options wrap host.ErrBadOptions or
// jshost.ErrBadOptions, of the config [ErrBadConfig]; a data directory
// another process holds, for a host that runs tasks, is a
// [*jshost.BusyError].
func Open(ctx context.Context, opts Options) (_ *Host, err error) {
	o := opts
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers > 0 && o.Config == nil {
		return nil, badOption("a host that runs tasks needs a governance config (Options.Config)")
	}
	if o.Config != nil && o.Config.Governance == nil && o.Workers > 0 {
		return nil, badOption("the config has no governance (config.File.Governance)")
	}
	if o.Workspace == "" {
		o.Workspace = "."
	}
	if ws, err := filepath.Abs(o.Workspace); err == nil {
		o.Workspace = ws
	}
	if o.embedded() && o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.embedded() {
		if abs, err := filepath.Abs(o.DataDir); err == nil {
			o.DataDir = abs
		}
	}
	if o.Workers < 0 || o.Workers > host.MaxWorkers {
		return nil, badOption("workers is %d; it must be from 0 to %d (run more processes for more)", o.Workers, host.MaxWorkers)
	}
	h := &Host{opts: o, reg: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	h.nats, err = jshost.Open(ctx, jshost.Options{
		NATS: o.NATS, DataDir: o.DataDir, Prefix: o.Prefix, Replicas: o.Replicas, LeaseTTL: o.LeaseTTL, Batch: o.Batch,
		Runs: o.Workers > 0, ReadOnly: o.ReadOnly, RetryStart: o.RetryStart, Name: o.Name, Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	ho := host.Options{
		Guards: o.Guards, Observers: nil, Policies: o.Policies,
		Workers: o.Workers, Deferred: o.Deferred, Queue: o.Queue, Workspace: o.Workspace, Actor: o.Actor,
		SegmentRetries: o.SegmentRetries, SegmentRetryPause: o.SegmentRetryPause,
		Skip: host.Skip{ChildLifecycle: o.Skip.ChildLifecycle}, ReadOnly: o.ReadOnly, Logger: o.Logger,
	}
	if o.Config != nil {
		ho.Governance, ho.Approvals = o.Config.Governance, o.Config.Approvals
		if o.Workers > 0 && o.Config.Governance != nil && o.Config.Governance.HasRateLimits() {
			// One count for the fleet: every engine and gateway of the
			// deployment takes from the same bucket.
			if ho.Rates, err = h.nats.Rates(ctx); err != nil {
				return nil, err
			}
		}
	}
	if !h.nats.ReadOnly() {
		if ho.Tools, err = h.buildTools(ctx); err != nil {
			return nil, err
		}
	}
	switch {
	case o.Workers > 0 && o.Policies == nil:
		if ho.Models, err = buildModels(o); err != nil {
			return nil, err
		}
	case o.Config != nil:
		// A client decides nothing: it builds no model and needs no API
		// key, but accepts a task without a script for an agent that has
		// one.
		ho.Models = map[string]engine.Policy{}
		for agent, am := range o.Config.AgentModels {
			if am.Model != "" {
				ho.Models[agent] = nil
			}
		}
	}
	// The host's own measures and the process's, served on /metrics.
	var self atomic.Pointer[host.Host]
	meter := registerCounters(h.reg, &self, h.nats)
	ho.Meter = meter
	if o.Workers > 0 {
		if h.obs, err = h.startObservers(ctx, &self); err != nil {
			return nil, err
		}
		ho.Observers = append(h.obs.observers, o.Observers...)
	}
	hh, err := host.Open(ctx, h.nats, ho)
	if err != nil {
		return nil, err
	}
	h.Host = hh
	self.Store(hh)
	return h, nil
}

// Close stops the host, then the tools, the observers' sinks (audit files,
// span exporters, hooks still queued), the listeners, and the backend. It
// is safe to call more than once.
func (h *Host) Close() {
	h.closeOnce.Do(func() {
		if h.Host != nil {
			h.Host.Close()
		}
		if h.closeTools != nil {
			// After the pools: no call is in flight any more.
			h.closeTools()
		}
		if h.obs != nil {
			h.obs.close(h.opts.Logger)
		}
		if h.nats != nil {
			_ = h.nats.Close()
		}
	})
}

// Backend is the host's JetStream backend.
func (h *Host) Backend() *jshost.Backend { return h.nats }

// Config is the config the host was opened with (nil for none).
func (h *Host) Config() *config.File { return h.opts.Config }

// Embedded reports whether the host runs on an embedded server (its own or,
// attached, another process's).
func (h *Host) Embedded() bool { return h.nats.Embedded() }

// Attached returns the holder whose server a client host uses, and whether
// it uses one.
func (h *Host) Attached() (jshost.Holder, bool) { return h.nats.Attached() }

// DataDir is the embedded server's data directory ("" on a remote NATS).
func (h *Host) DataDir() string { return h.nats.DataDir() }

// Conn is the host's NATS connection.
func (h *Host) Conn() *nats.Conn { return h.nats.Conn() }

// Log is the JetStream event log, for tools that append under leases of
// their own (engine bench's fenced-append probe); nil on a read-only host
// on a remote NATS.
func (h *Host) Log() *jetstream.Log { return h.nats.JetStreamLog() }

// Dispatcher is the JetStream dispatcher (nil read-only on a remote NATS).
func (h *Host) Dispatcher() *jetstream.Dispatcher { return h.nats.JetStreamDispatcher() }

// WaitingIndex is the JetStream waiting index (nil when a read-only host
// found none).
func (h *Host) WaitingIndex() *jetstream.WaitingIndex { return h.nats.WaitingIndex() }

// Registry is the host's Prometheus registry: the pool's counters, the
// metrics observer's instruments.
func (h *Host) Registry() *prometheus.Registry { return h.reg }

// Doctor checks the store of the host's deployment (jshost.Backend.Doctor).
func (h *Host) Doctor(ctx context.Context) (*jshost.DoctorReport, error) {
	return h.nats.Doctor(ctx)
}
