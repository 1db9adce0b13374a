package embedded_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   embedded.Config
		field string // "" = valid
	}{
		{name: "minimal", cfg: embedded.Config{Dir: "x"}},
		{name: "all set", cfg: embedded.Config{Dir: "x", Host: "::1", Port: 4222, ServerName: "a", SyncInterval: time.Second, MaxMemory: 1, MaxStore: 1, ReadyTimeout: time.Second}},
		{name: "no dir", cfg: embedded.Config{}, field: "Dir"},
		{name: "blank dir", cfg: embedded.Config{Dir: "  "}, field: "Dir"},
		{name: "host with scheme", cfg: embedded.Config{Dir: "x", Host: "nats://127.0.0.1"}, field: "Host"},
		{name: "negative port", cfg: embedded.Config{Dir: "x", Port: -1}, field: "Port"},
		{name: "port too big", cfg: embedded.Config{Dir: "x", Port: 70000}, field: "Port"},
		{name: "server name with space", cfg: embedded.Config{Dir: "x", ServerName: "a b"}, field: "ServerName"},
		{name: "negative sync", cfg: embedded.Config{Dir: "x", SyncInterval: -time.Second}, field: "SyncInterval"},
		{name: "negative max memory", cfg: embedded.Config{Dir: "x", MaxMemory: -1}, field: "MaxMemory"},
		{name: "negative max store", cfg: embedded.Config{Dir: "x", MaxStore: -1}, field: "MaxStore"},
		{name: "negative ready timeout", cfg: embedded.Config{Dir: "x", ReadyTimeout: -1}, field: "ReadyTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValidate(t, tt.cfg.Validate(), tt.field)
		})
	}
}

func TestClusterConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   embedded.ClusterConfig
		field string
	}{
		{name: "minimal", cfg: embedded.ClusterConfig{Dir: "x"}},
		{name: "five nodes", cfg: embedded.ClusterConfig{Dir: "x", Size: 5, Name: "c", SyncInterval: time.Second, ReadyTimeout: time.Second}},
		{name: "no dir", cfg: embedded.ClusterConfig{}, field: "Dir"},
		{name: "too small", cfg: embedded.ClusterConfig{Dir: "x", Size: 2}, field: "Size"},
		{name: "negative size", cfg: embedded.ClusterConfig{Dir: "x", Size: -3}, field: "Size"},
		{name: "name with space", cfg: embedded.ClusterConfig{Dir: "x", Name: "a b"}, field: "Name"},
		{name: "negative sync", cfg: embedded.ClusterConfig{Dir: "x", SyncInterval: -1}, field: "SyncInterval"},
		{name: "negative ready timeout", cfg: embedded.ClusterConfig{Dir: "x", ReadyTimeout: -1}, field: "ReadyTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValidate(t, tt.cfg.Validate(), tt.field)
		})
	}
}

func checkValidate(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, embedded.ErrInvalidConfig) {
		t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Errorf("Validate() = %q, want it to name %s", err, field)
	}
}

// TestDurableAcrossRestart is the embedded default's promise: an acknowledged
// append to a file stream is there after the server restarts on its Dir.
func TestDurableAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()

	began := time.Now()
	s := start(t, embedded.Config{Dir: dir})
	t.Logf("start: %v", time.Since(began))

	js := connect(t, s.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	ack, err := js.Publish(ctx, "t.a", []byte("hello"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}

	began = time.Now()
	s2, err := s.Restart(ctx)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Cleanup(s2.Shutdown)
	t.Logf("restart (shutdown + start): %v", time.Since(began))

	if got, want := s2.ClientURL(), s.ClientURL(); got != want {
		t.Errorf("ClientURL after restart = %s, want %s (the port is kept)", got, want)
	}
	if s.NATS().Running() {
		t.Errorf("old server still running after Restart")
	}
	js2 := connect(t, s2.ClientURL())
	st, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("Stream after restart: %v", err)
	}
	msg, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("GetMsg(%d) after restart: %v", ack.Sequence, err)
	}
	if got := string(msg.Data); got != "hello" {
		t.Errorf("message after restart = %q, want %q", got, "hello")
	}
}

