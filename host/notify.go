package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// hooksConfig is the in-process hooks observer's configuration: the
// host's workspace and environment (a webhook's env:NAME headers are read
// from it, once), and its log, for the agent of a task a notification is
// about.
func (h *Host) hooksConfig() observers.HooksObserverConfig {
	return observers.HooksObserverConfig{Workspace: h.opts.Workspace, Logger: h.logger, LookupEnv: h.opts.LookupEnv, Log: h.log}
}

// registerHookMetrics exports the hooks observer's counters as
// noeta_engine_hook_runs_total{outcome}.
func registerHookMetrics(reg *prometheus.Registry, hk *observers.Hooks) {
	reg.MustRegister(telemetry.HookRuns("noeta_engine_hook_runs_total", hk.Stats)...)
}
