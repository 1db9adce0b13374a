package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewayStdio: a client nobody here wrote (the go-sdk's) starts
// engine gateway as its MCP server over stdio, as Claude Code would, and
// calls a tool of server-everything through it; once the client closes,
// the session's task is in engine events with its calls, the decisions of
// origin client.
func TestGatewayStdio(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], trust_annotations: true, `+everythingSandbox(node, entry)+`}
agents:
  dev:
    tools: ["mcp__everything__*"]
rules:
  - match_tool: "mcp__*__trigger-long*"
    when: 'args.duration >= 1.0'
    action: deny
    reason: "no long operations here"
  - match_tool: "mcp__*__gzip*"
    action: deny
    reason: "never"
`)
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(engineBin, "gateway", "--config", cfg, "--agent", "dev", "--data", data, "--workspace", workspace(t))
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "through the gateway"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*sdk.TextContent).Text != "Echo: through the gateway" {
		t.Fatalf("echo: %+v %v\n%s", res, err, stderr)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 1}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "denied by rules: no long operations here") {
		t.Fatalf("denied: %+v %v\n%s", res, err, stderr)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	code, out, errOut := runCmd(t, "tasks", "--data", data, "--json")
	if code != 0 {
		t.Fatalf("tasks: exit %d\n%s\n%s", code, out, errOut)
	}
	var row struct {
		Task   string `json:"task"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &row); err != nil || row.Task == "" {
		t.Fatalf("tasks: %v\n%s", err, out)
	}
	code, out, errOut = runCmd(t, "events", row.Task, "--data", data)
	if code != 0 {
		t.Fatalf("events: exit %d\n%s\n%s", code, out, errOut)
	}
	// The tools the session was offered are pinned, first seen.
	code, pins, errOut := runCmd(t, "gateway", "pin", "list", "--data", data)
	if code != 0 || !regexpLine(pins, `everything\s+echo\s+[0-9a-f]{12}…\s+first seen\s+-`) {
		t.Errorf("pin list: exit %d\n%s\n%s", code, pins, errOut)
	}
	for _, want := range []string{"PolicyDecided         client", "ToolCallFinished", "ToolCallDenied", "TaskCompleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("events lacks %q:\n%s", want, out)
		}
	}
}
