package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/internal/settings"
	"github.com/noeta-go/noeta/webui"
)

type serveOpts struct {
	serveConfig string
	queue       string
	grace       time.Duration
	http        string
	config      string
	workspace   string
	child       bool
	hooks       bool
	audit       bool
	logFormat   string
	logLevel    string
	printConfig bool
	web         webui.ListenerFlags
	gateway     string
	gwNames     string
}

// Defaults of serve.
const (
	defaultGrace     = 30 * time.Second
	defaultServeHTTP = "127.0.0.1:9465"
)

func newServeCmd(g *globals) *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run tasks with a pool of workers on the configured NATS, until SIGTERM",
		Long: `serve runs a pool of --workers workers on the configured NATS (--nats; the
embedded server on --data without it): each leases a ready task from the
--queue, runs it to its next suspend or end under the governance config
(--config, required: default noeta.yaml in the working directory), releases
it, and leases the next. Run one on every host: the hosts share the tasks, and
a task whose host dies is taken over by another once its lease expires
(--lease-ttl).

If NATS cannot be reached when serve starts (or its streams are between
leaders), serve retries with backoff until it can start; SIGTERM stops it
meanwhile. A refused login or settings that differ from the deployment's
fail at once.

SIGTERM or SIGINT stops it gracefully: it takes no new task, lets the
segments in hand finish and release their tasks, and exits 0. If --grace
runs out first (or a second signal comes), the segments still running stop
at their next write without releasing anything; their leases expire into
another host's hands, which resumes them where their logs end.

--child (default true) runs the ChildLifecycle observer in this process: it
hands a finished subtask's result to its parent and wakes the parent. Turn it
off (--child=false) where observer-workers run it (observer-worker
--observers child); running both is safe, only redundant.

--hooks and --audit (default true) run the config's hooks: section and its
observers.audit section in this process, over the records it commits. Turn
them off where observer-workers run them (--observers hooks, audit): every
serve process runs its own, so on a cluster of several hosts an audit file
should be an observer-worker's, or each host's own file.

--http serves GET /healthz (200 while connected to NATS and the pool runs,
503 otherwise) and GET /metrics (Prometheus: the metrics observer over the
records this process commits, and the process's own counters:
noeta_engine_*, Go and process metrics), both without a login; on every
other path (the fanout's /tasks/{id}/events too) it serves the HTTP API and
the inbox page (docs/inbox.md) to the people of the config's http: section
only. It listens on loopback unless --http-tls-cert and --http-tls-key make
it HTTPS or --behind-tls-proxy says a TLS-terminating proxy is in front;
--max-streams and --max-streams-per-client bound the live streams.

--gateway AGENT mounts the MCP gateway (engine gateway, docs/gateway.md) on
the --http listener: MCP (streamable HTTP) on /mcp and Claude Code's hook
events on /hooks/claude-code, to the bearer tokens of the config's http:
section (or the trusted proxy); a session is a task of AGENT, or of the
token's own agent: (http.tokens). A pool of --workers more workers runs the
gateway's sessions beside the shared queue's. It needs --http.

Logs are structured (log/slog) on stderr, --log-format text or json.

Settings come from flags, then the environment, then the --serve-config file
(YAML or JSON), the first that has one winning; --print-config prints the
effective settings, each with its source. The file's keys are the flags'
names, with _ for -:
` + settings.WrapWords(strings.Join(engineSettings.Keys(), ", "), 76, "  ") + `
The environment variables are NOETA_ and the key in capitals:
` + envList(true),
		Example: `  engine serve --config noeta.yaml
  engine serve --nats nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222 \
      --user engine --config /etc/noeta/noeta.yaml --replicas 3 --workers 8
  NOETA_PASSWORD=… engine serve --serve-config /etc/noeta/serve.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.printConfig {
				return printConfig(cmd.Context(), g, o, cmd.Flags())
			}
			return serve(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.serveConfig, "serve-config", "", "settings file, YAML or JSON (or "+envServeConfig+")")
	f.StringVar(&o.queue, "queue", "", "ready queue to work (default: the default queue)")
	f.DurationVar(&o.grace, "grace", defaultGrace, "on SIGTERM, how long the segments in hand may take to finish")
	f.StringVar(&o.http, "http", defaultServeHTTP, "listen address of /healthz and /metrics (empty: none)")
	f.StringVar(&o.config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.StringVar(&o.workspace, "workspace", ".", "directory the file and shell tools work in")
	f.BoolVar(&o.child, "child", true, "run the ChildLifecycle observer in this process")
	f.BoolVar(&o.hooks, "hooks", true, "run the config's hooks: in this process")
	f.BoolVar(&o.audit, "audit", true, "run the config's observers.audit in this process")
	f.StringVar(&o.gateway, "gateway", "", "mount the MCP gateway on --http (/mcp, /hooks/claude-code), its sessions tasks of this agent")
	f.StringVar(&o.gwNames, "gateway-tool-names", gateway.NamesPrefixed, "how the gateway's clients know an MCP server's tool: prefixed or upstream (as engine gateway --tool-names)")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.BoolVar(&o.printConfig, "print-config", false, "print the effective settings and where each came from, and exit")
	o.web.Bind(f, "--http")
	return cmd
}

func serve(ctx context.Context, g *globals, o serveOpts) error {
	if err := g.check(); err != nil {
		return err
	}
	if o.grace < 0 {
		return usageErr("--grace is %v; it must not be negative", o.grace)
	}
	if o.queue != "" {
		if err := eventlog.ValidateQueue("--queue", o.queue); err != nil {
			return usageErr("%v", err)
		}
	}
	logger, err := settings.Logger(g.stderr, o.logFormat, o.logLevel)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg, err := governance(ctx, o.config)
	if err != nil {
		return err
	}
	workspace, err := absDir("--workspace", o.workspace)
	if err != nil {
		return err
	}
	if err := o.web.Check("--http", o.http); err != nil {
		return usageErr("%v", err)
	}
	if o.gateway != "" {
		// Said now, not found out by a client: a gateway nothing serves
		// would be a configured part silently ignored.
		if o.http == "" {
			return usageErr("--gateway mounts the MCP gateway on --http, which is empty")
		}
		if err := gateway.CheckToolNames(o.gwNames); err != nil {
			return usageErr("--gateway-tool-names: %v", err)
		}
		if !slices.Contains(cfg.Governance.Agents(), o.gateway) {
			return usageErr("--gateway: no agent %q in %s (agents: %s)", o.gateway, cfg.Path, strings.Join(cfg.Governance.Agents(), ", "))
		}
	}
	var ln net.Listener
	if o.http != "" {
		if ln, err = net.Listen("tcp", o.http); err != nil {
			return failErr(fmt.Errorf("--http: %w", err))
		}
		defer ln.Close()
	}

	// A second signal while draining ends the grace period at once.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// One gate for the API and the fanout's streams: one login reads both,
	// and both count toward one set of stream caps.
	gate := webui.NewGate(cfg.HTTP, o.web.Limits())
	actor := engine.DefaultActor()
	h, err := g.open(ctx, "serve", hostconfig.Options{
		Config: cfg, Workers: g.workers, Queue: o.queue, Workspace: workspace, Actor: actor, Streams: gate.Streams,
		Name: "serve " + actor, ServesHTTP: ln != nil, RetryStart: true, Stdout: g.stdout, Logger: logger,
		Skip: hostconfig.Skip{ChildLifecycle: !o.child, Hooks: !o.hooks, Audit: !o.audit},
	})
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("stopped while starting", "err", err)
			return nil
		}
		return err
	}
	defer h.Close()

	stop := hostconfig.ServeOptions{Grace: o.grace, Signals: sigs}
	httpAddr := ""
	if ln != nil {
		ui, err := webui.New(webui.Config{Host: h, HTTP: cfg.HTTP, Listen: []string{ln.Addr().String(), o.http}, Limits: o.web.Limits(), Gate: gate, BehindTLSProxy: o.web.BehindProxy, Pins: gateway.InboxPins(h.Conn(), g.conn.prefix), Logger: logger})
		if err != nil {
			return failErr(err)
		}
		defer ui.Close()
		var handler http.Handler = h.Mux(ui)
		if o.gateway != "" {
			gw, err := gateway.MountOn(ctx, h, gateway.Mount{Agent: o.gateway, Workers: g.workers, Prefix: g.conn.prefix, Replicas: g.conn.replicas, ToolNames: o.gwNames, Logger: logger})
			if err != nil {
				return failErr(err)
			}
			defer gw.Close()
			stop.Sessions = gw
			mux := http.NewServeMux()
			gwh := gw.Handler(gateway.GateAuth(gate))
			mux.Handle(gateway.MountPath, gwh)
			mux.Handle(gateway.HookPath, gwh)
			mux.Handle("/", handler)
			handler = mux
		}
		srv := webui.NewHTTPServer(handler, o.web.Limits())
		stop.Server, stop.Streams = srv, ui
		// Served until ServeUntil shuts srv down.
		go func() { _ = webui.ServeOn(srv, ln, o.web.Cert) }()
		httpAddr = ln.Addr().String()
		logger.Info("http listening", "addr", httpAddr)
	}
	if stop.Sessions == nil {
		// No gateway here sweeps: a dead gateway's tasks are swept by every
		// serve host, not only by the next gateway to start.
		sw := gateway.StartSweeper(h.Host, h.Conn(), g.conn.prefix, gateway.Options{Logger: logger})
		defer sw.Close()
		stop.Sessions = sw
	}
	ttl := g.conn.leaseTTL
	if ttl == 0 {
		ttl = jetstream.DefaultLeaseTTL
	}
	logger.Info("serving", "actor", actor, "nats", h.Describe(), "prefix", g.conn.prefix, "replicas", g.conn.replicas,
		"queue", queueName(o.queue), "workers", g.workers, "lease_ttl", ttl, "grace", o.grace, "child", o.child,
		"hooks", o.hooks, "audit", o.audit, "gateway", o.gateway,
		"config", cfg.Path, "workspace", workspace, "http", httpAddr)

	h.ServeUntil(ctx, stop)
	return nil
}

func queueName(q string) string {
	if q == "" {
		return eventlog.DefaultQueue
	}
	return q
}

// printConfig prints serve's settings with the values they take in
// effect (lease_ttl 30s, not 0s; the data directory's and config's paths),
// then what the governance config names, or why serve would refuse it.
func printConfig(ctx context.Context, g *globals, o serveOpts, flags *pflag.FlagSet) error {
	ttl := g.conn.leaseTTL
	if ttl == 0 {
		ttl = jetstream.DefaultLeaseTTL
	}
	eff := map[string]string{"lease_ttl": ttl.String(), "queue": queueName(o.queue)}
	if g.conn.embedded() {
		if data, err := g.dataDir(); err == nil {
			eff["data"] = data
		}
	} else {
		eff["data"] = "(not used with --nats)"
	}
	cfgPath := o.config
	if cfgPath == "" {
		cfgPath = defaultConfig
	}
	if abs, err := filepath.Abs(cfgPath); err == nil {
		eff["config"] = abs
	}
	if ws, err := filepath.Abs(o.workspace); err == nil {
		eff["workspace"] = ws
	}
	engineSettings.Print(g.stdout, flags, g.sources, eff)
	cfg, err := governance(ctx, o.config)
	if err != nil {
		// The settings stand on their own; what serve would say of the
		// config is said, not hidden.
		fmt.Fprintf(g.stderr, "engine: note: serve would not start: %v\n", err)
		return nil
	}
	fmt.Fprintf(g.stdout, "\n# from %s\n", cfg.Path)
	mcpFile := cfg.MCPServersFile
	if mcpFile == "" {
		mcpFile = "(none)"
	}
	fmt.Fprintf(g.stdout, "mcp_servers_file %s\nmcp_servers      %d\nagents           %d\n", mcpFile, len(cfg.MCPServers), len(cfg.Governance.Agents()))
	return nil
}
