package host

import (
	"strings"
	"testing"
)

// TestClientSendsCredentialsOnlyToLoopback: a lock file naming a server that
// is not on this host is refused before any credentials are sent to it.
func TestClientSendsCredentialsOnlyToLoopback(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		"nats://127.0.0.1:4222": true, "nats://[::1]:4222": true, "nats://127.3.2.1:1": true,
		"nats://10.0.0.1:4222": false, "nats://example.com:4222": false, "nats://localhost.evil:1": false,
		"tls://127.0.0.1:4222": false, "nats://u:p@127.0.0.1:4222": false, "": false,
	}
	for u, want := range cases {
		if got := loopbackURL(u); got != want {
			t.Errorf("loopbackURL(%q) = %v, want %v", u, got, want)
		}
	}
	a, err := attachTo(t.Context(), &BusyError{Dir: t.TempDir(), Known: true, Holder: Holder{PID: 1, Verb: "serve", URL: "nats://10.0.0.1:4222"}})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") || a != nil {
		t.Fatalf("attach to a remote URL: %v (%+v)", err, a)
	}
}
