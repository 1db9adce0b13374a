package sandbox

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
)

// The egress proxy's bounds (see [Proxy]). A sandboxed process is not
// trusted, so every wait it can cause is bounded.
const (
	maxHeaderBytes       = 16 << 10
	defaultHeaderTimeout = 10 * time.Second
	defaultDialTimeout   = 10 * time.Second
	defaultMaxConns      = 64
	// maxSummary is the maxItems of ToolCallFinished.egress.
	maxSummary = 256
)

// OtherHost is the Host of the [Proxy.Summary] entries that fold the
// destinations beyond what the summary holds.
const OtherHost = "(other)"

// After an error answer the proxy reads and drops what the client still
// sends for a moment before closing: closing a socket with unread input makes
// the peer see a reset, which can destroy the answer before it is read.
const (
	lingerTimeout = time.Second
	lingerBytes   = 64 << 10
)

// Proxy is the egress proxy of the tool sandbox: a sandboxed process's only
// way out of its network namespace. The engine runs it in the host's
// namespace behind a Unix socket; a relay inside the sandbox forwards the
// process's TCP connections to it, and the process finds it through
// HTTP_PROXY and HTTPS_PROXY.
//
// Each connection carries one HTTP/1.1 proxy request: CONNECT host:port,
// answered 200 and then spliced both ways, or a plain request with an
// absolute http:// URI, forwarded without hop-by-hop headers and
// Proxy-Authorization as the connection's only request (Connection: close)
// with the response streamed back. Anything else gets 400. A destination that
// is not in the allow list gets 403 with a short text saying so.
//
// # The allow list
//
// An entry is host:port. The host is a DNS name, an IP literal (IPv6 in
// brackets) or a wildcard *.suffix, which matches every name strictly under
// suffix but not suffix itself. The port is a number from 1 to 65535; there is
// no wildcard port. Names compare without regard to case and without one
// trailing dot; they must be ASCII (an internationalised name is written in
// its xn-- form). IP literals compare as addresses: an entry 127.0.0.1:80
// admits a request for 127.0.0.1:80, never one for a name that resolves to
// it, nor for ::ffff:127.0.0.1.
//
// # Resolving
//
// The proxy resolves an admitted name itself and connects to the address it
// vetted, never to the name again, so the answer it checked is the one it
// uses. It refuses the connection (403) when any address the name resolves to
// is loopback, unspecified (0.0.0.0/8, ::), link-local (169.254.0.0/16,
// fe80::/10: the cloud metadata endpoints), multicast, another known cloud
// metadata address (fd00:ec2::254, 100.100.100.200), or an address of one of
// the host's own interfaces (a server listening on all of them, the
// embedded NATS among them, answers there as on its loopback). Without this
// rule a name the operator allowed could be made to resolve to the host
// (DNS rebinding) and reach the engine's own ports. Other private addresses
// stay reachable: an allowed internal service lives there. The exception is an entry
// that names the host as an IP literal or as localhost itself (not
// *.localhost): the operator asked for that host by address, so a test server
// on 127.0.0.1 can be allowed on purpose.
//
// # Bounds
//
// A client has 10 seconds from connecting to send a request line and header
// of at most 16 KiB (or gets 431); resolving and connecting take at most 10
// seconds; at most 64 connections are served at once, and one more gets 503
// without its request being read. Once a tunnel or a forward is under way it
// is not timed: it lasts while both sides keep it open, or until
// [Proxy.Close].
//
// # Accounting
//
// [Proxy.Summary] is the egress record of the calls that used the proxy: one
// [noeta.Egress] per destination and verdict, with connections and bytes. A
// destination that was admitted but could not be reached (the name did not
// resolve, the connect failed or timed out) is still Allowed: the allow list
// admitted it, and the Reason says the dial failed. Connections that never
// named a destination (a malformed request, a client silent past the header
// deadline, one refused over the connection limit before it was read) sent
// nothing anywhere and have no entry.
//
// A Proxy is safe for concurrent use. Every goroutine it starts ends by the
// time [Proxy.Close] returns.
type Proxy struct {
	rules []target

	// Set by NewProxy; tests in this package shorten or replace them before
	// Serve.
	headerTimeout time.Duration
	dialTimeout   time.Duration
	maxConns      int
	lookup        func(ctx context.Context, host string) ([]netip.Addr, error)
	dial          func(ctx context.Context, network, address string) (net.Conn, error)
	ownAddrs      func() ([]netip.Addr, error) // the host's interfaces' addresses

	// ctx ends at Close, so that lookups and dials in flight end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the connection handlers; each waits for its own splice
	// goroutine before it ends.
	wg sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // client and destination sides, for Close
	active    int                   // client connections being handled
	stats     map[statKey]*stat
	other     [2]*stat // folded destinations, by verdict: [0] refused, [1] allowed
}

