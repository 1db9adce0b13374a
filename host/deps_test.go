package host

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNamesNoBackend: host runs over the eventlog seams and reads no YAML;
// the JetStream driver, the configuration, the metrics library and the
// heavy optional parts (model SDKs, OpenTelemetry, MCP) are the caller's
// to compose (docs/architecture.md). A dependency that creeps back into
// host fails here, naming it.
func TestNamesNoBackend(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, banned := range []string{
			"github.com/nats-io/", "github.com/prometheus/", "github.com/noeta-go/noeta/config",
			"github.com/noeta-go/noeta/eventlog/jetstream", "github.com/noeta-go/noeta/eventlog/memlog",
			"github.com/openai/", "github.com/anthropics/", "go.opentelemetry.io/", "github.com/modelcontextprotocol/",
			"google.golang.org/grpc",
		} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("host depends on %s", dep)
			}
		}
	}
	// The measure of docs/architecture.md: every non-standard package
	// host links, its own included.
	if len(deps) > 120 {
		t.Errorf("host links %d non-standard packages, over the 120 of docs/architecture.md", len(deps))
	}
}
