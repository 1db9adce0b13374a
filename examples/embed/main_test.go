package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEmbed runs the program: the task completes, the guard's denial and
// the one call that ran are in the observer's counts.
func TestEmbed(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), "../noeta.yaml", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`: completed "done"`, "ToolCallDenied         1", "ToolCallFinished       1", "TaskCompleted          1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
}

// TestLinksNoHeavyParts: an embedder that composes package host over
// memlog links no NATS, no model SDK, no OpenTelemetry and no MCP (the cut
// of docs/architecture.md); a dependency that creeps back fails here.
func TestLinksNoHeavyParts(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/nats-io/", "github.com/openai/", "github.com/anthropics/", "go.opentelemetry.io/", "github.com/modelcontextprotocol/", "github.com/prometheus/", "google.golang.org/grpc"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("examples/embed links %s", dep)
			}
		}
	}
}
