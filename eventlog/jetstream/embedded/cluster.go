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
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for the zero values of [ClusterConfig].
const (
	DefaultClusterSize         = 3
	DefaultClusterName         = "noeta"
	DefaultClusterReadyTimeout = 30 * time.Second
)

// readyStream is the R3 stream StartCluster creates and deletes to prove the
// cluster can place and serve a replicated stream.
const readyStream = "NOETA_EMBEDDED_READY"

// ClusterConfig configures an in-process JetStream cluster, for tests. The zero
// value of every field but Dir means the documented default; pass it by value.
type ClusterConfig struct {
	// Dir is the parent directory; required. Node i (0-based) is named
	// n<i+1> and stores under Dir/n<i+1>, so starting a cluster again on the
	// same Dir brings back the same nodes with their data.
	Dir string

	// Size is the number of nodes, default 3; at least 3, so that R3 streams
	// fit and the cluster keeps quorum with one node down.
	Size int

	// Name is the cluster name, default "noeta". It must not contain spaces.
	Name string

	// SyncInterval, ReadyTimeout and Logger apply to every node as in
	// [Config]; ReadyTimeout defaults to 30s here, since a cluster waits for a
	// Raft election. It bounds StartCluster and each RestartNode.
	SyncInterval time.Duration
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Validate reports the first invalid field.
func (c ClusterConfig) Validate() error {
	switch {
	case strings.TrimSpace(c.Dir) == "":
		return fieldErr("Dir", "is required")
	case c.Size != 0 && c.Size < 3:
		return fieldErr("Size", fmt.Sprintf("%d is below 3 (a JetStream cluster needs 3 nodes to keep quorum with one down)", c.Size))
	case strings.ContainsAny(c.Name, " \t\n"):
		return fieldErr("Name", fmt.Sprintf("%q must not contain spaces", c.Name))
	case c.SyncInterval < 0:
		return fieldErr("SyncInterval", fmt.Sprintf("%v is negative (0 means sync always)", c.SyncInterval))
	case c.ReadyTimeout < 0:
		return fieldErr("ReadyTimeout", fmt.Sprintf("%v is negative", c.ReadyTimeout))
	}
	return nil
}

func (c ClusterConfig) withDefaults() (ClusterConfig, error) {
	if c.Size == 0 {
		c.Size = DefaultClusterSize
	}
	if c.Name == "" {
		c.Name = DefaultClusterName
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultClusterReadyTimeout
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("%w: Dir %q: %w", ErrStartFailed, c.Dir, err)
	}
	c.Dir = dir
	return c, nil
}

// Cluster is an in-process JetStream cluster on loopback. Its methods are
// safe for concurrent use; StopNode, RestartNode and Shutdown run one at a
// time.
type Cluster struct {
	cfg ClusterConfig

	opMu  sync.Mutex   // serialises StopNode, RestartNode, Shutdown
	mu    sync.RWMutex // guards nodes
	nodes []*Server    // the current incarnation of each node, running or stopped
}

// StartCluster starts cfg.Size nodes, each routed to all the others, and
// returns once the cluster is ready: a meta leader knows every peer, every
// node passes its health check (current with the meta leader), and a client
// created and deleted an R3 stream. ctx and cfg.ReadyTimeout bound the wait.
//
// Route ports are reserved by binding port 0 and releasing it just before the
// nodes start (every node needs every route up front: a JetStream cluster
// refuses to start without configured routes). Someone may grab a port in
// that gap; StartCluster then retries with fresh ports. Client ports are
// picked by the server itself and cannot collide.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
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
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	// A failed attempt leaves Raft state behind in node dirs. Nodes that
	// restart with state wait out a full election timeout (4-9s) instead of
	// campaigning at once, so a retry first removes the dirs this call
	// created; dirs that held data before (a cluster started again on its
	// Dir) are kept.
	fresh := make([]string, 0, cfg.Size)
	for i := range cfg.Size {
		dir := filepath.Join(cfg.Dir, nodeName(i))
		if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
			fresh = append(fresh, dir)
		}
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		c, err := startCluster(ctx, cfg)
		if err == nil {
			return c, nil
		}
		if attempt == attempts || !isAddrInUse(err) || ctx.Err() != nil {
			return nil, err
		}
		for _, dir := range fresh {
			if rerr := os.RemoveAll(dir); rerr != nil {
				return nil, fmt.Errorf("%w: %w (cleaning up after: %v)", ErrStartFailed, rerr, err)
			}
		}
	}
}

