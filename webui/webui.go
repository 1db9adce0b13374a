// Package webui is the HTTP API and the inbox page: the pending approvals
// across the fleet, the tasks and their live timelines, and approve/deny with
// a reason, as the authenticated principal. It is mounted by engine serve
// --http and served by engine ui; its page is embedded in the binary (plain
// HTML, CSS and JavaScript, no build step, nothing fetched from elsewhere).
//
// Every request is authenticated (see [Config]): a bearer token whose hash is
// in noeta.yaml's http.tokens, the header of a trusted reverse proxy from a
// listed peer, or a session cookie issued by POST /api/v1/login in exchange
// for a token. The principal's name is the approver recorded for its answers,
// and how it was established the answer's auth. Nothing the client sends
// names the approver.
package webui

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

//go:embed assets
var assets embed.FS

// Host is what the API reads and answers through (a *host.Host).
type Host interface {
	Tasks(ctx context.Context) ([]eventlog.TaskSummary, error)
	Events(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error)
	Fold(ctx context.Context, task string) (*engine.State, string, error)
	Approve(ctx context.Context, task, handle string, a host.Answer) error
	// Tap is told of each record this process commits: the live streams
	// read the log when it fires, and on a short poll for the records
	// other processes commit.
	Tap(fn eventlog.Handler) (cancel func())
	// Waiting and WatchWaiting read the fleet's index of open requests.
	Waiting(ctx context.Context) ([]eventlog.Waiting, error)
	WatchWaiting(ctx context.Context, fn func(eventlog.WaitingChange)) (stop func(), err error)
}

// Config configures [New].
type Config struct {
	Host Host
	// HTTP is noeta.yaml's http: section: the tokens, the trusted proxy,
	// the host names.
	HTTP config.HTTP
	// Listen are the addresses the server listens on (host:port), which
	// the Host header may name.
	Listen []string
	// SessionTTL is how long a login lasts (DefaultSessionTTL).
	SessionTTL time.Duration
	// KeepAlive is the interval of the SSE comment lines (15s).
	KeepAlive time.Duration
	// Poll is how often a live timeline reads the log for records other
	// processes commit (1s).
	Poll time.Duration
	// Limits bound the live streams (the approvals stream, a task's live
	// timeline): their caps, unless Gate is set, whose caps are used.
	Limits Limits
	// Gate, if set, is the authentication and stream caps the server
	// shares with endpoints served outside it (a host's fanout, guarded by
	// Gate.Streams), so a session logged in here reads those too, and
	// their streams count toward the same caps. nil: one of HTTP and
	// Limits.
	Gate *Gate
	// BehindTLSProxy says a TLS-terminating proxy is in front: the browser
	// speaks HTTPS, so the session cookie is Secure though the request
	// reaching the server is plain.
	BehindTLSProxy bool
	// Pins, if set, lists the MCP tool definitions that changed upstream
	// and are refused until an operator accepts them (the gateway's pins):
	// the inbox shows them beside the requests.
	Pins   func(ctx context.Context) ([]ToolPin, error)
	Logger *slog.Logger
}

// ToolPin is a tool definition to review: GET /api/v1/pins.
type ToolPin struct {
	Server  string    `json:"server"`
	Tool    string    `json:"tool"`
	Pinned  string    `json:"pinned_sha256"`
	Pending string    `json:"pending_sha256"`
	SeenAt  time.Time `json:"seen_at"`
	Accept  string    `json:"accept"`
}

// Server serves the API and the page. Close ends its live streams.
type Server struct {
	cfg  Config
	auth *authn
	mux  *http.ServeMux
	base context.Context
	stop context.CancelFunc
	// mu guards closed against a stream starting while Close waits.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	files  fs.FS
	slots  *streamSlots
}

// New returns a Server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Host == nil {
		return nil, errors.New("webui: Config.Host is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	if cfg.Gate == nil {
		cfg.Gate = NewGate(cfg.HTTP, cfg.Limits)
	}
	cfg.Gate.auth.ttl = cfg.SessionTTL
	base, stop := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, base: base, stop: stop, files: files, slots: cfg.Gate.slots, auth: cfg.Gate.auth,
	}
	s.routes()
	return s, nil
}

// SetListen sets the addresses the Host header may name, once the listener
// is bound (an address of port 0 is known only then). Call it before
// serving.
func (s *Server) SetListen(addrs ...string) { s.cfg.Listen = addrs }

// LoginToken returns a fresh token that logs in as p once (POST
// /api/v1/login): engine ui prints it in the login URL, as the local user.
func (s *Server) LoginToken(p Principal) string { return s.auth.oneTime(p) }

// Close ends the live streams (an http.Server's Shutdown waits for them
// otherwise) and waits for them to return.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

// ServeHTTP checks the Host header, sets the security headers and serves.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	if !hostAllowed(r.Host, s.cfg.Listen, s.cfg.HTTP.Hosts) {
		problem(w, http.StatusMisdirectedRequest, "wrong-host", "Host not served here",
			"the Host header "+quote(r.Host)+" is not this server's address; add the name to http.hosts in noeta.yaml if it is one")
		return
	}
	s.mux.ServeHTTP(w, r)
}
