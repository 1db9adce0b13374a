package nats_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta/tools/sandbox"

	"github.com/nats-io/nats.go"
)

// The files under test. Tests read them from this directory and run
// nats-server on copies in which only the listen addresses, the monitoring
// port and the store directory are rewritten (see materialize); accounts,
// users, permissions, JetStream settings and the cluster's shape are the
// files' own.
const (
	accountsFile = "accounts.conf"
	usersFile    = "users.conf"
	routesFile   = "routes.conf"
	singleFile   = "single.conf"
)

func clusterFile(i int) string { return fmt.Sprintf("cluster-%d.conf", i+1) }

// Placeholder credentials of the users, as accounts.conf has them.
var passwords = map[string]string{
	"engine":     "CHANGE-ME-engine",
	"observer":   "CHANGE-ME-observer",
	"compliance": "CHANGE-ME-compliance",
	"operator":   "CHANGE-ME-operator",
	"alice":      "CHANGE-ME-alice",
	"sre":        "CHANGE-ME-sre",
}

// natsServerBin is the nats-server binary TestMain builds from the pinned
// module; engineBin is cmd/engine, built from this checkout.
var natsServerBin, engineBin string

func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "noeta-deploy-nats-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	natsServerBin = filepath.Join(dir, "nats-server")
	engineBin = filepath.Join(dir, "engine")
	for _, b := range []struct{ out, pkg string }{
		{natsServerBin, "github.com/nats-io/nats-server/v2"},
		{engineBin, "github.com/noeta-go/noeta/cmd/engine"},
		// The sandbox's helper beside the engine, as a deployment installs
		// it: without it every shell call re-executes the engine.
		{filepath.Join(dir, "noeta-sandbox"), "github.com/noeta-go/noeta/cmd/noeta-sandbox"},
	} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // static binaries, as released
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b.pkg+":", err)
			return 1
		}
	}
	return m.Run()
}

