package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tools"
)

// tool is one of a server's tools as a registry tool.
type tool struct {
	src     *Source
	name    string // mcp__<server>__<remote>
	remote  string
	desc    string
	schema  json.RawMessage
	risk    tools.RiskLevel
	edits   bool
	timeout time.Duration
}

// newTool makes the registry tool of a server's tool: its name, schema,
// risk (from the annotations as far as the server is trusted, the config's
// override winning) and edits
// (from the config only: an annotation cannot make a tool run unasked in
// acceptEdits). A tool the registry would refuse is an error, so that one
// bad tool cannot keep every other tool from being registered.
func (s *Source) newTool(def *sdk.Tool) (tools.Tool, error) {
	over := s.srv.Tools[def.Name]
	t := &tool{
		src:     s,
		name:    ToolName(s.srv.Name, def.Name),
		remote:  def.Name,
		desc:    def.Description,
		risk:    riskOf(def.Annotations, s.srv.TrustAnnotations),
		edits:   over.Edits,
		timeout: time.Duration(s.srv.TimeoutSeconds) * time.Second,
	}
	if over.Risk != "" {
		r, err := tools.ParseRiskLevel(over.Risk)
		if err != nil {
			return nil, err
		}
		t.risk = r
	}
	if over.TimeoutSeconds > 0 {
		t.timeout = time.Duration(over.TimeoutSeconds) * time.Second
	}
	if def.InputSchema != nil {
		raw, err := json.Marshal(def.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		t.schema = raw
	}
	if _, err := tools.NewRegistry(t); err != nil {
		return nil, err
	}
	return t, nil
}

// riskOf maps a tool's annotations to a risk level: destructiveHint is high
// (and wins over readOnlyHint when a server claims both), readOnlyHint low
// only when the server is trusted (config trust_annotations), anything else
// medium. The annotations are hints a server may get wrong or lie about: a
// claim that lowers the risk is taken only on the operator's word, one that
// raises it always. The spec's default for a missing destructiveHint is
// true; noeta reads only what a server says, and leaves the rest to the
// config's override.
func riskOf(a *sdk.ToolAnnotations, trusted bool) tools.RiskLevel {
	switch {
	case a == nil:
		return tools.RiskMedium
	case a.DestructiveHint != nil && *a.DestructiveHint:
		return tools.RiskHigh
	case a.ReadOnlyHint && trusted:
		return tools.RiskLow
	default:
		return tools.RiskMedium
	}
}

func (t *tool) Name() string                 { return t.name }
func (t *tool) Risk() tools.RiskLevel        { return t.risk }
func (t *tool) Edits() bool                  { return t.edits }
func (t *tool) Description() string          { return t.desc }
func (t *tool) InputSchema() json.RawMessage { return t.schema }

// Run calls the tool on the server. What the model can act on (the server
// would not start, died during the call, the tool is gone, the call timed
// out, the tool reported an error, the result is over the cap) is a failed
// Result naming the server; only ctx ending is an error.
func (t *tool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	res, err := t.call(callCtx, call.Args)
	switch {
	case err == nil:
		// A result that arrived is the call's outcome, even if ctx ended
		// just after: the call happened.
	case ctx.Err() != nil:
		return tools.Result{}, fmt.Errorf("%s: %w", t.name, ctx.Err())
	case callCtx.Err() != nil:
		return tools.Failf("mcp server %q: %s timed out after %s; the call was cancelled", t.src.srv.Name, t.remote, t.timeout), nil
	case err != nil:
		return tools.Failf("%v", err), nil
	}
	return res, nil
}

// call is Run's body, with the args.
func (t *tool) call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	s := t.src
	sess, err := s.ensure(ctx)
	if err != nil {
		return tools.Result{}, err
	}
	if err := s.refreshIfChanged(ctx, sess); err != nil {
		if serverError(err) {
			return tools.Result{}, err
		}
		return tools.Result{}, s.lost(ctx, sess, err)
	}
	if _, ok := s.lookup(t.remote); !ok {
		return tools.Result{}, fmt.Errorf("mcp server %q no longer offers tool %q", s.srv.Name, t.remote)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	params := &sdk.CallToolParams{Name: t.remote, Arguments: args}
	if p := tools.ProgressFrom(ctx); p != nil {
		tok := "noeta-" + strconv.FormatInt(s.tokens.Add(1), 10)
		params.SetProgressToken(tok)
		r := &progressRoute{p: p}
		s.progress.Store(tok, r)
		defer func() {
			r.end()
			s.progress.Delete(tok)
		}()
	}
	res, err := sess.cs.CallTool(ctx, params)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return tools.Result{}, ctx.Err()
	case serverError(err):
		return tools.Result{}, fmt.Errorf("mcp server %q: %s: %v", s.srv.Name, t.remote, err)
	default:
		return tools.Result{}, fmt.Errorf("%w (during a call of %s)", s.lost(ctx, sess, err), t.remote)
	}
	s.succeeded()
	return t.result(res)
}

