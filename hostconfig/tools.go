package hostconfig

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/tools"
	"github.com/noeta-go/noeta/tools/mcp"
	"github.com/noeta-go/noeta/tools/sandbox"
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
	Tools []tools.Tool
	// LookupEnv expands ${VAR} in the MCP servers' env and headers
	// (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	Logger    *slog.Logger
}

// AgentTools lists, agent by agent, the tools of the registry a host of
// cfg would have that each agent may call (guards.AgentConfig.MayCall):
// what a model deciding for it is offered. It starts nothing that runs
// tasks.
func AgentTools(ctx context.Context, cfg *config.File, o ToolOptions) ([]AgentTool, error) {
	// The servers it starts to list their tools are confined as a host's
	// are, the default data directory hidden: it is in the working
	// directory, their default workspace.
	sb := confinement(ctx, cfg, hiddenPaths(Options{DataDir: DefaultDataDir}), o.Logger, false)
	reg, closeSources, err := buildRegistry(ctx, cfg, o.Tools, true, o.LookupEnv, o.Logger, sb, "")
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

// buildRegistry is the registry of a host of cfg: the built-ins, extra,
// and, when sources is set, the tools of the config's MCP servers, which
// it starts to list them (a host that runs no task starts none) and lists
// again when they say their list changed.
// closeSources stops the servers it started. A server that cannot be
// started or listed is reported in the log, naming it, and adds no tools:
// nothing else is affected, and a call to one of its tools is refused as
// an unknown tool.
//
// sb confines the shell's commands and the stdio servers (nil: nothing is
// confined, the config's choice).
func buildRegistry(ctx context.Context, cfg *config.File, extra []tools.Tool, sources bool, lookupEnv func(string) (string, bool), logger *slog.Logger, sb *sandbox.Scoped, workspace string) (*tools.Registry, func(), error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bc := tools.BuiltinConfig{}
	if sb != nil {
		bc.Sandbox = agentConfiner{sb}
	}
	builtins, err := tools.Builtins(bc)
	if err != nil {
		return nil, nil, err
	}
	all := append(builtins, extra...)
	var srcs []*mcp.Source
	// A server that says its tool list changed has its tools listed again
	// and swapped into the registry by refresh, a goroutine of the
	// registry's owner, stopped by closeSources.
	changed := make(chan string, 16)
	refreshCtx, stopRefresh := context.WithCancel(context.Background())
	var refreshWG sync.WaitGroup
	closeSources := func() {
		stopRefresh()
		refreshWG.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), mcpCloseWait)
		defer cancel()
		for _, src := range srcs {
			if err := src.Close(ctx); err != nil {
				logger.Warn("mcp: stopping a server failed", "server", src.Name(), "err", err)
			}
		}
	}
	if cfg != nil && sources {
		names := make([]string, 0, len(cfg.MCPServers))
		for n := range cfg.MCPServers {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			opts := mcp.Options{LookupEnv: lookupEnv, Logger: logger, SandboxScope: mcpScope(n),
				OnToolsChanged: func(server string) {
					select {
					case changed <- server:
					default: // a refresh is pending already
					}
				}}
			if sb != nil {
				opts.Sandbox, opts.Workspace = sb, workspace
			}
			src := mcp.New(mcpServer(cfg.MCPServers[n]), opts)
			srcs = append(srcs, src)
			ts, err := src.Tools(ctx)
			if err != nil {
				logger.Error("mcp: the server's tools are unavailable", "server", n, "err", err)
				continue
			}
			all = append(all, ts...)
		}
	}
	reg, err := tools.NewRegistry(all...)
	if err != nil {
		closeSources()
		return nil, nil, badOption("tools: %v", err)
	}
	if cfg != nil {
		if err := cfg.CheckTools(reg.Names()); err != nil {
			closeSources()
			return nil, nil, &configError{err.Error()}
		}
	}
	if len(srcs) > 0 {
		byName := make(map[string]*mcp.Source, len(srcs))
		for _, src := range srcs {
			byName[src.Name()] = src
		}
		refreshWG.Go(func() { refreshTools(refreshCtx, reg, byName, changed, logger) })
	}
	return reg, closeSources, nil
}

// refreshTools lists a server's tools again when it says they changed and
// swaps them into reg: a tool it added is offered from the next turn on, a
// tool it removed is refused as unknown.
func refreshTools(ctx context.Context, reg *tools.Registry, srcs map[string]*mcp.Source, changed <-chan string, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case server := <-changed:
			src, ok := srcs[server]
			if !ok {
				continue
			}
			ts, err := src.Tools(ctx)
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("mcp: listing the server's changed tools failed; its old list stays", "server", server, "err", err)
				}
				continue
			}
			if err := reg.Replace("mcp__"+server+"__", ts); err != nil {
				logger.Warn("mcp: the server's changed tools were refused; its old list stays", "server", server, "err", err)
				continue
			}
			logger.Info("mcp: the server's tools were listed again", "server", server, "tools", len(ts))
		}
	}
}

// mcpCloseWait bounds how long the MCP servers have to stop.
const mcpCloseWait = 10 * time.Second

// mcpServer converts an mcp_servers: entry to the source's [mcp.Server].
// Its sandbox: is the host's to apply (mcpScope), not the source's.
func mcpServer(s config.MCPServer) mcp.Server {
	out := mcp.Server{
		Name: s.Name, Command: s.Command, Env: s.Env, Cwd: s.Cwd, URL: s.URL, Headers: s.Headers,
		TimeoutSeconds: s.TimeoutSeconds, TrustAnnotations: s.TrustAnnotations,
	}
	if s.Tools != nil {
		out.Tools = make(map[string]mcp.ToolOverride, len(s.Tools))
		for name, t := range s.Tools {
			out.Tools[name] = mcp.ToolOverride{Risk: t.Risk, Edits: t.Edits, TimeoutSeconds: t.TimeoutSeconds}
		}
	}
	return out
}

// buildTools builds the host's registry and, for a host that runs tasks,
// the sandbox its tools run in; Close stops both.
func (h *Host) buildTools(ctx context.Context) (*tools.Registry, error) {
	o := h.opts
	var sb *sandbox.Scoped
	if o.Workers > 0 {
		sb = confinement(ctx, o.Config, hiddenPaths(o), o.Logger, true)
	}
	reg, closeTools, err := buildRegistry(ctx, o.Config, o.Tools, o.Workers > 0, o.LookupEnv, o.Logger, sb, o.Workspace)
	if err != nil {
		_ = sb.Close()
		return nil, err
	}
	h.closeTools = func() {
		closeTools()
		// The sandbox's helper waiting for the next call ends with the
		// tools.
		_ = sb.Close()
	}
	return reg, nil
}
