package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// everythingEntry is node and the entry point of
// @modelcontextprotocol/server-everything, installed by
// tools/mcp/testdata/install-everything.sh (which .ci/run calls). Without
// them the test fails: it is not skipped.
func everythingEntry(t *testing.T) (node, entry string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the MCP tests need it (%v)", err)
	}
	dir := os.Getenv("NOETA_NPM_PREFIX")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "noeta-npm")
	}
	entry = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("@modelcontextprotocol/server-everything is not installed (%v): run tools/mcp/testdata/install-everything.sh", err)
	}
	return node, entry
}

// everythingSandbox is the sandbox: entry that lets the confined server
// read its program and its package, wherever npm and node put them (the
// system's directories are readable already).
func everythingSandbox(node, entry string) string {
	modules, _, _ := strings.Cut(entry, string(filepath.Separator)+"@modelcontextprotocol"+string(filepath.Separator))
	read := []string{modules}
	if real, err := filepath.EvalSymlinks(node); err == nil {
		read = append(read, filepath.Dir(real))
	}
	return "sandbox: {read: [" + strings.Join(read, ", ") + "]}"
}

// TestGovernedMCPCalls: the tools of an MCP server no one here wrote,
// governed like every other tool: a call its annotations mark read-only
// runs (the config trusts the server's annotations); a rule over mcp__*__trigger* denies; a tool with no read-only hint
// (medium risk) asks a human in default mode and runs once approved; the
// budget counts MCP calls. engine tools lists
// them with their source.
func TestGovernedMCPCalls(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], trust_annotations: true, `+everythingSandbox(node, entry)+`}
agents:
  a:
    tools: ["mcp__everything__*"]
    budget: {max_tool_calls: 2}
rules:
  - match_tool: "mcp__*__trigger*"
    action: deny
    reason: "no long operations here"
`)
	task := writeFile(t, "task.yaml", `
agent: a
goal: "use the server"
script:
  - tool_calls:
      - {tool: mcp__everything__echo, args: {message: hello}}
      - {tool: mcp__everything__trigger-long-running-operation, args: {duration: 1, steps: 1}}
      - {tool: mcp__everything__toggle-simulated-logging, args: {}}
  - tool_calls: [{tool: mcp__everything__echo, args: {message: "one too many"}}]
  - finish: {answer: done}
`)
	code, out, errOut := runCmd(t, "run", task, "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t), "--approvals", "approve")
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`ToolCallFinished\s+mcp__everything__echo call-1-0 ok .*Echo: hello`,
		`ToolCallDenied\s+guard=rules\s+mcp__everything__trigger-long-running-operation call-1-1: no long operations here`,
		`ApprovalRequested\s+guard=permission .*mcp__everything__toggle-simulated-logging call-1-2 \{\}`,
		`ApprovalResolved\s+approval-call-1-2-\S+ approve by`,
		`ToolCallFinished\s+mcp__everything__toggle-simulated-logging call-1-2 ok`,
		`ToolCallDenied\s+guard=budget\s+mcp__everything__echo call-2-0: max_tool_calls=2 reached`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the timeline lacks %s:\n%s", want, out)
		}
	}
	code, out, errOut = runCmd(t, "tools", "--config", cfg)
	if code != 0 || !regexpLine(out, `a\s+mcp__everything__echo\s+low\s+mcp:everything`) || !regexpLine(out, `a\s+mcp__everything__toggle-simulated-logging\s+medium\s+mcp:everything`) {
		t.Errorf("tools: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestModelReadsMCPImageResult: a model calling an MCP tool whose result
// is text around an image reads the text, and a line for the image, in
// its next turn: the image's data puts the output over the inline limit,
// so it is recorded by ref, and its preview is what the model reads
// (docs/adr/0102). Before, the model read the ref alone.
func TestModelReadsMCPImageResult(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if req.turn() == 0 {
			return chatReply{ToolCalls: [][2]string{{"mcp__everything__get-tiny-image", `{}`}}, In: 10, Out: 10}
		}
		return chatReply{Text: "I saw it.", In: 10, Out: 10}
	})
	cfg := writeFile(t, "noeta.yaml", `
