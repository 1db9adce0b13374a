package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPlainListenBeyondLoopbackRefused: serve --http and ui --listen on an
// address beyond loopback over plain HTTP exit 2, naming the flag and the
// flags that allow it. Before, both listened on 0.0.0.0 (the README's
// serve.yaml did), sending tokens, session cookies and every record across
// the network in clear.
func TestPlainListenBeyondLoopbackRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		flag string
	}{
		{"serve on every interface", []string{"serve", "--http", "0.0.0.0:0"}, "--http"},
		{"serve on an empty host", []string{"serve", "--http", ":0"}, "--http"},
		{"ui on every interface", []string{"ui", "--listen", "0.0.0.0:0", "--open=false"}, "--listen"},
		{"serve with half of TLS", []string{"serve", "--http", "0.0.0.0:0", "--http-tls-cert", "cert.pem"}, "--http-tls-key"},
		{"serve with no streams", []string{"serve", "--max-streams", "0"}, "--max-streams"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(tc.args, "--config", exampleConfig, "--data", t.TempDir(), "--workspace", t.TempDir())
			code, _, errb := runCmd(t, args...)
			if code != exitUsage || !strings.Contains(errb, tc.flag) {
				t.Fatalf("%v: exit %d, want %d naming %s\n%s", tc.args, code, exitUsage, tc.flag, errb)
			}
			if strings.Contains(tc.name, "interface") && !strings.Contains(errb, "--behind-tls-proxy") {
				t.Fatalf("%v: the refusal does not name --behind-tls-proxy\n%s", tc.args, errb)
			}
		})
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, PEM.
func selfSigned(t *testing.T) (certFile, keyFile string) {
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
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyFile = writeFile(t, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})))
	return certFile, keyFile
}

// TestServeHTTPS: with --http-tls-cert and --http-tls-key serve listens on
// every interface, over HTTPS only; /healthz answers without a login and
// the fanout's stream asks for one. Before, there were no such flags.
func TestServeHTTPS(t *testing.T) {
	t.Parallel()
	certFile, keyFile := selfSigned(t)
	base, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "noeta.yaml", string(base)+"observers:\n  fanout: {}\n")
	_, port, _ := net.SplitHostPort(freeAddr(t))
	p := startEngine(t, "serve", "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t),
		"--http", "0.0.0.0:"+port, "--http-tls-cert", certFile, "--http-tls-key", keyFile, "--log-format", "json")
	p.waitLog(t, "serving", time.Minute)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url string) (int, string) {
		t.Helper()
		res, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("https://127.0.0.1:" + port + "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz over HTTPS: %d %q", code, body)
	}
	if code, body := get("https://127.0.0.1:" + port + "/tasks/01M8XFYHEEED70J0F081H4WFWH/events"); code != http.StatusUnauthorized {
		t.Errorf("the fanout without a login: %d %q; want 401", code, body)
	}
	if code, _ := get("http://127.0.0.1:" + port + "/healthz"); code == http.StatusOK {
		t.Errorf("plain HTTP on the HTTPS listener answered 200")
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, p.stderr)
	}
}
