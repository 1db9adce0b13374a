package hostconfig

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// meter is the host's pool measures in Prometheus (host.Meter).
type meter struct {
	leases, leaseErrors prometheus.Counter
	segments            *prometheus.CounterVec
	segDuration         prometheus.Histogram
}

func (m *meter) Leased()      { m.leases.Inc() }
func (m *meter) LeaseFailed() { m.leaseErrors.Inc() }
func (m *meter) Segment(outcome string, took time.Duration) {
	m.segments.WithLabelValues(outcome).Inc()
	m.segDuration.Observe(took.Seconds())
}

// registerCounters registers the process's metrics in reg: the pool's (the
// meter returned, and what self, once open, counts), the Go runtime's and
// the process's, and the NATS connection's and the dispatcher's of b.
func registerCounters(reg *prometheus.Registry, self *atomic.Pointer[host.Host], b *jshost.Backend) *meter {
	m := &meter{
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "noeta_engine_leases_taken_total", Help: "Leases this process's workers took."}),
		leaseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "noeta_engine_lease_errors_total", Help: "Lease requests that failed (retried)."}),
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "noeta_engine_segments_total",
			Help: "Segments this process ran, by outcome: suspended, terminal (released), lease_lost, failed (handed back for a retry), stopped (cut at shutdown, left to expire)."},
			[]string{"outcome"}),
		segDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "noeta_engine_segment_duration_seconds", Help: "How long segments ran, lease to release.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	boolf := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	ofHost := func(f func(h *host.Host) float64) func() float64 {
		return func() float64 {
			if h := self.Load(); h != nil {
				return f(h)
			}
			return 0
		}
	}
	disp := func(f func(s jetstream.DispatcherStats) uint64) func() uint64 {
		return func() uint64 {
			if d := b.JetStreamDispatcher(); d != nil {
				return f(d.Stats())
			}
			return 0
		}
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		telemetry.BuildInfo(),
		m.leases, m.leaseErrors, m.segments, m.segDuration,
		gauge("noeta_engine_workers", "Workers in the pool.", ofHost(func(h *host.Host) float64 { return float64(h.Workers()) })),
		gauge("noeta_engine_segments_in_flight", "Segments running now.", ofHost(func(h *host.Host) float64 { return float64(h.InFlight()) })),
		gauge("noeta_engine_pool_running", "1 while the pool takes new tasks, 0 once it is stopping.", ofHost(func(h *host.Host) float64 {
			return boolf(h.Runs() && !h.Draining())
		})),
		gauge("noeta_engine_nats_connected", "1 while connected to NATS.", func() float64 { return boolf(b.Conn().Status() == nats.CONNECTED) }),
		counter("noeta_engine_nats_reconnects_total", "Reconnections to NATS.", func() uint64 { return b.Conn().Stats().Reconnects }),
		counter("noeta_engine_dispatcher_wakes_applied_total", "Wake ingress messages this process's dispatcher applied (fired timers included).",
			disp(func(s jetstream.DispatcherStats) uint64 { return s.WakesApplied })),
		counter("noeta_engine_damaged_logs_total", "Segments refused because the task's log is damaged (a gap, a corrupt record); each task so refused ends failed.", func() uint64 {
			if h := self.Load(); h != nil {
				return h.DamagedLogs()
			}
			return 0
		}),
		counter("noeta_engine_dispatcher_answers_refused_total", "Human answers on the wake ingress that matched no request the task waits on now: dropped, not kept.",
			disp(func(s jetstream.DispatcherStats) uint64 { return s.RefusedWakes })),
		counter("noeta_engine_dispatcher_wakes_held_total", "Wake ingress messages held back because their task already buffers MaxPendingWakes wakes; past the cap the broker refuses the sender.",
			disp(func(s jetstream.DispatcherStats) uint64 { return s.HeldWakes })),
		counter("noeta_engine_dispatcher_requeued_total", "Expired leases this process's dispatcher requeued or ended.",
			disp(func(s jetstream.DispatcherStats) uint64 { return s.Requeued })),
	)
	return m
}
