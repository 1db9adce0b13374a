package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/taskview"
)

// TestToolsVerb: engine tools lists each agent's tools with their risk and
// source, and with --json their input schemas; a pattern in an agent's
// tools: picks the tools it matches.
func TestToolsVerb(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCmd(t, "tools", "--config", exampleConfig)
	if code != 0 || !regexpLine(out, `researcher\s+shell\s+high\s+built-in`) || regexpLine(out, `helper\s+shell`) {
		t.Fatalf("tools: exit %d\n%s\n%s", code, out, errOut)
	}
	cfg := writeFile(t, "noeta.yaml", "agents:\n  reader: {tools: [\"*_file\"], permissions: {denied_tools: [write_file]}}\n")
	code, out, errOut = runCmd(t, "tools", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("tools --json: exit %d\n%s", code, errOut)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e taskview.ToolEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil || len(e.InputSchema) == 0 || e.Agent != "reader" {
			t.Fatalf("line %q: %+v %v", line, e, err)
		}
		names = append(names, e.Tool)
	}
	if strings.Join(names, ",") != "read_file" {
		t.Errorf("reader may call %v, want [read_file]", names)
	}
}

// regexpLine reports whether a line of out matches re.
func regexpLine(out, re string) bool {
	return regexp.MustCompile(`(?m)^` + re).MatchString(out)
}
