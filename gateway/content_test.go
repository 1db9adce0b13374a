package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/host"
)

// TestGatewayGivesContentAsTheUpstreamGaveIt: a call's result reaches the
// client as server-everything gave it — images with their data and MIME
// type, embedded resources, resource links, annotations, structured
// content, a long text whole — compared with the same call made on the
// server directly; and the task's record holds it (a body over the inline
// limit by its content ref).
func TestGatewayGivesContentAsTheUpstreamGaveIt(t *testing.T) {
	node, entry := everything(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "direct", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: exec.Command(node, entry, "stdio")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	r := open(t, config(t, "1h"), gateway.Options{Idle: time.Minute})
	cs, stop := r.connect(t)
	defer stop()

	long := strings.Repeat("a long text, ", 2000) // spilled: over the inline limit
	calls := []struct {
		tool, args string
		want       func(*sdk.CallToolResult) bool
	}{
		{"get-tiny-image", `{}`, func(res *sdk.CallToolResult) bool {
			for _, c := range res.Content {
				if img, ok := c.(*sdk.ImageContent); ok && img.MIMEType == "image/png" && bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
					return true
				}
			}
			return false
		}},
		{"get-annotated-message", `{"messageType":"error","includeImage":true}`, func(res *sdk.CallToolResult) bool {
			tc, ok := res.Content[0].(*sdk.TextContent)
			return ok && tc.Annotations != nil && len(tc.Annotations.Audience) > 0
		}},
		{"get-resource-reference", `{"resourceType":"Text","resourceId":2}`, func(res *sdk.CallToolResult) bool {
			for _, c := range res.Content {
				if er, ok := c.(*sdk.EmbeddedResource); ok && er.Resource != nil && er.Resource.URI != "" && er.Resource.Text != "" {
					return true
				}
			}
			return false
		}},
		{"get-resource-reference", `{"resourceType":"Blob","resourceId":3}`, func(res *sdk.CallToolResult) bool {
			for _, c := range res.Content {
				if er, ok := c.(*sdk.EmbeddedResource); ok && er.Resource != nil && len(er.Resource.Blob) > 0 {
					return true
				}
			}
			return false
		}},
		{"get-resource-links", `{"count":3}`, func(res *sdk.CallToolResult) bool {
			n := 0
			for _, c := range res.Content {
				if l, ok := c.(*sdk.ResourceLink); ok && l.URI != "" {
					n++
				}
			}
			return n == 3
		}},
		{"get-structured-content", `{"location":"New York"}`, func(res *sdk.CallToolResult) bool {
			return res.StructuredContent != nil
		}},
		{"echo", `{"message":"` + long + `"}`, func(res *sdk.CallToolResult) bool {
			return len(res.Content) == 1 && text(res) == "Echo: "+long
		}},
	}
	for _, c := range calls {
		want, err := direct.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: json.RawMessage(c.args)})
		if err != nil {
			t.Fatalf("%s directly: %v", c.tool, err)
		}
		if !c.want(want) {
			t.Fatalf("%s directly gave %s: the test's expectation of server-everything is wrong", c.tool, js(t, want))
		}
		got, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__" + c.tool, Arguments: json.RawMessage(c.args)})
		if err != nil {
			t.Fatalf("%s through the gateway: %v", c.tool, err)
		}
		if !c.want(got) {
			t.Errorf("%s through the gateway gave %s", c.tool, trim(js(t, got)))
		}
		// A text resource says when the server made it: the two servers
		// made it apart.
		if g, w := clock.ReplaceAllString(js(t, got), "at T"), clock.ReplaceAllString(js(t, want), "at T"); g != w {
			t.Errorf("%s through the gateway:\n got %s\nwant %s", c.tool, trim(g), trim(w))
		}
	}

	// The record keeps what the client got: the image's data is in the
	// task's ToolCallFinished, by its content ref.
	task := r.sessionTask(t)
	envs, err := r.h.Events(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range envs {
		if e.Type != noeta.TypeToolCallFinished {
			continue
		}
		p, _, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		fin := p.(*noeta.ToolCallFinished)
		if fin.Tool != "mcp__everything__get-tiny-image" {
			continue
		}
		found = true
		out := fin.Output
		if fin.OutputRef != nil {
			if out, err = r.h.Content(ctx, *fin.OutputRef); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Contains(out, []byte(`"mimeType":"image/png"`)) || !bytes.Contains(out, []byte(`"data":"iVBORw0KGgo`)) {
			t.Errorf("the recorded output of get-tiny-image holds no image: %s", trim(string(out)))
		}
	}
	if !found {
		t.Errorf("no ToolCallFinished of get-tiny-image in task %s (it may not have been durable yet: the next decision writes it)", task)
	}
}

var clock = regexp.MustCompile(`at \d{1,2}:\d{2}:\d{2} [AP]M`)

func js(t testing.TB, r *sdk.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Content    []sdk.Content `json:"content"`
		Structured any           `json:"structuredContent,omitempty"`
		IsError    bool          `json:"isError,omitempty"`
	}{r.Content, r.StructuredContent, r.IsError})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func trim(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

// TestGatewayApprovedCallGivesContent: a call that waited for a person's
// approval runs in a segment that has not asked the session anything yet;
// its image still reaches the client as the upstream gave it.
func TestGatewayApprovedCallGivesContent(t *testing.T) {
	// Untrusted annotations: get-tiny-image is medium risk and asks.
	yaml := strings.Replace(config(t, "1h"), "trust_annotations: true", "trust_annotations: false", 1)
	r := open(t, yaml, gateway.Options{Idle: time.Minute})
	cs, stop := r.connect(t)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__get-tiny-image", Arguments: map[string]any{}})
		done <- answer{res, err}
	}()
	var task string
	for task == "" && ctx.Err() == nil {
		if ts, _ := r.h.Tasks(ctx); len(ts) == 1 {
			task = ts[0].Task
		}
		time.Sleep(20 * time.Millisecond)
	}
	p, _, err := r.waitFor(t, task, noeta.TypeApprovalRequested).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.h.Approve(ctx, task, p.(*noeta.ApprovalRequested).Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("approved call: %+v %v", a.res, a.err)
	}
	var img *sdk.ImageContent
	for _, c := range a.res.Content {
		if i, ok := c.(*sdk.ImageContent); ok {
			img = i
		}
	}
	if img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("the approved call gave %s", trim(js(t, a.res)))
	}
}

