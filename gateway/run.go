package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/hostconfig"
)

// Stdio is what [RunStdio] runs: engine gateway's flags, composed.
type Stdio struct {
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
	// Who is the session's agent and submitter.
	Who Principal
	// In and Out are the client's pipe; Log gets the gateway's own lines
	// (never Out, which carries MCP only).
	In  io.Reader
	Out io.Writer
	Log io.Writer
	// Logger reports what the log cannot hold.
	Logger *slog.Logger
}

// RunStdio opens a host that runs the gateway's tasks, serves one session
// over In and Out, and settles its task before it returns.
func RunStdio(ctx context.Context, s Stdio) error {
	gw := New(Options{Agent: s.Who.Agent, Logger: s.Logger})
	defer gw.Close()
	h, err := s.Open(ctx, "gateway", hostconfig.Options{Config: s.Config, Workers: s.Workers, Workspace: s.Workspace, Actor: s.Actor,
		Policies: gw.Policies, Queue: gw.Queue(), Guards: []guards.Guard{gw.Guard()}, Verb: "gateway", Stdout: s.Log, Logger: s.Logger})
	if err != nil {
		return err
	}
	defer h.Close()
	pins, err := OpenPins(ctx, h.Conn(), s.Prefix, s.Replicas)
	if err != nil {
		return err
	}
	gw.Attach(h.Host, pins)
	if _, err := gw.Tools(s.Who.Agent); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return gw.ServeStdio(ctx, s.In, s.Out, s.Who)
}
