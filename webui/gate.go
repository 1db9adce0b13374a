package webui

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
)

// Defaults of [Limits].
const (
	// DefaultMaxStreams bounds the live streams (server-sent events) one
	// server holds at once, of everyone: each holds a goroutine, buffers and
	// a tap or subscription (300 unbounded streams took an engine from 70 to
	// 164 MB).
	DefaultMaxStreams = 64
	// DefaultMaxStreamsPerPrincipal bounds the live streams of one
	// principal (a token, a proxy's user, the local user): a browser opens
	// one for the inbox and one per timeline it shows.
	DefaultMaxStreamsPerPrincipal = 8
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, headers and body:
	// a body sent a byte at a time is cut off there, not held open.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds writing a response that is not a stream
	// (a stream clears it: it lives as long as its client reads).
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout bounds a kept-alive connection between requests.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultStreamRecheck is how often a stream a Gate admitted checks
	// its credentials again: it ends once its session is logged out or
	// expired.
	DefaultStreamRecheck = 15 * time.Second
	// maxHeaderBytes bounds a request's headers.
	maxHeaderBytes = 64 << 10
)

// Limits bound what the HTTP surface holds for its clients: the time a
// request may take to arrive and the live streams open at once. The zero
// value of each field is its default; a negative one is refused by
// [Limits.Validate].
type Limits struct {
	MaxStreams             int
	MaxStreamsPerPrincipal int
	ReadHeaderTimeout      time.Duration
	ReadTimeout            time.Duration
	WriteTimeout           time.Duration
	IdleTimeout            time.Duration
	// StreamRecheck is how often a stream [Gate.Streams] admitted checks
	// its credentials again (DefaultStreamRecheck).
	StreamRecheck time.Duration
}

// Validate names the first field that is negative.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxStreams", int64(l.MaxStreams)}, {"MaxStreamsPerPrincipal", int64(l.MaxStreamsPerPrincipal)},
		{"ReadHeaderTimeout", int64(l.ReadHeaderTimeout)}, {"ReadTimeout", int64(l.ReadTimeout)},
		{"WriteTimeout", int64(l.WriteTimeout)}, {"IdleTimeout", int64(l.IdleTimeout)},
		{"StreamRecheck", int64(l.StreamRecheck)},
	} {
		if f.v < 0 {
			return fmt.Errorf("webui: Limits.%s is negative", f.name)
		}
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxStreamsPerPrincipal, DefaultMaxStreamsPerPrincipal)
	defD(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	defD(&l.ReadTimeout, DefaultReadTimeout)
	defD(&l.WriteTimeout, DefaultWriteTimeout)
	defD(&l.IdleTimeout, DefaultIdleTimeout)
	defD(&l.StreamRecheck, DefaultStreamRecheck)
	return l
}

// NewHTTPServer returns an http.Server of h with l's timeouts: a client
// that sends its headers or its body slowly, or not at all, is cut off
// instead of holding a connection and a goroutine for ever. Streams clear
// their own connection's deadlines once authenticated and admitted.
func NewHTTPServer(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// ErrPlainBeyondLoopback is the error of [CheckListen].
var ErrPlainBeyondLoopback = fmt.Errorf("listening beyond loopback over plain HTTP")

// CheckListen refuses addr, the value of flag, when it would serve plain
// HTTP beyond the loopback interface: tokens, session cookies and every
// record would cross the network in clear. tls says the server itself
// speaks TLS; behindProxy that the operator declared a TLS-terminating
// proxy in front (which then is what reaches the listener). An empty host,
// 0.0.0.0, [::] and any name but localhost listen beyond loopback.
func CheckListen(flag, addr string, tls, behindProxy bool, tlsFlags, proxyFlag string) error {
	if tls || behindProxy || addr == "" {
		return nil
	}
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if strings.EqualFold(h, "localhost") {
		return nil
	}
	if ip, err := netip.ParseAddr(h); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	where := "every interface"
	if h != "" {
		where = h
	}
	return fmt.Errorf("%s %q: %w (%s): give %s to serve HTTPS, or %s if a TLS-terminating proxy is in front; or listen on 127.0.0.1",
		flag, addr, ErrPlainBeyondLoopback, where, tlsFlags, proxyFlag)
}

// streamSlots counts the live streams of a server, of everyone and per
// principal.
type streamSlots struct {
	total, per int

	mu  sync.Mutex
	n   int
	byP map[string]int
}

func newStreamSlots(l Limits) *streamSlots {
	l = l.withDefaults()
	return &streamSlots{total: l.MaxStreams, per: l.MaxStreamsPerPrincipal, byP: map[string]int{}}
}

// admit takes a slot for p's stream, or refuses it with the problem to
// answer: 429 when p holds its share, 503 when the server holds its most.
// release gives the slot back; call it once.
func (s *streamSlots) admit(w http.ResponseWriter, p Principal) (release func(), ok bool) {
	key := p.Auth + ":" + p.Name
	s.mu.Lock()
	switch {
	case s.byP[key] >= s.per:
		s.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusTooManyRequests, "too-many-streams", "Too many live streams",
			fmt.Sprintf("%s holds %d live streams, the most one principal may (max streams per client: %d); close one first", p.Name, s.per, s.per))
		return nil, false
	case s.n >= s.total:
		s.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, "server-busy", "Too many live streams",
			fmt.Sprintf("the server holds %d live streams, the most it takes (max streams: %d); try again later", s.total, s.total))
		return nil, false
	}
	s.n++
	s.byP[key]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.n--
			if s.byP[key]--; s.byP[key] <= 0 {
				delete(s.byP, key)
			}
			s.mu.Unlock()
		})
	}, true
}

