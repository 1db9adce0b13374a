package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/webui"
)

func newGatewayCmd(g *globals) *cobra.Command {
	var config, agent, workspace, listen, names string
	var asJSON bool
	var web webui.ListenerFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the configured MCP servers' tools to MCP clients, every call governed and recorded",
		Long: `gateway is an MCP server (stdio, or streamable HTTP with --listen) offering the
tools of the config's mcp_servers that --agent may call. A session is a task of
--agent; each call a decision of origin client, judged by its guards, run and
recorded; a changed tool definition is refused until pin accept (docs/gateway.md).`,
		Example: `  engine gateway --config noeta.yaml --agent dev
  engine gateway pin accept files read_file`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.check(); err != nil {
				return err
			}
			cfg, err := governance(cmd.Context(), config)
			if err != nil {
				return err
			}
			ws, err := absDir("--workspace", workspace)
			if err != nil {
				return err
			}
			if err := web.Check("--listen", listen); listen != "" && err != nil {
				return usageErr("%v", err)
			}
			if err := gateway.CheckToolNames(names); err != nil {
				return usageErr("--tool-names: %v", err)
			}
			return failIf(gateway.Serve(cmd.Context(), gateway.Run{Open: g.open,
				Config: cfg, Workers: g.workers, Workspace: ws, Prefix: g.conn.prefix, Replicas: g.conn.replicas,
				Who: gateway.Principal{Agent: agent, SubmittedBy: approvals.LocalApprover()}, Listen: listen, Gate: webui.NewGate(cfg.HTTP, web.Limits()), Cert: web.Cert, In: cmd.InOrStdin(), Out: g.rawOut, Log: g.stderr, Logger: g.logger(), ToolNames: names}))
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent whose tasks the client's sessions are (required)")
	_ = cmd.MarkFlagRequired("agent")
	cmd.Flags().StringVar(&workspace, "workspace", ".", "directory the file and shell tools work in")
	cmd.Flags().StringVar(&listen, "listen", "", "serve streamable HTTP on this address instead of stdio (bearer tokens of the config's http:)")
	cmd.Flags().StringVar(&names, "tool-names", gateway.NamesPrefixed, "how clients know an MCP server's tool: prefixed (mcp__<server>__<tool>) or upstream (its name on the server; two tools of one name are offered to no one)")
	web.Bind(cmd.Flags(), "--listen")
	pin := &cobra.Command{Use: "pin", Short: "List the pinned tool definitions, or accept a changed one", Args: cobra.NoArgs}
	list := &cobra.Command{Use: "list", Short: "List the pinned definitions and the changes refused until accepted", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return failIf(gateway.WithPins(cmd.Context(), g.open, g.conn.prefix, g.conn.replicas, func(p *gateway.Pins) error { return gateway.PrintPins(cmd.Context(), p, g.stdout, asJSON) }))
		}}
	list.Flags().BoolVar(&asJSON, "json", false, "one JSON object per pin per line")
	accept := &cobra.Command{Use: "accept SERVER TOOL", Short: "Pin a tool's changed definition: its calls run again", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return failIf(gateway.WithPins(cmd.Context(), g.open, g.conn.prefix, g.conn.replicas, func(p *gateway.Pins) error {
				return p.Accept(cmd.Context(), args[0], args[1], approvals.LocalApprover(), time.Now())
			}))
		}}
	pin.AddCommand(list, accept)
	cmd.AddCommand(pin)
	return cmd
}
