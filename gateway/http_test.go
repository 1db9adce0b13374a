package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/webui"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func TestGatewayHTTP(t *testing.T) {
	tok, sum := webui.NewToken()
	bobTok, bobSum := webui.NewToken()
	yaml := config(t, "1h") + `
http:
  tokens:
    - {name: alice, sha256: "` + sum + `"}
    - {name: bob, sha256: "` + bobSum + `"}
`
	r := open(t, yaml, gateway.Options{})
	gate := webui.NewGate(r.h.Config().HTTP, webui.Limits{})
	ts := httptest.NewServer(r.gw.Handler("dev", gateway.GateAuth(gate)))
	defer ts.Close()
	ctx := context.Background()

	// Unauthenticated: refused, whatever the request.
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated initialize: %s", resp.Status)
	}
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	if _, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ts.URL, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client without a token connected")
	}
	wrong := &http.Client{Transport: bearer{"not-a-token", http.DefaultTransport}}
	if _, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: wrong, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client with a wrong token connected")
	}

	// With alice's token: a session, a task submitted by alice.
	hc := &http.Client{Transport: bearer{tok, http.DefaultTransport}}
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "over http"}})
	if err != nil || res.IsError || text(res) != "Echo: over http" {
		t.Fatalf("echo over HTTP: %+v %v", res, err)
	}
	task := r.sessionTask(t)
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := envs[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if tc := p.(*noeta.TaskCreated); tc.SubmittedBy != "alice" || tc.Agent != "dev" {
		t.Errorf("TaskCreated: submitted by %q, agent %q", tc.SubmittedBy, tc.Agent)
	}

	// A request of the session with no token is refused; the session
	// goes on.
	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session's request without a token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Bob cannot use alice's session.
	req, _ = http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":10,"method":"tools/list"}`))
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bobTok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob on alice's session: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The client closing the session finishes the task.
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	r.waitFor(t, task, noeta.TypeTaskCompleted)
}
