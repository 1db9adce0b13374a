package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/internal/conformance"
	"github.com/noeta-go/noeta/webui"
)

// Why a server scenario fails through the gateway, when it does: what the
// gateway does not front.
const (
	notFronted  = "outside the gateway: it fronts tools only, not the upstream's %s"
	noUpstream  = "not built: a request of the upstream server to the client (%s) is not passed on; noeta's client of the upstream declares none (ADR 0031)"
	notRelayed  = "not built: the upstream's %s notifications during a call are not passed on to the client"
	promptsWhy  = "prompts"
	resourceWhy = "resources"
)

// serverScenarios are the conformance suite's server scenarios (0.1.16,
// --suite all) through engine gateway --listen --tool-names upstream
// fronting the go-sdk's conformance server, each with why it fails, or ""
// when it must pass.
var serverScenarios = []struct{ name, why string }{
	{"server-initialize", ""},
	{"ping", ""},
	{"logging-set-level", ""},
	{"tools-list", ""},
	{"tools-call-simple-text", ""},
	{"tools-call-image", ""},
	{"tools-call-audio", ""},
	{"tools-call-embedded-resource", ""},
	{"tools-call-mixed-content", ""},
	{"tools-call-error", ""},
	{"tools-call-with-progress", ""},
	{"json-schema-2020-12", ""},
	{"server-sse-polling", ""},
	{"server-sse-multiple-streams", ""},
	{"dns-rebinding-protection", ""},
	{"resources-list", ""},
	{"prompts-list", ""},
	{"tools-call-with-logging", sprintf(notRelayed, "log message")},
	{"tools-call-sampling", sprintf(noUpstream, "sampling/createMessage")},
	{"tools-call-elicitation", sprintf(noUpstream, "elicitation/create")},
	{"elicitation-sep1034-defaults", sprintf(noUpstream, "elicitation/create")},
	{"elicitation-sep1330-enums", sprintf(noUpstream, "elicitation/create")},
	{"completion-complete", sprintf(notFronted, "completions")},
	{"resources-read-text", sprintf(notFronted, resourceWhy)},
	{"resources-read-binary", sprintf(notFronted, resourceWhy)},
	{"resources-templates-read", sprintf(notFronted, resourceWhy)},
	{"resources-subscribe", sprintf(notFronted, resourceWhy)},
	{"resources-unsubscribe", sprintf(notFronted, resourceWhy)},
	{"prompts-get-simple", sprintf(notFronted, promptsWhy)},
	{"prompts-get-with-args", sprintf(notFronted, promptsWhy)},
	{"prompts-get-embedded-resource", sprintf(notFronted, promptsWhy)},
	{"prompts-get-with-image", sprintf(notFronted, promptsWhy)},
}

func sprintf(format, arg string) string { return strings.Replace(format, "%s", arg, 1) }

// conformanceServer builds the go-sdk's conformance server (the tools,
// resources and prompts the suite's server scenarios call) into a
// directory of its own, which the sandbox lets it read.
func conformanceServer(t *testing.T) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "everything-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server").CombinedOutput(); err != nil {
		t.Fatalf("building the go-sdk's conformance server: %v\n%s", err, out)
	}
	return bin, dir
}

// listenGateway starts engine gateway --listen on cfg and returns its URL.
func listenGateway(t *testing.T, cfg string, args ...string) (string, *proc) {
	t.Helper()
	p := startEngine(t, append([]string{"gateway", "--config", cfg, "--agent", "dev", "--data", t.TempDir(), "--workspace", workspace(t), "--listen", "127.0.0.1:0"}, args...)...)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if m := regexp.MustCompile(`on (http://\S+/mcp)`).FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1], p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no listening line:\n%s", p.stderr)
	return "", nil
}

