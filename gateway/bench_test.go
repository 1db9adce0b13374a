package gateway_test

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/gateway"
)

// BenchmarkGatewayOverhead measures a call of server-everything's echo
// through the gateway (recorded durably on the embedded default: the
// decision and ToolCallStarted fsynced before the call runs) and the same
// call made directly, by the go-sdk client over stdio; it reports each
// one's p50 and p99 and the p50 the gateway adds.
//
//	go test -run '^$' -bench GatewayOverhead -benchtime 2000x ./gateway/
func BenchmarkGatewayOverhead(b *testing.B) {
	ctx := context.Background()
	args := map[string]any{"message": "hi"}
	measure := func(b *testing.B, cs *sdk.ClientSession) []time.Duration {
		// Warm up: the first call starts the task and the upstream session.
		for range 20 {
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: args}); err != nil || res.IsError {
				b.Fatalf("warm-up: %+v %v", res, err)
			}
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			t0 := time.Now()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: args})
			lat = append(lat, time.Since(t0))
			if err != nil || res.IsError {
				b.Fatalf("call: %+v %v", res, err)
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		return lat
	}
	pct := func(lat []time.Duration, p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }

	var direct, through []time.Duration
	b.Run("direct", func(b *testing.B) {
		node, entry := everything(b)
		cl := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(node, entry, "stdio")}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		// The direct call has the upstream name; measure it under the
		// gateway's by calling the same tool.
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: args})
			lat = append(lat, time.Since(t0))
			if err != nil || res.IsError {
				b.Fatalf("call: %+v %v", res, err)
			}
		}
		slices.Sort(lat)
		direct = lat
		b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "p50-µs")
		b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "p99-µs")
	})
	b.Run("gateway", func(b *testing.B) {
		r := open(b, config(b, "1h"), gateway.Options{})
		cs, stop := r.connect(b)
		defer stop()
		lat := measure(b, cs)
		through = lat
		b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "p50-µs")
		b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "p99-µs")
	})
	b.Run("gateway+pins", func(b *testing.B) {
		r := openPinned(b, config(b, "1h"), gateway.Options{}, true)
		cs, stop := r.connect(b)
		defer stop()
		lat := measure(b, cs)
		b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "p50-µs")
		b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "p99-µs")
	})
	if len(direct) > 0 && len(through) > 0 {
		b.Logf("p50 direct %v, through the gateway %v: %v added; p99 %v and %v",
			pct(direct, 0.5), pct(through, 0.5), pct(through, 0.5)-pct(direct, 0.5), pct(direct, 0.99), pct(through, 0.99))
	}
}
