package host

import (
	"context"
	"fmt"
	"slices"

	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/models"
)

// defaultPolicies is the host's policy resolver when Options.Policies is
// nil: a task with a script is decided by it; a task without one by its
// agent's model (models:, agents.<name>.model), one policy per agent,
// built at Open so that a model that cannot be built is bad config before
// anything runs.
func (h *Host) defaultPolicies() (engine.PolicyResolver, error) {
	scripted := engine.ScriptedPolicies(h.log, policy.ParseScripted)
	byAgent := map[string]engine.Policy{}
	// A client decides nothing: it needs no model, nor its API key.
	if cfg := h.opts.Config; cfg != nil && h.opts.Workers > 0 {
		agents := make([]string, 0, len(cfg.AgentModels))
		for a := range cfg.AgentModels {
			agents = append(agents, a)
		}
		slices.Sort(agents)
		for _, agent := range agents {
			p, err := models.ForAgent(cfg, agent, llm.Options{LookupEnv: h.opts.LookupEnv})
			if err != nil {
				return nil, h.configErr("agents."+agent+".model", err.Error())
			}
			byAgent[agent] = p
		}
	}
	return func(ctx context.Context, st *engine.State) (engine.Policy, error) {
		if st.ScriptRef != nil {
			return scripted(ctx, st)
		}
		if p, ok := byAgent[st.Agent]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("task %s has no script and agent %q has no model (give the task a script:, or the agent a model: of models:)", st.Task, st.Agent)
	}, nil
}

// HasModel reports whether agent has a model that decides the tasks
// submitted to it without a script.
func (h *Host) HasModel(agent string) bool {
	cfg := h.opts.Config
	if cfg == nil {
		return false
	}
	am, ok := cfg.AgentModels[agent]
	return ok && am.Model != ""
}
