package host

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/tools"
)

// AgentTool is one tool an agent may call.
type AgentTool struct {
	Agent       string
	Tool        string
	Risk        string
	Source      string // built-in, or mcp:<server>
	Description string
	InputSchema json.RawMessage
}

// ToolOptions say how AgentTools builds the tools.
type ToolOptions struct {
	// Tools are added to the built-ins, as Options.Tools.
	Tools  []tools.Tool
	Logger *slog.Logger
}

// AgentTools lists, agent by agent, the tools of the registry a host of
// cfg would have that each agent may call (guards.AgentConfig.MayCall):
// what a model deciding for it is offered. It starts nothing that runs
// tasks.
func AgentTools(ctx context.Context, cfg *config.File, o ToolOptions) ([]AgentTool, error) {
	reg, closeSources, err := buildRegistry(ctx, cfg, o.Tools, o.Logger)
	if err != nil {
		return nil, err
	}
	defer closeSources()
	var out []AgentTool
	gov := cfg.Governance
	for _, agent := range gov.Agents() {
		a, _ := gov.Agent(agent)
		for _, name := range reg.Names() {
			if !a.MayCall(name) {
				continue
			}
			spec, _ := reg.Spec(name)
			out = append(out, AgentTool{
				Agent: agent, Tool: name, Risk: spec.Risk, Source: toolSource(name),
				Description: spec.Description, InputSchema: spec.InputSchema,
			})
		}
	}
	return out, nil
}

// toolSource names where a tool comes from.
func toolSource(name string) string {
	if rest, ok := strings.CutPrefix(name, "mcp__"); ok {
		server, _, _ := strings.Cut(rest, "__")
		return "mcp:" + server
	}
	return "built-in"
}

// buildRegistry is the registry of a host of cfg: the built-ins and extra.
// closeSources stops what it started.
func buildRegistry(_ context.Context, cfg *config.File, extra []tools.Tool, _ *slog.Logger) (*tools.Registry, func(), error) {
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		return nil, nil, err
	}
	reg, err := tools.NewRegistry(append(builtins, extra...)...)
	if err != nil {
		return nil, nil, badOption("tools: %v", err)
	}
	if cfg != nil {
		if err := cfg.CheckTools(reg.Names()); err != nil {
			return nil, nil, &configError{err.Error()}
		}
	}
	return reg, func() {}, nil
}
