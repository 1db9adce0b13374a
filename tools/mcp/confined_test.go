package mcp

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// confinedEverything is server-everything over stdio in the sandbox, which
// may read its program's package and nothing else beyond the system's.
func confinedEverything(tb testing.TB, node, entry string) (Server, Options) {
	tb.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.Options{})
	if err != nil {
		tb.Fatalf("sandbox.New: %v", err)
	}
	modules, _, _ := strings.Cut(entry, string(filepath.Separator)+"@modelcontextprotocol"+string(filepath.Separator))
	srv := Server{Name: "everything", Command: []string{node, entry, "stdio"}, TimeoutSeconds: 60}
	return srv, Options{Sandbox: &sandbox.Scoped{Sandbox: sb, Default: sandbox.Policy{Read: []string{modules}}},
		SandboxScope: "mcp:everything", Workspace: tb.TempDir()}
}

// TestEverythingConfined: server-everything, third-party code, works in
// the sandbox as it does outside; and a server whose package the policy
// does not let it read does not start, saying why.
func TestEverythingConfined(t *testing.T) {
	t.Parallel()
	node, entry := everything(t)
	srv, opts := confinedEverything(t, node, entry)
	checkEverything(t, newSource(t, srv, opts))

	opts.Sandbox.(*sandbox.Scoped).Default.Read = nil
	s := newSource(t, srv, opts)
	// The package is not in the sandbox's root at all.
	if _, err := s.Tools(context.Background()); err == nil || !strings.Contains(err.Error(), "Cannot find module") {
		t.Errorf("a server whose package the sandbox hides started: %v", err)
	}
}

// BenchmarkEverythingStart is what the sandbox adds to starting an MCP
// server: server-everything started, initialized and listed, then stopped.
//
//	go test -run '^$' -bench EverythingStart -count 6 ./tools/mcp/
func BenchmarkEverythingStart(b *testing.B) {
	node, entry := everything(b)
	start := func(b *testing.B, srv Server, opts Options) {
		for b.Loop() {
			s := New(srv, opts)
			if _, err := s.Tools(context.Background()); err != nil {
				b.Fatal(err)
			}
			_ = s.Close(context.Background())
		}
	}
	b.Run("plain", func(b *testing.B) {
		start(b, Server{Name: "everything", Command: []string{node, entry, "stdio"}, TimeoutSeconds: 60}, Options{})
	})
	b.Run("sandboxed", func(b *testing.B) {
		srv, opts := confinedEverything(b, node, entry)
		start(b, srv, opts)
	})
}
