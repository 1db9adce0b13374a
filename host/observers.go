package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// observerCloseWait bounds the observers' part of Close: the records still
// queued, the audit flush, the hooks still queued or running.
const observerCloseWait = 10 * time.Second

// observerSet is what a host that runs tasks runs in process over the
// records it commits: the config's observers and the caller's, each behind
// its own bounded queue (a slow observer never slows a writer).
type observerSet struct {
	inproc  *observers.InProcess
	audit   *observers.Audit
	hooks   *observers.Hooks
	metrics *telemetry.Metrics
}

// startObservers builds the config's observers and the caller's and feeds
// them from the log's Subscriber; it runs before the pool starts, so they
// see every record this process commits. An observer the config asks for
// that cannot be built is bad config, naming the file, line and field.
func (h *Host) startObservers(_ context.Context) (_ *observerSet, err error) {
	o := h.opts
	s := &observerSet{}
	defer func() {
		if err != nil {
			s.close(h.logger)
		}
	}()
	var obs []observers.Observer
	gov := o.Config.Governance
	if err := h.checkSkipped(); err != nil {
		return nil, err
	}
	if ac := gov.Observers().Audit; ac != nil && !o.Skip.Audit {
		if ac.Stdout && o.Verb != "" {
			return nil, h.configErr("observers.audit.stdout",
				fmt.Sprintf("engine %s prints its own output on stdout, which the audit records would be mixed into; write them to a file or a subject", o.Verb))
		}
		stdout := o.Stdout
		if stdout == nil {
			stdout = os.Stdout
		}
		a, field, err := observers.NewAuditFromConfig(*ac, observers.AuditDeps{
			Stdout: stdout, Publisher: h.nc, SyncEvery: time.Second, Log: h.log, Logger: h.logger,
		})
		if err != nil {
			return nil, h.configErr(field, err.Error())
		}
		s.audit = a
		obs = append(obs, a)
	}
	if hc := gov.Hooks(); !o.Skip.Hooks && (len(hc.PostToolUse) > 0 || len(hc.Notification) > 0) {
		hk, err := observers.NewHooksFromConfig(hc, observers.HooksObserverConfig{Workspace: o.Workspace, Logger: h.logger})
		if err != nil {
			return nil, h.configErr("hooks", err.Error())
		}
		s.hooks = hk
		obs = append(obs, hk)
	}
	if o.Metrics && !o.Skip.Metrics {
		m, err := telemetry.NewMetrics(telemetry.MetricsConfig{Registry: h.reg, Logger: h.logger})
		if err != nil {
			return nil, err
		}
		s.metrics = m
		obs = append(obs, m)
	}
	obs = append(obs, o.Observers...)
	if len(obs) > 0 {
		s.inproc = observers.NewInProcess(h.log, observers.InProcessConfig{Logger: h.logger}, obs...)
		if s.metrics != nil {
			s.metrics.SetStats(s.inproc.Stats)
		}
	}
	return s, nil
}

// Stats are the in-process observers' counters, by observer name.
func (h *Host) Stats() map[string]observers.ObserverStats {
	if h.obs == nil || h.obs.inproc == nil {
		return nil
	}
	return h.obs.inproc.Stats()
}

// close stops the in-process observers, in order: the feed (which hands on
// what is queued), the audit sink, the hooks, the metrics.
func (s *observerSet) close(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), observerCloseWait)
	defer cancel()
	if s.inproc != nil {
		if err := s.inproc.Close(ctx); err != nil {
			logger.Warn("observers: records still queued at shutdown were not handled", "err", err)
		}
		for name, c := range s.inproc.Stats() {
			if c.Dropped > 0 || c.Failed > 0 || c.Panicked > 0 {
				logger.Warn("observer lost records", "observer", name, "dropped", c.Dropped, "failed", c.Failed, "panicked", c.Panicked)
			}
		}
	}
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			logger.Error("audit: closing the sink failed; the last records may not be durable", "err", err)
		}
	}
	if s.hooks != nil {
		if err := s.hooks.Close(ctx); err != nil {
			logger.Warn("hooks: stopped before every queued hook ran", "err", err)
		}
	}
	if s.metrics != nil {
		_ = s.metrics.Shutdown(ctx)
	}
}

// checkSkipped refuses to leave a configured observer to other processes on
// the embedded default, where none can connect: it would silently never
// run.
func (h *Host) checkSkipped() error {
	o := h.opts
	if !o.embedded() {
		return nil
	}
	gov := o.Config.Governance
	hc := gov.Hooks()
	for _, c := range []struct {
		skip, set bool
		field     string
	}{
		{o.Skip.Hooks, len(hc.PostToolUse) > 0 || len(hc.Notification) > 0, "hooks"},
		{o.Skip.Audit, gov.Observers().Audit != nil, "observers.audit"},
	} {
		if c.skip && c.set {
			return h.configErr(c.field, "configured, but nothing would run it: this process was told to leave it to observer-workers, and none can connect to the embedded server; run it here or use a NATS cluster (--nats)")
		}
	}
	return nil
}
