package telemetry

import (
	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// decisionModel reads who decided a turn and how long the model call took:
// a model policy's decision names its model and provider; a scripted one
// (and a version 1 record) names neither.
func decisionModel(_ eventlog.Envelope, p *noeta.PolicyDecided) (model, provider string, latencyMS int64) {
	return p.Model, p.Provider, p.LatencyMS
}