// NewProxy returns a proxy that admits the host:port pairs of allow (see
// [Proxy] for their form). It reports every invalid entry, each error naming
// the entry and what is wrong with it. An empty list is valid: the proxy then
// refuses everything and records what was asked.
func NewProxy(allow []string) (*Proxy, error) {
	var errs []error
	rules := make([]target, 0, len(allow))
	for _, e := range allow {
		t, err := parseTarget(e, "", true)
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox: egress allow entry %q: %w", e, err))
			continue
		}
		rules = append(rules, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		rules:         rules,
		headerTimeout: defaultHeaderTimeout,
		dialTimeout:   defaultDialTimeout,
		maxConns:      defaultMaxConns,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		dial:      (&net.Dialer{}).DialContext,
		ownAddrs:  interfaceAddrs,
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
		stats:     make(map[statKey]*stat),
	}, nil
}

// Serve accepts connections on ln and serves each in its own goroutine until
// ln fails or [Proxy.Close] is called. It returns nil after Close (also when
// called after Close, which closes ln); otherwise the error that ended the
// accepting, after which connections already accepted go on until Close.
// Serve may be called on several listeners at once.
func (p *Proxy) Serve(ln net.Listener) error {
	if !p.addListener(ln) {
		ln.Close()
		return nil
	}
	defer p.removeListener(ln)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			if !exhausted(err) {
				return fmt.Errorf("sandbox: egress proxy: %w", err)
			}
			// Out of descriptors or memory: wait for connections to end
			// rather than spin or give up.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		if p.admit(c) {
			go p.handle(c)
		}
	}
}

// exhausted reports whether an accept error is a shortage that may pass.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Close stops every Serve, closes every live connection, tunnels included,
// and waits for the proxy's goroutines to end. It may be called more than
// once; [Proxy.Summary] still answers after it, with the final figures.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.cancel()
	var errs []error
	for ln := range p.listeners {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("sandbox: egress proxy: %w", err))
		}
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return errors.Join(errs...)
}

func (p *Proxy) addListener(ln net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.listeners[ln] = struct{}{}
	return true
}

func (p *Proxy) removeListener(ln net.Listener) {
	p.mu.Lock()
	delete(p.listeners, ln)
	p.mu.Unlock()
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// admit registers an accepted connection for a handler, or closes it: after
// Close, or with 503 over the connection limit. The 503 is written here, in
// the accept loop, so that a flood costs no goroutines; it is a few bytes to
// a fresh socket, and the deadline covers a peer that does not read.
func (p *Proxy) admit(c net.Conn) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return false
	}
	if p.active >= p.maxConns {
		p.mu.Unlock()
		c.SetWriteDeadline(time.Now().Add(lingerTimeout))
		writeAnswer(c, http.StatusServiceUnavailable,
			fmt.Sprintf("the sandbox's egress proxy already serves %d connections", p.maxConns))
		c.Close()
		return false
	}
	p.active++
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	return true
}

// release ends a client connection admit registered.
func (p *Proxy) release(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.active--
	p.mu.Unlock()
	c.Close()
}

