package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
)

// harness is a proxy serving on a Unix socket in a test's temp dir.
type harness struct {
	p      *Proxy
	sock   string
	served chan error

	once     sync.Once
	serveErr error
}

// startProxy starts a proxy for allow; opts adjust it before it serves. The
// proxy is closed at cleanup, and Serve must have returned nil.
func startProxy(t *testing.T, allow []string, opts ...func(*Proxy)) *harness {
	t.Helper()
	p, err := NewProxy(allow)
	if err != nil {
		t.Fatalf("NewProxy(%q): %v", allow, err)
	}
	for _, o := range opts {
		o(p)
	}
	sock := filepath.Join(t.TempDir(), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{p: p, sock: sock, served: make(chan error, 1)}
	go func() { h.served <- p.Serve(ln) }()
	t.Cleanup(func() { h.close(t) })
	return h
}

// close closes the proxy, waits for Serve and returns the final summary.
func (h *harness) close(t *testing.T) []noeta.Egress {
	t.Helper()
	h.once.Do(func() {
		if err := h.p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		h.serveErr = <-h.served
	})
	if h.serveErr != nil {
		t.Errorf("Serve returned %v, want nil after Close", h.serveErr)
	}
	return h.p.Summary()
}

func (h *harness) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connect sends CONNECT hostport, with extra written in the same write, and
// reads the answer. The tunnel's bytes, if any, are read from the returned
// reader.
func (h *harness) connect(t *testing.T, hostport, extra string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := h.dial(t)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n%s", hostport, hostport, extra); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: reading the answer: %v", hostport, err)
	}
	return c, br, resp
}

// raw sends a raw request and reads the answer and then the connection to
// its end.
func (h *harness) raw(t *testing.T, request string) (*http.Response, string) {
	t.Helper()
	c := h.dial(t)
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	requireEnd(t, br)
	return resp, string(body)
}

// requireEnd reads r until the proxy closes the connection.
func requireEnd(t *testing.T, r io.Reader) {
	t.Helper()
	n, err := io.Copy(io.Discard, r)
	if n != 0 {
		t.Errorf("read %d more bytes, want the connection closed", n)
	}
	// A reset is an end too: the proxy closed with input unread.
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Errorf("reading to the end: %v", err)
	}
}

// client is an HTTP client whose every request goes through the proxy.
func (h *harness) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", h.sock)
		},
		DisableKeepAlives: true,
	}}
}

// echoServer serves TCP echo on loopback and returns its port.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func serverPort(t *testing.T, ts *httptest.Server) int {
	t.Helper()
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

func hostport(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// resolver maps names to addresses, for Proxy.lookup.
func resolver(names map[string][]string) func(*Proxy) {
	return func(p *Proxy) {
		p.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			ss, ok := names[host]
			if !ok {
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			}
			var addrs []netip.Addr
			for _, s := range ss {
				addrs = append(addrs, netip.MustParseAddr(s))
			}
			return addrs, nil
		}
	}
}

func requireSummary(t *testing.T, got, want []noeta.Egress) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("summary:\n got %+v\nwant %+v", got, want)
	}
}

func TestNewProxyRejectsBadEntries(t *testing.T) {
	tests := []struct {
		entry string
		want  string // part of the error
	}{
		{"host", "missing port"},
		{":80", "missing host"},
		{"a:", "missing port"},
		{"a:0", "not a number from 1 to 65535"},
		{"a:70000", "not a number from 1 to 65535"},
		{"a:-1", "not a number from 1 to 65535"},
		{"a:+80", "not a number from 1 to 65535"},
		{"a:*", "cannot be a wildcard"},
		{"a:b", "not a number from 1 to 65535"},
		{"*:80", "wildcard"},
		{"a.*.b:80", "wildcard"},
		{"*.*.b:80", "wildcard"},
		{"*a.b:80", "wildcard"},
		{"bücher.example:443", "not ASCII"},
		{"::1:80", "too many colons"},
		{"[::1:80", "missing ]"},
		{"[127.0.0.1]:80", "not an IPv6 address"},
		{"[fe80::1%eth0]:80", "not an IPv6 address"},
		{"a..b:80", "empty label"},
		{"a b:80", "character other than"},
		{"127.1:80", "ends in a number"},
		{strings.Repeat("a", 64) + ".test:80", "longer than 63"},
		{strings.Repeat("abcdefg.", 32) + "test:80", "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			p, err := NewProxy([]string{"good.example:443", tt.entry})
			if err == nil {
				p.Close()
				t.Fatalf("NewProxy accepted %q", tt.entry)
			}
			if msg := err.Error(); !strings.Contains(msg, strconv.Quote(tt.entry)) || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q, want it to name %q and say %q", msg, tt.entry, tt.want)
			}
		})
	}
}