func nodeName(i int) string { return "n" + strconv.Itoa(i+1) }

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	ports, err := reservePorts(DefaultHost, cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("%w: reserving route ports: %w", ErrStartFailed, err)
	}
	routes := make([]*url.URL, len(ports))
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats-route", Host: net.JoinHostPort(DefaultHost, strconv.Itoa(p))}
	}
	c := &Cluster{cfg: cfg, nodes: make([]*Server, 0, cfg.Size)}
	for i := range cfg.Size {
		name := nodeName(i)
		sp := spec{
			cfg: Config{
				Dir:          filepath.Join(cfg.Dir, name),
				Host:         DefaultHost,
				ServerName:   name,
				SyncInterval: cfg.SyncInterval,
				ReadyTimeout: cfg.ReadyTimeout,
				Logger:       cfg.Logger,
			},
			cluster:   cfg.Name,
			routePort: ports[i],
			// Every node gets the full list; a node ignores the route to itself.
			routes: routes,
		}
		s, err := boot(sp, server.RANDOM_PORT)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	if err := c.waitReady(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// reservePorts is freePorts; a test swaps it to hand out a busy port.
var reservePorts = freePorts

// freePorts asks the kernel for n distinct free ports on host. All n are held
// open together so they differ, then released for the servers to bind.
func freePorts(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	nodes := c.Servers()
	fatal := func() error {
		for _, s := range nodes {
			if err := s.log.fatalErr(); err != nil {
				return fmt.Errorf("%s: %w", s.spec.cfg.ServerName, err)
			}
		}
		return nil
	}
	err := poll(ctx, fatal, 10*time.Millisecond, func(context.Context) error {
		leader := -1
		for i, s := range nodes {
			if s.ns.JetStreamIsLeader() {
				leader = i
			}
		}
		if leader < 0 {
			return errors.New("no JetStream meta leader")
		}
		if peers := len(nodes[leader].ns.JetStreamClusterPeers()); peers != len(nodes) {
			return fmt.Errorf("meta leader %s knows %d of %d peers", nodes[leader].spec.cfg.ServerName, peers, len(nodes))
		}
		for _, s := range nodes {
			if h := s.ns.Healthz(nil); h.Error != "" || h.StatusCode >= 300 {
				return fmt.Errorf("%s: healthz %d: %s", s.spec.cfg.ServerName, h.StatusCode, h.Error)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range nodes {
		addr, ok := s.ns.Addr().(*net.TCPAddr)
		if !ok {
			return fmt.Errorf("%w: %s has no client listener", ErrStartFailed, s.spec.cfg.ServerName)
		}
		s.clientURL = "nats://" + net.JoinHostPort(DefaultHost, strconv.Itoa(addr.Port))
	}
	return withClient(ctx, c.ClientURL(), fatal, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     readyStream,
			Subjects: []string{"_noeta.embedded.ready"},
			Storage:  jetstream.MemoryStorage,
			Replicas: 3,
		})
		if err != nil {
			return fmt.Errorf("creating R3 stream: %w", err)
		}
		if err := js.DeleteStream(ctx, readyStream); err != nil {
			return fmt.Errorf("deleting R3 stream: %w", err)
		}
		return nil
	})
}

// ClientURLs returns each node's client URL, in node order. A stopped node
// keeps its last URL; clients given the whole list skip it.
func (c *Cluster) ClientURLs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	urls := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		urls[i] = s.ClientURL()
	}
	return urls
}

// ClientURL returns ClientURLs comma-joined, the form nats.Connect takes.
func (c *Cluster) ClientURL() string { return strings.Join(c.ClientURLs(), ",") }

// Servers returns the current incarnation of each node, in node order; node i
// is named n<i+1>. The slice is a copy; after RestartNode(i) the new server
// is at index i.
func (c *Cluster) Servers() []*Server {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*Server(nil), c.nodes...)
}

// Index returns the index of the node named name (as in a stream's
// ClusterInfo.Leader), or -1.
func (c *Cluster) Index(name string) int {
	for i, s := range c.Servers() {
		if s.spec.cfg.ServerName == name {
			return i
		}
	}
	return -1
}

// Leader returns the index of the running node that is the JetStream meta
// leader, or -1 while there is none.
func (c *Cluster) Leader() int {
	for i, s := range c.Servers() {
		if s.ns.Running() && s.ns.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// StopNode shuts node i down and waits until it is gone; the others keep
// running and elect new leaders where needed. i is 0-based; an index out of
// range panics. Stopping a stopped node does nothing.
func (c *Cluster) StopNode(i int) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	c.Servers()[i].Shutdown()
}

// RestartNode starts node i again (stopping it first if it runs) on the same
// Dir, name and route port, and returns once it is back: healthy, which in a
// cluster means current with the meta leader and with every stream and
// consumer it hosts, and answering JetStream API requests. Its client port is
// kept if still free. ctx and ReadyTimeout bound the wait.
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	old := c.Servers()[i]
	old.Shutdown()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for {
		s, err := relaunch(ctx, old.spec, old.clientPort())
		if err == nil {
			c.mu.Lock()
			c.nodes[i] = s
			c.mu.Unlock()
			return nil
		}
		// The route port is fixed (the other nodes dial it) and was free a
		// moment ago; if something holds it, wait for it rather than give up.
		if !isAddrInUse(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last: %v)", ErrNotReady, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Shutdown stops every node and waits until all are gone. It is idempotent.
func (c *Cluster) Shutdown() {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	var wg sync.WaitGroup
	for _, s := range c.Servers() {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
}
