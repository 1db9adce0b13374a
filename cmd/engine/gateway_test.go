package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/webui"
)

// TestGatewayStdio: a client nobody here wrote (the go-sdk's) starts
// engine gateway as its MCP server over stdio, as Claude Code would, and
// calls a tool of server-everything through it; once the client closes,
// the session's task is in engine events with its calls, the decisions of
// origin client.
func TestGatewayStdio(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], trust_annotations: true, `+everythingSandbox(node, entry)+`}
agents:
  dev:
    tools: ["mcp__everything__*"]
rules:
  - match_tool: "mcp__*__trigger-long*"
    when: 'args.duration >= 1.0'
    action: deny
    reason: "no long operations here"
  - match_tool: "mcp__*__gzip*"
    action: deny
    reason: "never"
`)
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(engineBin, "gateway", "--config", cfg, "--agent", "dev", "--data", data, "--workspace", workspace(t))
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "through the gateway"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*sdk.TextContent).Text != "Echo: through the gateway" {
		t.Fatalf("echo: %+v %v\n%s", res, err, stderr)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 1}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "denied by rules: no long operations here") {
		t.Fatalf("denied: %+v %v\n%s", res, err, stderr)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	code, out, errOut := runCmd(t, "tasks", "--data", data, "--json")
	if code != 0 {
		t.Fatalf("tasks: exit %d\n%s\n%s", code, out, errOut)
	}
	var row struct {
		Task   string `json:"task"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &row); err != nil || row.Task == "" {
		t.Fatalf("tasks: %v\n%s", err, out)
	}
	code, out, errOut = runCmd(t, "events", row.Task, "--data", data)
	if code != 0 {
		t.Fatalf("events: exit %d\n%s\n%s", code, out, errOut)
	}
	// The tools the session was offered are pinned, first seen.
	code, pins, errOut := runCmd(t, "gateway", "pin", "list", "--data", data)
	if code != 0 || !regexpLine(pins, `everything\s+echo\s+[0-9a-f]{12}…\s+first seen\s+-`) {
		t.Errorf("pin list: exit %d\n%s\n%s", code, pins, errOut)
	}
	for _, want := range []string{"PolicyDecided         client", "ToolCallFinished", "ToolCallDenied", "TaskCompleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("events lacks %q:\n%s", want, out)
		}
	}
}

// TestGatewayListenRefusesPlainHTTPBeyondLoopback: --listen beyond
// loopback without TLS or --behind-tls-proxy is bad usage, as for ui.
func TestGatewayListenRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "noeta.yaml", "agents:\n  dev:\n    tools: [echo]\n")
	code, out, errOut := runCmd(t, "gateway", "--config", cfg, "--agent", "dev", "--data", t.TempDir(), "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(errOut, "plain HTTP") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestGatewayHTTPSubprocess: engine gateway --listen serves a client with
// a token of the config's http: section, refuses one without, and stops
// cleanly on SIGTERM, the session's task finished.
func TestGatewayHTTPSubprocess(t *testing.T) {
	t.Parallel()
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", `
agents:
  dev:
    tools: [echo]
http:
  tokens:
    - {name: alice, sha256: "`+sum+`"}
`)
	data := t.TempDir()
	p := startEngine(t, "gateway", "--config", cfg, "--agent", "dev", "--data", data, "--listen", "127.0.0.1:0")
	var url string
	deadline := time.Now().Add(60 * time.Second)
	for url == "" && time.Now().Before(deadline) {
		if m := regexp.MustCompile(`on (http://\S+/mcp)`).FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	if url == "" {
		t.Fatalf("no listening line:\n%s", p.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	if _, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client without a token connected")
	}
	hc := &http.Client{Transport: bearerRT{tok}}
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.stderr)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"said": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}
	_ = cs.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("gateway exited: %v\n%s", err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not stop on SIGTERM:\n%s", p.stderr)
	}
	code, out, _ := runCmd(t, "tasks", "--data", data)
	if code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("tasks: exit %d\n%s", code, out)
	}
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// ccConfig governs Claude Code's tools (and moreTools) for agent cc, a
// rule denying rm -rf, with moreAgents beside and alice's token of sum.
func ccConfig(sum, moreTools, moreAgents string) string {
	return `
agents:
  cc:
    tools: ["claude_code__*"` + moreTools + `]
    permission_mode: bypassPermissions
    approval: client_prompt
` + moreAgents + `rules:
  - match_tool: "claude_code__Bash"
    match_arg: {path: command, regex: "rm -rf"}
    action: deny
    reason: "no recursive deletes"
  - match_tool: "claude_code__Edit"
    action: require_approval
    reason: "edits need a person"
http:
  tokens:
    - {name: alice, sha256: "` + sum + `"}
`
}

