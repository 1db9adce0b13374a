// Package models builds the model-backed policy of an agent from a decoded
// noeta.yaml: the agent's model: names an entry of models:, whose provider
// picks policy/openai or policy/anthropic. It is the one place that knows
// every provider, so a host's policy resolver does not, and the one that
// converts the config's model types to the providers' options: it belongs to
// the composition layer, and the providers never read config.
package models

import (
	"errors"
	"fmt"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/policy/anthropic"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/openai"
)

// ErrNoModel is wrapped by ForAgent for an agent that names no model (it
// runs scripts only).
var ErrNoModel = errors.New("the agent has no model")

// ForAgent returns the policy of agent under f. The policy is immutable and
// safe for concurrent use: one per agent serves all its tasks.
func ForAgent(f *config.File, agent string, opts llm.Options) (*llm.Policy, error) {
	a, ok := f.AgentModels[agent]
	if !ok {
		return nil, fmt.Errorf("%w: agent %q has no model: in %s", ErrNoModel, agent, f.Path)
	}
	m, ok := f.Models[a.Model]
	if !ok {
		// config.Parse refuses this; a File built by hand may not.
		return nil, fmt.Errorf("%w: agent %q names model %q, which models: lacks", llm.ErrConfig, agent, a.Model)
	}
	lm, la := Model(m), Agent(a)
	switch m.Provider {
	case config.ProviderOpenAI:
		p, err := openai.New(lm, la, opts)
		if err != nil {
			return nil, err
		}
		return p.Policy, nil
	case config.ProviderAnthropic:
		p, err := anthropic.New(lm, la, opts)
		if err != nil {
			return nil, err
		}
		return p.Policy, nil
	}
	return nil, fmt.Errorf("%w: model %s has provider %q (want openai or anthropic)", llm.ErrConfig, m.Name, m.Provider)
}

// Model converts a models: entry to a provider's [llm.Model].
func Model(m config.Model) llm.Model {
	return llm.Model{
		Name: m.Name, Provider: m.Provider, Model: m.Model, BaseURL: m.BaseURL, APIKeyEnv: m.APIKeyEnv,
		MaxTokens: m.MaxTokens, TimeoutSeconds: m.TimeoutSeconds, MaxRetries: m.MaxRetries,
		MaxContextChars: m.MaxContextChars,
		Price:           llm.Price{Free: m.Price.Free, InputPerMTok: m.Price.InputPerMTok, OutputPerMTok: m.Price.OutputPerMTok},
	}
}

// Agent converts an agent's model keys to an [llm.Agent].
func Agent(a config.AgentModel) llm.Agent {
	return llm.Agent{Model: a.Model, SystemPrompt: a.SystemPrompt, MaxContextChars: a.MaxContextChars}
}
