package telemetry

import (
	"encoding/json"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// decisionModel reads who decided a turn and how long the model call took
// from a PolicyDecided record: a model policy's decision names its model
// and provider; a scripted one names neither.
func decisionModel(env eventlog.Envelope, _ *noeta.PolicyDecided) (model, provider string, latencyMS int64) {
	var who struct {
		Model     string `json:"model"`
		Provider  string `json:"provider"`
		LatencyMS int64  `json:"latency_ms"`
	}
	_ = json.Unmarshal(env.Payload, &who)
	return who.Model, who.Provider, who.LatencyMS
}
