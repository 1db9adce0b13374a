package webui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
)

const bobToken = "bob-secret-token"

// listenServer serves s on a loopback port through NewHTTPServer with l.
func listenServer(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := h.(*Server); ok {
		s.SetListen(ln.Addr().String())
	}
	srv := NewHTTPServer(h, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestSlowRequestsAreCutOff: many connections that send half a request —
// half the headers, or all the headers of a login and a part of its body —
// are each closed by the server once its timeouts pass. Before, serve and
// ui bounded only the headers (10s) and nothing bounded a body, so 1,500
// half-sent logins held 1,500 connections and goroutines open for as long
// as their senders liked.
func TestSlowRequestsAreCutOff(t *testing.T) {
	h := openHost(t)
	s := newServer(t, h)
	addr := listenServer(t, s, Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond})
	const n = 200
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		part := "POST /api/v1/login HTTP/1.1\r\nHost: " + addr + "\r\nContent-Ty"
		if i%2 == 1 {
			part = "POST /api/v1/login HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"token\": \"a"
		}
		if _, err := io.WriteString(c, part); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		// Generous: this waits for the close, it does not time it.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		_, err := io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d (half-sent %s) still open after two minutes", i, map[bool]string{false: "headers", true: "body"}[i%2 == 1])
		}
	}
}

// TestStreamCaps: live streams are capped per principal (429) and in all
// (503), with a body that names the cap; a stream that ends gives its
// slot back. Before, every authenticated client could open as many as it
// liked (300 streams took an engine from 70 to 164 MB).
func TestStreamCaps(t *testing.T) {
	h := openHost(t)
	hc := testHTTP()
	hc.Tokens = append(hc.Tokens, config.HTTPToken{Name: "bob", SHA256: tokenHash(bobToken)})
	s, err := New(Config{Host: h, HTTP: hc, Limits: Limits{MaxStreams: 3, MaxStreamsPerPrincipal: 2}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	addr := listenServer(t, s, Limits{})
	open := func(ctx context.Context, tok string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/v1/approvals/stream", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	admitted := func(ctx context.Context, tok string) context.CancelFunc {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		res := open(ctx, tok)
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("stream for %s: %d %s", tok, res.StatusCode, b)
		}
		next(t, readEvents(t, res), "snapshot")
		return cancel
	}
	refused := func(tok string, status int, want string) {
		t.Helper()
		res := open(t.Context(), tok)
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != status || !strings.Contains(string(b), want) || res.Header.Get("Retry-After") == "" {
			t.Fatalf("stream for %s past the cap: %d %s; want %d naming %q, with Retry-After", tok, res.StatusCode, b, status, want)
		}
	}
	first := admitted(t.Context(), aliceToken)
	admitted(t.Context(), aliceToken)
	refused(aliceToken, http.StatusTooManyRequests, "max streams per client: 2")
	admitted(t.Context(), bobToken)
	refused(bobToken, http.StatusServiceUnavailable, "max streams: 3")

	first()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithCancel(t.Context())
		res := open(ctx, aliceToken)
		if res.StatusCode == http.StatusOK {
			cancel()
			break
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's slot never came back: %d", res.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFanoutNeedsLogin: the fanout's /tasks/{id}/events, served by the
// host beside the API (serve --http), streams whole records only to a
// principal of the http: section, through the same gate as the API. Before,
// it streamed every record of any task to anyone who could reach the port,
// while /api/v1 beside it asked for a login.
func TestFanoutNeedsLogin(t *testing.T) {
	cfg, err := config.Parse("noeta.yaml", []byte(approvalYAML+"observers:\n  fanout: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gate := NewGate(testHTTP(), Limits{})
	for _, tc := range []struct {
		name    string
		streams func(http.Handler) http.Handler
		tok     string
		want    int
	}{
		{"no gate, no login", nil, "", http.StatusForbidden},
		{"no gate, a token", nil, aliceToken, http.StatusForbidden},
		{"no login", gate.Streams, "", http.StatusUnauthorized},
		{"a wrong token", gate.Streams, "guess", http.StatusUnauthorized},
		{"a token", gate.Streams, aliceToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := hostconfig.Open(t.Context(), hostconfig.Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, ServesHTTP: true,
				Streams: tc.streams, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Close)
			tf, err := policy.ParseTaskFile("task.yaml", []byte(askTask))
			if err != nil {
				t.Fatal(err)
			}
			sub, err := host.TaskFromFile(tf)
			if err != nil {
				t.Fatal(err)
			}
			id, err := h.Submit(t.Context(), sub)
			if err != nil {
				t.Fatal(err)
			}
			addr := listenServer(t, h.Handler(), Limits{})
			req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("http://%s/tasks/%s/events?follow=false", addr, id), nil)
			if tc.tok != "" {
				req.Header.Set("Authorization", "Bearer "+tc.tok)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.want {
				t.Fatalf("GET /tasks/%s/events: %d %s; want %d", id, res.StatusCode, b, tc.want)
			}
			if got := strings.Contains(string(b), "TaskCreated"); got != (tc.want == http.StatusOK) {
				t.Fatalf("records sent: %v; body %s", got, b)
			}
		})
	}
}

// TestCheckListen: a plain HTTP listener beyond loopback is refused
// unless TLS is served or a TLS proxy is declared in front.
func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr       string
		tls, proxy bool
		ok         bool
	}{
		{"127.0.0.1:9465", false, false, true},
		{"[::1]:9465", false, false, true},
		{"localhost:9465", false, false, true},
		{"0.0.0.0:9465", false, false, false},
		{":9465", false, false, false},
		{"[::]:9465", false, false, false},
		{"10.0.0.5:9465", false, false, false},
		{"inbox.example.com:443", false, false, false},
		{"0.0.0.0:9465", true, false, true},
		{"0.0.0.0:9465", false, true, true},
		{"", false, false, true},
	} {
		err := CheckListen("--http", tc.addr, tc.tls, tc.proxy, "--http-tls-cert and --http-tls-key", "--behind-tls-proxy")
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, tls %v, proxy %v): %v; want ok %v", tc.addr, tc.tls, tc.proxy, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrPlainBeyondLoopback) || !strings.Contains(err.Error(), "--behind-tls-proxy") || !strings.Contains(err.Error(), "--http ")) {
			t.Errorf("CheckListen(%q): %v; want it to name --http and the flags that allow it", tc.addr, err)
		}
	}
}