// freePorts reserves n loopback ports by binding port 0 and releasing them.
// Someone may take one in the gap; a server that cannot listen fails its
// start, and the test with it.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// rewrite replaces each old string of edits in the file src with its new
// one, and fails unless every old string occurs exactly once: a file that
// changed shape must change this test too, not slip past it.
func rewrite(t testing.TB, src, dst string, edits [][2]string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, e := range edits {
		if n := strings.Count(s, e[0]); n != 1 {
			t.Fatalf("%s: %q occurs %d times, want once", src, e[0], n)
		}
		s = strings.Replace(s, e[0], e[1], 1)
	}
	if err := os.WriteFile(dst, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// node is one nats-server process started from a config file.
type node struct {
	name     string
	conf     string // the rewritten copy it runs on
	store    string
	client   int // client port
	monitor  int // monitoring port
	logs     *syncBuffer
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	restarts int
	// In a lab (partition tests): the address the node listens on, the
	// argv prefix that starts it in its namespace and the HTTP client that
	// reaches its monitoring port. Zero: loopback, as is.
	host  string
	wrap  []string
	httpc *http.Client
}

func (n *node) addr() string {
	if n.host == "" {
		return "127.0.0.1"
	}
	return n.host
}

func (n *node) url() string { return "nats://" + n.addr() + ":" + strconv.Itoa(n.client) }

// materializeSingle writes single.conf and accounts.conf to dir with fresh
// ports and a store under dir.
func materializeSingle(t testing.TB, dir string) *node {
	t.Helper()
	ports := freePorts(t, 2)
	n := &node{name: "noeta-single", conf: filepath.Join(dir, singleFile), store: filepath.Join(dir, "store-single"),
		client: ports[0], monitor: ports[1], logs: &syncBuffer{}}
	rewrite(t, accountsFile, filepath.Join(dir, accountsFile), nil)
	rewrite(t, usersFile, filepath.Join(dir, usersFile), nil)
	rewrite(t, singleFile, n.conf, [][2]string{
		{"listen: 127.0.0.1:4222", "listen: 127.0.0.1:" + strconv.Itoa(n.client)},
		{"http: 127.0.0.1:8222", "http: 127.0.0.1:" + strconv.Itoa(n.monitor)},
		{`store_dir: "data/noeta-single"`, "store_dir: " + strconv.Quote(n.store)},
	})
	return n
}

// materializeCluster writes cluster-1..3.conf, routes.conf and accounts.conf
// to dir with fresh ports and a store per node under dir.
func materializeCluster(t testing.TB, dir string) []*node {
	t.Helper()
	ports := freePorts(t, 9)
	rewrite(t, accountsFile, filepath.Join(dir, accountsFile), nil)
	rewrite(t, usersFile, filepath.Join(dir, usersFile), nil)
	var routeEdits [][2]string
	nodes := make([]*node, 3)
	for i := range nodes {
		route := ports[6+i]
		routeEdits = append(routeEdits, [2]string{
			fmt.Sprintf("@127.0.0.1:%d\"", 6222+i), fmt.Sprintf("@127.0.0.1:%d\"", route)})
		n := &node{name: fmt.Sprintf("noeta-%d", i+1), conf: filepath.Join(dir, clusterFile(i)),
			store: filepath.Join(dir, fmt.Sprintf("store-%d", i+1)), client: ports[i], monitor: ports[3+i], logs: &syncBuffer{}}
		rewrite(t, clusterFile(i), n.conf, [][2]string{
			{fmt.Sprintf("listen: 127.0.0.1:%d", 4222+i), "listen: 127.0.0.1:" + strconv.Itoa(n.client)},
			{fmt.Sprintf("http: 127.0.0.1:%d", 8222+i), "http: 127.0.0.1:" + strconv.Itoa(n.monitor)},
			{fmt.Sprintf(`store_dir: "data/noeta-%d"`, i+1), "store_dir: " + strconv.Quote(n.store)},
			{fmt.Sprintf("listen: 127.0.0.1:%d", 6222+i), "listen: 127.0.0.1:" + strconv.Itoa(route)},
		})
		nodes[i] = n
	}
	rewrite(t, routesFile, filepath.Join(dir, routesFile), routeEdits)
	return nodes
}

// start runs the node's nats-server process. The test's cleanup kills it.
func (n *node) start(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	argv := append(append([]string{}, n.wrap...), natsServerBin, "-c", n.conf)
	cmd := exec.Command(argv[0], argv[1:]...)
	fmt.Fprintf(n.logs, "=== start %s (%d)\n", n.name, n.restarts)
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	done := make(chan struct{})
	n.cmd, n.done = cmd, done
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(done)
	}()
	t.Cleanup(func() { n.kill() })
}

// kill stops the process with SIGKILL and waits for it.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// running reports whether the process is still alive.
func (n *node) running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// waitHealthy polls the node's /healthz until it answers 200 (JetStream
// current with its cluster, the server's own check), or fails the test.
func (n *node) waitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://%s:%d/healthz", n.addr(), n.monitor)
	get := http.Get
	if n.httpc != nil {
		get = n.httpc.Get
	}
	var last string
	for time.Now().Before(deadline) {
		if !n.running() {
			t.Fatalf("%s exited: %v\n%s", n.name, n.exitErr, n.logs)
		}
		resp, err := get(url)
		if err == nil {
			b := new(bytes.Buffer)
			_, _ = b.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not healthy within %v: %s\n%s", n.name, timeout, last, n.logs)
}

// violations returns the permission violations in the node's log.
func (n *node) violations() []string {
	var out []string
	for _, l := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(l, "Violation") {
			out = append(out, l)
		}
	}
	return out
}

// asyncErrs collects a connection's asynchronous errors (permission
// violations arrive that way).
type asyncErrs struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrs) add(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}

func (a *asyncErrs) all() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// violation waits up to a while for a permissions violation naming subject
// to arrive on the connection, and returns it.
func (a *asyncErrs) violation(subject string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		for _, err := range a.all() {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return err
			}
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// connect connects as user to urls (comma-separated), reconnecting forever;
// opts add to the defaults (a dialer into a namespace).
func connect(t testing.TB, urls, user string, opts ...nats.Option) (*nats.Conn, *asyncErrs) {
	t.Helper()
	errs := &asyncErrs{}
	nc, err := nats.Connect(urls, append([]nats.Option{
		nats.UserInfo(user, passwords[user]),
		nats.Name("noeta-deploy-test-" + user),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs.add(err) }),
	}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
