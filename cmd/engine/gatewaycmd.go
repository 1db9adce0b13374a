package main

import (
	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/hostconfig"
)

func newGatewayCmd(g *globals) *cobra.Command {
	var config, agent, workspace string
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the configured MCP servers' tools to an MCP client over stdio, every call governed and recorded",
		Long: `gateway is an MCP server on stdin and stdout for the clients people already
run (Claude Code, Claude Desktop, Cursor, VS Code): it offers the tools of
the config's mcp_servers that --agent may call, as mcp__<server>__<tool>
(docs/gateway.md).

The session is a task of --agent, submitted by the local user. Each
tools/call is recorded as a decision of origin client, judged by the
agent's guards (rules, permissions and risk, budgets, repetition, shadow
rules), run against the upstream server and its result recorded and
returned. A denial comes back as an error result naming the guard and the
reason; a call that needs an approval waits while a person answers with
engine approve or in the inbox. The client closing the session finishes
the task.

It runs the tasks itself, on the embedded server of --data (which it needs
to itself) or on --nats. Nothing but MCP is written on stdout; logs go to
stderr.`,
		Example: `  engine gateway --config noeta.yaml --agent dev
  # .mcp.json: {"mcpServers": {"noeta": {"command": "engine",
  #   "args": ["gateway", "--config", "noeta.yaml", "--agent", "dev"]}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.check(); err != nil {
				return err
			}
			if agent == "" {
				return usageErr("--agent is required: the agent whose tasks the sessions are")
			}
			ctx := cmd.Context()
			cfg, err := governance(ctx, config)
			if err != nil {
				return err
			}
			ws, err := absDir("--workspace", workspace)
			if err != nil {
				return err
			}
			gw := gateway.New(gateway.Options{Agent: agent, Logger: g.logger()})
			defer gw.Close()
			h, err := g.open(ctx, "gateway", hostconfig.Options{Config: cfg, Workers: g.workers, Workspace: ws, Actor: engine.DefaultActor(),
				Policies: gw.Policies, Queue: gw.Queue(), Verb: "gateway", Stdout: g.stderr})
			if err != nil {
				return err
			}
			defer h.Close()
			gw.Attach(h.Host)
			if err := gw.ServeStdio(ctx, cmd.InOrStdin(), g.rawOut, gateway.Principal{Agent: agent, SubmittedBy: approvals.LocalApprover()}); err != nil {
				return failErr(err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.StringVar(&agent, "agent", "", "the agent whose tasks the client's sessions are (required)")
	f.StringVar(&workspace, "workspace", ".", "directory the file and shell tools work in")
	return cmd
}
