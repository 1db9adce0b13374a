package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for the zero values of [Config] and [ClusterConfig].
const (
	DefaultHost         = "127.0.0.1"
	DefaultServerName   = "noeta-embedded"
	DefaultReadyTimeout = 10 * time.Second
)

var (
	// ErrInvalidConfig: Validate refused a Config or ClusterConfig. The message
	// names the field. Start and StartCluster return it before touching disk.
	ErrInvalidConfig = errors.New("embedded: invalid config")

	// ErrStartFailed: the server could not start — the store directory cannot
	// be created, nats-server refused the options, or it reported a fatal error
	// while starting. The cause stays in the chain: errors.Is(err,
	// syscall.EADDRINUSE) for a busy port, syscall.ENOTDIR / *fs.PathError for a
	// Dir that is a file.
	ErrStartFailed = errors.New("embedded: start failed")

	// ErrNotReady: JetStream did not become ready before the context ended or
	// ReadyTimeout passed. The context's error (context.Canceled or
	// context.DeadlineExceeded) is in the chain too, and the message carries
	// the last readiness probe's failure.
	ErrNotReady = errors.New("embedded: not ready")
)

// Config configures one standalone server. The zero value of every field but
// Dir means the documented default; pass it by value.
type Config struct {
	// Dir is the JetStream store directory; required. It is created if
	// missing. The caller picks it: ./.noeta/nats for the engine, t.TempDir()
	// in tests. nats-server keeps its files under Dir/jetstream.
	Dir string

	// Host is the client listen address, default 127.0.0.1. Anything not
	// loopback exposes the server to the network, so it must be set on
	// purpose.
	Host string

	// User and Password, when set, are the one user the server accepts:
	// every client must authenticate as it (the readiness probe does). Empty,
	// the server accepts anyone who can reach Host, which on loopback is
	// every local user of the machine.
	User     string
	Password string

	// Port is the client port; 0 lets the kernel pick a free one (nats-server's
	// -1), which is what tests want. The chosen URL is [Server.ClientURL].
	Port int

	// ServerName is the server's name, default "noeta-embedded". It must not
	// contain spaces. It names the server in logs and in JetStream cluster
	// state, so keep it stable across restarts of the same Dir.
	ServerName string

	// SyncInterval is how often the store is fsynced. 0, the default, means
	// every write ("sync: always"): an acknowledged append survives a host
	// crash or power loss, which is the promise the engine makes. A positive
	// value trades that for throughput; nats-server's own default is 2m.
	SyncInterval time.Duration

	// MaxMemory and MaxStore are the JetStream memory and file storage limits in
	// bytes; 0 lets nats-server size them from the machine.
	MaxMemory int64
	MaxStore  int64

	// ReadyTimeout bounds Start (and Restart) in addition to its ctx; default
	// 10s.
	ReadyTimeout time.Duration

	// Logger receives the server's log (notices at Info, debug at Debug, the
	// protocol trace at [LevelTrace]); nil discards it.
	Logger *slog.Logger
}

// Validate reports the first invalid field. It does not touch the disk: a Dir
// that cannot be created is reported by Start.
func (c Config) Validate() error {
	switch {
	case strings.TrimSpace(c.Dir) == "":
		return fieldErr("Dir", "is required")
	case strings.Contains(c.Host, "://") || (c.Host != "" && strings.ContainsAny(c.Host, " /")):
		return fieldErr("Host", fmt.Sprintf("%q is not a host name or IP address", c.Host))
	case (c.User == "") != (c.Password == ""):
		return fieldErr("User", "and Password go together")
	case c.Port < 0 || c.Port > 65535:
		return fieldErr("Port", fmt.Sprintf("%d is out of range (0 picks a free port)", c.Port))
	case strings.ContainsAny(c.ServerName, " \t\n"):
		return fieldErr("ServerName", fmt.Sprintf("%q must not contain spaces", c.ServerName))
	case c.SyncInterval < 0:
		return fieldErr("SyncInterval", fmt.Sprintf("%v is negative (0 means sync always)", c.SyncInterval))
	case c.MaxMemory < 0:
		return fieldErr("MaxMemory", fmt.Sprintf("%d is negative (0 means the server default)", c.MaxMemory))
	case c.MaxStore < 0:
		return fieldErr("MaxStore", fmt.Sprintf("%d is negative (0 means the server default)", c.MaxStore))
	case c.ReadyTimeout < 0:
		return fieldErr("ReadyTimeout", fmt.Sprintf("%v is negative", c.ReadyTimeout))
	}
	return nil
}

func fieldErr(field, reason string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, reason)
}

// withDefaults fills the zero values and makes Dir absolute, so a restart
// after a chdir still finds the same store.
func (c Config) withDefaults() (Config, error) {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.ServerName == "" {
		c.ServerName = DefaultServerName
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("%w: Dir %q: %w", ErrStartFailed, c.Dir, err)
	}
	c.Dir = dir
	return c, nil
}

