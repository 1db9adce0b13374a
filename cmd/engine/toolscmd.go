package main

import (
	"context"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/taskview"
)

func newToolsCmd(g *globals) *cobra.Command {
	var config string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List every tool each agent of the config may call, with its risk, its source and its input schema",
		Long: `tools lists, agent by agent, the tools of the engine (the built-ins and the
tools of the config's MCP servers, which it starts to ask) that the agent's
tools:, permissions.allowed_tools and denied_tools let it call — what a model
deciding for it is offered — with each tool's risk level, where it comes from
(built-in, or mcp:<server>) and, with --json, its input schema. Which calls
need a human's approval is the permission mode's and the rules' to decide per
call.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listTools(cmd.Context(), g, config, asJSON)
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per agent and tool per line, with the input schema")
	return cmd
}

func listTools(ctx context.Context, g *globals, configPath string, asJSON bool) error {
	cfg, err := governance(ctx, configPath)
	if err != nil {
		return err
	}
	entries, err := hostconfig.AgentTools(ctx, cfg, hostconfig.ToolOptions{Logger: g.logger()})
	if err != nil {
		return hostErr("tools", err)
	}
	err = taskview.WriteTools(g.stdout, entries, asJSON)
	if err != nil && asJSON {
		return failErr(err)
	}
	return err
}