// track registers a destination connection so that Close ends it; after
// Close it closes it and reports false.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// handle serves one client connection: one request, then a tunnel or a
// forward.
func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	defer p.release(c)

	// The deadline is set once: it bounds the whole header, so a client
	// trickling bytes cannot stretch it.
	c.SetReadDeadline(time.Now().Add(p.headerTimeout))
	lim := &headerLimit{r: c, n: maxHeaderBytes}
	br := bufio.NewReader(lim)
	req, err := http.ReadRequest(br)
	if err != nil {
		var ne net.Error
		switch {
		case lim.n <= 0:
			p.refuse(c, http.StatusRequestHeaderFieldsTooLarge,
				fmt.Sprintf("the request line and header are over %d bytes", maxHeaderBytes))
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			// Silent past the deadline, gone, or closed by Close: nobody to
			// answer.
		default:
			p.refuse(c, http.StatusBadRequest, "malformed proxy request")
		}
		return
	}
	// The header is in; what follows (a body, a tunnel) is not the header's
	// to bound.
	lim.n = math.MaxInt64
	c.SetReadDeadline(time.Time{})

	dest, err := requestTarget(req)
	if err != nil {
		p.refuse(c, http.StatusBadRequest, err.Error())
		return
	}
	up, st, code, msg := p.connect(dest)
	if up == nil {
		p.refuse(c, code, msg)
		return
	}
	defer p.untrack(up)
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		splice(c, br, up, st)
		return
	}
	p.forward(c, req, up, st)
}

// requestTarget is the destination a proxy request names: the authority of a
// CONNECT, the host and port (80 by default) of an absolute http:// URI.
func requestTarget(req *http.Request) (target, error) {
	if req.Method == http.MethodConnect {
		if strings.HasPrefix(req.RequestURI, "/") {
			return target{}, errors.New("CONNECT needs host:port")
		}
		t, err := parseTarget(req.RequestURI, "", false)
		if err != nil {
			return target{}, fmt.Errorf("CONNECT %s: %w", req.RequestURI, err)
		}
		return t, nil
	}
	u := req.URL
	switch {
	case !u.IsAbs() || u.Host == "":
		return target{}, errors.New("a proxy request needs an absolute URI (http://host/path) or CONNECT host:port")
	case u.Scheme != "http":
		return target{}, fmt.Errorf("scheme %q is not proxied: use CONNECT for https and anything else", u.Scheme)
	case u.Opaque != "":
		return target{}, errors.New("an opaque URI is not proxied")
	}
	t, err := parseTarget(u.Host, "80", false)
	if err != nil {
		return target{}, fmt.Errorf("%s: %w", u.Host, err)
	}
	return t, nil
}