func TestNewProxyReportsEveryBadEntry(t *testing.T) {
	_, err := NewProxy([]string{"a:0", "ok.test:1", "b"})
	if err == nil {
		t.Fatal("NewProxy accepted bad entries")
	}
	for _, e := range []string{`"a:0"`, `"b"`} {
		if !strings.Contains(err.Error(), e) {
			t.Errorf("error %q does not name %s", err, e)
		}
	}
	if strings.Contains(err.Error(), "ok.test") {
		t.Errorf("error %q names a good entry", err)
	}
}

func TestNewProxyAcceptsEntries(t *testing.T) {
	for _, e := range []string{
		"api.github.com:443", "*.internal:8080", "API.GitHub.com.:443", "127.0.0.1:8080",
		"[::1]:80", "[2001:db8::1]:443", "localhost:65535", "_svc.example:1", "xn--bcher-kva.example:443",
	} {
		p, err := NewProxy([]string{e})
		if err != nil {
			t.Errorf("NewProxy(%q): %v", e, err)
			continue
		}
		p.Close()
	}
}

func TestMatch(t *testing.T) {
	p, err := NewProxy([]string{"*.example.test:80", "exact.test:443", "127.0.0.1:8080", "[::1]:8080", "localhost:9", "*.localhost:9"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tests := []struct {
		dest       string
		ok, exempt bool
	}{
		{"a.example.test:80", true, false},
		{"b.a.example.test:80", true, false},
		{"A.Example.Test.:80", true, false},
		{"example.test:80", false, false},
		{"a.example.test.evil:80", false, false},
		{"aexample.test:80", false, false},
		{"a.example.test:81", false, false},
		{"exact.test:443", true, false},
		{"EXACT.test.:443", true, false},
		{"sub.exact.test:443", false, false},
		{"exact.test:80", false, false},
		{"127.0.0.1:8080", true, true},
		{"[::1]:8080", true, true},
		{"[::ffff:127.0.0.1]:8080", false, false},
		{"localhost:9", true, true},
		{"localhost.:9", true, true},
		{"a.localhost:9", true, false}, // a wildcard names no address
	}
	for _, tt := range tests {
		t.Run(tt.dest, func(t *testing.T) {
			d, err := parseTarget(tt.dest, "", false)
			if err != nil {
				t.Fatal(err)
			}
			ok, exempt := p.match(d)
			if ok != tt.ok || exempt != tt.exempt {
				t.Errorf("match(%s) = %v, %v; want %v, %v", tt.dest, ok, exempt, tt.ok, tt.exempt)
			}
		})
	}
}

func TestConnectAllowedSplicesAndCounts(t *testing.T) {
	port := echoServer(t)
	dest := hostport("127.0.0.1", port)
	h := startProxy(t, []string{dest})

	// The first bytes ride in the CONNECT's own write: the proxy must pass
	// on what it read past the header.
	c, br, resp := h.connect(t, dest, "early ")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s, want 200", resp.Status)
	}
	if _, err := io.WriteString(c, "bytes"); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "early bytes" {
		t.Errorf("echo = %q, want %q", got, "early bytes")
	}
	requireSummary(t, h.close(t), []noeta.Egress{
		{Host: "127.0.0.1", Port: port, Allowed: true, Connections: 1, BytesOut: 11, BytesIn: 11},
	})
}

func TestConnectRefused(t *testing.T) {
	port := echoServer(t)
	h := startProxy(t, []string{"other.test:443", hostport("127.0.0.1", port+1)})
	dest := hostport("127.0.0.1", port)
	c, br, resp := h.connect(t, dest, "")
	defer c.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT: %s, want 403", resp.Status)
	}
	if want := dest + " is not in the sandbox's network allow list"; !strings.Contains(string(body), want) {
		t.Errorf("body %q, want it to say %q", body, want)
	}
	requireEnd(t, br)
	requireSummary(t, h.close(t), []noeta.Egress{
		{Host: "127.0.0.1", Port: port, Allowed: false, Reason: "not in the allow list", Connections: 1},
	})
}

