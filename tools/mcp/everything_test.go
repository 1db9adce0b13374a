package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tools"
)

// everything returns node and the entry point of
// @modelcontextprotocol/server-everything, installed by
// testdata/install-everything.sh (which .ci/run calls). A machine without
// them fails these tests: a governance product's MCP client is not
// "tested" by a skip.
func everything(t testing.TB) (node, entry string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the MCP tests run @modelcontextprotocol/server-everything with it (%v)", err)
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

// checkEverything runs the tests common to both transports against a
// source of server-everything named "everything".
func checkEverything(t *testing.T, s *Source) {
	reg := registry(t, s)
	for _, name := range []string{"mcp__everything__echo", "mcp__everything__get-sum", "mcp__everything__trigger-long-running-operation"} {
		if _, ok := reg.Lookup(name); !ok {
			t.Fatalf("no %s in %v", name, reg.Names())
		}
	}
	// The config does not trust the server's annotations.
	if r, _ := reg.Risk("mcp__everything__echo"); r != tools.RiskMedium {
		t.Errorf("echo (readOnlyHint, of a server not trusted) has risk %s", r)
	}
	if err := reg.ValidateArgs("mcp__everything__echo", json.RawMessage(`{"message": 1}`)); !errors.Is(err, tools.ErrInvalidArgs) {
		t.Errorf("the server's schema does not refuse a number: %v", err)
	}

	res := mustRun(t, reg, "mcp__everything__echo", `{"message":"hello"}`)
	if !res.OK || text(t, res) != "Echo: hello" {
		t.Errorf("echo = %+v", res)
	}

	res = mustRun(t, reg, "mcp__everything__trigger-long-running-operation", `{"duration": 0.2, "steps": 2}`)
	if !res.OK || !strings.Contains(text(t, res), "Long running operation completed") {
		t.Errorf("long-running = %+v", res)
	}

	// A call cancelled while the server works returns at once; the session
	// is still good afterwards.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := reg.Run(ctx, noeta.ToolCall{CallID: "c2", Tool: "mcp__everything__trigger-long-running-operation",
			Args: json.RawMessage(`{"duration": 600, "steps": 2}`)}, t.TempDir())
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled long-running: %v", err)
	}

	// A tool that returns an error: the server refuses echo without its
	// message (the registry would have refused it first; the tool is run
	// directly here).
	echo, _ := reg.Lookup("mcp__everything__echo")
	res, err := echo.Run(context.Background(), tools.Call{Args: json.RawMessage(`{}`)})
	if err != nil || res.OK || res.Error == "" {
		t.Errorf("echo without message = %+v, %v; want a failed result", res, err)
	}
	t.Logf("echo without message: %s", res.Error)

	res = mustRun(t, reg, "mcp__everything__echo", `{"message":"still here"}`)
	if !res.OK || text(t, res) != "Echo: still here" {
		t.Errorf("echo after cancel = %+v", res)
	}

	// An image is recorded as the server sent it: its MIME type and data.
	if _, ok := reg.Lookup("mcp__everything__get-tiny-image"); ok {
		res = mustRun(t, reg, "mcp__everything__get-tiny-image", `{}`)
		var out Output
		if err := json.Unmarshal(res.Output, &out); err != nil || !res.OK {
			t.Fatalf("get-tiny-image = %+v, %v", res, err)
		}
		var blocks []struct {
			Type     string `json:"type"`
			MIMEType string `json:"mimeType"`
			Data     []byte `json:"data"`
		}
		if err := json.Unmarshal(out.Upstream, &blocks); err != nil {
			t.Fatalf("get-tiny-image upstream content %s: %v", out.Upstream, err)
		}
		var img int
		for _, b := range blocks {
			if b.Type == "image" && b.MIMEType == "image/png" && len(b.Data) > 8 && string(b.Data[1:4]) == "PNG" {
				img++
			}
		}
		if img != 1 {
			t.Errorf("get-tiny-image content = %s, want one PNG image with its data", out.Upstream)
		}
	}

	// A call run with a Progress is told the server's progress, in order.
	if op, ok := reg.Lookup("mcp__everything__trigger-long-running-operation"); ok {
		var mu sync.Mutex
		var got []float64
		ctx := tools.WithProgress(context.Background(), func(progress, total float64, _ string) {
			mu.Lock()
			defer mu.Unlock()
			if total == 3 {
				got = append(got, progress)
			}
		})
		res, err := op.Run(ctx, tools.Call{Args: json.RawMessage(`{"duration":0.3,"steps":3}`)})
		if err != nil || !res.OK {
			t.Fatalf("trigger-long-running-operation = %+v, %v", res, err)
		}
		// Every notification sent before the result reached the call by
		// the time it returned, in order.
		mu.Lock()
		seen := slices.Clone(got)
		mu.Unlock()
		if !slices.Equal(seen, []float64{1, 2, 3}) {
			t.Errorf("progress = %v, want [1 2 3]", seen)
		}
	}
}

// TestEverythingStdio runs @modelcontextprotocol/server-everything over
// stdio, started by the source.
func TestEverythingStdio(t *testing.T) {
	t.Parallel()
	node, entry := everything(t)
	srv := Server{Name: "everything", Command: []string{node, entry, "stdio"}, TimeoutSeconds: 60}
	checkEverything(t, newSource(t, srv, Options{}))
}

