package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tools/mcp"
)

// Version is what the gateway tells clients it is.
const Version = "0.1.0"

// Server returns an MCP server for one client session acting as who: its
// tools are those who's agent may call, and its first tools/call submits
// the session's task. [Gateway.Serve] runs one on a transport and settles
// its task when the session ends.
func (g *Gateway) Server(ctx context.Context, who Principal) (*sdk.Server, *session, error) {
	return g.server(ctx, who, &sdk.ServerOptions{})
}

// server is Server with the transport's own options (o is filled in).
func (g *Gateway) server(ctx context.Context, who Principal, o *sdk.ServerOptions) (*sdk.Server, *session, error) {
	if who.SubmittedBy == "" {
		return nil, nil, errors.New("gateway: a session needs a principal")
	}
	specs, err := g.offer(ctx, who.Agent)
	if err != nil {
		return nil, nil, err
	}
	s := newSession(g, who)
	o.Instructions = "Every tool call is governed and recorded by noeta (agent " + who.Agent + "): a call may be denied, with the guard and the reason, or wait for a person's approval."
	o.Capabilities = &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}}
	o.Logger = g.log
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "noeta-gateway", Version: Version}, o)
	s.offered = map[string]string{}
	for _, spec := range specs {
		s.srv.AddTool(&sdk.Tool{Name: g.Exposed(spec.Name), Description: spec.Description, InputSchema: spec.InputSchema}, s.handle(spec.Name))
		s.offered[spec.Name] = specSum(spec)
	}
	g.mu.Lock()
	g.watched[s] = struct{}{}
	g.mu.Unlock()
	return s.srv, s, nil
}

// offer returns the tools a session of agent is offered: those it may
// call, a tool seen first pinned now, one whose definition changed offered
// as pinned (its calls are refused by the pin guard), and only those whose
// input schema is an object (MCP's rule).
func (g *Gateway) offer(ctx context.Context, agent string) ([]noeta.ToolSpec, error) {
	specs, err := g.Tools(agent)
	if err != nil {
		return nil, err
	}
	out := specs[:0]
	for _, spec := range specs {
		if ok, _, err := g.checkPin(ctx, spec.Name); err != nil {
			return nil, err
		} else if !ok {
			if def, found := g.pinned(ctx, spec.Name); found {
				spec.Description, spec.InputSchema = def.Description, def.InputSchema
			}
		}
		if !objectSchema(spec.InputSchema) {
			g.log.Warn("a tool whose input schema is not an object is not offered", "tool", spec.Name)
			continue
		}
		out = append(out, spec)
	}
	// Two tools a client would know by one name: neither is offered, so a
	// call never reaches a tool its caller did not mean.
	seen := map[string]int{}
	for _, spec := range out {
		seen[g.Exposed(spec.Name)]++
	}
	kept := out[:0]
	for _, spec := range out {
		if n := g.Exposed(spec.Name); seen[n] > 1 {
			g.log.Warn("tools named alike to the client are not offered", "name", n, "tool", spec.Name)
			continue
		}
		kept = append(kept, spec)
	}
	return kept, nil
}

// Exposed is the name a client knows the registry's tool by: its alias
// (noeta.yaml's gateway.aliases) if it has one; with
// Options.ToolNames upstream, an MCP server's tool by its name on the
// server (mcp__files__read_file is read_file); otherwise, and for a
// built-in, its registry name. Two tools exposed under one name are
// offered to no one.
func (g *Gateway) Exposed(tool string) string {
	if a := g.exposed(tool); a != tool {
		return a // an alias of noeta.yaml's gateway.aliases
	}
	if g.opts.ToolNames != NamesUpstream {
		return tool
	}
	if _, remote, ok := splitTool(tool); ok && remote != "" {
		return remote
	}
	return tool
}

func specSum(spec noeta.ToolSpec) string {
	def, err := definition(spec.Name, spec, time.Time{})
	if err != nil {
		return ""
	}
	return def.SHA256
}

// refreshTools offers each live session the tools of now: a tool the
// upstream server added or removed (tools/mcp lists a server again when it
// says its list changed) is added or removed, and the go-sdk tells the
// client (notifications/tools/list_changed).
func (g *Gateway) refreshTools(ctx context.Context) {
	g.mu.Lock()
	ss := make([]*session, 0, len(g.watched))
	for s := range g.watched {
		ss = append(ss, s)
	}
	g.mu.Unlock()
	byAgent := map[string][]noeta.ToolSpec{}
	for _, s := range ss {
		specs, ok := byAgent[s.who.Agent]
		if !ok {
			var err error
			if specs, err = g.offer(ctx, s.who.Agent); err != nil {
				g.log.Warn("gateway: listing the tools again failed", "agent", s.who.Agent, "err", err)
				continue
			}
			byAgent[s.who.Agent] = specs
		}
		s.reoffer(specs)
	}
}