func TestHTTPSThroughConnect(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secret")
	}))
	defer ts.Close()
	port := serverPort(t, ts)
	h := startProxy(t, []string{hostport("127.0.0.1", port)})
	cl := h.client()
	cl.Transport.(*http.Transport).TLSClientConfig = ts.Client().Transport.(*http.Transport).TLSClientConfig
	resp, err := cl.Get(ts.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "secret" {
		t.Errorf("body %q, want %q", body, "secret")
	}
	sum := h.close(t)
	if len(sum) != 1 || !sum[0].Allowed || sum[0].Connections != 1 || sum[0].BytesOut == 0 || sum[0].BytesIn == 0 {
		t.Errorf("summary %+v, want one allowed connection with bytes both ways", sum)
	}
}

func TestForward(t *testing.T) {
	var seen atomic.Pointer[http.Request]
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Resp", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, body)
	}))
	defer ts.Close()
	port := serverPort(t, ts)
	dest := hostport("127.0.0.1", port)
	h := startProxy(t, []string{dest})

	t.Run("client", func(t *testing.T) {
		resp, err := h.client().Post(ts.URL+"/up", "text/plain", strings.NewReader("data"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "POST /up data" {
			t.Errorf("got %s %q, want 200 %q", resp.Status, body, "POST /up data")
		}
	})
	t.Run("hop-by-hop headers", func(t *testing.T) {
		resp, body := h.raw(t, "GET http://"+dest+"/hop HTTP/1.1\r\n"+
			"Host: ignored.test\r\n"+
			"Proxy-Authorization: Basic c2VjcmV0\r\n"+
			"Proxy-Connection: keep-alive\r\n"+
			"Connection: keep-alive, X-Hop\r\n"+
			"X-Hop: 1\r\n"+
			"Keep-Alive: timeout=5\r\n"+
			"X-Keep: 1\r\n\r\n")
		if resp.StatusCode != http.StatusOK || body != "GET /hop " {
			t.Fatalf("got %s %q, want 200 %q", resp.Status, body, "GET /hop ")
		}
		r := seen.Load()
		for _, name := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "User-Agent"} {
			if v, ok := r.Header[name]; ok {
				t.Errorf("the destination got %s: %q", name, v)
			}
		}
		if r.Header.Get("X-Keep") != "1" {
			t.Errorf("the destination did not get X-Keep: %v", r.Header)
		}
		if r.Host != dest {
			t.Errorf("the destination got Host %q, want %q", r.Host, dest)
		}
		if resp.Header.Get("X-Resp") != "1" || resp.Header.Get("Keep-Alive") != "" || !resp.Close {
			t.Errorf("answer header %v, want X-Resp kept, Keep-Alive dropped, Connection: close", resp.Header)
		}
	})
	t.Run("refused", func(t *testing.T) {
		other := hostport("127.0.0.1", port+1)
		resp, err := h.client().Get("http://" + other + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), other+" is not in the sandbox's network allow list") {
			t.Errorf("got %s %q, want 403 naming %s", resp.Status, body, other)
		}
	})

	sum := h.close(t)
	if len(sum) != 2 {
		t.Fatalf("summary %+v, want two entries", sum)
	}
	if e := sum[0]; e.Port != port || !e.Allowed || e.Connections != 2 || e.BytesOut == 0 || e.BytesIn == 0 {
		t.Errorf("summary[0] = %+v, want 2 allowed connections to %s with bytes both ways", e, dest)
	}
	want := noeta.Egress{Host: "127.0.0.1", Port: port + 1, Reason: "not in the allow list", Connections: 1}
	if sum[1] != want {
		t.Errorf("summary[1] = %+v, want %+v", sum[1], want)
	}
}

