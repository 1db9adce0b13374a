package embedded

import (
	"net"
	"testing"
)

// TestStartClusterRetriesBusyRoutePort covers the gap between reserving a
// route port and a node binding it: the node fails with EADDRINUSE and
// StartCluster tries again with fresh ports. Not parallel: it swaps
// reservePorts.
func TestStartClusterRetriesBusyRoutePort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	calls := 0
	orig := reservePorts
	reservePorts = func(host string, n int) ([]int, error) {
		calls++
		ports, err := orig(host, n)
		if err == nil && calls == 1 {
			ports[1] = busy.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}
	t.Cleanup(func() { reservePorts = orig })

	c, err := StartCluster(t.Context(), ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	c.Shutdown()
	if calls != 2 {
		t.Errorf("reservePorts called %d times, want 2 (one retry)", calls)
	}
}
