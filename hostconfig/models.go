package hostconfig

import (
	"slices"

	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/models"
)

// buildModels builds the model of every agent of the config that has one
// (models:, agents.<name>.model), one policy per agent, at Open, so that a
// model that cannot be built is bad config before anything runs. A client
// decides nothing: it builds none, and needs no API key.
func buildModels(o Options) (map[string]engine.Policy, error) {
	cfg := o.Config
	byAgent := map[string]engine.Policy{}
	agents := make([]string, 0, len(cfg.AgentModels))
	for a := range cfg.AgentModels {
		agents = append(agents, a)
	}
	slices.Sort(agents)
	for _, agent := range agents {
		p, err := models.ForAgent(cfg, agent, llm.Options{LookupEnv: o.LookupEnv})
		if err != nil {
			return nil, configErr(cfg, "agents."+agent+".model", err.Error())
		}
		byAgent[agent] = p
	}
	return byAgent, nil
}