// reoffer brings the session's tools to specs.
func (s *session) reoffer(specs []noeta.ToolSpec) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	now := make(map[string]string, len(specs))
	for _, spec := range specs {
		sum := specSum(spec)
		now[spec.Name] = sum
		if s.offered[spec.Name] != sum {
			s.srv.AddTool(&sdk.Tool{Name: s.g.Exposed(spec.Name), Description: spec.Description, InputSchema: spec.InputSchema}, s.handle(spec.Name))
		}
	}
	var gone []string
	for name := range s.offered {
		if _, ok := now[name]; !ok {
			gone = append(gone, s.g.Exposed(name))
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(s.g.exposedAll(gone)...)
	}
	s.offered = now
}

// Serve runs one session as who on t until the client goes or ctx ends;
// then the session's task finishes.
func (g *Gateway) Serve(ctx context.Context, t sdk.Transport, who Principal) error {
	srv, s, err := g.Server(ctx, who)
	if err != nil {
		return err
	}
	defer s.settle()
	ss, err := srv.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("gateway: connect: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = ss.Close() })
	defer stop()
	err = ss.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// SettleWait bounds how long a session that ended waits for its task to
// record its finish (or come to rest on an approval still open).
const SettleWait = 10 * time.Second

// settle ends the session and waits, within SettleWait, for its task to
// come to rest, so a process that stops after Serve leaves it finished.
func (s *session) settle() {
	s.end()
	s.g.mu.Lock()
	delete(s.g.watched, s)
	s.g.mu.Unlock()
	task := s.taskID()
	h, err := s.g.host()
	if task == "" || err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), SettleWait)
	defer cancel()
	if _, err := h.Wait(ctx, task); err != nil {
		s.g.log.Warn("the session's task did not come to rest", "task", task, "err", err)
	}
}

// clientName is how the session's client introduced itself, bounded.
func clientName(ss *sdk.ServerSession) string {
	name := "an unnamed client"
	if ss == nil {
		return name
	}
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		name = p.ClientInfo.Name
		if p.ClientInfo.Version != "" {
			name += " " + p.ClientInfo.Version
		}
	}
	if len(name) > 200 {
		name = name[:200]
	}
	return strconv.Quote(name)
}

func objectSchema(raw json.RawMessage) bool {
	var m struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Type == "object"
}

// handle is the tools/call handler of one tool.
func (s *session) handle(tool string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) > s.g.opts.MaxArgsBytes {
			return errorResult("gateway: the arguments are %d bytes, over the gateway's limit of %d; the call was not made", len(args), s.g.opts.MaxArgsBytes), nil
		}
		if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
			args = json.RawMessage("{}")
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			return errorResult("gateway: the arguments are not a JSON object (%v); the call was not made", err), nil
		}
		if req.Params.RequestState != "" {
			// The client's answer to the question an approval put to it.
			return s.resumeAsked(ctx, req, tool)
		}
		c := &call{tool: tool, args: args, out: make(chan outcome, 1), requested: make(chan *noeta.ApprovalRequested, 1), progress: make(chan progressNote, progressQueue)}
		if err := s.submit(ctx, c, clientName(req.Session)); err != nil {
			return errorResult("gateway: %v; the call was not made", err), nil
		}
		return s.await(ctx, req, c)
	}
}

// await waits for c's outcome, telling the client it waits when it gave a
// progress token, and passing on the upstream server's progress once the
// call runs: its values offset by the waits told before, so that what the
// client is told keeps increasing, and the waits told no more.
func (s *session) await(ctx context.Context, req *sdk.CallToolRequest, c *call) (*sdk.CallToolResult, error) {
	token := req.Params.GetProgressToken()
	tick := time.NewTicker(s.g.opts.ProgressEvery)
	defer tick.Stop()
	n := 0.0
	relaying, base, sent := false, 0.0, false
	relay := func(p progressNote) {
		if token == nil || req.Session == nil {
			return
		}
		if !relaying {
			relaying, base = true, n
		}
		v := base + p.progress
		if sent && v <= n {
			return // the client is told increasing values only
		}
		n, sent = v, true
		params := &sdk.ProgressNotificationParams{ProgressToken: token, Progress: n}
		if p.total > 0 {
			params.Total = base + p.total
		}
		_ = req.Session.NotifyProgress(ctx, params)
	}
	for {
		select {
		case ar := <-c.requested:
			if s.elicits(req.Session) {
				if r := s.askClient(c, ar); r != nil {
					return r, nil
				}
			}
		case o := <-c.out:
			// The progress the upstream sent before its result, first.
			for len(c.progress) > 0 {
				relay(<-c.progress)
			}
			return s.result(ctx, c.tool, o), nil
		case p := <-c.progress:
			relay(p)
		case <-ctx.Done():
			if s.withdraw(c) {
				return nil, fmt.Errorf("gateway: the call was cancelled before it was made: %w", context.Cause(ctx))
			}
			// The engine has it: it runs (or waits for its approval) once,
			// recorded, and nobody reads the result.
			return nil, fmt.Errorf("gateway: the call was cancelled; it stays in the task's log: %w", context.Cause(ctx))
		case <-tick.C:
			if token == nil || req.Session == nil || relaying {
				continue
			}
			n, sent = n+1, true
			msg := "the call is being judged and run"
			c.mu.Lock()
			if c.approval != "" {
				msg = "waiting for a person's approval (" + c.approval + " of task " + s.taskID() + ": engine approve, or the inbox)"
			}
			c.mu.Unlock()
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
		}
	}
}

