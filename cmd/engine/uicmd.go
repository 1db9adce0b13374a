package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/internal/settings"
	"github.com/noeta-go/noeta/webui"
)

type uiOpts struct {
	listen    string
	open      bool
	config    string
	workspace string
	hashToken bool
	name      string
	web       webui.ListenerFlags
}

// defaultUIListen is engine ui's listener: loopback only.
const defaultUIListen = "127.0.0.1:9470"

func newUICmd(g *globals) *cobra.Command {
	var o uiOpts
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the inbox page: pending approvals, tasks and their live timelines",
		Long: `ui serves the HTTP API and the inbox page (docs/inbox.md) on --listen: the
approvals waiting across the fleet, approve or deny with a reason, the tasks
and each one's live timeline.

On the embedded default it prints a login URL holding a fresh one-time
token: opened, it logs the browser in as the local user (cli:$USER), as
engine approve does. If an engine serve holds the data directory, ui uses
its server as a client; otherwise it starts the server and runs --workers
workers like serve, so approved tasks move on. With --nats it is a client of
the cluster, and people log in with the tokens of the config's http:
section (or through its trusted proxy).

It listens on loopback unless --http-tls-cert and --http-tls-key make it
HTTPS or --behind-tls-proxy says a TLS-terminating proxy is in front:
tokens and session cookies do not cross a network in clear.
--max-streams and --max-streams-per-client bound the live streams.

--hash-token prints a new random token and the http.tokens line that
accepts it (the file holds only its hash), and exits.`,
		Example: `  engine ui --config noeta.yaml
  engine ui --listen 127.0.0.1:0 --open=false
  engine ui --hash-token --name alice`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.hashToken {
				return printToken(g, o.name)
			}
			return runUI(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", defaultUIListen, "listen address of the page and the API")
	f.BoolVar(&o.open, "open", true, "open the login URL in a browser")
	f.StringVar(&o.config, "config", "", "governance config (default "+defaultConfig+" in the working directory)")
	f.StringVar(&o.workspace, "workspace", ".", "directory the file and shell tools work in")
	f.BoolVar(&o.hashToken, "hash-token", false, "print a new token and its http.tokens line, and exit")
	f.StringVar(&o.name, "name", "", "with --hash-token: who the token is (default $USER)")
	o.web.Bind(f, "--listen")
	return cmd
}

func newTokenCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print a new API token and the http.tokens line of noeta.yaml that accepts it",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return printToken(g, name) },
	}
	cmd.Flags().StringVar(&name, "name", "", "who the token is: the approver its answers are recorded under (default $USER)")
	return cmd
}

func printToken(g *globals, name string) error {
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		return usageErr("--name is required ($USER is not set)")
	}
	// The config refuses what it would refuse in the file.
	tok, sum := webui.NewToken()
	line := fmt.Sprintf(`    - {name: %q, sha256: "%s"}`, name, sum)
	if _, err := govfile.Parse("the printed line", []byte("http:\n  tokens:\n"+line+"\n")); err != nil {
		return usageErr("--name: %v", err)
	}
	fmt.Fprintf(g.stdout, "token: %s\n\nadd to noeta.yaml (the token itself is not kept anywhere):\nhttp:\n  tokens:\n%s\n", tok, line)
	return nil
}

func runUI(ctx context.Context, g *globals, o uiOpts) error {
	if err := g.check(); err != nil {
		return err
	}
	cfg, err := governance(ctx, o.config)
	if err != nil {
		return err
	}
	workspace, err := absDir("--workspace", o.workspace)
	if err != nil {
		return err
	}
	if err := o.web.Check("--listen", o.listen); err != nil {
		return usageErr("%v", err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return failErr(fmt.Errorf("--listen: %w", err))
	}
	defer ln.Close()
	logger, _ := settings.Logger(g.stderr, "text", "info")
	embedded := g.conn.embedded()
	gate := webui.NewGate(cfg.HTTP, o.web.Limits())
	opts := hostconfig.Options{
		Config: cfg, Workers: g.workers, Workspace: workspace, Actor: engine.DefaultActor(), Streams: gate.Streams,
		Name: "ui", Verb: "ui", Stdout: g.stdout, Logger: logger,
	}
	if !embedded {
		// A client of the cluster: its serve processes run the tasks.
		opts.Workers = 0
	}
	h, err := g.open(ctx, "ui", opts)
	var busy *jshost.BusyError
	if embedded && errors.As(err, &busy) {
		// A serve holds the directory: answer through its server.
		opts.Workers = 0
		h, err = g.open(ctx, "ui", opts)
	}
	if err != nil {
		return err
	}
	defer h.Close()

	srv, err := webui.New(webui.Config{Host: h, HTTP: cfg.HTTP, Listen: []string{ln.Addr().String(), o.listen}, Limits: o.web.Limits(), Gate: gate, BehindTLSProxy: o.web.BehindProxy, Pins: gateway.InboxPins(h.Conn(), g.conn.prefix), Logger: logger})
	if err != nil {
		return failErr(err)
	}
	defer srv.Close()
	inbox := webui.StartInbox(srv, ln, o.web.Limits(), o.web.Cert)
	var local *webui.Principal
	if h.Embedded() {
		local = &webui.Principal{Name: approvals.LocalApprover(), Auth: noeta.AuthLocal}
	}
	if url := inbox.WriteWelcome(g.stdout, local, cfg.HTTP); url != "" && o.open {
		webui.OpenBrowser(url, logger)
	}
	if hold, ok := h.Attached(); ok {
		logger.Info("using the server of the process that holds the data directory", "holder", hold.String())
	}

	if err := inbox.Wait(ctx); err != nil {
		return failErr(fmt.Errorf("serving %s: %w", inbox.URL(), err))
	}
	if h.Runs() {
		grace, cancel := context.WithTimeout(context.Background(), defaultGrace)
		defer cancel()
		h.Drain(grace)
	}
	return nil
}
