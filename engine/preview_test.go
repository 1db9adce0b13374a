package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/schemas"
	"github.com/noeta-go/noeta/tools"
)

// transcriptPolicy calls every tool it is given in turn 1 and finishes in
// turn 2, keeping the transcript turn 2 was given.
type transcriptPolicy struct {
	calls []string
	mu    sync.Mutex
	seen  *noeta.Transcript
}

func (p *transcriptPolicy) Decide(_ context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	if in.Turn == 1 {
		d := noeta.Decision{Kind: noeta.DecisionToolCalls}
		for i, tool := range p.calls {
			d.ToolCalls = append(d.ToolCalls, noeta.ToolCall{CallID: fmt.Sprintf("call-1-%d", i), Tool: tool, Args: json.RawMessage(`{}`)})
		}
		return d, nil
	}
	p.mu.Lock()
	p.seen = in.Context
	p.mu.Unlock()
	return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"read"`)}, nil
}

func (p *transcriptPolicy) transcript() *noeta.Transcript {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// TestSpilledOutputPreview: an output over the inline limit is recorded by
// ref with a preview beside it (docs/adr/0102), and a model's next turn
// reads the preview, said to be one, instead of the bare ref: the tool's
// own rendering where it gives one (an MCP result's text, not its image
// data), else the output's JSON; a preview longer than its bound is cut to
// it, one with a sandbox's egress beside it to what the record has room
// for; a failed call gets none (a model reads its error).
func TestSpilledOutputPreview(t *testing.T) {
	image := strings.Repeat("iVBORw0KGgo", 600) // base64 "data", 6.6 KB
	mcpOut := `{"text":"The page says hello.\nThe image above is the logo.","upstream_content":[{"type":"text","text":"The page says hello."},` +
		`{"type":"image","mimeType":"image/png","data":"` + image + `"},{"type":"text","text":"The image above is the logo."}]}`
	var lines strings.Builder
	for i := range 600 {
		fmt.Fprintf(&lines, "line %d\n", i)
	}
	stdout, err := json.Marshal(map[string]any{"stdout": lines.String(), "exit_code": 0})
	if err != nil {
		t.Fatal(err)
	}
	egress := make([]noeta.Egress, 24)
	for i := range egress {
		egress[i] = noeta.Egress{Host: fmt.Sprintf("host-%02d.example.com", i), Port: 443, Allowed: true, Connections: 1, BytesOut: 100, BytesIn: 1000}
	}
	run := map[string]tools.Result{
		"fetch": {OK: true, Output: json.RawMessage(mcpOut), Preview: "The page says hello.\nThe image above is the logo.\n[image image/png, 6600 bytes]"},
		"dump":  {OK: true, Output: stdout},
		"huge":  {OK: true, Output: stdout, Preview: strings.Repeat("é\"\n", 20000)},
		"noisy": {OK: true, Output: stdout, Egress: egress},
		"broke": {OK: false, Output: stdout, Error: "exit status 1"},
	}
	names := []string{"fetch", "dump", "huge", "noisy", "broke"}
	var defs []tools.Tool
	for _, n := range names {
		res := run[n]
		defs = append(defs, tools.Define(tools.Def{Name: n, Risk: tools.RiskLow, Run: func(context.Context, tools.Call) (tools.Result, error) { return res, nil }}))
	}
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) { testSpilledOutputPreview(t, b, defs, names, run) })
	}
}

func testSpilledOutputPreview(t *testing.T, b backend, defs []tools.Tool, names []string, run map[string]tools.Result) {
	pol := &transcriptPolicy{calls: names}
	h := newHarness(t, b, "agents:\n  reader: {tools: [fetch, dump, huge, noisy, broke]}\n", func(c *engine.Config) {
		reg, err := tools.NewRegistry(defs...)
		if err != nil {
			t.Fatal(err)
		}
		c.Tools = reg
		c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return pol, nil }
	})
	h.start(1)
	id := h.submit("agent: reader\ngoal: read what the tools say\n")
	h.waitStatus(id, noeta.StatusTerminal)

	fin := map[string]noeta.ToolCallFinished{}
	for _, env := range h.log(id) {
		if env.Type != noeta.TypeToolCallFinished {
			continue
		}
		if err := schemas.Validate(env.Type, env.Payload); err != nil {
			t.Errorf("%s: %v", env.Payload, err)
		}
		if len(env.Payload) > noeta.PayloadMaxBytes {
			t.Errorf("%s's ToolCallFinished is %d bytes", env.Payload[:60], len(env.Payload))
		}
		var f noeta.ToolCallFinished
		if err := json.Unmarshal(env.Payload, &f); err != nil {
			t.Fatal(err)
		}
		if f.OutputRef == nil || f.Output != nil {
			t.Errorf("%s: output %s, ref %v: want it by ref", f.Tool, f.Output, f.OutputRef)
		}
		if b, _ := noeta.Canonical(f.Preview); len(b) > noeta.PreviewLimit {
			t.Errorf("%s: preview of %d bytes, over %d", f.Tool, len(b), noeta.PreviewLimit)
		}
		fin[f.Tool] = f
	}
	if got, want := fin["fetch"].Preview, run["fetch"].Preview; got != want {
		t.Errorf("fetch's preview %q, want the tool's own %q", got, want)
	}
	if got, _ := noeta.Canonical(fin["dump"].Preview); !strings.HasPrefix(fin["dump"].Preview, `{"exit_code":0,"stdout":"line 0\nline 1\nline 2\n`) || len(got) < noeta.PreviewLimit-12 {
		t.Errorf("dump's preview (%d bytes encoded) is not its canonical JSON up to the bound: %.80q", len(got), fin["dump"].Preview)
	}
	if b, _ := noeta.Canonical(fin["huge"].Preview); len(b) < noeta.PreviewLimit-12 || !strings.HasPrefix(run["huge"].Preview, fin["huge"].Preview) {
		t.Errorf("huge's preview is %d bytes encoded, not the tool's cut to %d", len(b), noeta.PreviewLimit)
	}
	if got := fin["noisy"].Preview; got == "" || len(got) >= len(fin["dump"].Preview) || !strings.HasPrefix(fin["dump"].Preview, got) {
		t.Errorf("noisy's preview (%d bytes, beside %d egress entries) is not dump's cut to the room left", len(got), len(fin["noisy"].Egress))
	}
	if got := fin["broke"].Preview; got != "" {
		t.Errorf("a failed call got a preview: %.60q", got)
	}

	tr := pol.transcript()
	if tr == nil {
		t.Fatal("turn 2 was never decided")
	}
	msgs := map[string]noeta.Message{}
	for _, m := range tr.Messages {
		if m.Role == noeta.RoleTool {
			msgs[m.ToolName] = m
		}
	}
	head := "[output stored by content ref sha256:" + fin["fetch"].OutputRef.Hash
	if m := msgs["fetch"]; !strings.HasPrefix(m.Text, head) || !strings.Contains(m.Text, "a preview of it follows]\nThe page says hello.\nThe image above is the logo.\n[image image/png, 6600 bytes]") ||
		strings.Contains(m.Text, "iVBOR") {
		t.Errorf("the model read of fetch:\n%s", m.Text)
	}
	if m := msgs["dump"]; !strings.Contains(m.Text, "a preview of it follows]\n"+`{"exit_code":0,"stdout":"line 0\nline 1`) {
		t.Errorf("the model read of dump:\n%.300s", m.Text)
	}
	if m := msgs["broke"]; !m.IsError || m.Text != "exit status 1" {
		t.Errorf("the model read of broke: %+v", m)
	}
}