func (s *session) taskID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.task
}

// result maps an outcome to a tool result: a call that ran is given back
// as recorded (an MCP tool's content blocks and structured content as the
// upstream server sent them, ADR 0095; a spilled output read from the
// content store by its ref), anything else as the text the log gives it (a
// denial or a refused approval names the guard or the approver and the
// reason).
func (s *session) result(ctx context.Context, tool string, o outcome) *sdk.CallToolResult {
	if o.rec == nil {
		return textResult(tool, o)
	}
	rec := o.rec
	out := rec.Output
	if rec.OutputRef != nil {
		h, err := s.g.host()
		if err == nil {
			out, err = h.Content(ctx, *rec.OutputRef)
		}
		if err != nil {
			return errorResult("gateway: the call ran; its output (content ref sha256:%s, %d bytes) could not be read: %v", rec.OutputRef.Hash, rec.OutputRef.Size, err)
		}
	}
	failed := func() *sdk.CallToolResult {
		msg := rec.Error
		if msg == "" {
			msg = "the call failed without an error message"
		}
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
	}
	if _, _, ok := splitTool(tool); !ok {
		// A built-in's output, as recorded.
		if !rec.OK {
			return failed()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: jsonText(out)}}}
	}
	var rout mcp.Output
	if err := json.Unmarshal(out, &rout); err != nil || !bytes.HasPrefix(bytes.TrimSpace(out), []byte("{")) {
		// Not a result the server sent (it could not be reached, the
		// call timed out): the error says why.
		if !rec.OK {
			return failed()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: jsonText(out)}}}
	}
	if !rec.OK && rout.Text == "" && len(rout.Upstream) == 0 {
		return failed()
	}
	r := &sdk.CallToolResult{IsError: !rec.OK, Content: []sdk.Content{&sdk.TextContent{Text: rout.Text}}}
	if len(rout.Upstream) > 0 {
		var blocks sdk.CallToolResult
		if err := json.Unmarshal([]byte(`{"content":`+string(rout.Upstream)+`}`), &blocks); err != nil {
			return errorResult("gateway: the call ran; its recorded content could not be read back: %v", err)
		}
		r.Content = blocks.Content
		if r.Content == nil {
			r.Content = []sdk.Content{}
		}
	}
	if len(rout.Structured) > 0 && !bytes.Equal(rout.Structured, []byte("null")) {
		r.StructuredContent = rout.Structured
	}
	return r
}

// jsonText is a recorded JSON value as text: a string unquoted, anything
// else as written.
func jsonText(v json.RawMessage) string {
	var s string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// textResult is the result of an outcome the log gives as text only.
func textResult(tool string, o outcome) *sdk.CallToolResult {
	if o.isErr {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: o.text}}}
	}
	if _, _, ok := splitTool(tool); !ok {
		// A built-in's output, as recorded.
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: o.text}}}
	}
	var out struct {
		Text       *string         `json:"text"`
		Structured json.RawMessage `json:"structured"`
	}
	if err := json.Unmarshal([]byte(o.text), &out); err != nil || out.Text == nil {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: o.text}}}
	}
	r := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: *out.Text}}}
	if len(out.Structured) > 0 && !bytes.Equal(out.Structured, []byte("null")) {
		r.StructuredContent = out.Structured
	}
	return r
}

func errorResult(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// errEnded is the outcome of calls whose task ended before their result.
var errEnded = errors.New("the session's task ended")

// terminal delivers what the log holds of the session's calls when its
// task ends (a budget run out, a cancel) without asking its policy again.
func (s *session) terminal(records []noeta.Payload, why string) {
	s.mu.Lock()
	asked := s.asked
	s.asked = map[string]*call{}
	clear(s.finished)
	s.done = true
	s.ended = why
	s.mu.Unlock()
	for _, p := range records {
		switch p := p.(type) {
		case *noeta.ToolCallDenied:
			if c, ok := asked[p.CallID]; ok {
				delete(asked, p.CallID)
				c.out <- outcome{text: "denied by " + p.Guard + ": " + p.Reason, isErr: true}
			}
		case *noeta.ToolCallFinished:
			if c, ok := asked[p.CallID]; ok {
				delete(asked, p.CallID)
				c.out <- outcome{text: p.Error, isErr: !p.OK, rec: p}
			}
		}
	}
	for _, c := range asked {
		c.out <- outcome{text: fmt.Sprintf("gateway: %v: %s", errEnded, why), isErr: true}
	}
	s.forget()
}
