package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/noeta-go/noeta/tools/sandbox"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// faultEnv selects the fault server: the test binary, run with it set,
// is an MCP server over stdio built with the SDK, with the faults the tests
// need (see runFaultServer).
const faultEnv = "NOETA_MCP_FAULT_SERVER"

func TestMain(m *testing.M) {
	sandbox.Main() // the confined servers' helper is this binary
	if mode, ok := os.LookupEnv(faultEnv); ok {
		os.Exit(runFaultServer(mode))
	}
	if dir, ok := os.LookupEnv(engineEnv); ok {
		runEngine(dir)
	}
	os.Exit(m.Run())
}

// runFaultServer serves the fault server's tools on stdin/stdout. mode:
//
//	ok        serve at once
//	exit      write to stderr and exit 7 before speaking
//	garbage   write a line that is not JSON-RPC, then serve
//	slow      sleep NOETA_MCP_DELAY before serving
//	hang      never answer initialize
//
// With NOETA_MCP_PIDFILE set it writes its pid there first; with
// NOETA_MCP_LINGER set it does not exit when its stdin closes.
func runFaultServer(mode string) int {
	if f := os.Getenv("NOETA_MCP_PIDFILE"); f != "" {
		if err := os.WriteFile(f+".tmp", []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil || os.Rename(f+".tmp", f) != nil {
			return 1
		}
	}
	if os.Getenv("NOETA_MCP_LINGER") != "" {
		defer func() { select {} }()
	}
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "fault server: no config, giving up")
		return 7
	case "garbage":
		fmt.Println("this is not JSON-RPC")
	case "slow":
		d, _ := time.ParseDuration(os.Getenv("NOETA_MCP_DELAY"))
		time.Sleep(d)
	case "hang":
		select {}
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "fault", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	var started, cancelled atomic.Int64
	yes := true
	s.AddTool(&sdk.Tool{Name: "echo", Description: "echoes its message", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string"}},
			"required": []string{"message"}}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(req.Params.Arguments)), os.Getpid())), nil
		})
	s.AddTool(&sdk.Tool{Name: "block", Description: "blocks until cancelled", InputSchema: obj},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			started.Add(1)
			<-ctx.Done()
			cancelled.Add(1)
			return nil, ctx.Err()
		})
	s.AddTool(&sdk.Tool{Name: "blocked", Description: "how many calls of block started and were cancelled", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(fmt.Sprintf("%d %d", started.Load(), cancelled.Load())), nil
		})
	s.AddTool(&sdk.Tool{Name: "crash", Description: "exits during the call", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "fault server: crashing mid-call")
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&sdk.Tool{Name: "garble", Description: "writes garbage to stdout during the call", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			fmt.Println("{garbage")
			select {}
		})
	s.AddTool(&sdk.Tool{Name: "big", Description: "returns NOETA_MCP_BIG bytes of text", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var n int
			fmt.Sscan(os.Getenv("NOETA_MCP_BIG"), &n)
			return text(strings.Repeat("x", n)), nil
		})
	s.AddTool(&sdk.Tool{Name: "fail", Description: "reports an error", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the disk is full"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "mixed", Description: "returns every kind of content", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			size := int64(2048)
			return &sdk.CallToolResult{
				Content: []sdk.Content{
					&sdk.TextContent{Text: "one"},
					&sdk.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG-not-really")},
					&sdk.ResourceLink{URI: "file:///r.txt", Name: "r.txt", MIMEType: "text/plain", Size: &size},
					&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://b", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
					&sdk.TextContent{Text: "two"},
				},
				StructuredContent: map[string]any{"n": 1},
			}, nil
		})
	s.AddTool(&sdk.Tool{Name: "picture", Description: "returns a caption, an image of NOETA_MCP_BIG bytes and a line about it", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var n int
			fmt.Sscan(os.Getenv("NOETA_MCP_BIG"), &n)
			data := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0xab}, max(n-8, 0))...)
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "Here is the logo you asked for."},
				&sdk.ImageContent{MIMEType: "image/png", Data: data},
				&sdk.TextContent{Text: "It is 16 by 16 pixels."},
			}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "getenv", Description: "the server's environment variable {name}", InputSchema: obj},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			v, ok := os.LookupEnv(args.Name)
			return text(fmt.Sprintf("%v %s", ok, v)), nil
		})
	s.AddTool(&sdk.Tool{Name: "gone", Description: "removed by swap", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text("still here"), nil
		})
	s.AddTool(&sdk.Tool{Name: "swap", Description: "removes gone, adds added", InputSchema: obj},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			s.RemoveTools("gone")
			s.AddTool(&sdk.Tool{Name: "added", Description: "added by swap", InputSchema: obj},
				func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("new"), nil })
			return text("swapped"), nil
		})
	addProgressTool(s)
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "fault server:", err)
		return 1
	}
	return 0
}
