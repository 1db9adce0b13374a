package hostconfig

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/telemetry"
)

// registerHookMetrics exports the hooks observer's counters as
// noeta_engine_hook_runs_total{outcome}.
func registerHookMetrics(reg *prometheus.Registry, hk *observers.Hooks) {
	reg.MustRegister(telemetry.HookRuns("noeta_engine_hook_runs_total", hk.Stats)...)
}
