package hostconfig

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/noeta-go/noeta/host"
)

// Mux serves the host's endpoints ([Host.Handler]: /healthz, /metrics, the
// fanout's /tasks/{id}/events) and, at every other path, ui: the API and
// the inbox page. The fanout streams whole records, so the host guards it
// with the API's gate (Options.Streams): it authenticates as the API does
// and counts toward its stream caps. /healthz (a liveness probe) and
// /metrics (counters, no record's content; scraped without credentials by
// convention) stay open, on a listener that is loopback unless TLS or a
// TLS proxy is in front (docs/adr/0049).
func (h *Host) Mux(ui http.Handler) http.Handler {
	own := h.Handler()
	mux := http.NewServeMux()
	mux.Handle("/healthz", own)
	mux.Handle("/metrics", own)
	mux.Handle("/tasks/", own)
	mux.Handle("/", ui)
	return mux
}

// ServeOptions say how [Host.ServeUntil] stops a host that runs tasks.
type ServeOptions struct {
	// Grace bounds how long the segments in hand may take to finish once
	// the host is told to stop; those still running then stop at their
	// next write, and their leases expire into another host's hands.
	Grace time.Duration
	// Signals delivers the process's stop signals, the first of them the
	// one that ended the serving context: a second ends the grace period
	// at once. nil: only Grace ends it.
	Signals <-chan os.Signal
	// Server serves [Host.Mux], if the caller serves one: it is shut down
	// once the pool has drained, after Streams has ended the live streams
	// (Shutdown waits for every request, and a stream does not end).
	Server  *http.Server
	Streams interface{ Close() }
	// Sessions, if set, is closed first, before the pools drain: a
	// mounted gateway's sessions end while the pools still run their
	// tasks' last turns, or a sweeper of dead gateways stops.
	Sessions interface{ Close() }
}

// shutdownWait bounds the HTTP server's shutdown once its live streams
// have ended.
const shutdownWait = 5 * time.Second

// ServeUntil returns once ctx has ended and the host has stopped: it takes
// no new task, lets the segments in hand finish within o.Grace (or until a
// second signal), shuts the HTTP server down and closes the host, logging
// each step. The report says how the drain went.
func (h *Host) ServeUntil(ctx context.Context, o ServeOptions) host.DrainReport {
	logger := h.opts.Logger
	<-ctx.Done()
	start := time.Now()
	grace, cancel := context.WithTimeout(context.Background(), o.Grace)
	defer cancel()
	drained := make(chan struct{})
	hurried := make(chan struct{})
	go func() {
		// Owned by ServeUntil: it ends with the drain, or on the second
		// signal. The signal that ended ctx is the first; another one
		// hurries.
		defer close(hurried)
		n := 0
		for {
			select {
			case <-drained:
				return
			case _, ok := <-o.Signals:
				if !ok {
					return
				}
				if n++; n == 2 {
					logger.Warn("second signal: the segments still running stop now")
					cancel()
					return
				}
			}
		}
	}()
	if o.Sessions != nil {
		o.Sessions.Close()
	}
	logger.Info("stopping: no new tasks; the segments in hand finish", "in_flight", h.InFlight(), "grace", o.Grace)
	rep := h.Drain(grace)
	close(drained)
	<-hurried
	if o.Server != nil {
		if o.Streams != nil {
			o.Streams.Close()
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
		_ = o.Server.Shutdown(sctx)
		cancel()
	}
	h.Close()
	logger.Info("stopped", "took", time.Since(start).Round(time.Millisecond), "finished_while_stopping", rep.Finished,
		"left_to_expire", len(rep.Abandoned), "segments", h.Segments())
	return rep
}
