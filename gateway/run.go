package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/webui"
)

// Run is what [Run] serves: engine gateway's flags, composed.
type Run struct {
	// Open opens the host for a verb on the deployment of the connection
	// flags.
	Open func(ctx context.Context, verb string, o hostconfig.Options) (*hostconfig.Host, error)
	// Config, Workers, Workspace, Actor: the host's (hostconfig.Options).
	Config    *config.File
	Workers   int
	Workspace string
	Actor     string
	// Prefix and Replicas place the pins' bucket (OpenPins).
	Prefix   string
	Replicas int
	// Who is the session's agent and submitter; over HTTP, the agent of
	// every session, each submitted by its request's principal.
	Who Principal
	// Listen, if set, serves streamable HTTP on it instead of stdio: Gate
	// says who each request is (the config's http: tokens and trusted
	// proxy, as for the inbox), Cert makes it HTTPS.
	Listen string
	Gate   *webui.Gate
	Cert   *tls.Certificate
	// Ready, if set, is called with the address once it listens.
	Ready func(addr string)
	// In and Out are the client's pipe; Log gets the gateway's own lines
	// (never Out, which carries MCP only).
	In  io.Reader
	Out io.Writer
	Log io.Writer
	// Logger reports what the log cannot hold.
	Logger *slog.Logger
	// ToolNames is Options.ToolNames.
	ToolNames string
}

// Serve opens a host that runs the gateway's tasks and serves one session
// over In and Out, or, with Listen, sessions over HTTP until ctx ends;
// the sessions' tasks are settled before it returns.
func Serve(ctx context.Context, s Run) error {
	if err := CheckToolNames(s.ToolNames); err != nil {
		return err
	}
	o := Options{Agent: s.Who.Agent, Logger: s.Logger, ToolNames: s.ToolNames}
	if s.Config != nil {
		o.Aliases, o.AgentOf, o.Approvals = s.Config.Gateway.Aliases, s.Config.HTTP.AgentOf(), s.Config.Approvals
	}
	gw := New(o)
	h, err := s.Open(ctx, "gateway", hostconfig.Options{Config: s.Config, Workers: s.Workers, Workspace: s.Workspace, Actor: s.Actor,
		Policies: gw.Policies, Queue: gw.Queue(), Guards: []guards.Guard{gw.Guard()}, Tools: gw.ClaudeCodeTools(), Verb: "gateway", Stdout: s.Log, Logger: s.Logger})
	if err != nil {
		return err
	}
	defer h.Close()
	pins, err := OpenPins(ctx, h.Conn(), s.Prefix, s.Replicas)
	if err != nil {
		return err
	}
	reg, err := OpenRegistry(ctx, h.Conn(), s.Prefix, s.Replicas)
	if err != nil {
		return err
	}
	gw.Attach(h.Host, pins)
	defer gw.Close() // before the host closes: the sessions' tasks settle
	if err := gw.Enlist(ctx, reg); err != nil {
		return err
	}
	if _, err := gw.Tools(s.Who.Agent); err != nil {
		return err
	}
	if s.Listen != "" {
		for _, a := range gw.opts.AgentOf {
			if _, err := gw.Tools(a); err != nil {
				return err
			}
		}
	}
	if s.Listen == "" {
		return gw.ServeStdio(ctx, s.In, s.Out, s.Who)
	}
	return gw.serveHTTP(ctx, s)
}

// serveHTTP serves the gateway's Handler on s.Listen until ctx ends.
func (g *Gateway) serveHTTP(ctx context.Context, s Run) error {
	if s.Gate == nil {
		return errors.New("gateway: HTTP needs a gate (webui.NewGate)")
	}
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	// A request must arrive within ReadTimeout; an admitted one's response
	// is not timed (a call waiting for an approval holds it open), and
	// its body is bounded by MaxFrameBytes (liftTimeouts).
	auth := GateAuth(s.Gate)
	mux := http.NewServeMux()
	mux.Handle(HookPath, liftTimeouts(auth, g.HookHandler(s.Who.Agent, auth)))
	mux.Handle("/", liftTimeouts(auth, g.Handler(s.Who.Agent, auth)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: requestReadTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	if s.Cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.Cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	scheme := "http"
	if s.Cert != nil {
		scheme = "https"
	}
	if s.Log != nil {
		fmt.Fprintf(s.Log, "gateway: serving MCP for agent %s on %s://%s/mcp, Claude Code's hooks on %s://%s%s\n", s.Who.Agent, scheme, ln.Addr(), scheme, ln.Addr(), HookPath)
	}
	if s.Ready != nil {
		s.Ready(ln.Addr().String())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	g.Close() // the sessions end first: their streams close
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	<-done
	return nil
}

// requestReadTimeout bounds the arrival of a request, headers and body, on
// engine gateway --listen, as webui's DefaultReadTimeout does for serve.
const requestReadTimeout = 30 * time.Second

// GateAuth authenticates with webui's gate: a bearer token of http.tokens
// or the trusted proxy's header.
func GateAuth(gate *webui.Gate) Authenticate {
	return func(r *http.Request) (string, error) {
		p, err := gate.Authenticate(r)
		return p.Name, err
	}
}

// WithPins opens the deployment as a client (open, as Run.Open) and runs fn
// on its pins: engine gateway pin.
func WithPins(ctx context.Context, open func(context.Context, string, hostconfig.Options) (*hostconfig.Host, error), prefix string, replicas int, fn func(*Pins) error) error {
	h, err := open(ctx, "gateway-pin", hostconfig.Options{})
	if err != nil {
		return err
	}
	defer h.Close()
	pins, err := OpenPins(ctx, h.Conn(), prefix, replicas)
	if err != nil {
		return err
	}
	return fn(pins)
}
