package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/tools"
)

// addProgressTool adds "progress": it reports {steps} progress
// notifications, 1 to steps of steps, and returns at once after the last.
func addProgressTool(s *sdk.Server) {
	s.AddTool(&sdk.Tool{Name: "progress", Description: "reports {steps} progress notifications, then returns",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"steps": map[string]any{"type": "integer"}}}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Steps int }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= args.Steps; i++ {
					p := &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(args.Steps), Message: fmt.Sprint("step ", i)}
					if err := req.Session.NotifyProgress(ctx, p); err != nil {
						return nil, err
					}
				}
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		})
}

// progressServerHTTP serves a server with the progress tool over the
// streamable HTTP transport on loopback, and returns its URL.
func progressServerHTTP(t *testing.T) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "progress", Version: "1"}, nil)
	addProgressTool(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

// TestProgressBeforeResult: every progress notification a server sent
// before its result has reached the call's Progress when the call returns,
// over stdio and over HTTP, call after call (the SDK handles notifications
// apart from responses; a progress routed by its handler could arrive
// after the call had returned, and the gateway then lost it).
func TestProgressBeforeResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		srv  func(t *testing.T) Server
	}{
		{"stdio", func(t *testing.T) Server { return faultServer(t, "fault", "ok", nil) }},
		{"http", func(t *testing.T) Server {
			return Server{Name: "fault", URL: progressServerHTTP(t), TimeoutSeconds: 30}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := registry(t, newSource(t, tc.srv(t), Options{}))
			tool, ok := reg.Lookup("mcp__fault__progress")
			if !ok {
				t.Fatal("no progress tool")
			}
			const steps = 5
			want := []string{"1/5 step 1", "2/5 step 2", "3/5 step 3", "4/5 step 4", "5/5 step 5"}
			for i := range 150 {
				var mu sync.Mutex
				var got []string
				ctx := tools.WithProgress(context.Background(), func(progress, total float64, msg string) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, fmt.Sprintf("%g/%g %s", progress, total, msg))
				})
				res, err := tool.Run(ctx, tools.Call{Args: json.RawMessage(fmt.Sprintf(`{"steps":%d}`, steps))})
				if err != nil || !res.OK {
					t.Fatalf("call %d = %+v, %v", i, res, err)
				}
				mu.Lock()
				seen := slices.Clone(got)
				mu.Unlock()
				if !slices.Equal(seen, want) {
					t.Fatalf("call %d: progress when the call returned = %q, want %q", i, seen, want)
				}
			}
			// A call that asked for no progress gets its result all the same.
			res, err := tool.Run(context.Background(), tools.Call{Args: json.RawMessage(`{"steps":3}`)})
			if err != nil || !res.OK {
				t.Fatalf("call without progress = %+v, %v", res, err)
			}
		})
	}
}

// TestSSEProgress: the event stream is passed through byte for byte, and
// the progress notifications in it are routed however the stream is cut
// and its lines ended, while what is not one (other messages, comments,
// events over the bound, data split over lines) is not.
func TestSSEProgress(t *testing.T) {
	t.Parallel()
	note := func(tok string, n int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%q,"progress":%d}}`, tok, n)
	}
	big := strings.Repeat("x", maxProgressFrame)
	for _, tc := range []struct {
		name   string
		stream string
		want   []float64
	}{
		{"lf", "data: " + note("t", 1) + "\n\ndata: " + note("t", 2) + "\n\n", []float64{1, 2}},
		{"crlf", "id: 1\r\ndata: " + note("t", 1) + "\r\n\r\n", []float64{1}},
		// The SDK ends lines at LF alone: two CRs end nothing, and the one
		// line's data decodes as its first message (jsonrpc.DecodeMessage
		// reads one value), so 1 goes and 2 does not, as in the SDK.
		{"cr is not a line end", "data: " + note("t", 1) + "\r\rdata: " + note("t", 2) + "\n\n", []float64{1}},
		{"comments and event names", ": keep-alive\n\nevent: message\ndata: " + note("t", 3) + "\n\n", []float64{3}},
		{"another event name", "event: other\ndata: " + note("t", 3) + "\n\n", nil},
		{"data over two lines", "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\ndata: \"params\":{\"progressToken\":\"t\",\"progress\":4}}\n\n", []float64{4}},
		{"an escaped slash", `data: {"jsonrpc":"2.0","method":"notifications\/progress","params":{"progressToken":"t","progress":5}}` + "\n\n", []float64{5}},
		{"another token", "data: " + note("other", 1) + "\n\n", nil},
		{"a response", `data: {"jsonrpc":"2.0","id":1,"result":{"content":[],"notifications/progress":1}}` + "\n\n", nil},
		{"a request with an id", `data: {"jsonrpc":"2.0","id":7,"method":"notifications/progress","params":{"progressToken":"t","progress":9}}` + "\n\n", nil},
		{"not JSON", "data: notifications/progress {\n\n", nil},
		{"the stream ends without a blank line", "data: " + note("t", 1), []float64{1}},
		{"an event over the bound, then one", "data: " + big + note("t", 8) + "\n\ndata: " + note("t", 9) + "\n\n", []float64{9}},
		// The lines after the long one are the same event's, as the SDK
		// reads them: not a new event.
		{"an event over the bound goes on past its long line", "data: " + big + "\nid: 3\ndata: " + note("t", 8) + "\n\ndata: " + note("t", 9) + "\n\n", []float64{9}},
		{"a line over the bound, then one", "data: " + note("t", 7) + "\nretry: " + big + "\n\ndata: " + note("t", 9) + "\n\n", []float64{9}},
		{"data over the bound in many lines", strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", 70) + "data: " + note("t", 8) + "\n\ndata: " + note("t", 9) + "\n\n", []float64{9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, cut := range []int{1, 3, 7, 4096} {
				src := &Source{}
				var got []float64
				src.progress.Store("t", &progressRoute{p: func(p, _ float64, _ string) { got = append(got, p) }})
				b := &sseProgress{rc: io.NopCloser(&chunked{s: tc.stream, n: cut}), src: src}
				out, err := io.ReadAll(b)
				if err != nil || string(out) != tc.stream {
					t.Fatalf("cut %d: read %d bytes, %v; want the stream as sent", cut, len(out), err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("cut %d: routed %v, want %v", cut, got, tc.want)
				}
			}
		})
	}
}

// chunked reads s at most n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// TestHTTPTransportMediaTypes: a response body is wrapped by its media type
// read as the SDK reads it, whatever its case and parameters: an event
// stream has its progress routed, a JSON body is bounded.
func TestHTTPTransportMediaTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ct   string
		want string
	}{
		{"text/event-stream", "*mcp.sseProgress"},
		{"Text/Event-Stream; charset=utf-8", "*mcp.sseProgress"},
		{"application/json", "*mcp.limitedBody"},
		{"APPLICATION/JSON;charset=UTF-8", "*mcp.limitedBody"},
		{"text/plain", ""},
	} {
		rt := httpTransport{base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {tc.ct}}, Body: io.NopCloser(strings.NewReader(""))}, nil
		}), limit: 1 << 10, src: &Source{}}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%T", resp.Body)
		if tc.want == "" && (got == "*mcp.sseProgress" || got == "*mcp.limitedBody") || tc.want != "" && got != tc.want {
			t.Errorf("Content-Type %q: body %s, want %q", tc.ct, got, tc.want)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
