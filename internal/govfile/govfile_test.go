package govfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const good = "agents:\n  a:\n    tools: [echo]\n  m:\n    tools: [echo]\n"

// TestParse: a config's mistakes are each on a line of their own, with the
// file, the line and the field; a tool no registry has is one of them.
func TestParse(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // "" for none: the config loads
	}{
		{"good", good, nil},
		{"unknown tool", "agents:\n  a:\n    tools: [ech0]\n", []string{"n.yaml", "ech0"}},
		{"two mistakes", "agents:\n  a:\n    tools: [echo]\n    budget: {max_iterations: -1}\n    nonsense: 1\n", []string{"n.yaml:", "\n"}},
		{"not YAML", "agents: [\n", []string{"n.yaml"}},
	}
	for _, tt := range tests {
		_, err := Parse("n.yaml", []byte(tt.body))
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tt.name, err, w)
			}
		}
	}
}

// TestGovernanceAndTask: the config by path or by default, and a task file
// checked against it.
func TestGovernanceAndTask(t *testing.T) {
	dir := t.TempDir()
	cfgPath := write(t, dir, "noeta.yaml", good)
	if _, err := Governance(t.Context(), "", filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "no governance config: pass --config FILE") {
		t.Errorf("no config: %v", err)
	}
	if _, err := Governance(t.Context(), filepath.Join(dir, "absent.yaml"), ""); err == nil || !strings.HasPrefix(err.Error(), "--config: ") {
		t.Errorf("a missing --config: %v", err)
	}
	cfg, err := Governance(t.Context(), "", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body string
		want       string // "" for none
	}{
		{"scripted", "agent: a\ngoal: g\nscript:\n  - finish: {answer: ok}\n", ""},
		{"unknown agent", "agent: z\ngoal: g\nscript:\n  - finish: {answer: ok}\n", `agent: "z" is not an agent of ` + cfgPath + " (its agents: a, m)"},
		{"no script, no model", "agent: m\ngoal: g\n", `the task has no script: and agent "m" has no model:`},
	}
	for _, tt := range tests {
		p := write(t, dir, "task.yaml", tt.body)
		_, sub, err := Task(t.Context(), p, cfg)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want == "" && sub.Agent != "a":
			t.Errorf("%s: submission %+v", tt.name, sub)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, _, err := Task(t.Context(), filepath.Join(dir, "none.yaml"), cfg); err == nil || !strings.HasPrefix(err.Error(), "task file: ") {
		t.Errorf("a missing task file: %v", err)
	}
}

// TestLoadMCPServersFile: a mistake in the MCP client's file that
// noeta.yaml's mcp_servers_file names is reported with that file's name
// and line, beside noeta.yaml's own mistakes with theirs; a good file's
// servers are the config's.
func TestLoadMCPServersFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".mcp.json", "{\"mcpServers\": {\n  \"files\": {\"command\": \"npx\", \"args\": [\"x\"]},\n  \"old\": {\"type\": \"sse\", \"url\": \"https://h/sse\"}\n}}\n")
	cfg := write(t, dir, "noeta.yaml", "mcp_servers_file: .mcp.json\nagents:\n  a:\n    tools: [echo]\n    nonsense: 1\n")
	_, err := Load(t.Context(), cfg)
	want := []string{
		cfg + ":5: agents.a.nonsense: unknown key",
		filepath.Join(dir, ".mcp.json") + ":3: mcpServers.old.type: noeta speaks MCP over stdio and streamable HTTP",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("got %v\nwant a line %q", err, w)
		}
	}

	write(t, dir, ".mcp.json", `{"mcpServers": {"files": {"command": "npx", "args": ["x"]}}}`)
	cfg = write(t, dir, "noeta.yaml", "mcp_servers_file: .mcp.json\nagents:\n  a:\n    tools: [echo, \"mcp__files__*\"]\n")
	f, err := Load(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.MCPServers["files"]; strings.Join(s.Command, " ") != "npx x" {
		t.Errorf("files = %+v", s)
	}
}
