package webui

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/config"
)

// Principal is who a request speaks for: the approver recorded for its
// answers, and how that was established (noeta.AuthToken, noeta.AuthProxy,
// noeta.AuthLocal).
type Principal struct {
	Name string `json:"name"`
	Auth string `json:"auth"`
}

// SessionCookie is the name of the session cookie POST /api/v1/login sets.
const SessionCookie = "noeta_session"

// Bounds of the session store.
const (
	DefaultSessionTTL = 12 * time.Hour
	maxSessions       = 10_000
	maxLoginTokens    = 64
)

// NewToken returns a fresh random token (32 bytes, base64url) and the hex of
// its SHA-256, as http.tokens wants it.
func NewToken() (token, sha256Hex string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	token = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:])
}

// authn decides who a request is. It holds the configured tokens (as
// hashes), the trusted proxy, the sessions and the one-time login tokens.
type authn struct {
	tokens []config.HTTPToken
	proxy  *config.TrustedProxy
	ttl    time.Duration
	now    func() time.Time

	mu       sync.Mutex
	sessions map[[32]byte]session // by the hash of the cookie
	once     map[[32]byte]Principal
}

type session struct {
	p       Principal
	expires time.Time
}

// errUnauthenticated is a request that proved nobody.
type authError struct{ detail string }

func (e *authError) Error() string { return e.detail }

// authenticate returns the request's principal: a bearer token (whose
// header, once given, must be right: a wrong one is never passed over for a
// cookie), the trusted proxy's header from a listed peer, or a session.
func (a *authn) authenticate(r *http.Request) (Principal, bool, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			return Principal{}, false, &authError{"the Authorization header must be Bearer <token>"}
		}
		p, ok := a.token(strings.TrimSpace(tok))
		if !ok {
			return Principal{}, false, &authError{"the bearer token is not one of http.tokens"}
		}
		return p, true, nil
	}
	if a.proxy != nil {
		if v := r.Header.Values(a.proxy.Header); len(v) > 0 && a.trustedPeer(r.RemoteAddr) {
			if len(v) > 1 {
				return Principal{}, false, &authError{fmt.Sprintf("the proxy set the %s header %d times", a.proxy.Header, len(v))}
			}
			if err := config.CheckPrincipal(v[0]); err != nil {
				return Principal{}, false, &authError{fmt.Sprintf("the %s header set by the proxy: %v", a.proxy.Header, err)}
			}
			name, err := approvals.Approver(v[0])
			if err != nil {
				return Principal{}, false, &authError{fmt.Sprintf("the %s header set by the proxy: %v", a.proxy.Header, err)}
			}
			return Principal{Name: name, Auth: noeta.AuthProxy}, false, nil
		}
		// From any other peer the header is ignored: anyone can set it.
	}
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		if p, ok := a.session(c.Value); ok {
			return p, false, nil
		}
		return Principal{}, false, &authError{"the session has expired or is unknown; log in again"}
	}
	return Principal{}, false, &authError{"log in: a bearer token, a session (POST /api/v1/login) or a trusted proxy is required"}
}

// token compares the token's hash with every configured hash, in constant
// time each, and all of them whatever matched.
func (a *authn) token(tok string) (Principal, bool) {
	sum := sha256.Sum256([]byte(tok))
	var found Principal
	ok := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.SHA256[:]) == 1 {
			found, ok = Principal{Name: t.Name, Auth: noeta.AuthToken}, 1
		}
	}
	return found, ok == 1
}

func (a *authn) trustedPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.proxy.From {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// login exchanges a token (a configured one, or a one-time login token,
// which it consumes) for a new session's cookie value.
func (a *authn) login(tok string) (Principal, string, bool) {
	p, ok := a.token(tok)
	if !ok {
		sum := sha256.Sum256([]byte(tok))
		a.mu.Lock()
		p, ok = a.once[sum]
		delete(a.once, sum)
		a.mu.Unlock()
		if !ok {
			return Principal{}, "", false
		}
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cookie := base64.RawURLEncoding.EncodeToString(b)
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sessions) >= maxSessions {
		for k, s := range a.sessions {
			if !now.Before(s.expires) {
				delete(a.sessions, k)
			}
		}
		if len(a.sessions) >= maxSessions {
			// The oldest to expire goes: a flood of logins cannot grow the map.
			var oldest [32]byte
			var at time.Time
			for k, s := range a.sessions {
				if at.IsZero() || s.expires.Before(at) {
					oldest, at = k, s.expires
				}
			}
			delete(a.sessions, oldest)
		}
	}
	a.sessions[sha256.Sum256([]byte(cookie))] = session{p: p, expires: now.Add(a.ttl)}
	return p, cookie, true
}

func (a *authn) session(cookie string) (Principal, bool) {
	k := sha256.Sum256([]byte(cookie))
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[k]
	if !ok {
		return Principal{}, false
	}
	if !a.now().Before(s.expires) {
		delete(a.sessions, k)
		return Principal{}, false
	}
	return s.p, true
}

func (a *authn) logout(cookie string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, sha256.Sum256([]byte(cookie)))
}

// oneTime registers a token that logs in as p once.
func (a *authn) oneTime(p Principal) string {
	tok, _ := NewToken()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.once) >= maxLoginTokens {
		clear(a.once)
	}
	a.once[sha256.Sum256([]byte(tok))] = p
	return tok
}

// hostAllowed reports whether the Host header names this server: an IP
// address, the listener's address, localhost on a loopback or unspecified
// listener, or a configured name. A DNS name rebound to the listener's
// address names something else.
func hostAllowed(host string, listen []string, names []string) bool {
	host = strings.ToLower(host)
	if host == "" {
		return false
	}
	hostOnly := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostOnly = h
	}
	if _, err := netip.ParseAddr(strings.Trim(hostOnly, "[]")); err == nil {
		// An address, not a name: no DNS answer can rebind it, and a page
		// loaded from it is its own origin.
		return true
	}
	for _, n := range names {
		if host == n || hostOnly == n {
			return true
		}
	}
	for _, l := range listen {
		if host == l {
			return true
		}
		h, port, err := net.SplitHostPort(l)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || !(ip.IsLoopback() || ip.IsUnspecified()) {
			continue
		}
		for _, alias := range []string{"localhost", "127.0.0.1", "[::1]"} {
			if host == alias+":"+port {
				return true
			}
		}
	}
	return false
}

// originAllowed reports whether a state-changing request comes from the
// page: Origin absent only with a bearer token (a script, not a browser);
// present, it must be this host, over https — or over http too when the
// request came in plain (a proxy may have ended TLS in front).
func originAllowed(r *http.Request, bearer bool) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return bearer
	}
	if strings.EqualFold(o, "https://"+r.Host) {
		return true
	}
	return r.TLS == nil && strings.EqualFold(o, "http://"+r.Host)
}
