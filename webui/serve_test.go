package webui

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/config"
)

// testCert is a self-signed certificate for 127.0.0.1.
func testCert(t *testing.T) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestInbox: an inbox serves its Server on its listener, over HTTPS when
// given a certificate, gives one-time login links, and once its context
// ends shuts down; a listener that fails ends Wait with the error.
func TestInbox(t *testing.T) {
	t.Parallel()
	h := openHost(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	tests := []struct {
		name   string
		cert   *tls.Certificate
		scheme string
	}{
		{"plain", nil, "http://"},
		{"https", testCert(t), "https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(Config{Host: h, HTTP: testHTTP(), Listen: []string{ln.Addr().String()}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			in := StartInbox(s, ln, Limits{}, tt.cert)
			if in.URL() != tt.scheme+ln.Addr().String() {
				t.Errorf("URL() = %q", in.URL())
			}
			if l := in.LoginURL(Principal{Name: "cli:tester", Auth: "local"}); !strings.HasPrefix(l, in.URL()+"/login#token=") || len(l) < len(in.URL())+30 {
				t.Errorf("LoginURL() = %q", l)
			}
			res, err := client.Get(in.URL() + "/api/v1/approvals")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || res.Header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("GET /api/v1/approvals: %d, headers %v", res.StatusCode, res.Header)
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if err := in.Wait(ctx); err != nil {
				t.Errorf("Wait: %v", err)
			}
			if res, err := client.Get(in.URL() + "/api/v1/approvals"); err == nil {
				res.Body.Close()
				t.Error("the inbox still serves after Wait")
			}
		})
	}
	t.Run("the listener fails", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Host: h, HTTP: testHTTP(), Listen: []string{ln.Addr().String()}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		in := StartInbox(s, ln, Limits{}, nil)
		ln.Close()
		if err := in.Wait(t.Context()); err == nil {
			t.Error("Wait returned nil for a listener that failed")
		}
	})
}

// TestWriteWelcome: the local user gets a one-time link, returned for a
// browser; others are told to log in with a token, or that nobody can.
func TestWriteWelcome(t *testing.T) {
	t.Parallel()
	s := newServer(t, openHost(t))
	in := &Inbox{s: s, url: "http://127.0.0.1:9470"}
	tests := []struct {
		name    string
		local   *Principal
		http    config.HTTP
		want    string
		wantURL bool
	}{
		{"local", &Principal{Name: "cli:alice", Auth: "local"}, config.HTTP{}, "inbox: http://127.0.0.1:9470\nlog in as cli:alice (the link works once): http://127.0.0.1:9470/login#token=", true},
		{"tokens", nil, testHTTP(), "inbox: http://127.0.0.1:9470 (log in with a token of http.tokens)\n", false},
		{"nobody", nil, config.HTTP{}, "inbox: http://127.0.0.1:9470\nnobody can log in: the config has no http.tokens or http.trusted_proxy (engine token prints a token)\n", false},
	}
	for _, tt := range tests {
		var b strings.Builder
		url := in.WriteWelcome(&b, tt.local, tt.http)
		if !strings.HasPrefix(b.String(), tt.want) {
			t.Errorf("%s: wrote %q, want %q", tt.name, b.String(), tt.want)
		}
		if (url != "") != tt.wantURL || (tt.wantURL && !strings.Contains(b.String(), url)) {
			t.Errorf("%s: returned %q", tt.name, url)
		}
	}
}