// TestForwardStreams checks that a response reaches the client as the
// destination sends it: the destination holds back its end until the client
// has read the first part, so a proxy that waited for the whole response
// would never finish.
func TestForwardStreams(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "last\n")
	}))
	defer ts.Close()
	h := startProxy(t, []string{hostport("127.0.0.1", serverPort(t, ts))})
	resp, err := h.client().Get(ts.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	if rest, err := io.ReadAll(br); string(rest) != "last\n" || err != nil {
		t.Errorf("rest %q, %v; want %q", rest, err, "last\n")
	}
}

func TestBadRequests(t *testing.T) {
	h := startProxy(t, []string{"a.test:80", "a.test:443"})
	tests := []struct {
		name, request string
	}{
		{"origin form", "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"https scheme", "GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"ftp scheme", "GET ftp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"garbage", "HELLO\r\n\r\n"},
		{"connect without port", "CONNECT a.test HTTP/1.1\r\n\r\n"},
		{"connect path", "CONNECT /a.test:443 HTTP/1.1\r\n\r\n"},
		{"connect wildcard", "CONNECT *.test:443 HTTP/1.1\r\n\r\n"},
		{"connect non-ASCII", "CONNECT bücher.test:443 HTTP/1.1\r\n\r\n"},
		{"connect bare IPv6", "CONNECT ::1:443 HTTP/1.1\r\n\r\n"},
		{"connect numeric name", "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n"},
		{"http2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := h.raw(t, tt.request)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("got %s, want 400", resp.Status)
			}
		})
	}
	if sum := h.close(t); len(sum) != 0 {
		t.Errorf("summary %+v, want none: no request named a destination", sum)
	}
}

func TestResolvedAddressVetting(t *testing.T) {
	port := echoServer(t)
	names := map[string][]string{
		"rebind.test": {"127.0.0.1"},
		"meta.test":   {"169.254.169.254"},
		"mixed.test":  {"192.0.2.10", "127.0.0.1"},
		"v6.test":     {"::1"},
		"mapped.test": {"::ffff:127.0.0.1"},
		"zero.test":   {"0.0.0.0"},
		"mcast.test":  {"224.0.0.1"},
		"ll6.test":    {"fe80::1"},
		"a.localhost": {"127.0.0.1"},
		"localhost":   {"127.0.0.1"},
		"self.test":   {"198.51.100.7"},
	}
	var allow []string
	for n := range names {
		if n != "a.localhost" {
			allow = append(allow, hostport(n, port))
		}
	}
	allow = append(allow, hostport("*.localhost", port), hostport("127.0.0.1", port))
	h := startProxy(t, allow, func(p *Proxy) {
		resolver(names)(p)
		// The host's own interface address: a server on all interfaces
		// (the embedded NATS) answers there as on its loopback.
		p.ownAddrs = func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.7")}, nil
		}
	})

	tests := []struct {
		host   string
		code   int
		reason string
	}{
		{"rebind.test", 403, "resolves to a loopback address (127.0.0.1)"},
		{"meta.test", 403, "resolves to a link-local address (169.254.169.254)"},
		{"mixed.test", 403, "resolves to a loopback address (127.0.0.1)"},
		{"v6.test", 403, "resolves to a loopback address (::1)"},
		{"mapped.test", 403, "resolves to a loopback address (::ffff:127.0.0.1)"},
		{"zero.test", 403, "resolves to an unspecified address (0.0.0.0)"},
		{"mcast.test", 403, "resolves to a multicast address (224.0.0.1)"},
		{"ll6.test", 403, "resolves to a link-local address (fe80::1)"},
		{"a.localhost", 403, "resolves to a loopback address (127.0.0.1)"},
		{"self.test", 403, "resolves to the host's own address (198.51.100.7)"},
		// Entries that name the host by address are the operator's choice.
		{"localhost", 200, ""},
		{"127.0.0.1", 200, ""},
	}
	var want []noeta.Egress
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			c, _, resp := h.connect(t, hostport(tt.host, port), "")
			c.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("CONNECT %s: %s, want %d", tt.host, resp.Status, tt.code)
			}
			if tt.code == 403 {
				body, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(body), tt.reason) {
					t.Errorf("body %q, want it to say %q", body, tt.reason)
				}
			}
		})
		want = append(want, noeta.Egress{Host: tt.host, Port: port, Allowed: tt.code == 200, Reason: tt.reason, Connections: 1})
	}
	slices.SortFunc(want, func(a, b noeta.Egress) int { return strings.Compare(a.Host, b.Host) })
	requireSummary(t, h.close(t), want)
}