// TestFanoutStreamEndsAtLogout: a fanout stream opened with a session ends
// once the session is logged out, as the API's own streams do. Before the
// fanout asked for a login at all, nothing ended it but the client.
func TestFanoutStreamEndsAtLogout(t *testing.T) {
	cfg, err := config.Parse("noeta.yaml", []byte(approvalYAML+"observers:\n  fanout: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gate := NewGate(testHTTP(), Limits{StreamRecheck: 50 * time.Millisecond})
	h, err := hostconfig.Open(t.Context(), hostconfig.Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, ServesHTTP: true,
		Streams: gate.Streams, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ui, err := New(Config{Host: h.Host, HTTP: testHTTP(), Gate: gate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ui.Close)
	mux := http.NewServeMux()
	mux.Handle("/tasks/", h.Handler())
	mux.Handle("/", ui)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ui.SetListen(addr)
	srv := NewHTTPServer(mux, Limits{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	id, _ := submitWaiting(t, h.Host)

	res, err := http.Post("http://"+addr+"/api/v1/login", "application/json", strings.NewReader(`{"token": "`+aliceToken+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == SessionCookie {
			cookie = c
		}
	}
	if res.StatusCode != http.StatusOK || cookie == nil {
		t.Fatalf("login: %d, cookie %v", res.StatusCode, cookie)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/tasks/"+id+"/events", nil)
	req.AddCookie(cookie)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("fanout with a session: %d", res.StatusCode)
	}
	evs := readEvents(t, res)
	next(t, evs, "ApprovalRequested")

	lo, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/logout", strings.NewReader("{}"))
	lo.Header.Set("Content-Type", "application/json")
	lo.Header.Set("Origin", "http://"+addr)
	lo.AddCookie(cookie)
	lres, err := http.DefaultClient.Do(lo)
	if err != nil {
		t.Fatal(err)
	}
	lres.Body.Close()
	if lres.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", lres.StatusCode)
	}
	for range evs {
		// Drained once the server ends the stream; the two-minute context
		// ends it otherwise, and that is the failure below.
	}
	if ctx.Err() != nil {
		t.Fatal("the fanout stream outlived its session's logout")
	}
}

// TestSessionCookieSecureBehindTLSProxy: behind a TLS-terminating proxy
// the browser speaks HTTPS, so the session cookie is Secure although the
// request reaches the server plain. Before, it was Secure only when the
// server itself spoke TLS, so behind a proxy a browser would also send it
// over plain HTTP.
func TestSessionCookieSecureBehindTLSProxy(t *testing.T) {
	h := openHost(t)
	for _, behind := range []bool{false, true} {
		s, err := New(Config{Host: h, HTTP: testHTTP(), Listen: []string{"127.0.0.1:8080"}, BehindTLSProxy: behind, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		w := do(s, req{method: "POST", path: "/api/v1/login", body: `{"token": "` + aliceToken + `"}`, hdr: map[string]string{"Content-Type": "application/json"}})
		res := w.Result()
		var secure, found bool
		for _, c := range res.Cookies() {
			if c.Name == SessionCookie {
				found, secure = true, c.Secure
			}
		}
		if w.Code != http.StatusOK || !found || secure != behind {
			t.Errorf("behind a TLS proxy %v: login %d, cookie found %v secure %v; want secure %v", behind, w.Code, found, secure, behind)
		}
	}
}
