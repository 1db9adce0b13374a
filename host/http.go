package host

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the host's HTTP endpoints: GET /healthz (200 while the
// host is connected and, if it runs tasks, its pool takes tasks; 503
// otherwise), GET /metrics (Prometheus: the metrics observer over the
// records this process commits, when it runs, and the process's own
// counters) and, with an observers.fanout section, GET
// /tasks/{id}/events (a task's records as server-sent events).
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if h.reg != nil {
		mux.Handle("GET /metrics", h.metricsHandler())
	}
	if h.obs != nil && h.obs.fanout != nil {
		mux.Handle("GET /tasks/{id}/events", h.obs.fanout.SSEHandler(h.log))
	}
	return mux
}

// metricsHandler serves the host's registry.
func (h *Host) metricsHandler() http.Handler {
	return promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}
