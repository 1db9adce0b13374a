package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
)

// everything returns node and the entry point of
// @modelcontextprotocol/server-everything, installed by
// tools/mcp/testdata/install-everything.sh. Without them the tests fail:
// they are not skipped.
func everything(t testing.TB) (node, entry string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the gateway tests run @modelcontextprotocol/server-everything with it (%v)", err)
	}
	dir := os.Getenv("NOETA_NPM_PREFIX")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatalf("go env GOCACHE: %v", err)
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "noeta-npm")
	}
	entry = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("@modelcontextprotocol/server-everything is not installed (%v): run tools/mcp/testdata/install-everything.sh", err)
	}
	return node, entry
}

// config is a governance config fronting server-everything: echo (read
// only, low risk) runs, a rule denies the long operations, a tool without
// a read-only hint (medium risk) needs a person's approval, and the
// agent's approvals expire after expiry.
func config(t testing.TB, expiry string) string {
	node, entry := everything(t)
	modules, _, _ := strings.Cut(entry, string(filepath.Separator)+"@modelcontextprotocol"+string(filepath.Separator))
	read := []string{modules}
	if real, err := filepath.EvalSymlinks(node); err == nil {
		read = append(read, filepath.Dir(real))
	}
	return `
mcp_servers:
  everything: {command: [` + node + `, ` + entry + `, stdio], trust_annotations: true, sandbox: {read: [` + strings.Join(read, ", ") + `]}}
agents:
  dev:
    tools: ["mcp__everything__*"]
    approval_timeout: ` + expiry + `
rules:
  - match_tool: "mcp__*__trigger-long*"
    when: 'args.duration >= 1.0'
    action: deny
    reason: "no long operations here"
  - match_tool: "mcp__*__gzip*"
    action: deny
    reason: "never"
  - match_tool: "mcp__*__echo"
    action: deny
    reason: "trying a ban on echo"
    shadow: true
`
}

// rig is a gateway over a host on an embedded NATS server.
type rig struct {
	gw   *gateway.Gateway
	h    *hostconfig.Host
	pins *gateway.Pins
}

func open(t testing.TB, yaml string, o gateway.Options) *rig {
	return openPinned(t, yaml, o, false)
}

func openPinned(t testing.TB, yaml string, o gateway.Options, pinned bool) *rig {
	t.Helper()
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if o.Agent == "" {
		o.Agent = "dev"
	}
	if o.Aliases == nil {
		o.Aliases = cfg.Gateway.Aliases
	}
	gw := gateway.New(o)
	ctx := context.Background()
	h, err := hostconfig.Open(ctx, hostconfig.Options{Config: cfg, DataDir: t.TempDir(), Workers: 2, Workspace: t.TempDir(),
		Policies: gw.Policies, Queue: gw.Queue(), Guards: []guards.Guard{gw.Guard()}, Name: "gateway", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	var pins *gateway.Pins
	if pinned {
		if pins, err = gateway.OpenPins(ctx, h.Conn(), hostconfig.DefaultPrefix, 1); err != nil {
			t.Fatal(err)
		}
	}
	gw.Attach(h.Host, pins)
	t.Cleanup(func() {
		gw.Close()
		h.Close()
	})
	return &rig{gw: gw, h: h, pins: pins}
}

// connect starts a session as the local user and returns its client.
func (r *rig) connect(t testing.TB) (*sdk.ClientSession, func()) {
	t.Helper()
	return r.connectWith(t, nil)
}

// connectWith is connect with the client's options.
func (r *rig) connectWith(t testing.TB, o *sdk.ClientOptions) (*sdk.ClientSession, func()) {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		// A response the server writes after the client closed its end (to
		// a call the client cancelled) finds the pipe closed: the client
		// went, as it may.
		if err := r.gw.Serve(ctx, st, gateway.Principal{Agent: "dev", SubmittedBy: "cli:tester"}); err != nil && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("serve: %v", err)
		}
	})
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, o)
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return cs, func() {
		_ = cs.Close()
		cancel()
		wg.Wait()
	}
}

func text(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sessionTask is the one task of the gateway's sessions.
func (r *rig) sessionTask(t testing.TB) string {
	t.Helper()
	ts, err := r.h.Tasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 {
		t.Fatalf("tasks: %+v, want one", ts)
	}
	return ts[0].Task
}

// waitFor polls until the task's log holds a record of type typ.
func (r *rig) waitFor(t testing.TB, task, typ string) eventlog.Envelope {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		envs, err := r.h.Events(context.Background(), task, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range envs {
			if e.Type == typ {
				return e
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s in task %s", typ, task)
	return eventlog.Envelope{}
}

func TestGatewayGovernsCalls(t *testing.T) {
	r := open(t, config(t, "1h"), gateway.Options{Idle: 200 * time.Millisecond})
	cs, stop := r.connect(t)
	ctx := context.Background()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range lt.Tools {
		names[tl.Name] = true
	}
	// A tool a rule denies whatever its arguments is not offered.
	if !names["mcp__everything__echo"] || !names["mcp__everything__trigger-long-running-operation"] || names["mcp__everything__gzip-file-as-resource"] {
		t.Fatalf("tools/list: %v", names)
	}

	// Allowed: the result comes back.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || text(res) != "Echo: hello" {
		t.Fatalf("echo: %+v %q", res, text(res))
	}
	task := r.sessionTask(t)

	// Denied by a rule: an error result naming the guard and the reason.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "rules") || !strings.Contains(text(res), "no long operations here") {
		t.Fatalf("denied call: %+v %q", res, text(res))
	}

	// Arguments the tool's schema refuses: an error result, the gateway
	// goes on.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": 7}})
	if err != nil || !res.IsError {
		t.Fatalf("bad args: %+v %v", res, err)
	}

	// Oversized arguments are refused before they reach the engine.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": strings.Repeat("x", gateway.DefaultMaxArgsBytes+1)}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "over the gateway's limit") {
		t.Fatalf("oversized: %+v %v", res, err)
	}

	// After the idle park, the next call wakes the task.
	time.Sleep(500 * time.Millisecond)
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "again"}})
	if err != nil || res.IsError || text(res) != "Echo: again" {
		t.Fatalf("echo after parking: %+v %v", res, err)
	}

	// The session's end finishes the task.
	stop()
	r.waitFor(t, task, noeta.TypeTaskCompleted)
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	var clientDecisions, finished, denied, shadowed int
	for _, e := range envs {
		switch e.Type {
		case noeta.TypePolicyDecided:
			if e.Origin == eventlog.OriginClient && e.Actor == "cli:tester" {
				clientDecisions++
			}
		case noeta.TypeToolCallFinished:
			finished++
		case noeta.TypeToolCallDenied:
			denied++
		case noeta.TypeGuardShadowed:
			shadowed++
		}
	}
	// The shadow rule was judged on each echo (the two that ran and the
	// one the schema refused) and decided nothing.
	if clientDecisions < 4 || finished != 2 || denied != 2 || shadowed < 2 {
		t.Errorf("log: %d decisions of origin client, %d calls finished, %d denied, %d shadowed; want ≥ 4, 2, 2, ≥ 2", clientDecisions, finished, denied, shadowed)
	}
}