// Gate authenticates requests the way the API does and admits live
// streams within [Limits]: what guards an endpoint served beside the API
// (serve's /tasks/{id}/events), or without it (an observer worker's).
type Gate struct {
	auth    *authn
	slots   *streamSlots
	recheck time.Duration
}

// NewGate returns the gate of the http: section's tokens and trusted
// proxy. With neither, it admits nobody: an endpoint it guards is closed
// until the config says who may use it.
func NewGate(h config.HTTP, l Limits) *Gate {
	return &Gate{
		auth: &authn{
			tokens: h.Tokens, proxy: h.TrustedProxy, ttl: DefaultSessionTTL, now: time.Now,
			sessions: map[[32]byte]session{}, once: map[[32]byte]Principal{},
		},
		slots:   newStreamSlots(l),
		recheck: l.withDefaults().StreamRecheck,
	}
}

// Streams guards h, whose every request is a live stream (a task's
// server-sent events): the request must authenticate as an API request
// does, and is refused with 429 or 503 past the stream caps. A GET or HEAD
// only: nothing else is a stream.
//
// An admitted stream checks its credentials again every StreamRecheck and
// ends once they fail (a session logged out or expired): it does not
// outlive the right to read it.
func (g *Gate) Streams(h http.Handler) http.Handler {
	a, slots := g.auth, g.slots
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _, err := a.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="noeta"`)
			problem(w, http.StatusUnauthorized, "unauthenticated", "Not logged in", err.Error())
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			problem(w, http.StatusMethodNotAllowed, "method", "Method not allowed", r.Method+" "+r.URL.Path+": only GET")
			return
		}
		release, ok := slots.admit(w, p)
		if !ok {
			return
		}
		defer release()
		clearDeadlines(w)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			// Ends with the request: the handler's return cancels ctx.
			t := time.NewTicker(g.recheck)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if _, _, err := a.authenticate(r); err != nil {
						cancel()
						return
					}
				}
			}
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// clearDeadlines lifts the server's read and write timeouts from an
// admitted stream's connection: they bound a request's arrival and a
// plain response, and would otherwise cut a stream off mid-way (the read
// deadline ends the request's context once it passes).
func clearDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// Authenticate says who r speaks for, as the API would, for an endpoint
// that is not a stream (the MCP gateway's): a bearer token of http.tokens
// or the trusted proxy's header. A session cookie is refused there: a page
// a browser is led to could post with it.
func (g *Gate) Authenticate(r *http.Request) (Principal, error) {
	p, bearer, err := g.auth.authenticate(r)
	if err != nil {
		return Principal{}, err
	}
	if !bearer && p.Auth != noeta.AuthProxy {
		return Principal{}, &authError{"a bearer token or the trusted proxy is required here; a session cookie is not taken"}
	}
	return p, nil
}
