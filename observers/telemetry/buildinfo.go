package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/internal/buildinfo"
)

// BuildInfo is the gauge noeta_build_info{version, revision, goversion},
// always 1, as Prometheus's own *_build_info: a dashboard joins it to
// every series of the process to say which build produced them.
func BuildInfo() prometheus.Collector {
	in := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "noeta_build_info",
		Help: "The build of noeta this process runs: module version, commit and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
