package observers

import (
	"os/exec"
	"strings"
	"testing"
)

// TestObserversBuildsNoTelemetryStack keeps package observers light: a
// program that imports it for the Observer interface, a runner, audit or
// hooks must not build the OpenTelemetry SDK, the Prometheus client or gRPC,
// which are package observers/telemetry's (docs/adr/0025). Before Metrics and
// Trace moved out, `go list -deps` of this package listed 468 packages, gRPC
// and the OTLP exporters among them; this test failed then, naming them.
func TestObserversBuildsNoTelemetryStack(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list this package's dependencies: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	heavy := []string{"go.opentelemetry.io/", "github.com/prometheus/", "google.golang.org/grpc"}
	var found []string
	for dep := range strings.FieldsSeq(string(out)) {
		for _, prefix := range heavy {
			if strings.HasPrefix(dep, prefix) {
				found = append(found, dep)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("package observers depends on %d packages of the telemetry stack, which belong in observers/telemetry: %s",
			len(found), strings.Join(found[:min(len(found), 8)], ", "))
	}
}