// result maps a call's result: text joined (what a model and a rule
// read), structured content as sent, and, unless the content is one plain
// text block, every content block as the server sent it (images and audio
// with their data, resources with their text or blob: what the gateway's
// client gets back, ADR 0095); over the cap refused, isError a failed
// Result with the text as its error.
func (t *tool) result(res *sdk.CallToolResult) (tools.Result, error) {
	var out Output
	var text []string
	size := 0
	plain := len(res.Content) == 1
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			text = append(text, c.Text)
			size += len(c.Text)
			if c.Meta != nil || c.Annotations != nil {
				plain = false
			}
		case *sdk.ImageContent:
			size += len(c.Data)
			plain = false
		case *sdk.AudioContent:
			size += len(c.Data)
			plain = false
		case *sdk.ResourceLink:
			size += len(c.URI) + len(c.Name) + len(c.Description)
			plain = false
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil {
				size += len(r.URI) + len(r.Text) + len(r.Blob)
			}
			plain = false
		default:
			plain = false
		}
	}
	if !plain {
		blocks := res.Content
		if blocks == nil {
			blocks = []sdk.Content{}
		}
		raw, err := json.Marshal(blocks)
		if err != nil {
			return tools.Result{}, fmt.Errorf("mcp server %q: %s: content: %v", t.src.srv.Name, t.remote, err)
		}
		out.Upstream = raw
	}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return tools.Result{}, fmt.Errorf("mcp server %q: %s: structured content: %v", t.src.srv.Name, t.remote, err)
		}
		out.Structured = raw
		size += len(raw)
	}
	if max := t.src.opts.MaxResultBytes; size > max {
		return tools.Result{}, fmt.Errorf("mcp server %q: %s returned a result of %d bytes, over the cap of %d", t.src.srv.Name, t.remote, size, max)
	}
	out.Text = strings.Join(text, "\n")
	raw, err := json.Marshal(out)
	if err != nil {
		return tools.Result{}, fmt.Errorf("mcp server %q: %s: %v", t.src.srv.Name, t.remote, err)
	}
	r := tools.Result{Output: raw, OK: !res.IsError, Preview: preview(res.Content, out)}
	if res.IsError {
		r.Error = out.Text
		if r.Error == "" {
			r.Error = fmt.Sprintf("mcp server %q: %s reported an error", t.src.srv.Name, t.remote)
		}
	}
	return r, nil
}

// preview is what a model reads of a result whose output is recorded by
// ref (docs/adr/0102): the content in its order, a text block's text and a
// line for any other block (its kind, MIME type, size or URI: the data is
// the client's, not the model's), or the structured content when there is
// no content. At most noeta.PreviewLimit bytes are kept, which the engine
// cuts further (the canonical form escapes every non-ASCII character):
// the whole text is not copied to be thrown away.
func preview(content []sdk.Content, out Output) string {
	var b strings.Builder
	add := func(s string) bool {
		if b.Len() > 0 {
			if b.Len() >= noeta.PreviewLimit {
				return false
			}
			b.WriteByte('\n')
		}
		if room := noeta.PreviewLimit - b.Len(); len(s) > room {
			for room > 0 && !utf8.RuneStart(s[room]) {
				room--
			}
			b.WriteString(s[:room])
			return false
		}
		b.WriteString(s)
		return true
	}
	for _, c := range content {
		var line string
		switch c := c.(type) {
		case *sdk.TextContent:
			line = c.Text
		case *sdk.ImageContent:
			line = fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data))
		case *sdk.AudioContent:
			line = fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data))
		case *sdk.ResourceLink:
			line = "[resource link " + c.URI
			if c.MIMEType != "" {
				line += " " + c.MIMEType
			}
			if c.Size != nil {
				line += fmt.Sprintf(", %d bytes", *c.Size)
			}
			line += "]"
		case *sdk.EmbeddedResource:
			line = "[resource]"
			if r := c.Resource; r != nil {
				line = fmt.Sprintf("[resource %s %s, %d bytes]", r.URI, r.MIMEType, len(r.Text)+len(r.Blob))
			}
		default:
			line = fmt.Sprintf("[%T content]", c)
		}
		if !add(line) {
			return b.String()
		}
	}
	if len(content) == 0 && len(out.Structured) > 0 {
		add(string(out.Structured))
	}
	return b.String()
}

// Output is a call's Output as recorded in ToolCallFinished.
type Output struct {
	// Text is the text content, joined with newlines.
	Text string `json:"text"`
	// Structured is structuredContent, as the server sent it.
	Structured json.RawMessage `json:"structured,omitempty"`
	// Upstream is the content as the server sent it, in MCP's JSON (an
	// array of content blocks), when it is anything but one text block
	// without annotations: Text and Upstream then say the same of the
	// text. It sorts after text in the canonical record, so a model that
	// reads a clipped output reads the text first.
	Upstream json.RawMessage `json:"upstream_content,omitempty"`
}
