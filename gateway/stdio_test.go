package gateway_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/gateway"
)

// TestGatewayStdioBadLines: a line that is not JSON and one over the
// frame limit are answered with JSON-RPC errors and skipped; the session
// goes on and answers the next request.
func TestGatewayStdioBadLines(t *testing.T) {
	r := open(t, `
agents:
  dev:
    tools: [echo]
`, gateway.Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.gw.ServeStdio(ctx, inR, outW, gateway.Principal{Agent: "dev", SubmittedBy: "cli:tester"}); err != nil {
			t.Errorf("serve: %v", err)
		}
		outW.Close()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-ctx.Done():
			t.Fatal("no answer")
		}
		return ""
	}
	go func() {
		io.WriteString(inW, "not json at all\n")
		io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"`+strings.Repeat("x", gateway.MaxFrameBytes)+`"}}`+"\n")
		io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`+"\n")
	}()
	if l := next(); !strings.Contains(l, "-32700") || !strings.Contains(l, "not JSON") {
		t.Errorf("a line that is not JSON: %s", l)
	}
	if l := next(); !strings.Contains(l, "-32600") || !strings.Contains(l, "over the gateway's limit") {
		t.Errorf("an oversized line: %.200s", l)
	}
	if l := next(); !strings.Contains(l, `"id":2`) || !strings.Contains(l, "noeta-gateway") {
		t.Errorf("initialize after them: %s", l)
	}
	inW.Close()
	wg.Wait()
}