// connect decides on dest and, when it is admitted and vetted, dials it. It
// records the attempt either way. Without a connection it returns the status
// and text to answer with.
func (p *Proxy) connect(dest target) (up net.Conn, st *stat, code int, msg string) {
	hp := dest.String()
	ok, exempt := p.match(dest)
	if !ok {
		p.record(dest, false, "not in the allow list")
		return nil, nil, http.StatusForbidden, hp + " is not in the sandbox's network allow list"
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	defer cancel()

	addrs := []netip.Addr{dest.ip}
	if !dest.ip.IsValid() {
		var err error
		addrs, err = p.lookup(ctx, dest.host)
		if err == nil && len(addrs) == 0 {
			err = fmt.Errorf("lookup %s: no addresses", dest.host)
		}
		if err != nil {
			p.record(dest, true, "dial failed: "+err.Error())
			return nil, nil, http.StatusBadGateway, "could not reach " + hp + ": " + err.Error()
		}
	}
	if !exempt {
		own, err := p.ownAddrs()
		if err != nil {
			// Blind to the host's addresses, it cannot vet: refused.
			p.record(dest, false, "the host's addresses unknown")
			return nil, nil, http.StatusForbidden, "the sandbox's egress proxy could not list the host's addresses: " + err.Error()
		}
		for _, a := range addrs {
			kind := forbidden(a)
			if kind == "" && slices.Contains(own, a.Unmap().WithZone("")) {
				kind = "the host's own"
			}
			if kind != "" {
				why := fmt.Sprintf("resolves to %s address (%s)", kind, a)
				p.record(dest, false, why)
				return nil, nil, http.StatusForbidden,
					hp + " " + why + ", which the sandbox's egress proxy refuses"
			}
		}
	}
	var firstErr error
	for _, a := range addrs {
		c, err := p.dial(ctx, "tcp", netip.AddrPortFrom(a, dest.port).String())
		if err == nil {
			if !p.track(c) {
				return nil, nil, http.StatusServiceUnavailable, "the sandbox's egress proxy is closing"
			}
			return c, p.record(dest, true, ""), 0, ""
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	p.record(dest, true, "dial failed: "+firstErr.Error())
	return nil, nil, http.StatusBadGateway, "could not reach " + hp + ": " + firstErr.Error()
}

// match reports whether the allow list admits dest, and whether an entry
// that names the host by address (an IP literal, localhost) admits it, which
// exempts it from the address vetting.
func (p *Proxy) match(dest target) (ok, exempt bool) {
	for _, r := range p.rules {
		if r.port != dest.port {
			continue
		}
		var hit bool
		switch {
		case r.ip.IsValid():
			hit = dest.ip == r.ip
		case dest.ip.IsValid():
			// A name entry never admits an address.
		case r.wildcard:
			hit = strings.HasSuffix(dest.host, "."+r.host)
		default:
			hit = dest.host == r.host
		}
		if !hit {
			continue
		}
		if r.ip.IsValid() || !r.wildcard && r.host == "localhost" {
			return true, true
		}
		ok = true
	}
	return ok, false
}

// interfaceAddrs lists the addresses of the host's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifas))
	for _, ifa := range ifas {
		if pfx, err := netip.ParsePrefix(ifa.String()); err == nil {
			out = append(out, pfx.Addr().Unmap().WithZone(""))
		}
	}
	return out, nil
}

// Cloud metadata services outside the link-local range.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// forbidden names the kind of a that an allowed name must not resolve to, with
// its article, or returns "".
func forbidden(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	switch {
	case a.IsLoopback():
		return "a loopback"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0:
		// 0.0.0.0/8 "this network": Linux connects 0.0.0.0 to the host
		// itself.
		return "an unspecified"
	case a.IsLinkLocalUnicast():
		return "a link-local"
	case a.IsMulticast():
		return "a multicast"
	case slices.Contains(metadataAddrs, a):
		return "a cloud metadata"
	}
	return ""
}

// splice copies both ways between the client (whose buffered reader may hold
// bytes sent right after the CONNECT) and the destination until both sides
// have finished. An end of input is passed on as a half close; an error ends
// the tunnel both ways.
func splice(c net.Conn, br *bufio.Reader, up net.Conn, st *stat) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := io.Copy(&countWriter{w: up, n: &st.out}, br)
		endCopy(err, up, c)
	}()
	_, err := io.Copy(&countWriter{w: c, n: &st.in}, up)
	endCopy(err, c, up)
	<-done
}

func endCopy(err error, dst, src net.Conn) {
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	closeWrite(dst)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// Hop-by-hop headers (RFC 9110 section 7.6.1, and the proxy ones): they
// concern one connection, not the request, and Proxy-Authorization is for this
// proxy only.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// forward sends req to the destination in origin form and streams the
// response back. It is the connection's only request: both sides are told
// Connection: close, which spares the proxy a keep-alive state machine.
func (p *Proxy) forward(c net.Conn, req *http.Request, up net.Conn, st *stat) {
	removeHopHeaders(req.Header)
	// The proxy cannot pass a 100 Continue on before it has the body, so it
	// does not ask for one; the client sends the body after its own wait.
	req.Header.Del("Expect")
	if _, ok := req.Header["User-Agent"]; !ok {
		// Request.Write would otherwise add Go's own.
		req.Header["User-Agent"] = []string{""}
	}
	req.Close = true
	if err := req.Write(&countWriter{w: up, n: &st.out}); err != nil {
		p.refuse(c, http.StatusBadGateway, "forwarding the request failed: "+err.Error())
		return
	}
	upr := bufio.NewReader(&countReader{r: up, n: &st.in})
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(upr, req)
		if err != nil {
			p.refuse(c, http.StatusBadGateway, "reading the response failed: "+err.Error())
			return
		}
		// An interim answer (102, 103) is dropped: the final one follows.
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		p.refuse(c, http.StatusBadGateway, "a protocol upgrade is not proxied: use CONNECT")
		return
	}
	removeHopHeaders(resp.Header)
	resp.Close = true
	bw := bufio.NewWriter(c)
	resp.Body = &flushingBody{ReadCloser: resp.Body, w: bw}
	if err := resp.Write(writerOnly{bw}); err != nil {
		return
	}
	bw.Flush()
}

