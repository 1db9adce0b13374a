package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tools"
)

// BenchmarkCall compares one call of the fault server's echo over stdio
// through a registry tool of a Source (schema check included) with the same
// call made directly on an SDK session, in the same run. Measured on 2
// loaded cores: sdk 375–398 µs/op, source 364–428 µs/op (about 1.0×).
func BenchmarkCall(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"message":"hi"}`)
	b.Run("sdk", func(b *testing.B) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), faultEnv+"=ok")
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench"}, nil).Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		for b.Loop() {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "echo", Arguments: args})
			if err != nil || res.IsError {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("source", func(b *testing.B) {
		s := New(faultServerConfig(exe, "fault", "ok", nil), Options{})
		defer s.Close(context.Background())
		ts, err := s.Tools(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		reg, err := tools.NewRegistry(ts...)
		if err != nil {
			b.Fatal(err)
		}
		call := noeta.ToolCall{CallID: "c", Tool: "mcp__fault__echo", Args: args}
		ws := b.TempDir()
		for b.Loop() {
			if err := reg.ValidateArgs(call.Tool, call.Args); err != nil {
				b.Fatal(err)
			}
			res, err := reg.Run(context.Background(), call, ws)
			if err != nil || !res.OK {
				b.Fatal(res, err)
			}
		}
	})
}