// TestEverythingHTTP runs @modelcontextprotocol/server-everything in its
// streamable HTTP mode and connects to its URL.
func TestEverythingHTTP(t *testing.T) {
	t.Parallel()
	node, entry := everything(t)
	port := freePort(t)
	cmd := exec.Command(node, entry, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var drain sync.WaitGroup
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		drain.Wait()
		_ = cmd.Wait()
	})
	// It says so on stderr once it listens.
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "listening on port "+port) {
			break
		}
	}
	if sc.Err() != nil || len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "listening") {
		t.Fatalf("server-everything streamableHttp did not start: %q, %v", lines, sc.Err())
	}
	drain.Go(func() {
		for sc.Scan() {
		}
	})
	srv := Server{Name: "everything", URL: "http://127.0.0.1:" + port + "/mcp", TimeoutSeconds: 60}
	checkEverything(t, newSource(t, srv, Options{}))
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestHTTPHeaders: a url server gets the configured headers, ${VAR}
// expanded from the environment; a variable that is not set keeps the
// server from starting, naming the variable and not the value.
func TestHTTPHeaders(t *testing.T) {
	t.Parallel()
	server := sdk.NewServer(&sdk.Implementation{Name: "auth", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you"}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k3n" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	server.AddTool(&sdk.Tool{Name: "big", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", 50_000)}}}, nil
		})
	srv := Server{Name: "issues", URL: ts.URL, TimeoutSeconds: 30,
		Headers: map[string]string{"Authorization": "Bearer ${ISSUES_TOKEN}"}}
	env := map[string]string{"ISSUES_TOKEN": "t0k3n"}
	s := newSource(t, srv, Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		MaxResultBytes: 4000, MinBackoff: 1})
	reg := registry(t, s)
	if res := mustRun(t, reg, "mcp__issues__whoami", `{}`); !res.OK || text(t, res) != "you" {
		t.Errorf("whoami = %+v", res)
	}
	// A response body far over the cap is not read whole.
	res := mustRun(t, reg, "mcp__issues__big", `{}`)
	if res.OK || !strings.Contains(res.Error, `mcp server "issues"`) {
		t.Errorf("big = %+v", res)
	}
	t.Log(res.Error)
	if res := mustRun(t, reg, "mcp__issues__whoami", `{}`); !res.OK {
		t.Errorf("whoami after big = %+v", res)
	}

	s2 := newSource(t, srv, Options{LookupEnv: func(string) (string, bool) { return "", false }})
	_, err := s2.Tools(context.Background())
	if err == nil || err.Error() != `mcp server "issues": headers.Authorization: environment variable ISSUES_TOKEN is not set` {
		t.Errorf("unset token: %v", err)
	}

	// Refused: the error names the server and its URL, but neither the
	// header nor a query string (either may be a token).
	wrong := map[string]string{"ISSUES_TOKEN": "wr0ng"}
	srv.URL += "?key=sekrit"
	s3 := newSource(t, srv, Options{LookupEnv: func(k string) (string, bool) { v, ok := wrong[k]; return v, ok }})
	_, err = s3.Tools(context.Background())
	if err == nil || !strings.Contains(err.Error(), `mcp server "issues" (`+ts.URL+`)`) || strings.Contains(err.Error(), "wr0ng") ||
		strings.Contains(err.Error(), "sekrit") {
		t.Errorf("refused token: %v", err)
	}
	t.Log(err)
}

// TestHTTPServerDiesMidCall: a url server that drops its connections during
// a call fails that call naming the server, and the next call connects
// again.
//
// Reproduction (before): the SDK reports the failed POST as a JSON-RPC error
// ("rejected by transport", -32005), which was taken for the server's own
// answer: the session was kept, and the next call went out on it.
func TestHTTPServerDiesMidCall(t *testing.T) {
	t.Parallel()
	server := sdk.NewServer(&sdk.Implementation{Name: "flaky", Version: "1"}, nil)
	var ts *httptest.Server
	release := make(chan struct{})
	obj := map[string]any{"type": "object"}
	server.AddTool(&sdk.Tool{Name: "die", InputSchema: obj},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ts.CloseClientConnections()
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil, errors.New("gone")
		})
	server.AddTool(&sdk.Tool{Name: "session", InputSchema: obj},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: req.Session.ID()}}}, nil
		})
	ts = httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil))
	t.Cleanup(ts.Close)
	s := newSource(t, Server{Name: "flaky", URL: ts.URL, TimeoutSeconds: 20}, Options{MinBackoff: 1})
	// First of the cleanups: the source's Close and ts.Close wait for the
	// handler.
	t.Cleanup(func() { close(release) })
	reg := registry(t, s)
	before := text(t, mustRun(t, reg, "mcp__flaky__session", `{}`))
	res := mustRun(t, reg, "mcp__flaky__die", `{}`)
	if res.OK || !strings.Contains(res.Error, `mcp server "flaky"`) {
		t.Fatalf("die = %+v", res)
	}
	t.Log(res.Error)
	after := mustRun(t, reg, "mcp__flaky__session", `{}`)
	if !after.OK || text(t, after) == before || before == "" {
		t.Errorf("session before the drop %q, after %+v: want a new one", before, after)
	}
}
