package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/anthropic"
	"github.com/noeta-go/noeta/policy/llm"
)

func jsonOf(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

// lastBlock is the last content block of the last message of a request.
func lastBlock(req map[string]any) map[string]any {
	m := lastMessage(req)
	blocks, _ := m["content"].([]any)
	if len(blocks) == 0 {
		return nil
	}
	b, _ := blocks[len(blocks)-1].(map[string]any)
	return b
}

// TestTwoTurns: a tool call, its result, a final answer; the exact
// requests the server received are asserted (system, messages with
// tool_use and tool_result blocks under our call ids, tools with their
// schemas, the configured key).
func TestTwoTurns(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		if b := lastBlock(req); b["type"] == "tool_result" {
			text := b["content"].([]any)[0].(map[string]any)["text"].(string)
			return 200, textReply(300, 10, "the tool said: "+text)
		}
		return 200, toolCallsReply(100, 20, [2]string{"echo", `{"text":"hi"}`})
	})
	p := newPolicy(t, srv.model(), llm.Agent{Model: "fast", SystemPrompt: "You are careful."})
	ctx := context.Background()

	in := noeta.PolicyInput{Task: "t1", Turn: 1, Agent: "researcher", Context: goal("say hi"), Tools: []noeta.ToolSpec{echoSpec}}
	d1, err := p.Decide(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	want1 := []noeta.ToolCall{{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`)}}
	if d1.Kind != noeta.DecisionToolCalls || !reflect.DeepEqual(d1.ToolCalls, want1) {
		t.Fatalf("turn 1 = %+v, want the call %+v", d1, want1)
	}
	if d1.Model != "claude-test" || d1.Provider != "anthropic" || d1.InputTokens != 100 || d1.OutputTokens != 20 {
		t.Errorf("turn 1 model/provider/tokens = %q %q %d %d", d1.Model, d1.Provider, d1.InputTokens, d1.OutputTokens)
	}
	if want := 100*2.0/1e6 + 20*8.0/1e6; d1.CostUSD != want {
		t.Errorf("cost = %v, want %v", d1.CostUSD, want)
	}
	if !strings.Contains(string(d1.Response), `"msg_1"`) {
		t.Errorf("Response is not the raw body: %s", d1.Response)
	}

	in.Turn = 2
	in.Context = &noeta.Transcript{Messages: []noeta.Message{
		{Role: noeta.RoleUser, Text: "say hi"},
		{Role: noeta.RoleAssistant, ToolCalls: want1},
		{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "echo", Text: "hi"},
	}}
	d2, err := p.Decide(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Kind != noeta.DecisionFinish || string(d2.Answer) != `"the tool said: hi"` {
		t.Fatalf("turn 2 = %+v, want finish with the text", d2)
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		// This SDK sends WithAPIKey's key as a bearer token.
		if r.path != "/v1/messages" || r.header.Get("Authorization") != "Bearer "+testKey || r.header.Get("Anthropic-Version") == "" {
			t.Errorf("path %q, Authorization %q, anthropic-version %q", r.path, r.header.Get("Authorization"), r.header.Get("Anthropic-Version"))
		}
	}
	wantReq := jsonOf(t, `{
		"model": "claude-test",
		"max_tokens": 256,
		"system": [{"type": "text", "text": "You are careful."}],
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "say hi"}]},
			{"role": "assistant", "content": [{"type": "tool_use", "id": "call-1-0", "name": "echo", "input": {"text": "hi"}}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call-1-0", "content": [{"type": "text", "text": "hi"}], "is_error": false}]}
		],
		"tools": [
			{"name": "echo", "description": "Echo the text back.",
				"input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false}},
			{"name": "ask_human", "description": "Ask a human a question and wait for the answer. Use it when you cannot go on without a person's decision or information. Call it alone.",
				"input_schema": {"type": "object", "properties": {"question": {"type": "string", "description": "The question, complete enough to answer without other context."}}, "required": ["question"], "additionalProperties": false}}
		]
	}`)
	if got := jsonOf(t, reqs[1].raw); !reflect.DeepEqual(got, wantReq) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("request 2:\n%s", g)
	}
}

// TestDenialAndOrder: a denial is a tool_result with is_error and the
// guard's reason; results come right after their tool_use even when the
// transcript has an approval's outcome between (the API refuses anything
// else), consecutive user messages are one, and a call without a result
// gets an error result rather than a request the API refuses.
func TestDenialAndOrder(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "ok") })
	p := newPolicy(t, srv.model(), llm.Agent{})
	in := noeta.PolicyInput{Task: "t1", Turn: 2, Context: &noeta.Transcript{Messages: []noeta.Message{
		{Role: noeta.RoleUser, Text: "clean up"},
		{Role: noeta.RoleAssistant, ToolCalls: []noeta.ToolCall{
			{CallID: "call-1-0", Tool: "shell", Args: json.RawMessage(`{"command":"rm -rf /"}`)},
			{CallID: "call-1-1", Tool: "write_file", Args: json.RawMessage(`{"path":"a","content":"b"}`)},
			{CallID: "call-1-2", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)},
		}},
		{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "shell", IsError: true, Text: "denied by rules: destructive shell command"},
		{Role: noeta.RoleUser, Text: "approved by alice: fine"},
		{Role: noeta.RoleTool, ToolCallID: "call-1-1", ToolName: "write_file", Text: "wrote 1 byte"},
	}}}
	if _, err := p.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	got := srv.requests()[0].body["messages"]
	want := jsonOf(t, `[
		{"role": "user", "content": [{"type": "text", "text": "clean up"}]},
		{"role": "assistant", "content": [
			{"type": "tool_use", "id": "call-1-0", "name": "shell", "input": {"command": "rm -rf /"}},
			{"type": "tool_use", "id": "call-1-1", "name": "write_file", "input": {"path": "a", "content": "b"}},
			{"type": "tool_use", "id": "call-1-2", "name": "echo", "input": {"text": "x"}}]},
		{"role": "user", "content": [
			{"type": "tool_result", "tool_use_id": "call-1-0", "content": [{"type": "text", "text": "denied by rules: destructive shell command"}], "is_error": true},
			{"type": "tool_result", "tool_use_id": "call-1-1", "content": [{"type": "text", "text": "wrote 1 byte"}], "is_error": false},
			{"type": "tool_result", "tool_use_id": "call-1-2", "content": [{"type": "text", "text": "no result was recorded for this call: it did not run"}], "is_error": true},
			{"type": "text", "text": "approved by alice: fine"}]}
	]`)
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("messages:\n%s", g)
	}
}

// TestRetries: as for openai — 429 then success, 529 (overloaded) until
// the budget is spent, an empty reply — each attempt paid for.
func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		respond  func(n int) (int, string)
		requests int
		kind     noeta.DecisionKind
		errHas   string
		noteHas  string
		inTokens int64
	}{
		{"429 then success", func(n int) (int, string) {
			if n == 1 {
				return 429, errorReply("slow down", "rate_limit_error")
			}
			return 200, textReply(5, 5, "done")
		}, 2, noeta.DecisionFinish, "", "attempt 1: HTTP 429 Too Many Requests: slow down; retrying", 5},
		{"overloaded until spent", func(n int) (int, string) {
			return 529, errorReply("Overloaded", "overloaded_error")
		}, 3, noeta.DecisionFail, "anthropic claude-test: HTTP 529: Overloaded; gave up after 3 attempts (max_retries: 2)", "attempt 2: HTTP 529", 0},
		{"401 is final", func(n int) (int, string) {
			return 401, errorReply("invalid x-api-key", "authentication_error")
		}, 1, noeta.DecisionFail, "HTTP 401 Unauthorized: invalid x-api-key", "", 0},
		{"empty reply", func(n int) (int, string) {
			return 200, textReply(7, 0, "")
		}, 3, noeta.DecisionFail, "an empty reply", "attempt 1: an empty reply", 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(_ map[string]any, n int) (int, string) { return tt.respond(n) })
			p := newPolicy(t, srv.model(), llm.Agent{})
			d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := len(srv.requests()); got != tt.requests {
				t.Errorf("%d requests, want %d", got, tt.requests)
			}
			if d.Kind != tt.kind || !strings.Contains(d.Error, tt.errHas) {
				t.Errorf("decision %s %q, want %s with %q", d.Kind, d.Error, tt.kind, tt.errHas)
			}
			if tt.noteHas != "" && !strings.Contains(strings.Join(d.Notes, "\n"), tt.noteHas) {
				t.Errorf("notes %q, want %q", d.Notes, tt.noteHas)
			}
			if d.InputTokens != tt.inTokens {
				t.Errorf("input tokens %d, want %d", d.InputTokens, tt.inTokens)
			}
		})
	}
}

// TestCallsThatCannotRun: input that is not an object, an unknown tool.
func TestCallsThatCannotRun(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, toolCallsReply(1, 1, [2]string{"echo", `{"text": "unterminated`}, [2]string{"nope", `{}`}, [2]string{"echo", `{"text":"ok"}`})
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 2, Context: goal("g"), Tools: []noeta.ToolSpec{echoSpec}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(d.ToolCalls) != 3 ||
		!strings.Contains(d.ToolCalls[0].Invalid, "must be a JSON object") ||
		d.ToolCalls[1].Invalid != `unknown tool "nope" (the tools: echo)` ||
		d.ToolCalls[2].Invalid != "" || d.ToolCalls[2].CallID != "call-2-2" {
		t.Errorf("calls = %+v", d.ToolCalls)
	}
}

// TestCacheTokensCounted: cache writes and reads are input the budget
// counts, at the input price.
func TestCacheTokensCounted(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, `{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":1000,"cache_read_input_tokens":500}}`
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
	if err != nil {
		t.Fatal(err)
	}
	if d.InputTokens != 1510 || d.CostUSD != (1510*2.0+1*8.0)/1e6 {
		t.Errorf("input tokens %d, cost %v", d.InputTokens, d.CostUSD)
	}
}

// TestCredentialsOnlyFromConfig: the SDK's environment (ANTHROPIC_BASE_URL,
// ANTHROPIC_AUTH_TOKEN) is not read; the key is the configured variable's,
// and a server echoing it does not get it into the decision.
func TestCredentialsOnlyFromConfig(t *testing.T) {
	other := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "wrong server") })
	t.Setenv("ANTHROPIC_BASE_URL", other.srv.URL)
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-sdk-default")
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-sdk-default")
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 403, errorReply("key "+testKey+" may not use this model", "permission_error")
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
	if err != nil {
		t.Fatal(err)
	}
	if len(other.requests()) != 0 || len(srv.requests()) != 1 {
		t.Fatalf("requests: configured %d, ANTHROPIC_BASE_URL's %d", len(srv.requests()), len(other.requests()))
	}
	h := srv.requests()[0].header
	if h.Get("Authorization") != "Bearer "+testKey || h.Get("X-Api-Key") != "" {
		t.Errorf("x-api-key %q, Authorization %q", h.Get("X-Api-Key"), h.Get("Authorization"))
	}
	all, _ := json.Marshal(d)
	if strings.Contains(string(all), "SECRET") || !strings.Contains(d.Error, "HTTP 403") {
		t.Errorf("decision = %s", all)
	}
	m := srv.model()
	m.APIKeyEnv, m.BaseURL = "", ""
	if _, err := anthropic.New(m, llm.Agent{}, anthropic.Options{LookupEnv: func(string) (string, bool) { return "", false }}); !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("New without a key: %v", err)
	}
	m.Provider = "openai"
	if _, err := anthropic.New(m, llm.Agent{}, anthropic.Options{LookupEnv: env}); !errors.Is(err, llm.ErrConfig) {
		t.Errorf("New of an openai model: %v", err)
	}
}

