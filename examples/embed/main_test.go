package main

import (
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