func TestGatewayApproval(t *testing.T) {
	r := open(t, config(t, "1h"), gateway.Options{ProgressEvery: 50 * time.Millisecond})
	cs, stop := r.connect(t)
	defer stop()
	ctx := context.Background()

	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}}
		p.SetProgressToken("tok")
		res, err := cs.CallTool(ctx, p)
		done <- answer{res, err}
	}()
	task := ""
	deadline := time.Now().Add(30 * time.Second)
	for task == "" && time.Now().Before(deadline) {
		if ts, _ := r.h.Tasks(ctx); len(ts) == 1 {
			task = ts[0].Task
		}
		time.Sleep(20 * time.Millisecond)
	}
	req := r.waitFor(t, task, noeta.TypeApprovalRequested)
	p, _, err := req.Decode()
	if err != nil {
		t.Fatal(err)
	}
	handle := p.(*noeta.ApprovalRequested).Handle
	select {
	case a := <-done:
		t.Fatalf("the call returned before it was approved: %+v %v", a.res, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := r.h.Approve(ctx, task, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("approved call: %+v %v", a.res, a.err)
	}

	// A second one, denied: an error result naming who refused it.
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
		done <- answer{res, err}
	}()
	var second string
	for time.Now().Before(deadline) && second == "" {
		envs, _ := r.h.Events(ctx, task, 0)
		for _, e := range envs {
			if e.Type == noeta.TypeApprovalRequested {
				p, _, _ := e.Decode()
				if h := p.(*noeta.ApprovalRequested).Handle; h != handle {
					second = h
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.h.Approve(ctx, task, second, host.Answer{Decision: noeta.ApprovalDeny, Approver: "cli:approver", Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	a = <-done
	if a.err != nil || !a.res.IsError || !strings.Contains(text(a.res), "not today") {
		t.Fatalf("refused call: %+v %q %v", a.res, text(a.res), a.err)
	}
}

func TestGatewayApprovalExpires(t *testing.T) {
	r := open(t, config(t, "1s"), gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "no one answered in time") {
		t.Fatalf("expired: %+v %q", res, text(res))
	}
}

func TestGatewayMalformedArgs(t *testing.T) {
	r := open(t, config(t, "1h"), gateway.Options{})
	cs, stop := r.connect(t)
	defer stop()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: json.RawMessage(`[1,2]`)})
	if err == nil && !res.IsError {
		t.Fatalf("an array of arguments was taken: %+v", res)
	}
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "still here"}})
	if err != nil || res.IsError {
		t.Fatalf("after a malformed call: %+v %v", res, err)
	}
}

// TestGatewayDisconnectMidApproval: the client goes while its call waits
// for a person; the request stays answerable, and approved, the call runs
// once and the task finishes.
func TestGatewayDisconnectMidApproval(t *testing.T) {
	r := open(t, config(t, "1h"), gateway.Options{})
	cs, stop := r.connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	}()
	var task string
	deadline := time.Now().Add(30 * time.Second)
	for task == "" && time.Now().Before(deadline) {
		if ts, _ := r.h.Tasks(context.Background()); len(ts) == 1 {
			task = ts[0].Task
		}
		time.Sleep(20 * time.Millisecond)
	}
	req := r.waitFor(t, task, noeta.TypeApprovalRequested)
	cancel()
	<-done
	t0 := time.Now()
	stop()
	took := time.Since(t0)
	t.Logf("the session ended in %v", took)
	if took > 5*time.Second {
		t.Errorf("the session took %v to end while its call waited", took)
	}
	p, _, _ := req.Decode()
	if err := r.h.Approve(context.Background(), task, p.(*noeta.ApprovalRequested).Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("approved in %v", time.Since(t0))
	r.waitFor(t, task, noeta.TypeTaskCompleted)
	t.Logf("completed in %v", time.Since(t0))
	envs, _ := r.h.Events(context.Background(), task, 0)
	runs := 0
	for _, e := range envs {
		if e.Type == noeta.TypeToolCallStarted {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("the approved call started %d times, want 1", runs)
	}
}
