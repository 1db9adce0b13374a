package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// toolEntry is one tool an agent may call, as engine tools prints it.
type toolEntry struct {
	Agent       string          `json:"agent"`
	Tool        string          `json:"tool"`
	Risk        string          `json:"risk"`
	Source      string          `json:"source"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

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
	entries, err := host.AgentTools(ctx, cfg, host.ToolOptions{Logger: g.logger()})
	if err != nil {
		return hostErr("tools", err)
	}
	if asJSON {
		enc := json.NewEncoder(g.stdout)
		for _, e := range entries {
			if err := enc.Encode(toolEntry(e)); err != nil {
				return failErr(err)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tTOOL\tRISK\tSOURCE\tDESCRIPTION")
	for _, e := range entries {
		// A tool's name and description come from its MCP server; a tab in
		// one is escaped too, so it cannot shift the columns.
		l := termsafe.Line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l(e.Agent), l(e.Tool), l(e.Risk), l(e.Source), timeline.Cut(e.Description, 60))
	}
	return tw.Flush()
}
