package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/observers"
)

// HookRuns returns counters, all named name with a label outcome, of a
// hooks observer's runs — commands and webhooks — read from stats at each
// collection: ran, failed, timed_out, dropped (a full queue, or after
// Close), retried (webhook attempts made again). A failed notification is
// logged and counted this way, never an error of a task.
func HookRuns(name string, stats func() observers.HooksStats) []prometheus.Collector {
	help := "Runs of hooks and notifications (commands and webhooks) by outcome: ran, failed, timed_out, dropped (queue full or closed), retried (webhook attempts made again)."
	var out []prometheus.Collector
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
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{"outcome": c.outcome},
		}, func() float64 { return float64(c.f(stats())) }))
	}
	return out
}
