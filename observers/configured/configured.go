// Package configured builds the observers noeta.yaml configures (the audit
// trail, the metrics, the traces, the live fan-out, the hooks) for every
// process that runs them: a host, in process, and observer-worker, from
// durable consumers. It belongs to the composition layer: it reads package
// config so that the observers do not, and each observer takes its own
// options. A new observer is an entry of [Names] and a case of [New] here,
// and its own package.
package configured

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// The observers noeta.yaml can configure, by the names observer-worker's
// --observers and a host's log give them.
const (
	Audit   = "audit"
	Metrics = "metrics"
	Trace   = "trace"
	Fanout  = "fanout"
	Hooks   = "hooks"
)

// Names are the observers noeta.yaml can configure, in the order they are
// built.
var Names = []string{Audit, Metrics, Trace, Fanout, Hooks}

// Field is where noeta.yaml configures the observer name: observers.<name>,
// or hooks.
func Field(name string) string {
	if name == Hooks {
		return "hooks"
	}
	return "observers." + name
}

// In reports whether f configures the observer name; a nil f configures
// none.
func In(f *config.File, name string) bool {
	if f == nil {
		return false
	}
	oc := f.Observers
	switch name {
	case Audit:
		return oc.Audit != nil
	case Metrics:
		return oc.Metrics != nil
	case Trace:
		return oc.Trace != nil
	case Fanout:
		return oc.Fanout != nil
	case Hooks:
		return !f.Hooks.Empty()
	}
	return false
}

// Options are what the caller gives the observers beside the config. The
// zero value is valid; a field an observer needs and lacks is an error of
// that observer.
type Options struct {
	Logger *slog.Logger
	// Log reads a task's log: the audit fills gaps from it, and the
	// metrics, the trace and the hooks read the agent of a task whose
	// TaskCreated they did not see.
	Log eventlog.Reader
	// Stdout is where an audit stdout: sink writes.
	Stdout io.Writer
	// Publisher publishes for an audit subject: sink (a *nats.Conn).
	Publisher observers.AuditPublisher
	// AuditSyncEvery is an audit file: sink's fsync interval (0: after
	// every record).
	AuditSyncEvery time.Duration
	// PartialFeed: the audit is fed only this process's commits
	// (observers.AuditConfig.PartialFeed).
	PartialFeed bool
	// Registry is what the metrics register on (a private one when nil).
	Registry *prometheus.Registry
	// OTLP, when set, is where the trace exports instead of
	// observers.trace (observer-worker's flags).
	OTLP *telemetry.OTLPConfig
	// Workspace is the hooks' working directory; LookupEnv reads the
	// variables their webhook headers name (os.LookupEnv when nil).
	Workspace string
	LookupEnv func(string) (string, bool)
}

// Error is an observer of the config that cannot be built. Field is where
// noeta.yaml configures it, down to the key at fault when known
// (observers.audit.file), for the caller to place at its line.
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ErrNotConfigured is wrapped by New for an observer f does not configure
// and cannot be built without (audit, trace without Options.OTLP; hooks
// without a file).
var ErrNotConfigured = errors.New("not configured")

// ErrUnknown is wrapped by New for a name that is not one of [Names].
var ErrUnknown = errors.New("unknown observer")

// New builds the observer name of f (one of [Names]). A mistake in what f
// configures is an [*Error] naming its field. The caller closes the
// observer by its kind (Close or Shutdown) and serves what it serves
// (Metrics.Handler, Fanout.SSEHandler).
func New(ctx context.Context, f *config.File, name string, o Options) (observers.Observer, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch name {
	case Audit:
		if !In(f, Audit) {
			return nil, &Error{Field(Audit), ErrNotConfigured}
		}
		a, err := newAudit(*f.Observers.Audit, o)
		if err != nil {
			return nil, err // not a nil *Audit in a non-nil Observer
		}
		return a, nil
	case Metrics:
		mc := telemetry.MetricsConfig{Registry: o.Registry, Logger: o.Logger}
		if o.Log != nil {
			mc.Log = o.Log
		}
		m, err := telemetry.NewMetrics(mc)
		if err != nil {
			return nil, err
		}
		return m, nil
	case Trace:
		oc := o.OTLP
		if oc == nil {
			if !In(f, Trace) {
				return nil, &Error{Field(Trace), ErrNotConfigured}
			}
			oc = OTLP(*f.Observers.Trace)
		}
		exp, err := telemetry.NewOTLPExporter(ctx, *oc)
		if err != nil {
			return nil, &Error{Field(Trace), err}
		}
		t, err := telemetry.NewTrace(telemetry.TraceConfig{Exporter: exp, Log: o.Log, Logger: o.Logger})
		if err != nil {
			_ = exp.Shutdown(ctx)
			return nil, &Error{Field(Trace), err}
		}
		return t, nil
	case Fanout:
		return observers.NewFanout(observers.FanoutConfig{Logger: o.Logger}), nil
	case Hooks:
		// A file without hooks: builds hooks that run nothing: a worker
		// told to run them on such a file runs, as it always has.
		if f == nil {
			return nil, &Error{Field(Hooks), ErrNotConfigured}
		}
		hc := observers.HooksObserverConfig{
			PostToolUse:  slices.Clone(f.Hooks.PostToolUse),
			Notification: slices.Clone(f.Hooks.Notification),
			Workspace:    o.Workspace, Logger: o.Logger, LookupEnv: o.LookupEnv,
		}
		if o.Log != nil {
			hc.Log = o.Log
		}
		h, err := observers.NewHooks(hc)
		if err != nil {
			return nil, &Error{Field(Hooks), err}
		}
		return h, nil
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, Names)
}

// OTLP is the exporter's config of an observers.trace section.
func OTLP(tc config.Trace) *telemetry.OTLPConfig {
	return &telemetry.OTLPConfig{Protocol: tc.Protocol, Endpoint: tc.Endpoint, Insecure: tc.Insecure}
}

// newAudit builds the audit of an observers.audit section, on its one sink.
func newAudit(ac config.Audit, o Options) (*observers.Audit, error) {
	var (
		sink  observers.AuditSink
		field string
		err   error
	)
	switch {
	case ac.File != "" && !ac.Stdout && ac.Subject == "":
		field = "observers.audit.file"
		sink, err = observers.NewAuditFileSink(observers.AuditFileConfig{Path: ac.File, SyncEvery: o.AuditSyncEvery, Logger: o.Logger})
	case ac.Stdout && ac.File == "" && ac.Subject == "":
		field = "observers.audit.stdout"
		if o.Stdout == nil {
			return nil, &Error{field, fmt.Errorf("%w: no standard output to write to", observers.ErrInvalidConfig)}
		}
		sink = observers.NewAuditWriterSink(o.Stdout)
	case ac.Subject != "" && ac.File == "" && !ac.Stdout:
		field = "observers.audit.subject"
		if o.Publisher == nil {
			return nil, &Error{field, fmt.Errorf("%w: no NATS connection to publish on", observers.ErrInvalidConfig)}
		}
		sink, err = observers.NewAuditPublishSink(o.Publisher, ac.Subject, true)
	default:
		return nil, &Error{"observers.audit", fmt.Errorf("%w: audit needs exactly one sink: file, stdout or subject", observers.ErrInvalidConfig)}
	}
	if err != nil {
		return nil, &Error{field, err}
	}
	a, err := observers.NewAudit(observers.AuditConfig{Sink: sink, Logger: o.Logger, Log: o.Log, PartialFeed: o.PartialFeed})
	if err != nil {
		_ = sink.Close()
		return nil, &Error{field, err}
	}
	return a, nil
}