// Server is one running nats-server with JetStream. Its methods are safe for
// concurrent use. A Server is not reused after Shutdown: [Server.Restart]
// returns a new one.
type Server struct {
	spec         spec
	ns           *server.Server
	log          *serverLog
	clientURL    string
	startDone    chan struct{} // closed when ns.Start returns
	shutdownOnce sync.Once
}

// spec is everything needed to (re)start one server: the resolved Config and,
// for a cluster member, its route setup.
type spec struct {
	cfg       Config // defaults applied, Dir absolute
	cluster   string // cluster name; "" for a standalone server
	routePort int
	routes    []*url.URL
}

// options builds fresh nats-server options. A new struct every time matters:
// nats-server writes back into the Options it is given (the random port it
// chose, baseline defaults), so one must never be reused for a second server.
func (sp spec) options(clientPort int) *server.Options {
	c := sp.cfg
	o := &server.Options{
		ServerName:         c.ServerName,
		Host:               c.Host,
		Port:               clientPort,
		NoLog:              true, // logging goes through serverLog, installed by boot
		NoSigs:             true, // never install signal handlers in the host process
		JetStream:          true,
		StoreDir:           c.Dir,
		JetStreamMaxMemory: c.MaxMemory,
		JetStreamMaxStore:  c.MaxStore,
		Username:           c.User,
		Password:           c.Password,
	}
	if c.SyncInterval == 0 {
		// What "sync_interval: always" sets in a config file (opts.go): fsync
		// per write for R1 streams, and for R>1 the Raft WAL is fsynced instead.
		o.SyncAlways = true
	} else {
		o.SyncInterval = c.SyncInterval
	}
	if sp.cluster != "" {
		o.Cluster = server.ClusterOpts{Name: sp.cluster, Host: c.Host, Port: sp.routePort}
		o.Routes = sp.routes
	}
	return o
}

// Start runs a standalone server on cfg.Dir and returns once JetStream serves
// API requests: a nats.go client connected over TCP got an AccountInfo answer.
// ctx and cfg.ReadyTimeout bound the wait; on any failure the server is shut
// down before Start returns. Errors wrap [ErrInvalidConfig], [ErrStartFailed]
// or [ErrNotReady].
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return launch(ctx, spec{cfg: cfg}, port)
}

// launch boots sp and waits, within sp.cfg.ReadyTimeout, until the server is
// healthy and a client's AccountInfo succeeds through it. A cluster member is
// only healthy once the cluster has a meta leader it is current with.
func launch(ctx context.Context, sp spec, clientPort int) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, sp.cfg.ReadyTimeout)
	defer cancel()
	s, err := boot(sp, clientPort)
	if err != nil {
		return nil, err
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.Shutdown()
		return nil, err
	}
	err = withClient(ctx, s.clientURL, s.log.fatalErr, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.AccountInfo(ctx)
		return err
	}, s.ClientOptions()...)
	if err != nil {
		s.Shutdown()
		return nil, s.startErr(err)
	}
	return s, nil
}

// boot creates the store dir and starts the server without waiting for it.
func boot(sp spec, clientPort int) (*Server, error) {
	if err := os.MkdirAll(sp.cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: store dir: %w", ErrStartFailed, err)
	}
	ns, err := server.NewServer(sp.options(clientPort))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStartFailed, err)
	}
	s := &Server{spec: sp, ns: ns, log: newServerLog(sp.cfg.Logger, sp.cfg.ServerName), startDone: make(chan struct{})}
	debug, trace := s.log.levels()
	ns.SetLoggerV2(s.log, debug, trace, false)
	go func() {
		defer close(s.startDone)
		ns.Start()
	}()
	return s, nil
}

// waitHealthy polls the server's own health check until it passes, the server
// reports a fatal error, or ctx ends. Healthz covers what ReadyForConnections
// does not: JetStream enabled, its streams recovered from disk and, in a
// cluster, contact with a meta leader and being current with it.
func (s *Server) waitHealthy(ctx context.Context) error {
	err := poll(ctx, s.log.fatalErr, 10*time.Millisecond, func(context.Context) error {
		h := s.ns.Healthz(nil)
		if h.Error != "" || h.StatusCode >= 300 {
			return fmt.Errorf("healthz %d: %s", h.StatusCode, h.Error)
		}
		return nil
	})
	if err != nil {
		return s.startErr(err)
	}
	// The listener is up once healthy; the server wrote the chosen port back
	// into its options, and Addr reads it under the server's lock.
	addr, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("%w: server has no client listener", ErrStartFailed)
	}
	s.clientURL = "nats://" + net.JoinHostPort(s.spec.cfg.Host, strconv.Itoa(addr.Port))
	return nil
}

