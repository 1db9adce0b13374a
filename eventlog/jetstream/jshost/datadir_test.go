package jshost

import (
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
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

// TestHolderConnectsInProcess: the process that holds the data directory
// reaches its own embedded server through memory (no loopback TCP on each
// append), while a client that attaches to it from outside, and the URL the
// lock file advertises, stay TCP. Before, the holder dialled its own
// server's 127.0.0.1 listener.
func TestHolderConnectsInProcess(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	runner, client := openHolderAndClient(t, data)
	if got := runner.nc.ConnectedAddr(); got != "pipe" {
		t.Fatalf("the holder's connection is to %q, want the in-process pipe", got)
	}
	h, ok := readHolder(data)
	if !ok || !loopbackURL(h.URL) {
		t.Fatalf("the lock file advertises %+v, want a loopback TCP URL for clients", h)
	}
	if _, ok := client.Attached(); !ok {
		t.Fatal("the second host did not attach")
	}
	if got := client.nc.ConnectedAddr(); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Fatalf("the attached client's connection is to %q, want the holder's TCP listener", got)
	}
}

// TestGroupCommitOnTheEmbeddedServer: the processes on the embedded server
// (which syncs every write), the holder and one attached to it, write with
// group commit (ADR 0107); a process on a remote server writes every
// record alone, since it cannot tell how that server syncs.
func TestGroupCommitOnTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	runner, client := openHolderAndClient(t, data)
	for name, b := range map[string]*Backend{"holder": runner, "attached": client} {
		if got := b.log.GroupCommit(); got != jetstream.DefaultGroupCommit {
			t.Errorf("the %s writes with GroupCommit %d, want %d", name, got, jetstream.DefaultGroupCommit)
		}
	}
	remote := openRemote(t)
	if got := remote.log.GroupCommit(); got != 0 {
		t.Errorf("on a remote server GroupCommit is %d, want 0", got)
	}
}

// TestAsyncLivenessOnTheEmbeddedServer: on the embedded default the lease
// keys and the ready signals are persisted asynchronously (ADR 0109), the
// rows and the task logs are not; on a remote server nothing is.
func TestAsyncLivenessOnTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	runner, _ := openHolderAndClient(t, t.TempDir())
	remote := openRemote(t)
	for name, b := range map[string]*Backend{"embedded": runner, "remote": remote} {
		js, err := natsjs.New(b.nc)
		if err != nil {
			t.Fatal(err)
		}
		for stream, async := range map[string]bool{
			"KV_noeta_leases": b == runner, "NOETA_READY": b == runner,
			"KV_noeta_tasks": false, "NOETA_TASKS": false, "NOETA_WAKE": false,
		} {
			s, err := js.Stream(t.Context(), stream)
			if err != nil {
				t.Fatalf("%s: stream %s: %v", name, stream, err)
			}
			if got := s.CachedInfo().Config.PersistMode == natsjs.AsyncPersistMode; got != async {
				t.Errorf("%s: %s persisted asynchronously = %v, want %v", name, stream, got, async)
			}
		}
	}
}

// openRemote opens a backend that runs tasks on a server of its own, as on
// a remote NATS; both close with t.
func openRemote(t *testing.T) *Backend {
	t.Helper()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	remote, err := Open(t.Context(), Options{NATS: Connection{URL: srv.ClientURL()}, Runs: true, Name: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Close() })
	return remote
}

// openHolderAndClient opens a backend that holds data and runs tasks, and
// a second one, which attaches to the first's server; both close with t.
func openHolderAndClient(t *testing.T, data string) (runner, client *Backend) {
	t.Helper()
	runner, err := Open(t.Context(), Options{DataDir: data, Runs: true, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runner.Close() })
	client, err = Open(t.Context(), Options{DataDir: data, Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return runner, client
}
