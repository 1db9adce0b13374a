package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/webui"
)

// mounted is a gateway mounted on a host that also runs the shared
// queue's tasks, as engine serve --gateway does.
type mounted struct {
	h   *hostconfig.Host
	m   *gateway.Mounted
	url string
	tok string
}

func mount(t *testing.T) *mounted {
	t.Helper()
	tok, sum := webui.NewToken()
	yaml := ccConfig + `
  - match_tool: "echo"
    action: allow
http:
  tokens:
    - {name: alice, sha256: "` + sum + `"}
`
	yaml = strings.Replace(yaml, `tools: ["claude_code__*"]`, `tools: ["claude_code__*", echo]`, 1)
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := hostconfig.Open(context.Background(), hostconfig.Options{Config: cfg, DataDir: t.TempDir(), Workers: 2, Workspace: t.TempDir(), Name: "serve", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	m, err := gateway.MountOn(context.Background(), h, gateway.Mount{Agent: "cc", Workers: 2, Prefix: hostconfig.DefaultPrefix, Replicas: 1, Logger: logger})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	gate := webui.NewGate(cfg.HTTP, webui.Limits{})
	mux := http.NewServeMux()
	gh := m.Handler(gateway.GateAuth(gate))
	mux.Handle(gateway.MountPath, gh)
	mux.Handle(gateway.HookPath, gh)
	// serve's own timeouts, short: a call waiting for an approval must
	// outlast them, a body sent slowly must not.
	ts := httptest.NewUnstartedServer(mux)
	ts.Config.ReadTimeout, ts.Config.WriteTimeout = mountTimeout, mountTimeout
	ts.Start()
	t.Cleanup(func() {
		m.Close() // first: its sessions' streams end, which ts.Close waits for
		ts.Close()
		h.Close()
	})
	return &mounted{h: h, m: m, url: ts.URL, tok: tok}
}

// mountTimeout is the read and write timeout of the mounted gateway's
// test server.
const mountTimeout = 500 * time.Millisecond

func (r *mounted) records(t *testing.T, task, typ string) []noeta.Payload {
	return (&ccRig{h: r.h}).records(t, task, typ)
}

// TestMountOnServeHost: a gateway mounted on a host that runs the shared
// queue serves MCP on /mcp and the hook on /hooks/claude-code, its
// sessions tasks on its own queue run by its own pool, while the host's
// pool goes on running the shared queue's scripted tasks.
func TestMountOnServeHost(t *testing.T) {
	r := mount(t)
	ctx := context.Background()

	hc := &http.Client{Transport: bearer{r.tok, http.DefaultTransport}}
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: r.url + gateway.MountPath, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "mounted"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(res), "mounted") {
		t.Fatalf("echo through the mounted gateway: %s", text(res))
	}
	_ = cs.Close()

	var out, errOut bytes.Buffer
	c := gateway.HookClient{URL: r.url, Token: r.tok, Wait: 10 * time.Second}
	if code := c.Forward(ctx, bytes.NewReader(event("PreToolUse", "s1", "Bash", "toolu_9", map[string]any{"command": "rm -rf /"})), &out, &errOut); code != 0 {
		t.Fatalf("hook: exit %d %s", code, errOut.String())
	}
	if d, why := decision(t, out.String()); d != "deny" || !strings.Contains(why, "no recursive deletes") {
		t.Fatalf("rm -rf: %s (%s)", d, why)
	}

	// The shared queue's tasks run beside: a scripted task of the host's
	// own pool, decided by its script, not by the gateway.
	id, err := r.h.Submit(ctx, host.Submission{Agent: "cc", Goal: "a scripted task beside the gateway", Script: json.RawMessage(`[{"tool_calls":[{"tool":"echo","args":{"text":"beside"}}]},{"finish":{"answer":"done"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scripted task completed", func() bool { return len(r.records(t, id, noeta.TypeTaskCompleted)) == 1 })
}

// TestMountedHookCallIDOfAnotherTask: a hook's call is answered allow only
// when its own session's task runs it. A task of the shared queue whose
// call of a Claude Code tool has the same id (a scripted call's id is
// call-<turn>-<index>, and Claude Code's tool_use_id is the client's to
// choose) is told no hook waits for it, and the hook's call still waits
// for its approval.
func TestMountedHookCallIDOfAnotherTask(t *testing.T) {
	r := mount(t)
	ctx := context.Background()
	type answer struct {
		code int
		out  string
	}
	got := make(chan answer, 1)
	go func() {
		var out, errOut bytes.Buffer
		c := gateway.HookClient{URL: r.url, Token: r.tok, Wait: 5 * time.Second}
		code := c.Forward(ctx, bytes.NewReader(event("PreToolUse", "s1", "Bash", "call-1-0", map[string]any{"command": "ls"})), &out, &errOut)
		got <- answer{code, out.String()}
	}()
	var session string
	eventually(t, "the hook's call asks for an approval", func() bool {
		ts, err := r.h.Tasks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if len(r.records(t, tk.Task, noeta.TypeApprovalRequested)) == 1 {
				session = tk.Task
				return true
			}
		}
		return false
	})
	id, err := r.h.Submit(ctx, host.Submission{Agent: "cc", Goal: "a call of the same id",
		Script: json.RawMessage(`[{"tool_calls":[{"tool":"claude_code__Read","args":{"file_path":"/etc/hostname"}}]},{"finish":{"answer":"done"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scripted call recorded", func() bool { return len(r.records(t, id, noeta.TypeToolCallFinished)) == 1 })
	fin := r.records(t, id, noeta.TypeToolCallFinished)[0].(*noeta.ToolCallFinished)
	if fin.OK || !strings.Contains(fin.Error, "no Claude Code hook waits") {
		t.Fatalf("another task's call of the hook's id: %+v", fin)
	}
	a := <-got
	if d, why := decision(t, a.out); a.code != 0 || d != "deny" || !strings.Contains(why, "approval") {
		t.Fatalf("the hook's call was answered %d %s (%s); want a denial for the approval it did not get", a.code, d, why)
	}
	if n := len(r.records(t, session, noeta.TypeToolCallStarted)); n != 0 {
		t.Fatalf("the session's call started %d times without its approval", n)
	}
}

// TestMountedSlowBody: the server's read timeout still cuts off a request
// whose body comes too slowly (an admitted principal's), though a call's
// wait for an approval outlasts it (TestMountedHookCallIDOfAnotherTask
// waits ten times as long on the same server).
func TestMountedSlowBody(t *testing.T) {
	r := mount(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"session_id\":", gateway.HookPath, r.tok)
	// Nothing more comes: the server must close the connection, not wait.
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server still held a connection whose body stopped coming, long past its read timeout")
	}
}