// writerOnly hides the ReadFrom of a bufio.Writer: it reads straight into the
// writer's buffer, which the flush in flushingBody.Read empties underneath it.
type writerOnly struct{ io.Writer }

// flushingBody flushes what has been written to the client before it waits
// for more of the response, so that a slow stream reaches the client as it
// comes while a header still goes out in one write.
type flushingBody struct {
	io.ReadCloser
	w *bufio.Writer
}

func (b *flushingBody) Read(p []byte) (int, error) {
	if err := b.w.Flush(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// refuse answers c with an error status and closes it gently.
func (p *Proxy) refuse(c net.Conn, code int, msg string) {
	c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	if writeAnswer(c, code, msg) != nil {
		return
	}
	closeWrite(c)
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c, lingerBytes)
}

// writeAnswer writes a complete HTTP response with msg as its text body.
func writeAnswer(w io.Writer, code int, msg string) error {
	body := "noeta sandbox egress proxy: " + msg + "\n"
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	return err
}

// headerLimit ends input at n bytes while the header is read; setting n to
// MaxInt64 lifts the limit for what follows.
type headerLimit struct {
	r io.Reader
	n int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw *countWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (cr *countReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	cr.n.Add(int64(n))
	return n, err
}

// target is a host:port as an allow entry or a request names it. host is
// lower case without a trailing dot; for an address it is the address's
// text, and ip is the address; for a wildcard it is the suffix.
type target struct {
	host     string
	ip       netip.Addr
	wildcard bool
	port     uint16
}

func (t target) String() string {
	h := t.host
	if t.wildcard {
		h = "*." + h
	}
	return net.JoinHostPort(h, strconv.Itoa(int(t.port)))
}

// parseTarget parses host:port. With defPort set, the port may be left out.
// Only an allow entry (wildcard true) may be a wildcard.
func parseTarget(s, defPort string, wildcard bool) (target, error) {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return target{}, errors.New("not ASCII: write an internationalised name in its xn-- form")
		}
	}
	bracketed := strings.HasPrefix(s, "[")
	hasPort := strings.Contains(s, ":")
	if bracketed {
		hasPort = strings.Contains(s, "]:")
	}
	var host, port string
	switch {
	case bracketed && !strings.Contains(s, "]"):
		return target{}, errors.New("missing ] after an IPv6 address")
	case hasPort:
		var err error
		if host, port, err = net.SplitHostPort(s); err != nil {
			return target{}, err
		}
	case defPort == "":
		return target{}, errors.New("missing port: write host:port")
	case bracketed:
		if !strings.HasSuffix(s, "]") {
			return target{}, errors.New("missing ] after an IPv6 address")
		}
		host, port = s[1:len(s)-1], defPort
	default:
		host, port = s, defPort
	}
	n, err := parsePort(port)
	if err != nil {
		return target{}, err
	}
	t, err := parseHost(host, bracketed, wildcard)
	t.port = n
	return t, err
}

func parsePort(s string) (uint16, error) {
	switch {
	case s == "":
		return 0, errors.New("missing port: write host:port")
	case s == "*":
		return 0, errors.New("a port cannot be a wildcard")
	case len(s) > 5 || strings.Trim(s, "0123456789") != "":
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > math.MaxUint16 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

func parseHost(h string, bracketed, wildcard bool) (target, error) {
	if bracketed {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return target{}, fmt.Errorf("[%s] is not an IPv6 address without a zone", h)
		}
		return target{host: a.String(), ip: a}, nil
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return target{}, errors.New("missing host")
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Is6() {
			return target{}, errors.New("an IPv6 address must be in brackets")
		}
		return target{host: a.String(), ip: a}, nil
	}
	t := target{host: h}
	if wildcard && strings.HasPrefix(h, "*.") {
		t.host, t.wildcard = h[2:], true
	}
	if err := checkName(t.host); err != nil {
		return target{}, err
	}
	return t, nil
}

// checkName checks the syntax of a lower-case DNS name.
func checkName(h string) error {
	if len(h) > 253 {
		return errors.New("name longer than 253 characters")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return fmt.Errorf("name %q has an empty label", h)
		case len(l) > 63:
			return fmt.Errorf("name %q has a label longer than 63 characters", h)
		case strings.Contains(l, "*"):
			return errors.New("a wildcard must be the whole first label of an entry, as in *.example.com")
		case strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "":
			return fmt.Errorf("name %q has a character other than a letter, a digit, - or _", h)
		}
	}
	// A resolver may read 127.1 or 2130706433 as an address; a real name
	// never ends in a numeric label.
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("%q ends in a number but is not an IP address", h)
	}
	return nil
}