// TestBadNameInHistory: a call the model named outside the API's alphabet
// (recorded invalid) goes back under a name the API accepts, so the
// model's mistake does not fail every later turn with a 400.
func TestBadNameInHistory(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "ok") })
	p := newPolicy(t, srv.model(), llm.Agent{})
	in := noeta.PolicyInput{Task: "t1", Turn: 2, Context: &noeta.Transcript{Messages: []noeta.Message{
		{Role: noeta.RoleUser, Text: "g"},
		{Role: noeta.RoleAssistant, ToolCalls: []noeta.ToolCall{{CallID: "call-1-0", Tool: "functions.echo", Invalid: "unknown tool"}}},
		{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "functions.echo", IsError: true, Text: `unknown tool "functions.echo"`},
	}}}
	if _, err := p.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	msgs := srv.requests()[0].body["messages"].([]any)
	use := msgs[1].(map[string]any)["content"].([]any)[0].(map[string]any)
	if use["name"] != "functions_echo" || mustJSON(use["input"]) != "{}" {
		t.Errorf("tool_use in history = %v", use)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestArgsThatCannotBeRecorded: a tool_use input that encoding/json
// accepts but canonical JSON refuses is an invalid call, its input not
// kept, the decision valid and recordable. Before, such a call was a call
// that could run, and the engine then failed to record its
// PolicyDecided: the segment was retried, the model asked and billed
// again each time, until the task ended with no terminal record. input is
// the tool_use block's input as the server sends it.
func TestArgsThatCannotBeRecorded(t *testing.T) {
	tests := []struct {
		name, input string
		invalid     string // "" when the call can run
		args        string // what a call that can run keeps
	}{
		{"duplicate key", `{"command":"a","command":"b"}`, `duplicate object key "command"`, ""},
		{"lone surrogate", `{"text":"\ud800"}`, "unpaired surrogate", ""},
		{"number out of range", `{"text":"x","n":1e999}`, "overflows float64", ""},
		{"invalid UTF-8", "{\"text\":\"\xff\"}", "invalid UTF-8", ""},
		{"an array", `[1]`, "must be a JSON object", "[1]"},
		{"a string", `"echo hi"`, "must be a JSON object", `"echo hi"`},
		{"large integer in range", `{"text":"x","n":123456789012345678901234567890}`, "", `{"text":"x","n":123456789012345678901234567890}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(req map[string]any, n int) (int, string) {
				return 200, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"tool_use","id":"toolu_0","name":"echo","input":` + tt.input + `}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
			})
			p := newPolicy(t, srv.model(), llm.Agent{})
			d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g"), Tools: []noeta.ToolSpec{echoSpec}})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Validate(); err != nil {
				t.Fatal(err)
			}
			if d.Kind != noeta.DecisionToolCalls || len(d.ToolCalls) != 1 {
				t.Fatalf("decision %+v", d)
			}
			c := d.ToolCalls[0]
			switch {
			case tt.invalid == "" && c.Invalid != "":
				t.Fatalf("call refused: %s", c.Invalid)
			case tt.invalid != "" && !strings.Contains(c.Invalid, tt.invalid):
				t.Fatalf("invalid %q, want it to say %q", c.Invalid, tt.invalid)
			case string(c.Args) != tt.args:
				t.Fatalf("args %q, want %q", c.Args, tt.args)
			}
			if len(c.Args) > 0 {
				if _, err := noeta.CanonicalizeJSON(c.Args); err != nil {
					t.Errorf("the call keeps arguments the log cannot hold: %v", err)
				}
			}
		})
	}
}

// TestTextBesideCalls: the text blocks of a reply that asks for calls are
// the decision's Text, joined in order; the next request sends them back
// as text blocks before the tool_use blocks, as the API returned them.
func TestTextBesideCalls(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		if n == 1 {
			reply := toolCallsReply(10, 5, [2]string{"echo", `{"text":"hi"}`})
			return 200, strings.Replace(reply, `{"type":"text","text":"Let me check."}`, `{"type":"text","text":"Let me check "},{"type":"text","text":"the file first."}`, 1)
		}
		return 200, textReply(10, 5, "done")
	})
	p := newPolicy(t, srv.model(), llm.Agent{Model: "fast"})
	in := noeta.PolicyInput{Task: "t1", Turn: 1, Agent: "a", Context: goal("say hi"), Tools: []noeta.ToolSpec{echoSpec}}
	d, err := p.Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionToolCalls || d.Text != "Let me check the file first." {
		t.Fatalf("turn 1 = %s with text %q, want tool_calls with the reply's text", d.Kind, d.Text)
	}
	in.Turn = 2
	in.Context = &noeta.Transcript{Messages: []noeta.Message{
		{Role: noeta.RoleUser, Text: "say hi"},
		{Role: noeta.RoleAssistant, Text: d.Text, ToolCalls: d.ToolCalls},
		{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "echo", Text: "hi"},
	}}
	d2, err := p.Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Kind != noeta.DecisionFinish || d2.Text != "" {
		t.Errorf("turn 2 = %s with text %q, want a finish without text (the answer is the text)", d2.Kind, d2.Text)
	}
	msgs := srv.requests()[1].body["messages"].([]any)
	blocks := msgs[1].(map[string]any)["content"].([]any)
	if len(blocks) != 2 || blocks[0].(map[string]any)["type"] != "text" || blocks[0].(map[string]any)["text"] != "Let me check the file first." ||
		blocks[1].(map[string]any)["type"] != "tool_use" {
		t.Errorf("turn 2's request replays the assistant turn as %v, want its text, then its call", blocks)
	}
}
