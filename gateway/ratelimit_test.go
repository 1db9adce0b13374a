package gateway_test

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/guards"
)

// TestGatewayRateLimit: the session's principal may call echo twice an
// hour; the third call comes back as an error result naming the rate
// limit, and the log records it as ToolCallDenied by rate_limit.
func TestGatewayRateLimit(t *testing.T) {
	yaml := strings.Replace(config(t, "1h"), "    approval_timeout: 1h\n",
		"    approval_timeout: 1h\n    rate_limits: [{tool: \"mcp__*__echo\", calls: 2, window: 1h}]\n", 1)
	r := open(t, yaml, gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()
	echo := func() *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 2 {
		if res := echo(); res.IsError || text(res) != "Echo: hi" {
			t.Fatalf("call %d: %+v %q", i+1, res, text(res))
		}
	}
	res := echo()
	if !res.IsError || !strings.Contains(text(res), "denied by rate_limit") || !strings.Contains(text(res), `2 calls per 1h of "mcp__*__echo" for principal "cli:tester"`) {
		t.Fatalf("the third call: %+v %q", res, text(res))
	}
	env := r.waitFor(t, r.sessionTask(t), noeta.TypeToolCallDenied)
	p, _, err := env.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if d := p.(*noeta.ToolCallDenied); d.Guard != guards.NameRateLimit || d.Tool != "mcp__everything__echo" || !strings.Contains(d.Reason, "rate limit reached") {
		t.Fatalf("recorded %+v", d)
	}
}
