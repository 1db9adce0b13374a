package jetstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// One single-node server and one 3-node cluster serve every test of the
// package; each test uses its own task ids, so they share streams.
var (
	singleURL string
	// singleServer is the single node, for benchmarks that connect in process.
	singleServer *embedded.Server
	clusterURL   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "noeta-jetstream-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(ctx, embedded.Config{Dir: dir + "/single"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded server:", err)
		return 1
	}
	defer srv.Shutdown()
	singleURL, singleServer = srv.ClientURL(), srv
	cl, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: dir + "/cluster"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded cluster:", err)
		return 1
	}
	defer cl.Shutdown()
	clusterURL = cl.ClientURL()
	// Create the streams and buckets once, before parallel tests race to.
	for _, c := range []struct {
		url      string
		replicas int
	}{{singleURL, 1}, {clusterURL, 3}} {
		if err := precreate(ctx, c.url, c.replicas); err != nil {
			fmt.Fprintln(os.Stderr, "create streams:", err)
			return 1
		}
	}
	return m.Run()
}

func precreate(ctx context.Context, url string, replicas int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	for {
		_, err = jetstream.Open(ctx, nc, jetstream.Config{Replicas: replicas})
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// factory builds backends whose log is JetStream and whose dispatcher (the
// lease registry) is memlog's, on a manual clock shared by both.
func factory(url string, replicas int) eventlogtest.Factory {
	return factoryConfig(url, jetstream.Config{Replicas: replicas})
}

// factoryConfig is factory with the Log's settings (its registry and clock
// are the pairing's).
func factoryConfig(url string, lc jetstream.Config) eventlogtest.Factory {
	return func(t *testing.T) eventlogtest.Backend {
		t.Helper()
		clock := memlog.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		disp, err := memlog.New(memlog.Options{Clock: clock, LeaseTTL: 30 * time.Second, HeartbeatMax: 5})
		if err != nil {
			t.Fatal(err)
		}
		return memlogPairing(t, url, lc, clock, disp)
	}
}

// memlogPairing opens a JetStream Log, on a connection of its own, whose
// lease registry is disp. A restart closes both and opens them again on
// the same state: the Log on the same streams, the dispatcher reopened on
// its memory.
func memlogPairing(t *testing.T, url string, lc jetstream.Config, clock *memlog.ManualClock, disp *memlog.Store) eventlogtest.Backend {
	t.Helper()
	nc := connect(t, url)
	lc.Registry, lc.Now = disp, clock.Now
	log, err := jetstream.Open(t.Context(), nc, lc)
	if err != nil {
		_ = disp.Close()
		t.Fatal(err)
	}
	closeAll := func() error {
		_ = log.Close()
		return disp.Close()
	}
	t.Cleanup(func() { _ = closeAll() })
	return eventlogtest.Backend{
		Log:             log,
		Dispatcher:      disp,
		Content:         log,
		Close:           closeAll,
		Advance:         clock.Advance,
		LeaseTTL:        30 * time.Second,
		HeartbeatMax:    5,
		ReclaimMax:      memlog.DefaultReclaimMax,
		MaxFailAttempts: memlog.DefaultMaxFailAttempts,
		Restart: func(t *testing.T) eventlogtest.Backend {
			t.Helper()
			_ = log.Close()
			nd, err := disp.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			return memlogPairing(t, url, lc, clock, nd)
		},
	}
}

func TestSuiteSingleNode(t *testing.T) { eventlogtest.RunSuite(t, factory(singleURL, 1)) }

func TestSuiteCluster(t *testing.T) { eventlogtest.RunSuite(t, factory(clusterURL, 3)) }

// The suites run the JetStream Dispatcher on prefixes of their own. Every
// subtest of a suite shares its prefix's streams and buckets (cases use their
// own task ids and queues), which keeps the cluster's count of replicated
// streams small.
//
// The dispatcher suite uses a short lease, 2s: its cases wait out leases
// and timers, so the TTL is most of their running time. It used the
// shortest the server's expiry honours, 1s, until a case holding a lease
// over five calls saw it expire beside two chaos runs (a load of 16 on two
// cores); 2s costs the package's two dispatcher suites about 30 s, and the
// cases that look at a queue's order park what they lease (leaseParked).
// The log, subscriber and content suites hold one lease over
// many appends (sixteen concurrent writers, say) and wait out few; on a
// loaded machine under -race a 1s lease can run out in the middle of that,
// and so did a 2s one (sixty-four appends by sixteen writers on the cluster
// under a load of 20 on two cores: "lease not live"), so their pairing uses
// 5s.
func suiteDispatcherConfig(replicas int) jetstream.DispatcherConfig {
	return jetstream.DispatcherConfig{
		Prefix:       "dsuite",
		Replicas:     replicas,
		LeaseTTL:     2 * time.Second,
		HeartbeatMax: 5,
		// Small, so the cap's case fills a buffer in a few writes.
		MaxPendingWakes: 8,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

func pairingDispatcherConfig(replicas int) jetstream.DispatcherConfig {
	cfg := suiteDispatcherConfig(replicas)
	cfg.Prefix = "dpair"
	cfg.LeaseTTL = 5 * time.Second
	return cfg
}

// dispatcherFactory builds backends whose dispatcher is the JetStream
// Dispatcher and whose log is a JetStream Log with that Dispatcher as its
// lease registry: both on the wall clock, on one connection of their own,
// as one engine process would be.
func dispatcherFactory(url string, cfg jetstream.DispatcherConfig) eventlogtest.Factory {
	var f eventlogtest.Factory
	f = func(t *testing.T) eventlogtest.Backend {
		t.Helper()
		nc := connect(t, url)
		disp, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: cfg.Prefix, Replicas: cfg.Replicas, Registry: disp})
		if err != nil {
			_ = disp.Close()
			t.Fatal(err)
		}
		closeAll := func() error {
			_ = log.Close()
			return disp.Close()
		}
		t.Cleanup(func() { _ = closeAll() })
		return eventlogtest.Backend{
			Log:             log,
			Dispatcher:      disp,
			Content:         log,
			Close:           closeAll,
			LeaseTTL:        cfg.LeaseTTL,
			HeartbeatMax:    cfg.HeartbeatMax,
			ReclaimMax:      jetstream.DefaultReclaimMax,
			MaxFailAttempts: jetstream.DefaultMaxFailAttempts,
			MaxPendingWakes: cfg.MaxPendingWakes,
			// A restart is a new connection, Dispatcher and Log on the
			// same streams and buckets, as a process started again.
			Restart: func(t *testing.T) eventlogtest.Backend {
				t.Helper()
				_ = closeAll()
				return f(t)
			},
		}
	}
	return f
}

// precreateDispatcher creates a prefix's streams, buckets and consumers
// once, before parallel subtests race to.
func precreateDispatcher(t *testing.T, url string, cfg jetstream.DispatcherConfig) {
	t.Helper()
	precreatePrefix(t, url, cfg)
	b := dispatcherFactory(url, cfg)(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDispatcherSuiteSingleNode(t *testing.T) {
	cfg := suiteDispatcherConfig(1)
	precreateDispatcher(t, singleURL, cfg)
	eventlogtest.RunDispatcherSuite(t, dispatcherFactory(singleURL, cfg))
}

func TestDispatcherSuiteCluster(t *testing.T) {
	cfg := suiteDispatcherConfig(3)
	precreateDispatcher(t, clusterURL, cfg)
	eventlogtest.RunDispatcherSuite(t, dispatcherFactory(clusterURL, cfg))
}

// The dispatcher's contract with the lease keys and the ready signals
// persisted asynchronously, as on the embedded default (ADR 0109).
func TestDispatcherSuiteSingleNodeAsyncLiveness(t *testing.T) {
	cfg := suiteDispatcherConfig(1)
	cfg.Prefix, cfg.AsyncLiveness = "dasync", true
	precreateDispatcher(t, singleURL, cfg)
	eventlogtest.RunDispatcherSuite(t, dispatcherFactory(singleURL, cfg))
}

// The rest of RunSuite on the same pairing: the log (fenced by the
// Dispatcher's Valid), the subscriber and the content store. With
// TestDispatcherSuite* above, this is the whole RunSuite, without running
// the dispatcher cases twice.
func TestSuiteSingleNodeWithDispatcher(t *testing.T) {
	cfg := pairingDispatcherConfig(1)
	precreateDispatcher(t, singleURL, cfg)
	runSuiteButDispatcher(t, dispatcherFactory(singleURL, cfg))
}

func TestSuiteClusterWithDispatcher(t *testing.T) {
	cfg := pairingDispatcherConfig(3)
	precreateDispatcher(t, clusterURL, cfg)
	runSuiteButDispatcher(t, dispatcherFactory(clusterURL, cfg))
}

func runSuiteButDispatcher(t *testing.T, f eventlogtest.Factory) {
	t.Run("Log", func(t *testing.T) { t.Parallel(); eventlogtest.RunLogSuite(t, f) })
	t.Run("Subscriber", func(t *testing.T) { t.Parallel(); eventlogtest.RunSubscriberSuite(t, f) })
	t.Run("Content", func(t *testing.T) { t.Parallel(); eventlogtest.RunContentSuite(t, f) })
}