// TestGatewayBuiltinOutputWhole: a built-in's output over the inline
// limit (in the content store by ref) reaches the client whole, as
// recorded, not as the transcript's "stored by content ref" line.
func TestGatewayBuiltinOutputWhole(t *testing.T) {
	r := open(t, "agents:\n  dev:\n    tools: [echo]\n", gateway.Options{Idle: time.Minute})
	cs, stop := r.connect(t)
	defer stop()
	long := strings.Repeat("y", 20_000)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"said": long}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}
	if got, want := text(res), `{"said":"`+long+`"}`; got != want {
		t.Errorf("echo gave %d bytes: %s", len(got), trim(got))
	}
}

// TestGatewayRelaysUpstreamProgress: the progress server-everything
// reports during a call reaches the client that asked for it (a progress
// token), increasing, before the result.
func TestGatewayRelaysUpstreamProgress(t *testing.T) {
	r := open(t, config(t, "1h"), gateway.Options{Idle: time.Minute})
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- r.gw.Serve(ctx, st, gateway.Principal{Agent: "dev", SubmittedBy: "cli:tester"})
	}()
	var mu sync.Mutex
	var seen []*sdk.ProgressNotificationParams
	cl := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			seen = append(seen, req.Params)
			mu.Unlock()
		},
	})
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &sdk.CallToolParams{Name: "mcp__everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 0.3, "steps": 3}}
	p.SetProgressToken("op-1")
	res, err := cs.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("call: %+v %v", res, err)
	}
	// The client's handler runs apart from the call's return: wait for it.
	var got []*sdk.ProgressNotificationParams
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got = slices.Clone(seen)
		mu.Unlock()
		if len(got) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 3 {
		t.Fatalf("the client was told %d progress notifications, want the upstream's 3: %+v", len(got), got)
	}
	for i, n := range got {
		if n.ProgressToken != "op-1" || n.Progress != float64(i+1) || n.Total != 3 {
			t.Errorf("progress %d = %+v, want %d of 3 on token op-1", i, n, i+1)
		}
	}
	_ = cs.Close()
	cancel()
	<-served
}
