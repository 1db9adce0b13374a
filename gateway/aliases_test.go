package gateway_test

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
)

// TestGatewayAliases: a client sees an aliased tool under its alias only
// and calls it by it; the log and the guards see the tool's own name, so
// a rule written against mcp__everything__echo denies a call by its alias,
// and a tool a rule denies outright is not offered under its alias either.
func TestGatewayAliases(t *testing.T) {
	yaml := config(t, "1h") + `  - match_tool: "mcp__everything__echo"
    match_arg: {path: message, equals: "forbidden"}
    action: deny
    reason: "no forbidden echoes"
gateway:
  aliases:
    say: mcp__everything__echo
    long: mcp__everything__trigger-long-running-operation
    zip: mcp__everything__gzip-file-as-resource
`
	r := open(t, yaml, gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range lt.Tools {
		names[tl.Name] = true
	}
	if !names["say"] || !names["long"] || names["zip"] || names["mcp__everything__echo"] || names["mcp__everything__trigger-long-running-operation"] {
		t.Fatalf("tools/list: %v", names)
	}
	if !names["mcp__everything__get-env"] && !names["mcp__everything__toggle-simulated-logging"] {
		t.Fatalf("the tools without an alias keep their names: %v", names)
	}

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "say", Arguments: map[string]any{"message": "hi"}})
	if err != nil || res.IsError || text(res) != "Echo: hi" {
		t.Fatalf("say: %+v %v", res, err)
	}
	for _, c := range []struct {
		tool, why string
		args      map[string]any
	}{
		{"say", "no forbidden echoes", map[string]any{"message": "forbidden"}},
		{"long", "no long operations here", map[string]any{"duration": 1, "steps": 1}},
	} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil || !res.IsError || !strings.Contains(text(res), "denied by rules") || !strings.Contains(text(res), c.why) {
			t.Fatalf("%s by its alias: %+v %q %v", c.tool, res, text(res), err)
		}
	}
	// The tool's own name is not offered: it is no way around anything,
	// but a client's name means one tool.
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "x"}}); err == nil && !res.IsError {
		t.Fatalf("the aliased tool's own name was taken: %+v", res)
	}
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "zip", Arguments: map[string]any{"name": "x", "data": "x"}}); err == nil && !res.IsError {
		t.Fatalf("a denied tool was called by its alias: %+v", res)
	}

	task := r.sessionTask(t)
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		p, _, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		var tool string
		switch p := p.(type) {
		case *noeta.ToolCallStarted:
			tool = p.Tool
		case *noeta.ToolCallDenied:
			tool = p.Tool
		default:
			continue
		}
		if !strings.HasPrefix(tool, "mcp__everything__") {
			t.Errorf("%s records the tool as %q", e.Type, tool)
		}
	}
}