// TestHookClaudeCode: engine hook claude-code, as Claude Code runs it (the
// event on stdin, the token in $NOETA_TOKEN), against engine gateway
// --listen: a Read is allowed, rm -rf denied naming the rule, the
// session's task holds both; no gateway there blocks the call (exit 2).
func TestHookClaudeCode(t *testing.T) {
	t.Parallel()
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", ccConfig(sum, "", ""))
	data := t.TempDir()
	p := startEngine(t, "gateway", "--config", cfg, "--agent", "cc", "--data", data, "--listen", "127.0.0.1:0")
	var base string
	for deadline := time.Now().Add(60 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`hooks on (http://\S+)/hooks/claude-code`).FindStringSubmatch(p.stderr.String()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatalf("no listening line:\n%s", p.stderr)
	}
	hook := func(env []string, stdin string) (int, string, string) {
		cmd := exec.Command(engineBin, "hook", "claude-code", "--url", base)
		cmd.Env = append(cmd.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}
	token := []string{"NOETA_TOKEN=" + tok}
	pre := func(tool, id, input string) string {
		return `{"session_id":"abc-123","transcript_path":"/tmp/t.jsonl","cwd":"/src","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"` + tool + `","tool_input":` + input + `,"tool_use_id":"` + id + `"}`
	}
	code, out, errOut := hook(token, pre("Read", "toolu_1", `{"file_path":"/src/a.go"}`))
	if code != 0 || !strings.Contains(out, `"permissionDecision":"allow"`) {
		t.Fatalf("Read: exit %d %s %s", code, out, errOut)
	}
	code, out, _ = hook(token, `{"session_id":"abc-123","hook_event_name":"PostToolUse","tool_name":"Read","tool_use_id":"toolu_1","tool_input":{"file_path":"/src/a.go"},"tool_response":{"content":"package a"}}`)
	if code != 0 || strings.TrimSpace(out) != "{}" {
		t.Fatalf("PostToolUse: exit %d %q", code, out)
	}
	code, out, _ = hook(token, pre("Bash", "toolu_2", `{"command":"rm -rf ~"}`))
	if code != 0 || !strings.Contains(out, `"permissionDecision":"deny"`) || !strings.Contains(out, "no recursive deletes") {
		t.Fatalf("rm -rf: exit %d %s", code, out)
	}
	// An approval handed to Claude Code's prompt (approval: client_prompt).
	code, out, _ = hook(token, pre("Edit", "toolu_4", `{"file_path":"/src/a.go","old_string":"a","new_string":"b"}`))
	if code != 0 || !strings.Contains(out, `"permissionDecision":"ask"`) || !strings.Contains(out, "edits need a person") {
		t.Fatalf("Edit: exit %d %s", code, out)
	}
	// No token: blocked, the reason on stderr.
	if code, out, errOut := hook(nil, pre("Read", "toolu_3", `{"file_path":"/x"}`)); code != 2 || out != "" || !strings.Contains(errOut, "401") {
		t.Fatalf("without a token: exit %d %q %q", code, out, errOut)
	}
	code, out, _ = runCmd(t, "tasks", "--data", data, "--json")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "Claude Code session abc-123") {
		t.Fatalf("tasks: exit %d\n%s", code, out)
	}
	var row struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, "events", row.Task, "--data", data)
	if code != 0 || !strings.Contains(out, "ToolCallFinished") || !strings.Contains(out, "ToolCallDenied") {
		t.Fatalf("events: exit %d\n%s", code, out)
	}
}