type statKey struct {
	host    string
	port    uint16
	allowed bool
}

// stat accounts for one summary entry. The counts and reason are guarded by
// Proxy.mu; the byte counts move while connections run, so they are atomic.
type stat struct {
	conns, failed int
	reason        string // the first refusal or dial failure
	out, in       atomic.Int64
}

// record counts one connection to dest with its verdict; failure is why it
// was refused or could not be dialled, "" when it went through. It returns
// the entry the connection's bytes go to. Entries beyond the summary's room
// fold into the "(other)" entry of their verdict, so a process trying many
// names cannot grow the proxy's memory without bound.
func (p *Proxy) record(dest target, allowed bool, failure string) *stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := statKey{host: dest.host, port: dest.port, allowed: allowed}
	st := p.stats[k]
	if st == nil {
		if len(p.stats) < maxSummary-len(p.other) {
			st = new(stat)
			p.stats[k] = st
		} else {
			i := 0
			if allowed {
				i = 1
			}
			if p.other[i] == nil {
				p.other[i] = new(stat)
			}
			st = p.other[i]
		}
	}
	st.conns++
	if failure != "" {
		st.failed++
		if st.reason == "" {
			st.reason = failure
		}
	}
	return st
}

// Summary returns what the proxy was asked for so far: one entry per
// destination (the host as asked, lower case and without a trailing dot; an
// IPv6 address without brackets), port and verdict, sorted by host, port and
// verdict (refused first), with the connections and the bytes that crossed
// them (BytesOut from the sandbox, BytesIn to it, as exchanged with the
// destination; for a forwarded request, the request and response as sent on
// the wire).
//
// Reason says why a refused entry was refused ("not in the allow list",
// "resolves to a loopback address (127.0.0.1)"; the first reason when they
// differ). On an allowed entry it is set when dials failed: "dial failed:
// ..." with the first failure, followed by "(n of m connections)" when only
// some failed.
//
// It returns at most 256 entries, the maxItems of ToolCallFinished.egress:
// the destinations first seen after 254 others fold, by verdict, into at most
// two last entries with Host [OtherHost], Port 0 and a Reason saying so (two,
// not one, so that bytes that went out stay apart from refusals). Summary may
// be called while the proxy serves, and after Close for the final figures.
func (p *Proxy) Summary() []noeta.Egress {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]noeta.Egress, 0, len(p.stats)+len(p.other))
	for k, st := range p.stats {
		e := st.egress(k.host, int(k.port), k.allowed)
		if k.allowed && st.failed > 0 && st.failed < st.conns {
			e.Reason = fmt.Sprintf("%s (%d of %d connections)", st.reason, st.failed, st.conns)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b noeta.Egress) int {
		return cmp.Or(
			strings.Compare(a.Host, b.Host),
			cmp.Compare(a.Port, b.Port),
			compareBool(a.Allowed, b.Allowed),
		)
	})
	for i, st := range p.other {
		if st != nil {
			e := st.egress(OtherHost, 0, i == 1)
			e.Reason = fmt.Sprintf("destinations beyond the first %d, folded into one entry", maxSummary-len(p.other))
			out = append(out, e)
		}
	}
	return out
}

func (st *stat) egress(host string, port int, allowed bool) noeta.Egress {
	return noeta.Egress{
		Host:        host,
		Port:        port,
		Allowed:     allowed,
		Reason:      st.reason,
		Connections: st.conns,
		BytesOut:    st.out.Load(),
		BytesIn:     st.in.Load(),
	}
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