// startErr names the server in a start failure.
func (s *Server) startErr(err error) error {
	if errors.Is(err, ErrStartFailed) {
		return fmt.Errorf("%s: %w", s.spec.cfg.ServerName, err)
	}
	return err
}

// poll runs probe every interval until it succeeds. It gives up when ctx ends
// (an ErrNotReady that carries the last probe error) or when fatal reports the
// server's fatal error (an ErrStartFailed wrapping it): waiting on a server
// that has given up would only turn a clear cause into a timeout.
func poll(ctx context.Context, fatal func() error, interval time.Duration, probe func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := fatal(); err != nil {
			return fmt.Errorf("%w: %w", ErrStartFailed, err)
		}
		last := probe(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last probe: %v)", ErrNotReady, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// withClient connects a short-lived nats.go client to url and retries fn until
// it succeeds or ctx ends. It proves readiness the way a real caller sees it:
// over TCP, through the JetStream API.
func withClient(ctx context.Context, url string, fatal func() error, fn func(context.Context, jetstream.JetStream) error, opts ...nats.Option) error {
	var nc *nats.Conn
	defer func() {
		if nc != nil {
			nc.Close()
		}
	}()
	return poll(ctx, fatal, 50*time.Millisecond, func(ctx context.Context) error {
		if nc == nil {
			c, err := nats.Connect(url, append([]nats.Option{nats.Name("noeta-embedded-readiness"), nats.Timeout(time.Second)}, opts...)...)
			if err != nil {
				return err
			}
			nc = c
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return fn(rctx, js)
	})
}

// ClientURL is the URL clients connect to, e.g. nats://127.0.0.1:40123.
func (s *Server) ClientURL() string { return s.clientURL }

// ClientOptions are the nats.go options a client of the server needs beyond
// its URL: the user and password of [Config], if it has them.
func (s *Server) ClientOptions() []nats.Option {
	if s.spec.cfg.User == "" {
		return nil
	}
	return []nats.Option{nats.UserInfo(s.spec.cfg.User, s.spec.cfg.Password)}
}

// ConnectInProcess connects a nats.go client to the server through memory
// (nats-server's InProcessConn, a net.Pipe) instead of its TCP listener: no
// socket, no loopback stack, no kernel copies on each round trip. It is the
// connection of the process that embeds the server; everything else —
// another process attaching to it, the nats CLI, an observer-worker — keeps
// connecting to [Server.ClientURL] over TCP, which stays open. The client
// still authenticates as [Config] says (the options of
// [Server.ClientOptions] are included), and opts come after them. After
// Shutdown it can no longer reconnect: a [Server.Restart] returns a new
// Server to connect to. See docs/adr/0037.
func (s *Server) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	all := append(s.ClientOptions(), nats.InProcessServer(s.ns))
	// The URL is never dialled; nats.go needs one to name the server.
	nc, err := nats.Connect(s.clientURL, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("embedded: connect in process to %s: %w", s.spec.cfg.ServerName, err)
	}
	return nc, nil
}

// Config returns the Config the server runs with, defaults filled in and Dir
// made absolute.
func (s *Server) Config() Config { return s.spec.cfg }

// NATS returns the underlying nats-server, for tests that need to look inside
// (JetStreamConfig, Jsz, Healthz). Callers must not shut it down directly.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has released its ports, files
// and goroutines. It is idempotent and safe to call concurrently; every call
// returns only once shutdown is complete.
func (s *Server) Shutdown() {
	s.shutdownOnce.Do(func() {
		// Shutting down while Start is still running races inside nats-server
		// (Start sets running after Shutdown has cleared it), so let Start
		// finish first; it returns promptly once its accept loop is launched.
		<-s.startDone
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// Restart shuts s down (if it is not already) and starts a new server on the
// same Config and Dir, returning once it is ready as [Start] does. The client
// port is kept, so connected clients reconnect on their own; if the port had
// been picked at random and is now taken by someone else, a new one is picked
// and ClientURL changes. Restart a [Cluster] member with [Cluster.RestartNode]
// instead.
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	s.Shutdown()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return relaunch(ctx, s.spec, s.clientPort())
}

// clientPort is the port s listened on, or 0 if it never did.
func (s *Server) clientPort() int {
	if s.clientURL == "" {
		return 0
	}
	u, err := url.Parse(s.clientURL)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// relaunch starts sp again on its previous client port. A configured port is
// kept or the restart fails; a port the kernel picked is given up for a new
// random one if someone else took it meanwhile.
func relaunch(ctx context.Context, sp spec, prevPort int) (*Server, error) {
	port := sp.cfg.Port
	if port == 0 {
		port = prevPort
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	s, err := launch(ctx, sp, port)
	if err != nil && sp.cfg.Port == 0 && port != server.RANDOM_PORT && isAddrInUse(err) {
		return launch(ctx, sp, server.RANDOM_PORT)
	}
	return s, err
}

func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
