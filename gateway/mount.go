package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
)

// MountPath is where a gateway mounted on engine serve --http serves MCP.
const MountPath = "/mcp"

// Mount says what a gateway mounted in a host that runs tasks serves.
type Mount struct {
	// Agent is the agent of the sessions of a principal that http.tokens
	// gives none.
	Agent string
	// Workers is the size of the pool that works the gateway's queue.
	Workers int
	// Prefix and Replicas place the pins' and the gateways' buckets.
	Prefix   string
	Replicas int
	// ToolNames is Options.ToolNames.
	ToolNames string
	// Logger reports what the log cannot hold.
	Logger *slog.Logger
}

// Mounted is a gateway running in a host of engine serve: a pool of its
// own works the gateway's queue, beside the host's pool, deciding the
// sessions' turns with the gateway's policies and judging their calls
// with its pin guard as well as the host's guards. The tools, the
// observers, the connection and the rate counts are the host's.
type Mounted struct {
	g     *Gateway
	agent string
	once  sync.Once
}

// MountOn starts a gateway in h, which must run tasks (Options.Workers >
// 0) and have been opened with the governance config the gateway serves.
// Close it before the host drains: its sessions end while the pools still
// run their tasks' last turns.
func MountOn(ctx context.Context, h *hostconfig.Host, m Mount) (_ *Mounted, err error) {
	if err := CheckToolNames(m.ToolNames); err != nil {
		return nil, err
	}
	cfg := h.Config()
	if cfg == nil || cfg.Governance == nil {
		return nil, errors.New("gateway: the host has no governance config to serve")
	}
	if m.Agent == "" {
		return nil, errors.New("gateway: no agent for the sessions (Mount.Agent)")
	}
	if m.Workers < 1 {
		m.Workers = 1
	}
	g := New(Options{Agent: m.Agent, Logger: m.Logger, ToolNames: m.ToolNames,
		Aliases: cfg.Gateway.Aliases, AgentOf: cfg.HTTP.AgentOf(), Approvals: cfg.Approvals})
	// Claude Code's tools run in the gateway's sessions only: another
	// task that calls one is told no hook waits for it (runHooked).
	if err := h.Tools().Replace(config.ClaudeCodeToolPrefix, g.ClaudeCodeTools()); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if _, err := h.StartPool(ctx, host.PoolOptions{Workers: m.Workers, Queue: g.Queue(), Policies: g.Policies, Guards: []guards.Guard{g.Guard()}}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// The pool stops with the host's drain.
	pins, err := OpenPins(ctx, h.Conn(), m.Prefix, m.Replicas)
	if err != nil {
		return nil, err
	}
	reg, err := OpenRegistry(ctx, h.Conn(), m.Prefix, m.Replicas)
	if err != nil {
		return nil, err
	}
	g.Attach(h.Host, pins)
	// Closed if it cannot start: its tap and watchers must not outlive
	// the error.
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if err := g.Enlist(ctx, reg); err != nil {
		return nil, err
	}
	if _, err := g.Tools(m.Agent); err != nil {
		return nil, err
	}
	for _, a := range g.opts.AgentOf {
		if _, err := g.Tools(a); err != nil {
			return nil, err
		}
	}
	return &Mounted{g: g, agent: m.Agent}, nil
}

// Handler serves MCP at [MountPath] and Claude Code's hook events at
// [HookPath] to the principals auth admits; mount it on those two paths.
// The server's write timeout is lifted from an admitted request's
// connection, and its read timeout once the request's body has been read
// whole: a call waiting for an approval holds its response open for as
// long as the approval takes, while a body sent slowly is still cut off
// (its size is bounded by MaxFrameBytes).
func (m *Mounted) Handler(auth Authenticate) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MountPath, liftTimeouts(auth, m.g.Handler(m.agent, auth)))
	mux.Handle(HookPath, liftTimeouts(auth, m.g.HookHandler(m.agent, auth)))
	return mux
}

// liftTimeouts lifts the server's write timeout from the connection of a
// request auth admits, and its read timeout once the request's body has
// been read whole.
func liftTimeouts(auth Authenticate, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := auth(r); err == nil {
			rc := http.NewResponseController(w)
			_ = rc.SetWriteDeadline(time.Time{})
			if r.Body == nil || r.Body == http.NoBody {
				_ = rc.SetReadDeadline(time.Time{})
			} else {
				r.Body = &liftAtEOF{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// liftAtEOF lifts the connection's read deadline once the body has been
// read to its end: the read deadline also ends the request's context once
// it passes, which would cut a response still waiting on an approval.
type liftAtEOF struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Close ends the gateway's sessions (their tasks finish on the pool's
// next turns) and its part in the gateways' registry; once, however often
// it is called.
func (m *Mounted) Close() { m.once.Do(m.g.Close) }