// TestGatewayConformance runs the MCP conformance suite's server scenarios
// against engine gateway --listen fronting the go-sdk's conformance server
// (--tool-names upstream: the scenarios call the tools by their own
// names), and holds every scenario to the table above: the protocol's
// (lifecycle, ping, tools/list, tools/call and its content shapes, errors,
// the upstream's progress, streams, DNS rebinding) must pass. The suite sends no bearer token: a
// proxy of the test adds one, as a client configured with the token's
// header does, and passes the suite's Host and Origin on.
func TestGatewayConformance(t *testing.T) {
	t.Parallel()
	tl := conformance.Find(t)
	bin, dir := conformanceServer(t)
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  conf: {command: [`+bin+`], trust_annotations: true, sandbox: {read: [`+dir+`]}}
agents:
  dev:
    tools: ["mcp__conf__*"]
    permission_mode: bypassPermissions
http:
  tokens:
    - {name: conformance, sha256: "`+sum+`"}
`)
	gw, _ := listenGateway(t, cfg, "--tool-names", "upstream")
	target, err := url.Parse(gw)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	direct := rp.Director
	rp.Director = func(r *http.Request) {
		host := r.Host
		direct(r)
		r.Host = host
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := tl.Command(ctx, tl.Suite, "server", "--suite", "all", "--url", "http://"+ln.Addr().String()+"/mcp", "-o", out)
	cmd.Dir = out
	text, err := cmd.CombinedOutput()
	t.Logf("conformance server --suite all: %v", err) // exits 1 when a scenario fails
	results, rerr := conformance.Results(out)
	if rerr != nil || len(results) == 0 {
		t.Fatalf("no results (%v):\n%s", rerr, text)
	}
	want := map[string]string{}
	var names []string
	for _, s := range serverScenarios {
		want[s.name] = s.why
		names = append(names, s.name)
	}
	t.Logf("\n%s", conformance.Table(names, results, want))
	if diffs := conformance.Compare(results, want); len(diffs) > 0 {
		t.Errorf("the conformance suite's server scenarios differ from the table:\n%s\n\nsuite output:\n%s", strings.Join(diffs, "\n"), text)
	}
}

// TestGatewayInspector: the MCP inspector's CLI mode lists and calls
// tools through engine gateway, over stdio (it starts the gateway as its
// server) and over HTTP with a bearer token: a call's text, an image as
// the upstream gave it, and a denial naming the rule.
func TestGatewayInspector(t *testing.T) {
	t.Parallel()
	tl := conformance.Find(t)
	node, entry := everythingEntry(t)
	tok, sum := webui.NewToken()
	cfg := writeFile(t, "noeta.yaml", `
mcp_servers:
  everything: {command: [`+node+`, `+entry+`, stdio], trust_annotations: true, `+everythingSandbox(node, entry)+`}
agents:
  dev:
    tools: ["mcp__everything__*"]
rules:
  - match_tool: "mcp__*__echo"
    match_arg: {path: message, regex: "secret"}
    action: deny
    reason: "no secrets through the inspector"
http:
  tokens:
    - {name: inspector, sha256: "`+sum+`"}
`)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	data, ws := t.TempDir(), workspace(t)
	stdio := []string{"--", engineBin, "gateway", "--config", cfg, "--agent", "dev", "--data", data, "--workspace", ws}
	gw, _ := listenGateway(t, cfg)
	overHTTP := []string{gw, "--transport", "http", "--header", "Authorization: Bearer " + tok}

	inspect := func(transport []string, args ...string) map[string]any {
		t.Helper()
		// The target comes last over stdio (after --), first over HTTP;
		// --method last of the options, so that the variadic --tool-arg
		// does not take the target's words.
		var all []string
		if transport[0] == "--" {
			all = append(append([]string{"--cli"}, args...), transport...)
		} else {
			all = append(append([]string{"--cli", transport[0]}, args...), transport[1:]...)
		}
		cmd := tl.Command(ctx, tl.Inspector, all...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("inspector %s: %v\n%s\n%s", strings.Join(args, " "), err, out, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("inspector %s printed %s: %v", strings.Join(args, " "), out, err)
		}
		return v
	}
	for name, transport := range map[string][]string{"stdio": stdio, "http": overHTTP} {
		list := inspect(transport, "--method", "tools/list")
		var names []string
		for _, tool := range list["tools"].([]any) {
			names = append(names, tool.(map[string]any)["name"].(string))
		}
		if !strings.Contains(strings.Join(names, " "), "mcp__everything__echo") {
			t.Errorf("%s: tools/list = %v", name, names)
		}
		res := inspect(transport, "--tool-name", "mcp__everything__echo", "--tool-arg", "message=through the inspector", "--method", "tools/call")
		if b, _ := json.Marshal(res["content"]); !strings.Contains(string(b), `"text":"Echo: through the inspector"`) || res["isError"] == true {
			t.Errorf("%s: echo = %v", name, res)
		}
		res = inspect(transport, "--tool-name", "mcp__everything__get-tiny-image", "--method", "tools/call")
		if b, _ := json.Marshal(res["content"]); !strings.Contains(string(b), `"mimeType":"image/png"`) || !strings.Contains(string(b), `"data":"iVBORw0KGgo`) {
			t.Errorf("%s: get-tiny-image = %.300s", name, b)
		}
		res = inspect(transport, "--tool-name", "mcp__everything__echo", "--tool-arg", "message=a secret", "--method", "tools/call")
		if b, _ := json.Marshal(res); res["isError"] != true || !strings.Contains(string(b), "denied by rules: no secrets through the inspector") {
			t.Errorf("%s: a denied call = %s", name, b)
		}
	}
}