// TestServeGateway: engine serve --gateway mounts the MCP gateway and the
// Claude Code hook on its --http listener beside the API, while its pool
// goes on running the shared queue; on SIGTERM the gateway's session
// tasks end before the host stops, and serve exits 0.
func TestServeGateway(t *testing.T) {
	t.Parallel()
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", ccConfig(sum, ", echo", "  researcher: {tools: [read_file, echo]}\n"))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no such agent", []string{"--gateway", "nosuch", "--http", "127.0.0.1:0"}, `no agent "nosuch"`},
		{"no listener", []string{"--gateway", "cc", "--http", ""}, "--http, which is empty"},
		{"tool names", []string{"--gateway", "cc", "--http", "127.0.0.1:0", "--gateway-tool-names", "short"}, "--gateway-tool-names"},
	} {
		code, _, errOut := runCmd(t, append([]string{"serve", "--config", cfg, "--data", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, %s", c.name, code, errOut)
		}
	}

	data := t.TempDir()
	p := startEngine(t, "serve", "--config", cfg, "--data", data, "--workspace", t.TempDir(), "--http", "127.0.0.1:0",
		"--gateway", "cc", "--workers", "2", "--log-format", "json")
	p.waitLog(t, "serving", time.Minute)
	m := regexp.MustCompile(`"msg":"http listening","addr":"([^"]+)"`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no http address in:\n%s", p.stderr)
	}
	base := "http://" + m[1]
	ctx := t.Context()

	// MCP on /mcp, with alice's token.
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	if _, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client without a token connected")
	}
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{tok}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "through serve"}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}

	// Claude Code's hook on /hooks/claude-code, through engine hook.
	pre := `{"session_id":"s-9","transcript_path":"/tmp/t.jsonl","cwd":"/src","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf ~"},"tool_use_id":"toolu_1"}`
	hook := exec.Command(engineBin, "hook", "claude-code", "--url", base)
	hook.Env = append(hook.Environ(), "NOETA_TOKEN="+tok)
	hook.Stdin = strings.NewReader(pre)
	out, err := hook.Output()
	if err != nil || !strings.Contains(string(out), `"permissionDecision":"deny"`) || !strings.Contains(string(out), "no recursive deletes") {
		t.Fatalf("hook: %v %s", err, out)
	}

	// The shared queue's tasks run beside the gateway's.
	code, sub, errOut := runCmd(t, "submit", example("01-allowed-call.yaml"), "--config", cfg, "--data", data)
	if code != 0 {
		t.Fatalf("submit: exit %d %s %s", code, sub, errOut)
	}
	id := strings.TrimSpace(sub)
	waitFor(t, time.Minute, "the shared queue's task to end", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data)
		return strings.Contains(out, "status    terminal")
	})

	// SIGTERM with the MCP session still open: its task and the hook's
	// session's task end before serve stops.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve exited %d\n%s", code, p.stderr)
	}
	_ = cs.Close()
	code, list, _ := runCmd(t, "tasks", "--data", data, "--json")
	if code != 0 || strings.Count(list, "\n") != 3 {
		t.Fatalf("tasks: exit %d\n%s", code, list)
	}
	for line := range strings.Lines(list) {
		var row struct {
			Task   string `json:"task"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if row.Status != "completed" {
			t.Errorf("task %s is %s after serve stopped, want completed\n%s", row.Task, row.Status, list)
		}
	}
}
