package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
)

// TestGatewayUpstreamToolNames: with ToolNames upstream a client knows an
// MCP server's tool by its name on the server; the call is recorded, and
// judged, as the registry's tool; a name two tools would share (the
// built-in echo and everything's echo) is offered to no one.
func TestGatewayUpstreamToolNames(t *testing.T) {
	yaml := strings.Replace(config(t, "1h"), `tools: ["mcp__everything__*"]`, `tools: [echo, "mcp__everything__*"]`, 1)
	r := open(t, yaml, gateway.Options{Idle: time.Minute, ToolNames: gateway.NamesUpstream})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "get-tiny-image") || !slices.Contains(names, "get-sum") {
		t.Errorf("tools/list = %v, want the upstream names", names)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "mcp__") || n == "echo" {
			t.Errorf("tools/list offers %q", n)
		}
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "get-sum", Arguments: json.RawMessage(`{"a":2,"b":3}`)})
	if err != nil || res.IsError || !strings.Contains(text(res), "5") {
		t.Fatalf("get-sum = %+v, %v", res, err)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "trigger-long-running-operation", Arguments: json.RawMessage(`{"duration":2,"steps":1}`)})
	if err != nil || !res.IsError || !strings.Contains(text(res), "denied by rules: no long operations here") {
		t.Fatalf("a call the rules deny = %+v, %v", res, err)
	}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: json.RawMessage(`{"message":"x"}`)}); err == nil {
		t.Error("echo, a name two tools share, was called")
	}
	task := r.sessionTask(t)
	e := r.waitFor(t, task, noeta.TypeToolCallDenied)
	p, _, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if d := p.(*noeta.ToolCallDenied); d.Tool != "mcp__everything__trigger-long-running-operation" {
		t.Errorf("the denial names %q, want the registry's name", d.Tool)
	}
}