models:
  fake: {provider: openai, model: fake-1, base_url: `+f.baseURL()+`, max_retries: 1, price: free}
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], trust_annotations: true, `+everythingSandbox(node, entry)+`}
agents:
  a:
    model: fake
    tools: ["mcp__everything__get-tiny-image"]
    budget: {max_iterations: 4}
`)
	task := writeFile(t, "task.yaml", "agent: a\ngoal: \"Show me the logo\"\n")
	code, out, errOut := runCmd(t, "run", task, "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t), "--approvals", "approve")
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2\n%s", len(reqs), out)
	}
	read := reqs[1].lastTool()
	want := regexp.MustCompile(`^\[output stored by content ref sha256:[0-9a-f]{64} \(\d+ bytes\); not shown whole: a preview of it follows\]\n` +
		`Here's the image you requested:\n\[image image/png, \d+ bytes\]\nThe image above is the MCP logo\.$`)
	if !want.MatchString(read) || strings.Contains(read, "iVBOR") {
		t.Errorf("the model read of get-tiny-image:\n%s", read)
	}
	// The timeline shows the preview beside the ref.
	if !regexp.MustCompile(`ToolCallFinished\s+mcp__everything__get-tiny-image call-1-0 ok \d+ms → \(\d+ bytes in the content store, sha256 \S+\) "Here's the image you requested:`).MatchString(out) {
		t.Errorf("the timeline:\n%s", out)
	}
}

// TestMCPCallInterruptedByAKill: serve is SIGKILLed while an MCP call runs
// (a long operation of server-everything); the serve that takes the task
// over records the call as failed — it may have had effects — and does
// not run it again.
func TestMCPCallInterruptedByAKill(t *testing.T) {
	t.Parallel()
	node, entry := everythingEntry(t)
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], `+everythingSandbox(node, entry)+`}
agents:
  a:
    tools: ["mcp__everything__*"]
    permission_mode: bypassPermissions
`)
	task := writeFile(t, "task.yaml", `
agent: a
goal: "a long operation"
script:
  - tool_calls: [{tool: mcp__everything__trigger-long-running-operation, args: {duration: 30, steps: 3}}]
  - finish: {answer: done}
`)
	data, ws := t.TempDir(), workspace(t)
	args := []string{"serve", "--config", cfg, "--data", data, "--workspace", ws, "--http", "", "--log-format", "json", "--lease-ttl", "2s"}
	a := startEngine(t, args...)
	a.waitLog(t, "serving", time.Minute)
	code, out, errOut := runCmd(t, "submit", task, "--config", cfg, "--data", data, "--lease-ttl", "2s")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	waitFor(t, time.Minute, "the MCP call to start", func() bool {
		_, out, _ := runCmd(t, "events", id, "--data", data, "--lease-ttl", "2s")
		return strings.Contains(out, "ToolCallStarted")
	})
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	a.wait(t, 30*time.Second)
	b := startEngine(t, args...)
	b.waitLog(t, "serving", time.Minute)
	waitFor(t, 2*time.Minute, "the task to end under the second serve", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data, "--lease-ttl", "2s")
		return strings.Contains(out, "status    terminal")
	})
	_ = b.cmd.Process.Signal(os.Interrupt)
	b.wait(t, time.Minute)
	_, out, _ = runCmd(t, "events", id, "--data", data, "--lease-ttl", "2s")
	if n := strings.Count(out, "ToolCallStarted"); n != 1 {
		t.Errorf("the call was started %d times, want once:\n%s", n, out)
	}
	if !regexp.MustCompile(`ToolCallFinished\s+\S+\s+mcp__everything__trigger-long-running-operation call-1-0 failed`).MatchString(out) {
		t.Errorf("the interrupted call is not recorded failed:\n%s", out)
	}
}
