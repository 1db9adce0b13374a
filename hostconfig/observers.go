package hostconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/configured"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// observerCloseWait bounds the observers' part of Close: the audit flush,
// the spans still to export, the hooks still queued or running.
const observerCloseWait = 10 * time.Second

// observerSet is what a host that runs tasks runs in process over the
// records it commits: the config's observers and the caller's, each behind
// its own bounded queue (a slow observer never slows a writer).
type observerSet struct {
	// observers are the config's, for the host to feed.
	observers []observers.Observer
	audit     *observers.Audit
	hooks     *observers.Hooks
	metrics   *telemetry.Metrics
	trace     *telemetry.Trace
	fanout    *observers.Fanout
	// servers are the listeners of observers.metrics.listen and
	// observers.fanout.listen.
	servers []*http.Server
	// metricsAddr is where observers.metrics.listen listens.
	metricsAddr string
}

// startObservers builds the config's observers and starts their listeners,
// for the host to feed from its log before its pool starts, so they see
// every record this process commits. An observer the config asks for
// that cannot be built, or that nothing in this process would run, is bad
// config, naming the file, line and field.
func (h *Host) startObservers(ctx context.Context, self *atomic.Pointer[host.Host]) (_ *observerSet, err error) {
	o := h.opts
	logger := o.Logger
	log := h.nats.Log()
	cfg := o.Config
	oc := cfg.Observers
	s := &observerSet{}
	defer func() {
		if err != nil {
			s.close(logger)
		}
	}()
	if err := h.checkSkipped(); err != nil {
		return nil, err
	}
	stdout := o.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	opts := configured.Options{
		Logger: logger, Log: log, Stdout: stdout, Publisher: h.nats.Conn(), AuditSyncEvery: time.Second,
		// In process, the audit sees only what this process commits.
		PartialFeed: true,
		// In process, the metrics see only what this process commits: the
		// agent of a task submitted elsewhere is read from its log.
		Registry:  h.reg,
		Workspace: o.Workspace, LookupEnv: o.LookupEnv,
	}
	var obs []observers.Observer
	for _, name := range configured.Names {
		if h.skips(name) {
			continue
		}
		switch name {
		case configured.Metrics:
			// Served on the host's HTTP listener even when not configured.
			if oc.Metrics == nil && !o.ServesHTTP {
				continue
			}
		case configured.Audit:
			if oc.Audit != nil && oc.Audit.Stdout && o.Verb != "" {
				return nil, configErr(cfg, "observers.audit.stdout",
					fmt.Sprintf("engine %s prints its own output on stdout, which the audit records would be mixed into; write them to a file or a subject", o.Verb))
			}
			fallthrough
		default:
			if !configured.In(cfg, name) {
				continue
			}
		}
		if fc := oc.Fanout; name == configured.Fanout && fc.Listen == "" && !o.ServesHTTP {
			what := "this process"
			if o.Verb != "" {
				what = "engine " + o.Verb
			}
			return nil, configErr(cfg, "observers.fanout", what+" serves no HTTP for its live stream: give it a listener of its own (listen: HOST:PORT), or run it in engine serve --http")
		}
		ob, err := configured.New(ctx, cfg, name, opts)
		if err != nil {
			if ce, ok := errors.AsType[*configured.Error](err); ok {
				return nil, configErr(cfg, ce.Field, ce.Err.Error())
			}
			return nil, err
		}
		obs = append(obs, ob)
		switch ob := ob.(type) {
		case *observers.Audit:
			s.audit = ob
		case *observers.Hooks:
			registerHookMetrics(h.reg, ob)
			s.hooks = ob
		case *telemetry.Metrics:
			s.metrics = ob
			if oc.Metrics != nil {
				addr, err := s.listen(h, "observers.metrics.listen", oc.Metrics.Listen, h.metricsHandler())
				if err != nil {
					return nil, err
				}
				s.metricsAddr = addr
			}
		case *telemetry.Trace:
			s.trace = ob
		case *observers.Fanout:
			s.fanout = ob
			if fc := oc.Fanout; fc.Listen != "" {
				if !loopback(fc.Listen) {
					// Its own listener has no TLS: records and tokens would
					// cross the network in clear.
					return nil, configErr(cfg, "observers.fanout.listen", fmt.Sprintf("%q listens beyond loopback over plain HTTP; listen on 127.0.0.1, or serve the fanout on engine serve --http (fanout: {}), which takes --http-tls-cert and --http-tls-key or --behind-tls-proxy", fc.Listen))
				}
				if _, err := s.listen(h, "observers.fanout.listen", fc.Listen, h.streams(ob.SSEHandler(log))); err != nil {
					return nil, err
				}
			}
		}
	}
	s.observers = obs
	if s.metrics != nil {
		s.metrics.SetStats(func() map[string]observers.ObserverStats {
			if h := self.Load(); h != nil {
				return h.Stats()
			}
			return nil
		})
	}
	return s, nil
}

// listen serves handler on addr until the set closes and returns the
// address it listens on; a listener that cannot be had is bad config
// naming field.
func (s *observerSet) listen(h *Host, field, addr string, handler http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", configErr(h.opts.Config, field, err.Error())
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: listenReadHeaderTimeout, ReadTimeout: listenReadTimeout,
		WriteTimeout: listenWriteTimeout, IdleTimeout: listenIdleTimeout, MaxHeaderBytes: 64 << 10}
	s.servers = append(s.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.opts.Logger.Error("http listener stopped", "field", field, "addr", addr, "err", err)
		}
	}()
	h.opts.Logger.Info("http listening", "field", field, "addr", ln.Addr().String())
	return ln.Addr().String(), nil
}

// skips reports whether this process leaves the observer name to
// observer-workers (Options.Skip).
func (h *Host) skips(name string) bool {
	sk := h.opts.Skip
	switch name {
	case configured.Audit:
		return sk.Audit
	case configured.Hooks:
		return sk.Hooks
	case configured.Metrics:
		return sk.Metrics
	case configured.Trace:
		return sk.Trace
	case configured.Fanout:
		return sk.Fanout
	}
	return false
}

// checkSkipped refuses to leave a configured observer to other processes on
// the embedded default, where none can connect: it would silently never
// run.
func (h *Host) checkSkipped() error {
	o := h.opts
	if !o.embedded() {
		return nil
	}
	for _, name := range []string{configured.Hooks, configured.Audit, configured.Metrics, configured.Trace, configured.Fanout} {
		if h.skips(name) && configured.In(o.Config, name) {
			return configErr(o.Config, configured.Field(name), "configured, but nothing would run it: this process was told to leave it to observer-workers, and none can connect to the embedded server; run it here or use a NATS cluster (--nats)")
		}
	}
	return nil
}

// close stops what the observers hold, once the host has drained their
// feed: the listeners, the audit sink, the spans, the hooks, the metrics.
func (s *observerSet) close(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), observerCloseWait)
	defer cancel()
	for _, srv := range s.servers {
		_ = srv.Shutdown(ctx)
	}
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			logger.Error("audit: closing the sink failed; the last records may not be durable", "err", err)
		}
	}
	if s.fanout != nil {
		_ = s.fanout.Close()
	}
	if s.trace != nil {
		if err := s.trace.Shutdown(ctx); err != nil {
			logger.Warn("trace: the last spans were not exported", "err", err)
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

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}
