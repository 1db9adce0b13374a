package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestToolsFromMCPServersFile: a server declared in a project's .mcp.json,
// as an MCP client writes it (command a string, args a list), is started
// and listed by engine tools like one written in noeta.yaml: under the
// top-level sandbox, its tools medium risk (the file cannot say to trust
// annotations), in the agent's list.
func TestToolsFromMCPServersFile(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	dir := t.TempDir()
	mcpJSON, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"type": "stdio", "command": node, "args": []string{entry, "stdio"}, "env": map[string]string{}},
	}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "noeta.yaml")
	if err := os.WriteFile(cfg, []byte(`
mcp_servers_file: .mcp.json
`+everythingSandbox(node, entry)+`
agents:
  a:
    tools: ["mcp__everything__*"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "tools", "--config", cfg)
	if code != 0 || !regexpLine(out, `a\s+mcp__everything__echo\s+medium\s+mcp:everything`) {
		t.Errorf("tools: exit %d\n%s\n%s", code, out, errOut)
	}
}
