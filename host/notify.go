package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/observers"
)

// hooksConfig is the in-process hooks observer's configuration: the
// host's workspace and environment (a webhook's env:NAME headers are read
// from it, once), and its log, for the agent of a task a notification is
// about.
func (h *Host) hooksConfig() observers.HooksObserverConfig {
	return observers.HooksObserverConfig{Workspace: h.opts.Workspace, Logger: h.logger, LookupEnv: h.opts.LookupEnv, Log: h.log}
}

// registerHookMetrics exports the hooks observer's counters: a failed
// notification is logged and counted, never an error of the task.
func registerHookMetrics(reg *prometheus.Registry, hk *observers.Hooks) {
	for _, c := range []struct {
		outcome string
		f       func(observers.HooksStats) uint64
	}{
		{"ran", func(s observers.HooksStats) uint64 { return s.Ran }},
		{"failed", func(s observers.HooksStats) uint64 { return s.Failed }},
		{"timed_out", func(s observers.HooksStats) uint64 { return s.TimedOut }},
		{"dropped", func(s observers.HooksStats) uint64 { return s.Dropped }},
		{"retried", func(s observers.HooksStats) uint64 { return s.Retried }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "noeta_engine_hook_runs_total",
			Help:        "Runs of hooks and notifications (commands and webhooks) by outcome: ran, failed, timed_out, dropped (queue full or closed), retried (webhook attempts made again).",
			ConstLabels: prometheus.Labels{"outcome": c.outcome},
		}, func() float64 { return float64(c.f(hk.Stats())) }))
	}
}
