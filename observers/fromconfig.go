package observers

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
)

// NewHooksFromConfig is [NewHooks] with the PostToolUse and Notification
// hooks of a noeta.yaml hooks: section; the rest of cfg (workspace, queue,
// logger) is the caller's.
func NewHooksFromConfig(hc config.Hooks, cfg HooksObserverConfig) (*Hooks, error) {
	cfg.PostToolUse, cfg.Notification = hc.PostToolUse, hc.Notification
	return NewHooks(cfg)
}

// AuditDeps is what [NewAuditFromConfig] builds a sink with.
type AuditDeps struct {
	// Stdout is where a stdout sink writes.
	Stdout io.Writer
	// Publisher publishes for a subject sink (a *nats.Conn).
	Publisher AuditPublisher
	// SyncEvery is a file sink's fsync interval (0: after every record).
	SyncEvery time.Duration
	// Log fills gaps (AuditConfig.Log).
	Log    eventlog.Reader
	Logger *slog.Logger
	// PartialFeed: the feed carries only this process's commits
	// (AuditConfig.PartialFeed).
	PartialFeed bool
}

// NewAuditFromConfig builds the audit observer of an observers.audit
// section. An error names the field of the sink that failed
// (observers.audit.file, .stdout or .subject) in field.
func NewAuditFromConfig(ac config.Audit, deps AuditDeps) (a *Audit, field string, err error) {
	var sink AuditSink
	switch {
	case ac.File != "" && !ac.Stdout && ac.Subject == "":
		field = "observers.audit.file"
		sink, err = NewAuditFileSink(AuditFileConfig{Path: ac.File, SyncEvery: deps.SyncEvery, Logger: deps.Logger})
	case ac.Stdout && ac.File == "" && ac.Subject == "":
		field = "observers.audit.stdout"
		if deps.Stdout == nil {
			return nil, field, fmt.Errorf("%w: no standard output to write to", ErrInvalidConfig)
		}
		sink = NewAuditWriterSink(deps.Stdout)
	case ac.Subject != "" && ac.File == "" && !ac.Stdout:
		field = "observers.audit.subject"
		if deps.Publisher == nil {
			return nil, field, fmt.Errorf("%w: no NATS connection to publish on", ErrInvalidConfig)
		}
		sink, err = NewAuditPublishSink(deps.Publisher, ac.Subject, true)
	default:
		return nil, "observers.audit", fmt.Errorf("%w: audit needs exactly one sink: file, stdout or subject", ErrInvalidConfig)
	}
	if err != nil {
		return nil, field, err
	}
	a, err = NewAudit(AuditConfig{Sink: sink, Logger: deps.Logger, Log: deps.Log, PartialFeed: deps.PartialFeed})
	if err != nil {
		_ = sink.Close()
		return nil, field, err
	}
	return a, field, nil
}
