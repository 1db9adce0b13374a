package main

import (
	"strings"
	"testing"
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
