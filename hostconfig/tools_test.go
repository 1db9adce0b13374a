package hostconfig

import (
	"reflect"
	"testing"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/tools/mcp"
)

// TestMCPServerConversion: every key of an mcp_servers: entry the source
// runs by reaches it with its value, and the tool names the config checks
// rules against are the names the source registers.
func TestMCPServerConversion(t *testing.T) {
	in := config.MCPServer{Name: "s", Command: []string{"x", "y"}, Env: map[string]string{"A": "${B}"}, Cwd: "/w",
		URL: "http://u", Headers: map[string]string{"H": "v"}, TimeoutSeconds: 7, TrustAnnotations: true,
		Tools: map[string]config.MCPTool{"t": {Risk: "high", Edits: true, TimeoutSeconds: 3}}}
	want := mcp.Server{Name: "s", Command: []string{"x", "y"}, Env: map[string]string{"A": "${B}"}, Cwd: "/w",
		URL: "http://u", Headers: map[string]string{"H": "v"}, TimeoutSeconds: 7, TrustAnnotations: true,
		Tools: map[string]mcp.ToolOverride{"t": {Risk: "high", Edits: true, TimeoutSeconds: 3}}}
	if got := mcpServer(in); !reflect.DeepEqual(got, want) {
		t.Errorf("mcpServer = %+v, want %+v", got, want)
	}
	// Every field of the source's options has a counterpart in the config
	// (Sandbox is the host's), so a field added to one is seen here.
	cs, ms := reflect.TypeFor[config.MCPServer](), reflect.TypeFor[mcp.Server]()
	for i := range ms.NumField() {
		if _, ok := cs.FieldByName(ms.Field(i).Name); !ok {
			t.Errorf("mcp.Server.%s has no counterpart in config.MCPServer", ms.Field(i).Name)
		}
	}
	for i := range cs.NumField() {
		if n := cs.Field(i).Name; n != "Sandbox" {
			if _, ok := ms.FieldByName(n); !ok {
				t.Errorf("config.MCPServer.%s does not reach mcp.Server", n)
			}
		}
	}
	if a, b := config.MCPToolName("srv", "tool"), mcp.ToolName("srv", "tool"); a != b {
		t.Errorf("config names MCP tools %q, the source %q", a, b)
	}
}