func TestDialsTheVettedAddress(t *testing.T) {
	port := echoServer(t)
	var lookups atomic.Int32
	var dialled atomic.Pointer[string]
	h := startProxy(t, []string{hostport("svc.test", port)}, func(p *Proxy) {
		resolver(map[string][]string{"svc.test": {"192.0.2.10"}})(p)
		resolve := p.lookup
		p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			return resolve(ctx, host)
		}
		// 192.0.2.10 is a documentation address: the test reaches the echo
		// server instead, after noting where the proxy meant to go.
		p.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			dialled.Store(&address)
			var d net.Dialer
			return d.DialContext(ctx, network, hostport("127.0.0.1", port))
		}
	})
	c, br, resp := h.connect(t, hostport("SVC.test.", port), "ping")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s, want 200", resp.Status)
	}
	c.(*net.UnixConn).CloseWrite()
	if got, _ := io.ReadAll(br); string(got) != "ping" {
		t.Errorf("echo %q, want %q", got, "ping")
	}
	if want := hostport("192.0.2.10", port); dialled.Load() == nil || *dialled.Load() != want {
		t.Errorf("dialled %v, want %s", dialled.Load(), want)
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups, want 1", n)
	}
	requireSummary(t, h.close(t), []noeta.Egress{
		{Host: "svc.test", Port: port, Allowed: true, Connections: 1, BytesOut: 4, BytesIn: 4},
	})
}

func TestDialFailureIsAllowedWithReason(t *testing.T) {
	closed := closedPort(t)
	dest := hostport("127.0.0.1", closed)
	h := startProxy(t, []string{dest, "gone.test:443"}, resolver(nil))
	for _, hp := range []string{dest, "gone.test:443"} {
		c, _, resp := h.connect(t, hp, "")
		c.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("CONNECT %s: %s, want 502", hp, resp.Status)
		}
	}
	sum := h.close(t)
	if len(sum) != 2 {
		t.Fatalf("summary %+v, want two entries", sum)
	}
	for _, e := range sum {
		if !e.Allowed || e.Connections != 1 || !strings.HasPrefix(e.Reason, "dial failed: ") {
			t.Errorf("entry %+v, want allowed, one connection, reason dial failed", e)
		}
	}
}

func TestOversizedHeader(t *testing.T) {
	h := startProxy(t, []string{"a.test:80"})
	resp, _ := h.raw(t, "GET http://a.test/ HTTP/1.1\r\nX-Big: "+strings.Repeat("x", 20<<10)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("got %s, want 431", resp.Status)
	}
	if sum := h.close(t); len(sum) != 0 {
		t.Errorf("summary %+v, want none", sum)
	}
}

