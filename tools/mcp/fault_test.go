package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tools"
)

// faultServer is the config of the fault server in mode, as a stdio server
// named name.
func faultServer(t *testing.T, name, mode string, env map[string]string) Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return faultServerConfig(exe, name, mode, env)
}

func faultServerConfig(exe, name, mode string, env map[string]string) Server {
	e := map[string]string{faultEnv: mode}
	for k, v := range env {
		e[k] = v
	}
	return Server{Name: name, Command: []string{exe}, Env: e, TimeoutSeconds: 30}
}

// newSource returns a source closed when the test ends.
func newSource(t *testing.T, srv Server, opts Options) *Source {
	t.Helper()
	s := New(srv, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// registry lists the source's tools and registers them.
func registry(t *testing.T, s *Source) *tools.Registry {
	t.Helper()
	ts, err := s.Tools(context.Background())
	if err != nil {
		t.Fatalf("Tools: %v", err)
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return reg
}

func run(t *testing.T, reg *tools.Registry, tool, args string) (tools.Result, error) {
	t.Helper()
	return reg.Run(context.Background(), noeta.ToolCall{CallID: "c1", Tool: tool, Args: json.RawMessage(args)}, t.TempDir())
}

func mustRun(t *testing.T, reg *tools.Registry, tool, args string) tools.Result {
	t.Helper()
	res, err := run(t, reg, tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func text(t *testing.T, res tools.Result) string {
	t.Helper()
	var out Output
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	return out.Text
}

// TestFaultServerTools: a server's tools become registry tools named
// mcp__<server>__<tool> with its schemas, risk from annotations (the
// config's override winning), edits from the config only, and the
// registry checks args against the server's schema.
func TestFaultServerTools(t *testing.T) {
	t.Parallel()
	srv := faultServer(t, "fault", "ok", nil)
	srv.Tools = map[string]ToolOverride{"fail": {Risk: "low", Edits: true}}
	srv.TrustAnnotations = true
	reg := registry(t, newSource(t, srv, Options{}))
	for _, tt := range []struct {
		tool  string
		risk  tools.RiskLevel
		edits bool
	}{
		{"mcp__fault__echo", tools.RiskLow, false},   // readOnlyHint, of a trusted server
		{"mcp__fault__crash", tools.RiskHigh, false}, // destructiveHint
		{"mcp__fault__block", tools.RiskMedium, false},
		{"mcp__fault__fail", tools.RiskLow, true}, // the config's override
	} {
		tl, ok := reg.Lookup(tt.tool)
		if !ok {
			t.Fatalf("no %s in %v", tt.tool, reg.Names())
		}
		if tl.Risk() != tt.risk || tl.Edits() != tt.edits {
			t.Errorf("%s: risk %s, edits %v; want %s, %v", tt.tool, tl.Risk(), tl.Edits(), tt.risk, tt.edits)
		}
	}
	spec, _ := reg.Spec("mcp__fault__echo")
	if spec.Description != "echoes its message" || !strings.Contains(string(spec.InputSchema), `"required":["message"]`) {
		t.Errorf("spec = %+v (%s)", spec, spec.InputSchema)
	}
	if err := reg.ValidateArgs("mcp__fault__echo", json.RawMessage(`{}`)); !errors.Is(err, tools.ErrInvalidArgs) {
		t.Errorf("ValidateArgs without message: %v", err)
	}
	res := mustRun(t, reg, "mcp__fault__echo", `{"message":"hi"}`)
	if !res.OK || !strings.Contains(text(t, res), `{"message":"hi"}`) {
		t.Errorf("echo = %+v", res)
	}
}

// TestFaultServerResults: text is joined, structured content kept, the
// content blocks kept as the server sent them, isError a failed result with the
// text as its error, and a result over the cap a clear failure.
func TestFaultServerResults(t *testing.T) {
	t.Parallel()
	srv := faultServer(t, "fault", "ok", map[string]string{"NOETA_MCP_BIG": "5000"})
	reg := registry(t, newSource(t, srv, Options{MaxResultBytes: 4000}))

	res := mustRun(t, reg, "mcp__fault__mixed", `{}`)
	want := `{"text":"one\ntwo","structured":{"n":1},"upstream_content":[{"type":"text","text":"one"},` +
		`{"type":"image","mimeType":"image/png","data":"iVBORy1ub3QtcmVhbGx5"},` +
		`{"type":"resource_link","mimeType":"text/plain","uri":"file:///r.txt","name":"r.txt","size":2048},` +
		`{"type":"resource","resource":{"uri":"mem://b","mimeType":"application/octet-stream","blob":"AAEC"}},` +
		`{"type":"text","text":"two"}]}`
	if !res.OK || string(res.Output) != want {
		t.Errorf("mixed = %s, %v\nwant %s", res.Output, res.OK, want)
	}

	// What a model reads if the output is recorded by ref: the content in
	// its order, a line for each block that is not text (docs/adr/0102).
	if want := "one\n[image image/png, 15 bytes]\n[resource link file:///r.txt text/plain, 2048 bytes]\n" +
		"[resource mem://b application/octet-stream, 3 bytes]\ntwo"; res.Preview != want {
		t.Errorf("mixed's preview = %q\nwant %q", res.Preview, want)
	}

	res = mustRun(t, reg, "mcp__fault__fail", `{}`)
	if res.OK || res.Error != "the disk is full" {
		t.Errorf("fail = %+v", res)
	}

	res = mustRun(t, reg, "mcp__fault__big", `{}`)
	if res.OK || res.Error != `mcp server "fault": big returned a result of 5000 bytes, over the cap of 4000` {
		t.Errorf("big = %+v", res)
	}
	// The server is still there; one plain text block is recorded as text
	// alone.
	if res := mustRun(t, reg, "mcp__fault__echo", `{"message":"after"}`); !res.OK || strings.Contains(string(res.Output), "upstream_content") ||
		res.Preview != text(t, res) {
		t.Errorf("echo after big = %+v", res)
	}

	// A frame far over the cap is not read whole: the connection is
	// dropped, the call fails naming the server, the next call restarts it.
	srv = faultServer(t, "fault", "ok", map[string]string{"NOETA_MCP_BIG": "50000"})
	reg = registry(t, newSource(t, srv, Options{MaxResultBytes: 4000, MinBackoff: time.Millisecond}))
	res = mustRun(t, reg, "mcp__fault__big", `{}`)
	if res.OK || !strings.Contains(res.Error, `mcp server "fault" stopped`) {
		t.Errorf("huge = %+v", res)
	}
	t.Log(res.Error)
	if res := mustRun(t, reg, "mcp__fault__echo", `{"message":"after"}`); !res.OK {
		t.Errorf("echo after huge = %+v", res)
	}
}

// TestFaultServerPreview: a result whose image puts it over the inline
// limit keeps the image's data in its output, for the gateway's client,
// and gives a model its text and a line for the image, never the data;
// a text longer than the preview's bound is cut to it, between runes.
func TestFaultServerPreview(t *testing.T) {
	t.Parallel()
	srv := faultServer(t, "fault", "ok", map[string]string{"NOETA_MCP_BIG": "6000"})
	reg := registry(t, newSource(t, srv, Options{}))
	res := mustRun(t, reg, "mcp__fault__picture", `{}`)
	if !res.OK || len(res.Output) <= noeta.ArgsInlineLimit || !strings.Contains(string(res.Output), `"data":"iVBORw0KGgqrq6ur`) {
		t.Fatalf("picture = %.200s (%d bytes), %v: want the image's data, over the inline limit", res.Output, len(res.Output), res.OK)
	}
	if want := "Here is the logo you asked for.\n[image image/png, 6000 bytes]\nIt is 16 by 16 pixels."; res.Preview != want {
		t.Errorf("picture's preview = %q\nwant %q", res.Preview, want)
	}

	long := strings.Repeat("é", noeta.PreviewLimit)
	for _, tt := range []struct {
		name    string
		content []sdk.Content
		out     Output
		want    string
	}{
		{"long text", []sdk.Content{&sdk.TextContent{Text: long}, &sdk.ImageContent{MIMEType: "image/png", Data: []byte{1}}}, Output{}, long[:noeta.PreviewLimit]},
		{"text cut between runes", []sdk.Content{&sdk.TextContent{Text: "xy"}, &sdk.TextContent{Text: long}}, Output{}, "xy\n" + long[:noeta.PreviewLimit-4]},
		{"full before the next block", []sdk.Content{&sdk.TextContent{Text: strings.Repeat("a", noeta.PreviewLimit)}, &sdk.TextContent{Text: "b"}}, Output{}, strings.Repeat("a", noeta.PreviewLimit)},
		{"structured alone", nil, Output{Structured: json.RawMessage(`{"n":1}`)}, `{"n":1}`},
		{"nothing", nil, Output{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := preview(tt.content, tt.out)
			if got != tt.want {
				t.Errorf("preview = %.40q… (%d bytes), want %.40q… (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if len(got) > noeta.PreviewLimit || !utf8.ValidString(got) {
				t.Errorf("preview of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

// TestFaultServerStartFaults: a missing command, a server that exits at
// once, one that writes garbage to stdout and one that never answers are
// each a clear error naming the server, and never a hang.
func TestFaultServerStartFaults(t *testing.T) {
	t.Parallel()
	missing := Server{Name: "nope", Command: []string{"/nonexistent/mcp-server"}, TimeoutSeconds: 30}
	exit := faultServer(t, "quits", "exit", nil)
	garbage := faultServer(t, "garbled", "garbage", nil)
	hang := faultServer(t, "mute", "hang", nil)
	hang.TimeoutSeconds = 1
	for _, tt := range []struct {
		name string
		srv  Server
		want []string
	}{
		{"missing command", missing, []string{`mcp server "nope": start "/nonexistent/mcp-server"`, "no such file or directory"}},
		{"exits at once", exit, []string{`mcp server "quits" did not initialize`, "exit status 7", "no config, giving up"}},
		{"garbage on stdout", garbage, []string{`mcp server "garbled" did not initialize`, "invalid"}},
		{"never answers", hang, []string{`mcp server "mute" did not initialize`, "deadline exceeded", "signal: killed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSource(t, tt.srv, Options{})
			_, err := s.Tools(context.Background())
			if err == nil || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Tools: %v; want ErrUnavailable", err)
			}
			t.Log(err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestFaultServerCrashMidCall: a server that dies during a call fails that
// call, naming the server and saying how it died, and the next call runs on
// a new process.
func TestFaultServerCrashMidCall(t *testing.T) {
	t.Parallel()
	s := newSource(t, faultServer(t, "fault", "ok", nil), Options{MinBackoff: time.Millisecond})
	reg := registry(t, s)
	before := text(t, mustRun(t, reg, "mcp__fault__echo", `{"message":"a"}`))

	res := mustRun(t, reg, "mcp__fault__crash", `{}`)
	if res.OK || !strings.Contains(res.Error, `mcp server "fault" stopped`) || !strings.Contains(res.Error, "exit status 3") ||
		!strings.Contains(res.Error, "crashing mid-call") {
		t.Fatalf("crash = %+v", res)
	}
	t.Log(res.Error)
	after := text(t, mustRun(t, reg, "mcp__fault__echo", `{"message":"a"}`))
	if before == after || !strings.HasPrefix(after, `{"message":"a"} (pid `) {
		t.Errorf("echo before the crash %q, after %q: want a new process", before, after)
	}
}

// TestFaultServerGarbageMidCall: garbage on stdout during a call fails the
// call naming the server; the process is killed and the next call starts
// a new one.
func TestFaultServerGarbageMidCall(t *testing.T) {
	t.Parallel()
	s := newSource(t, faultServer(t, "fault", "ok", nil), Options{MinBackoff: time.Millisecond})
	reg := registry(t, s)
	res := mustRun(t, reg, "mcp__fault__garble", `{}`)
	if res.OK || !strings.Contains(res.Error, `mcp server "fault" stopped`) {
		t.Fatalf("garble = %+v", res)
	}
	t.Log(res.Error)
	if res := mustRun(t, reg, "mcp__fault__echo", `{"message":"b"}`); !res.OK {
		t.Errorf("echo after garbage = %+v", res)
	}
}

// TestFaultServerCancel: a call whose context ends returns at once with the
// context's error, and the server hears of it
// (notifications/cancelled cancels its handler); a call that times out is
// a failed result saying so.
func TestFaultServerCancel(t *testing.T) {
	t.Parallel()
	srv := faultServer(t, "fault", "ok", nil)
	srv.Tools = map[string]ToolOverride{"block": {TimeoutSeconds: 1}}
	s := newSource(t, srv, Options{})
	reg := registry(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := reg.Run(ctx, noeta.ToolCall{CallID: "c1", Tool: "mcp__fault__block", Args: json.RawMessage(`{}`)}, t.TempDir())
		done <- err
	}()
	// Cancel once the server runs the call, then ask until it has seen
	// the cancellation (the notification is sent after the call returns).
	for text(t, mustRun(t, reg, "mcp__fault__blocked", `{}`)) == "0 0" {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	for text(t, mustRun(t, reg, "mcp__fault__blocked", `{}`)) != "1 1" {
		time.Sleep(10 * time.Millisecond)
	}

	res := mustRun(t, reg, "mcp__fault__block", `{}`)
	if res.OK || res.Error != `mcp server "fault": block timed out after 1s; the call was cancelled` {
		t.Errorf("timed out call = %+v", res)
	}
}

// TestFaultServerListChanged: after notifications/tools/list_changed the
// list is fetched again; a tool that disappeared fails its call clearly and
// a new one is listed.
func TestFaultServerListChanged(t *testing.T) {
	t.Parallel()
	changed := make(chan string, 10)
	s := newSource(t, faultServer(t, "fault", "ok", nil), Options{OnToolsChanged: func(server string) { changed <- server }})
	reg := registry(t, s)
	if res := mustRun(t, reg, "mcp__fault__swap", `{}`); !res.OK {
		t.Fatalf("swap = %+v", res)
	}
	if got := <-changed; got != "fault" {
		t.Errorf("OnToolsChanged(%q)", got)
	}
	res := mustRun(t, reg, "mcp__fault__gone", `{}`)
	if res.OK || res.Error != `mcp server "fault" no longer offers tool "gone"` {
		t.Errorf("gone = %+v", res)
	}
	reg2 := registry(t, s)
	if _, ok := reg2.Lookup("mcp__fault__added"); !ok {
		t.Errorf("no added tool in %v", reg2.Names())
	}
	if _, ok := reg2.Lookup("mcp__fault__gone"); ok {
		t.Errorf("gone is still listed")
	}
}

// TestFaultServerSlowStart: calls that arrive while a slow server starts
// wait for that one start (one process serves them all).
func TestFaultServerSlowStart(t *testing.T) {
	t.Parallel()
	s := newSource(t, faultServer(t, "fault", "slow", map[string]string{"NOETA_MCP_DELAY": "300ms"}), Options{})
	tl := (&tool{src: s, name: "mcp__fault__echo", remote: "echo", timeout: 30 * time.Second})
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Go(func() {
			res, err := tl.Run(context.Background(), tools.Call{Args: json.RawMessage(`{"message":"x"}`)})
			if err != nil || !res.OK {
				t.Errorf("call %d: %+v, %v", i, res, err)
				return
			}
			outs[i] = text(t, res)
		})
	}
	wg.Wait()
	for _, o := range outs[1:] {
		if o != outs[0] {
			t.Errorf("outputs %q: want one process", outs)
		}
	}
}

// TestSourceClose: Close stops the server; a call after it fails with
// ErrClosed (a failed result, as it is not the caller's context).
func TestSourceClose(t *testing.T) {
	t.Parallel()
	s := New(faultServer(t, "fault", "ok", nil), Options{})
	reg := registry(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, reg, "mcp__fault__echo", `{"message":"x"}`)
	if res.OK || !strings.Contains(res.Error, "source closed") {
		t.Errorf("after Close: %+v", res)
	}
}

// TestServerEnv: a stdio server inherits PATH and HOME but none of the
// engine's other variables (its API keys); what it needs is given in env,
// ${VAR} expanded. Not parallel: it sets the process environment.
func TestServerEnv(t *testing.T) {
	t.Setenv("NOETA_TEST_SECRET", "hunter2")
	srv := faultServer(t, "fault", "ok", map[string]string{"GIVEN": "${NOETA_TEST_SECRET}!"})
	reg := registry(t, newSource(t, srv, Options{}))
	for _, tt := range []struct{ name, want string }{
		{"NOETA_TEST_SECRET", "false "},
		{"GIVEN", "true hunter2!"},
		{"PATH", "true " + os.Getenv("PATH")},
	} {
		if got := text(t, mustRun(t, reg, "mcp__fault__getenv", `{"name":"`+tt.name+`"}`)); got != tt.want {
			t.Errorf("the server's %s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSourceBackoff: after a failed start the server is not started again
// until its backoff has passed; a use within it fails with the last
// failure once its context ends.
func TestSourceBackoff(t *testing.T) {
	t.Parallel()
	s := newSource(t, faultServer(t, "quits", "exit", nil), Options{MinBackoff: time.Hour})
	if _, err := s.Tools(context.Background()); err == nil {
		t.Fatal("no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Tools(ctx)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), `mcp server "quits" is waiting to restart (mcp server "quits" did not initialize`) {
		t.Errorf("within the backoff: %v", err)
	}
}