// TestRestartPortTaken: a kernel-picked port that someone took while the
// server was down is given up for a new one rather than failing the restart.
func TestRestartPortTaken(t *testing.T) {
	t.Parallel()
	s := start(t, embedded.Config{Dir: t.TempDir()})
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")
	s.Shutdown()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("taking the old port: %v", err)
	}
	defer l.Close()

	s2, err := s.Restart(t.Context())
	if err != nil {
		t.Fatalf("Restart with the old port taken: %v", err)
	}
	t.Cleanup(s2.Shutdown)
	if s2.ClientURL() == s.ClientURL() {
		t.Errorf("ClientURL after restart = %s, want a new port", s2.ClientURL())
	}
	connect(t, s2.ClientURL())
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	s := start(t, embedded.Config{Dir: t.TempDir()})

	jc := s.NATS().JetStreamConfig()
	if jc == nil {
		t.Fatal("JetStreamConfig() = nil, want JetStream enabled")
	}
	if !jc.SyncAlways {
		t.Errorf("JetStreamConfig().SyncAlways = false, want true by default")
	}
	cfg := s.Config()
	if cfg.Host != "127.0.0.1" || cfg.ServerName != "noeta-embedded" || cfg.ReadyTimeout != 10*time.Second {
		t.Errorf("Config() = host %q name %q timeout %v, want the documented defaults", cfg.Host, cfg.ServerName, cfg.ReadyTimeout)
	}
	if got := s.NATS().Name(); got != "noeta-embedded" {
		t.Errorf("server name = %q, want noeta-embedded", got)
	}
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatalf("ClientURL %q: %v", s.ClientURL(), err)
	}
	if u.Scheme != "nats" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "0" {
		t.Errorf("ClientURL() = %q, want nats://127.0.0.1:<port>", s.ClientURL())
	}
}

func TestSyncIntervalOptOut(t *testing.T) {
	t.Parallel()
	s := start(t, embedded.Config{Dir: t.TempDir(), SyncInterval: 30 * time.Second, MaxMemory: 64 << 20, MaxStore: 256 << 20})
	jc := s.NATS().JetStreamConfig()
	if jc.SyncAlways || jc.SyncInterval != 30*time.Second {
		t.Errorf("JetStreamConfig() sync = always %v interval %v, want false 30s", jc.SyncAlways, jc.SyncInterval)
	}
	if jc.MaxMemory != 64<<20 || jc.MaxStore != 256<<20 {
		t.Errorf("JetStreamConfig() limits = %d/%d, want %d/%d", jc.MaxMemory, jc.MaxStore, 64<<20, 256<<20)
	}
}

func TestStartCancelledContext(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "never")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	began := time.Now()
	s, err := embedded.Start(ctx, embedded.Config{Dir: dir})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start with a cancelled ctx succeeded")
	}
	if !errors.Is(err, embedded.ErrNotReady) || !errors.Is(err, context.Canceled) {
		t.Errorf("Start = %v, want ErrNotReady and context.Canceled", err)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Errorf("Start took %v with a cancelled ctx, want it to fail fast", d)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(Dir) = %v, want not created", err)
	}
}

// TestStartDeadline: readiness is bounded by ctx, and a server that missed it
// is shut down, not leaked.
func TestStartDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	s, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err == nil {
		// A very fast machine may make it; that is not a failure of Start.
		s.Shutdown()
		t.Log("Start beat a 1ms deadline")
		return
	}
	if !errors.Is(err, embedded.ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start = %v, want ErrNotReady and context.DeadlineExceeded", err)
	}
}

func TestStartBadDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(t.Context(), embedded.Config{Dir: file})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start on a file succeeded")
	}
	if !errors.Is(err, embedded.ErrStartFailed) || !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("Start = %v, want ErrStartFailed wrapping ENOTDIR", err)
	}
}

func TestStartPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	began := time.Now()
	s, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), Port: port})
	if err == nil {
		s.Shutdown()
		t.Fatalf("Start on busy port %d succeeded", port)
	}
	if !errors.Is(err, embedded.ErrStartFailed) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Start = %v, want ErrStartFailed wrapping EADDRINUSE", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Start took %v to report a busy port, want it to fail at once", d)
	}
}

