package nats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/internal/natsconn"
	"github.com/noeta-go/noeta/webui"
)

// TestGatewayAsEngine: engine serve --gateway (and engine gateway) on a
// deployment with deploy/nats's roles, as the engine user: the gateway's
// buckets (the pins, the live gateways) are made and used, a Claude Code
// session runs as a task, the operator reads the pins to review, all with
// no permission violation.
func TestGatewayAsEngine(t *testing.T) {
	n := materializeSingle(t, t.TempDir())
	n.start(t)
	n.waitHealthy(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tok, sum := webui.NewToken()
	cfg, err := govfile.Parse("noeta.yaml", []byte(`
agents:
  cc:
    tools: ["claude_code__*"]
    permission_mode: bypassPermissions
http:
  tokens:
    - {name: alice, sha256: "`+sum+`"}
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hostconfig.Open(ctx, hostconfig.Options{
		NATS:   natsconn.Options{URL: n.url(), User: "engine", Password: passwords["engine"]},
		Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "serve engine",
	})
	if err != nil {
		t.Fatalf("open a serve host as the engine user: %v", err)
	}
	defer h.Close()
	m, err := gateway.MountOn(ctx, h, gateway.Mount{Agent: "cc", Workers: 1, Prefix: "noeta", Replicas: 1})
	if err != nil {
		t.Fatalf("mount the gateway as the engine user: %v", err)
	}
	defer m.Close()
	mux := http.NewServeMux()
	gh := m.Handler(gateway.GateAuth(webui.NewGate(cfg.HTTP, webui.Limits{})))
	mux.Handle(gateway.HookPath, gh)
	ts := httptest.NewServer(mux)
	defer ts.Close()

	hook := func(body map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(body)
		var out, errOut bytes.Buffer
		c := gateway.HookClient{URL: ts.URL, Token: tok, Wait: 30 * time.Second}
		if code := c.Forward(ctx, bytes.NewReader(b), &out, &errOut); code != 0 {
			t.Fatalf("hook %s: exit %d %s", body["hook_event_name"], code, errOut.String())
		}
		return out.String()
	}
	ev := map[string]any{"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_use_id": "toolu_1", "tool_input": map[string]any{"file_path": "/a"}}
	if out := hook(ev); !strings.Contains(out, `"permissionDecision":"allow"`) {
		t.Fatalf("PreToolUse Read: %s", out)
	}
	ev["hook_event_name"], ev["tool_response"] = "PostToolUse", map[string]any{"content": "a"}
	hook(ev)
	hook(map[string]any{"session_id": "s1", "hook_event_name": "SessionEnd", "reason": "exit"})
	tasks, err := h.Tasks(ctx)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("tasks: %+v %v", tasks, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		envs, err := h.Events(ctx, tasks[0].Task, 0)
		if err != nil {
			t.Fatal(err)
		}
		if last := envs[len(envs)-1]; last.Type == noeta.TypeTaskCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's task did not complete: %d records", len(envs))
		}
	}

	// The pins, as the gateway keeps them: a first definition pinned, a
	// changed one refused until accepted, the list read.
	pins, err := gateway.OpenPins(ctx, h.Conn(), "noeta", 1)
	if err != nil {
		t.Fatalf("engine opens the pins: %v", err)
	}
	def := func(d string) gateway.Definition {
		return gateway.Definition{SHA256: strings.Repeat(d, 64), Description: "reads", SeenAt: time.Now()}
	}
	if ok, why, err := pins.Check(ctx, "files", "read", def("a")); err != nil || !ok {
		t.Fatalf("first definition: %v %s %v", ok, why, err)
	}
	if ok, _, err := pins.Check(ctx, "files", "read", def("b")); err != nil || ok {
		t.Fatalf("changed definition: %v %v", ok, err)
	}
	onc, _ := connect(t, n.url(), "operator")
	if review, err := gateway.PinsToReview(ctx, onc, "noeta"); err != nil || len(review) != 1 {
		t.Fatalf("operator reads the pins to review: %+v %v", review, err)
	}
	if err := pins.Accept(ctx, "files", "read", "cli:ops", time.Now()); err != nil {
		t.Fatalf("engine accepts the change: %v", err)
	}
	if list, err := pins.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("engine lists the pins: %+v %v", list, err)
	}
	m.Close()
	h.Close()

	if v := n.violations(); len(v) > 0 {
		t.Errorf("a gateway as the engine user met %d permission violations:\n%s", len(v), strings.Join(v, "\n"))
	}
}
