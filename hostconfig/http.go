package hostconfig

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the host's HTTP endpoints: GET /healthz (200 while the
// host is connected and, if it runs tasks, its pool takes tasks; 503
// otherwise), GET /metrics (Prometheus: the metrics observer over the
// records this process commits, when it runs, and the process's own
// counters) and, with an observers.fanout section, GET
// /tasks/{id}/events (a task's records as server-sent events), guarded by
// Options.Streams. /healthz and /metrics ask for no login: a liveness
// probe and a scraper have none, and neither shows a record's content.
//
// One registry is served on one port: with observers.metrics.listen the
// registry is served there alone, and /metrics here answers 404 naming
// it, since a scraper of both would count every series twice.
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if addr := h.metricsListen(); addr != "" {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "this process serves its metrics on observers.metrics.listen ("+addr+") only: scrape that", http.StatusNotFound)
		})
	} else if h.reg != nil {
		mux.Handle("GET /metrics", h.metricsHandler())
	}
	if h.obs != nil && h.obs.fanout != nil {
		mux.Handle("/tasks/{id}/events", h.streams(h.obs.fanout.SSEHandler(h.nats.Log())))
	}
	return mux
}

// metricsListen is the address of observers.metrics.listen when this
// process serves the registry there ("" otherwise).
func (h *Host) metricsListen() string {
	if h.obs == nil || h.obs.metricsAddr == "" {
		return ""
	}
	return h.obs.metricsAddr
}

// metricsHandler serves the host's registry.
func (h *Host) metricsHandler() http.Handler {
	return promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.opts.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// streams is next guarded by Options.Streams, or refused to everyone.
func (h *Host) streams(next http.Handler) http.Handler {
	if h.opts.Streams != nil {
		return h.opts.Streams(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "this endpoint streams whole records and no authentication is configured for it", http.StatusForbidden)
	})
}

// Timeouts of the host's own listeners (observers.metrics.listen and
// observers.fanout.listen): a client that sends its request slowly, or
// never, is cut off; the fanout's streams lift them once admitted.
const (
	listenReadHeaderTimeout = 10 * time.Second
	listenReadTimeout       = 30 * time.Second
	listenWriteTimeout      = time.Minute
	listenIdleTimeout       = 2 * time.Minute
)