func TestLogger(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := start(t, embedded.Config{Dir: t.TempDir(), ServerName: "logged", Logger: l})
	s.Shutdown()
	out := buf.String()
	for _, want := range []string{"Server is ready", "server=logged", "component=nats-server", "Server Exiting"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestShutdownReleases is not parallel: it counts goroutines.
func TestShutdownReleases(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	js := connect(t, s.ClientURL())
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")

	var wg sync.WaitGroup
	for range 3 { // idempotent and safe concurrently
		wg.Go(s.Shutdown)
	}
	wg.Wait()
	s.Shutdown()

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("client port still taken after Shutdown: %v", err)
	} else {
		l.Close()
	}
	checkGoroutines(t, before)
}

func TestCluster(t *testing.T) {
	ctx := t.Context()
	before := runtime.NumGoroutine()

	began := time.Now()
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(c.Shutdown)
	t.Logf("cluster start: %v", time.Since(began))

	servers := c.Servers()
	if len(servers) != 3 || len(c.ClientURLs()) != 3 {
		t.Fatalf("got %d servers, %d URLs, want 3", len(servers), len(c.ClientURLs()))
	}
	for i, s := range servers {
		if got, want := s.NATS().Name(), fmt.Sprintf("n%d", i+1); got != want {
			t.Errorf("node %d name = %q, want %q", i, got, want)
		}
		if !s.NATS().JetStreamConfig().SyncAlways {
			t.Errorf("node %d: SyncAlways = false, want true by default", i)
		}
	}
	if c.Leader() < 0 {
		t.Errorf("Leader() = -1 after StartCluster, want a meta leader")
	}

	js := connect(t, c.ClientURL())
	// The new stream answers once its own Raft group has a leader: on a
	// loaded two-core machine that election took longer than the client's
	// default 5 s (a clean-clone CI run), so the request gets 30 s.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	cancel()
	if err != nil {
		t.Fatalf("CreateStream R3: %v", err)
	}
	// Not a plain Publish: the new stream's leader may sit on another node
	// than the client, and its interest in r3.> reaches the client's node over
	// the routes a moment after CreateStream returns; until then a publish
	// gets no responders.
	publishRetry(t, js, "r3.a", "one")
	// Every node serves the read, and every node's replica holds the message.
	for i, u := range c.ClientURLs() {
		readFrom(t, u, 1, "one")
		waitReplica(t, c.Servers()[i], "R3", 1)
	}

	// Fail over: stop the stream leader; a publish succeeds once a new leader
	// is elected.
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q is not a node", info.Cluster.Leader)
	}
	began = time.Now()
	c.StopNode(leader)
	t.Logf("stop node %d (stream leader): %v", leader, time.Since(began))
	began = time.Now()
	publishRetry(t, js, "r3.b", "two")
	t.Logf("first publish after failover: %v", time.Since(began))
	info, err = st.Info(ctx)
	if err != nil {
		t.Fatalf("Info after failover: %v", err)
	}
	if info.Cluster.Leader == "" || c.Index(info.Cluster.Leader) == leader {
		t.Errorf("stream leader after failover = %q, want another node", info.Cluster.Leader)
	}

	began = time.Now()
	if err := c.RestartNode(ctx, leader); err != nil {
		t.Fatalf("RestartNode(%d): %v", leader, err)
	}
	t.Logf("restart node %d: %v", leader, time.Since(began))
	restarted := c.Servers()[leader]
	if !restarted.NATS().JetStreamIsCurrent() {
		t.Errorf("node %d not JetStream-current after RestartNode", leader)
	}
	waitReplica(t, restarted, "R3", 2)
	readFrom(t, restarted.ClientURL(), 2, "two")

	urls := c.ClientURLs()
	c.Shutdown()
	c.Shutdown() // idempotent
	for _, u := range urls {
		addr := strings.TrimPrefix(u, "nats://")
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("client port %s still taken after Shutdown: %v", addr, err)
			continue
		}
		l.Close()
	}
	closeClients(t)
	checkGoroutines(t, before)
}

func TestStartClusterCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: t.TempDir()})
	if err == nil {
		c.Shutdown()
		t.Fatal("StartCluster with a cancelled ctx succeeded")
	}
	if !errors.Is(err, embedded.ErrNotReady) || !errors.Is(err, context.Canceled) {
		t.Errorf("StartCluster = %v, want ErrNotReady and context.Canceled", err)
	}
}

// --- helpers ---

func start(t *testing.T, cfg embedded.Config) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

var (
	clientsMu sync.Mutex
	clients   = map[*testing.T][]*nats.Conn{}
)