func TestSilentClientIsDropped(t *testing.T) {
	h := startProxy(t, []string{"a.test:80"}, func(p *Proxy) { p.headerTimeout = 50 * time.Millisecond })
	for _, sent := range []string{"", "GET http://a.test/ HTTP/1.1\r\nX-Slow: "} {
		c := h.dial(t)
		io.WriteString(c, sent)
		// Nothing more is sent: the read ends when the proxy drops us.
		requireEnd(t, c)
	}
}

func TestCloseEndsTunnels(t *testing.T) {
	port := echoServer(t)
	dest := hostport("127.0.0.1", port)
	h := startProxy(t, []string{dest})
	c, br, resp := h.connect(t, dest, "x")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s, want 200", resp.Status)
	}
	if b, err := br.ReadByte(); err != nil || b != 'x' {
		t.Fatalf("echo: %q, %v", b, err)
	}
	idle := h.dial(t) // a client that has not sent its request yet
	sum := h.close(t) // waits for the handlers, so both must have ended
	requireEnd(t, br)
	requireEnd(t, idle)
	c.Close()
	requireSummary(t, sum, []noeta.Egress{
		{Host: "127.0.0.1", Port: port, Allowed: true, Connections: 1, BytesOut: 1, BytesIn: 1},
	})
	if err := h.p.Serve(mustListen(t)); err != nil {
		t.Errorf("Serve after Close: %v, want nil", err)
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "q.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestConnectionLimit(t *testing.T) {
	port := echoServer(t)
	dest := hostport("127.0.0.1", port)
	h := startProxy(t, []string{dest}, func(p *Proxy) { p.maxConns = 1 })
	_, _, resp := h.connect(t, dest, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first CONNECT: %s, want 200", resp.Status)
	}
	// The tunnel is live, so its handler holds the one place. The next
	// client is answered before it sends anything (writing could race with
	// the proxy's close).
	br := bufio.NewReader(h.dial(t))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection: %s, want 503", resp.Status)
	}
	io.ReadAll(resp.Body)
	requireEnd(t, br)
}

func TestSummaryFoldsAndReasons(t *testing.T) {
	p, err := NewProxy(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 300
	for i := range n {
		p.record(target{host: fmt.Sprintf("h%03d.test", i), port: 443}, i%2 == 0, "")
	}
	// A destination seen before the summary filled keeps its own entry.
	p.record(target{host: "h000.test", port: 443}, true, "dial failed: refused")
	sum := p.Summary()
	if len(sum) != maxSummary {
		t.Fatalf("%d entries, want %d", len(sum), maxSummary)
	}
	total := 0
	for _, e := range sum {
		total += e.Connections
	}
	if total != n+1 {
		t.Errorf("%d connections in all, want %d", total, n+1)
	}
	if e := sum[0]; e.Host != "h000.test" || e.Connections != 2 || e.Reason != "dial failed: refused (1 of 2 connections)" {
		t.Errorf("first entry %+v, want h000.test with a partial dial failure", e)
	}
	last := sum[len(sum)-2:]
	if last[0].Host != OtherHost || last[0].Allowed || last[1].Host != OtherHost || !last[1].Allowed || last[0].Port != 0 {
		t.Errorf("last entries %+v, want the two folded ones", last)
	}
	if got := last[0].Connections + last[1].Connections; got != n-(maxSummary-2) {
		t.Errorf("%d folded connections, want %d", got, n-(maxSummary-2))
	}
	if !slices.IsSortedFunc(sum[:len(sum)-2], func(a, b noeta.Egress) int { return strings.Compare(a.Host, b.Host) }) {
		t.Error("entries are not sorted by host")
	}
}

// The host's addresses the proxy vets against are its interfaces': the
// loopback among them, and every address the kernel lists.
func TestInterfaceAddrs(t *testing.T) {
	own, err := interfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(own, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("the host's addresses %v lack the loopback", own)
	}
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != len(ifas) {
		t.Errorf("%d addresses, the kernel lists %d: %v", len(own), len(ifas), ifas)
	}
}
