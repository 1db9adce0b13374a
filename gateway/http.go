package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of the HTTP transport.
const (
	// MaxSessions bounds the MCP sessions open at once over HTTP.
	MaxSessions = 256
	// SessionIdle closes an HTTP session that sent nothing for that long;
	// its task finishes.
	SessionIdle = 30 * time.Minute
)

// Authenticate says who an HTTP request speaks for: the approver name of a
// bearer token or of a trusted proxy's header (webui's gate). An error is
// a request that proved nobody; it is refused with 401.
type Authenticate func(r *http.Request) (name string, err error)

// errNoSession is the answer to a request for a session its principal
// does not own.
var errNoSession = errors.New("no such session")

// Handler serves MCP over streamable HTTP: every request must authenticate
// (401 otherwise); each new session is a task of the principal's agent
// (Options.AgentOf, else agent) submitted by the request's principal, and
// only that principal may use it afterwards.
// [Gateway.Close] ends the sessions.
func (g *Gateway) Handler(agent string, auth Authenticate) http.Handler {
	mcpH := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		name, _ := principalOf(r)
		srv, err := g.httpServer(r, Principal{Agent: g.agentFor(name, agent), SubmittedBy: name})
		if err != nil {
			g.log.Warn("gateway: a session could not start", "principal", name, "err", err)
			return nil
		}
		return srv
	}, &sdk.StreamableHTTPOptions{SessionTimeout: SessionIdle, MaxRequestBodyBytes: MaxFrameBytes, Logger: g.log})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := auth(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="noeta"`)
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			g.mu.Lock()
			o, known := g.owners[id]
			g.mu.Unlock()
			if !known || o.name != name {
				http.Error(w, errNoSession.Error(), http.StatusNotFound)
				return
			}
		} else {
			g.mu.Lock()
			full := len(g.owners) >= MaxSessions
			g.mu.Unlock()
			if full {
				http.Error(w, "too many MCP sessions are open", http.StatusServiceUnavailable)
				return
			}
		}
		mcpH.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), name)))
	})
}

// httpServer is the server of one new HTTP session: its id is recorded as
// the principal's, and the session, once initialized, is watched so its
// end settles its task.
func (g *Gateway) httpServer(r *http.Request, who Principal) (*sdk.Server, error) {
	var s *session
	srv, s, err := g.server(r.Context(), who, &sdk.ServerOptions{
		GetSessionID: func() string {
			id := rand.Text()
			g.mu.Lock()
			g.owners[id] = owner{name: who.SubmittedBy, since: time.Now()}
			g.mu.Unlock()
			return id
		},
		InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
			ss := req.Session
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.closed {
				_ = ss.Close()
				return
			}
			g.live[ss] = struct{}{}
			if o, ok := g.owners[ss.ID()]; ok {
				o.inited = true
				g.owners[ss.ID()] = o
			}
			g.wg.Go(func() {
				_ = ss.Wait()
				g.mu.Lock()
				delete(g.live, ss)
				delete(g.owners, ss.ID())
				g.mu.Unlock()
				s.settle()
			})
		},
	})
	return srv, err
}

type principalKey struct{}

func withPrincipal(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, principalKey{}, name)
}

func principalOf(r *http.Request) (string, bool) {
	name, ok := r.Context().Value(principalKey{}).(string)
	return name, ok && name != ""
}