// connect opens a client closed at cleanup (or earlier by closeClients, for
// tests that count goroutines).
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Connect(%s): %v", url, err)
	}
	clientsMu.Lock()
	clients[t] = append(clients[t], nc)
	clientsMu.Unlock()
	t.Cleanup(func() { closeClients(t) })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func closeClients(t *testing.T) {
	clientsMu.Lock()
	ncs := clients[t]
	delete(clients, t)
	clientsMu.Unlock()
	for _, nc := range ncs {
		nc.Close()
	}
}

// readFrom reads message seq through a client connected to url only.
func readFrom(t *testing.T, url string, seq uint64, want string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("Connect(%s): %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		st, err := js.Stream(ctx, "R3")
		if err == nil {
			var msg *jetstream.RawStreamMsg
			if msg, err = st.GetMsg(ctx, seq); err == nil {
				if got := string(msg.Data); got != want {
					t.Fatalf("via %s: message %d = %q, want %q", url, seq, got, want)
				}
				return
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("via %s: reading message %d: %v", url, seq, last)
}

// waitReplica waits until the node's own replica of stream holds msgs
// messages, read from the node's monitoring state rather than over the API
// (which the stream leader answers).
func waitReplica(t *testing.T, s *embedded.Server, stream string, msgs uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got uint64
	for time.Now().Before(deadline) {
		got = 0
		acc, err := s.NATS().JszAccount(&server.JSzOptions{Account: "$G", Streams: true})
		if err == nil {
			for _, sd := range acc.Streams {
				if sd.Name == stream {
					got = sd.State.Msgs
				}
			}
		}
		if got == msgs {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: replica of %s holds %d messages, want %d", s.NATS().Name(), stream, got, msgs)
}

func publishRetry(t *testing.T, js jetstream.JetStream, subject, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		// A Msg-Id makes a retry after an ambiguous failure harmless.
		_, err := js.Publish(pctx, subject, []byte(data), jetstream.WithMsgID(subject+"/"+data))
		pcancel()
		if err == nil {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("publish %s never succeeded: %v", subject, last)
}

// checkGoroutines allows a little slack (runtime and test framework
// goroutines come and go) but catches a server's worth of leaks, which is
// dozens.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	const slack = 5
	deadline := time.Now().Add(5 * time.Second)
	var now int
	for time.Now().Before(deadline) {
		if now = runtime.NumGoroutine(); now <= before+slack {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	t.Errorf("goroutines after Shutdown = %d, before = %d (slack %d)\n%s", now, before, slack, buf[:n])
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestConnectInProcess: the embedding process's connection goes through
// memory, not the TCP listener, and still authenticates; other clients keep
// TCP. Before ConnectInProcess existed the engine dialled its own server at
// 127.0.0.1 like any other client.
func TestConnectInProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	nc, err := srv.ConnectInProcess(nats.Name("in-process"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// net.Pipe's address: no socket behind it.
	if got := nc.ConnectedAddr(); got != "pipe" {
		t.Fatalf("in-process connection's address = %q, want pipe (not a TCP socket)", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INPROC", Subjects: []string{"inproc.>"}}); err != nil {
		t.Fatalf("JetStream over the in-process connection: %v", err)
	}
	if _, err := js.Publish(ctx, "inproc.a", []byte("x")); err != nil {
		t.Fatal(err)
	}

	// The TCP listener still serves everyone else, who sees the same store.
	tcp, err := nats.Connect(srv.ClientURL(), srv.ClientOptions()...)
	if err != nil {
		t.Fatalf("TCP client beside the in-process one: %v", err)
	}
	defer tcp.Close()
	if _, _, err := net.SplitHostPort(tcp.ConnectedAddr()); err != nil {
		t.Fatalf("TCP client's address %q is not host:port: %v", tcp.ConnectedAddr(), err)
	}
	tjs, _ := jetstream.New(tcp)
	st, err := tjs.Stream(ctx, "INPROC")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("TCP client sees %v messages (err %v), want 1", info, err)
	}
}

// TestConnectInProcessAuthenticates: going through memory is no way around
// the server's user: wrong credentials are refused as over TCP.
func TestConnectInProcessAuthenticates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.ConnectInProcess(nats.UserInfo("u", "wrong"))
	if err == nil {
		nc.Close()
		t.Fatal("in-process connection with a wrong password was accepted")
	}
	// The server drops the pipe after its -ERR, so what nats.go reports
	// varies (an authorization error or the closed pipe): refused is what
	// counts.
	t.Logf("refused: %v", err)
}
