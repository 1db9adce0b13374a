package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/openai"
)

func jsonOf(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

// TestTwoTurns: a tool call, its result, a final answer; the exact
// requests the server received are asserted (messages, tools offered, our
// call ids as the provider's, the key as a bearer token).
func TestTwoTurns(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		if last := lastMessage(req); last["role"] == "tool" {
			return 200, textReply(300, 10, "the tool said: "+last["content"].(string))
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
	if err := d1.Validate(); err != nil {
		t.Fatal(err)
	}
	if d1.Model != "gpt-test" || d1.Provider != "openai" || d1.InputTokens != 100 || d1.OutputTokens != 20 {
		t.Errorf("turn 1 model/provider/tokens = %q %q %d %d", d1.Model, d1.Provider, d1.InputTokens, d1.OutputTokens)
	}
	// 100 × $2/M + 20 × $8/M
	if want := 100*2.0/1e6 + 20*8.0/1e6; d1.CostUSD != want {
		t.Errorf("cost = %v, want %v", d1.CostUSD, want)
	}
	if !strings.Contains(string(d1.Response), `"chatcmpl-1"`) {
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
		if r.path != "/v1/chat/completions" {
			t.Errorf("path %q", r.path)
		}
		if got := r.header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("Authorization = %q", got)
		}
	}
	wantReq := jsonOf(t, `{
		"model": "gpt-test",
		"max_tokens": 256,
		"messages": [
			{"role": "system", "content": "You are careful."},
			{"role": "user", "content": "say hi"},
			{"role": "assistant", "tool_calls": [{"id": "call-1-0", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}]},
			{"role": "tool", "tool_call_id": "call-1-0", "content": "hi"}
		],
		"tools": [
			{"type": "function", "function": {"name": "echo", "description": "Echo the text back.",
				"parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false}}},
			{"type": "function", "function": {"name": "ask_human", "description": "Ask a human a question and wait for the answer. Use it when you cannot go on without a person's decision or information. Call it alone.",
				"parameters": {"type": "object", "properties": {"question": {"type": "string", "description": "The question, complete enough to answer without other context."}}, "required": ["question"], "additionalProperties": false}}}
		]
	}`)
	if got := jsonOf(t, reqs[1].raw); !reflect.DeepEqual(got, wantReq) {
		g, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("request 2:\n%s", g)
	}
}

// TestDenialReachesModel: a denied call is in the next request as a tool
// error naming the guard and its reason.
func TestDenialReachesModel(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "ok") })
	p := newPolicy(t, srv.model(), llm.Agent{})
	in := noeta.PolicyInput{Task: "t1", Turn: 2, Context: &noeta.Transcript{Messages: []noeta.Message{
		{Role: noeta.RoleUser, Text: "clean up"},
		{Role: noeta.RoleAssistant, ToolCalls: []noeta.ToolCall{{CallID: "call-1-0", Tool: "shell", Args: json.RawMessage(`{"command":"rm -rf /"}`)}}},
		{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "shell", IsError: true, Text: "denied by rules: destructive shell command"},
	}}}
	if _, err := p.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	last := lastMessage(srv.requests()[0].body)
	if last["role"] != "tool" || last["tool_call_id"] != "call-1-0" || last["content"] != "[error] denied by rules: destructive shell command" {
		t.Errorf("last message = %v, want the denial as a tool error", last)
	}
}

// TestRetries: 429 then success is one decision with a note; 500s until
// the budget is spent is a fail decision saying why, after exactly
// max_retries+1 requests; a 400 is not retried; every attempt that got a
// reply is paid for.
func TestRetries(t *testing.T) {
	tests := []struct {
		name      string
		respond   func(n int) (int, string)
		requests  int
		kind      noeta.DecisionKind
		errHas    string
		notes     int
		inTokens  int64
		noteHas   string
		retryHint bool
	}{
		{"429 then success", func(n int) (int, string) {
			if n == 1 {
				return 429, errorReply("Rate limit reached", "rate_limit_error")
			}
			return 200, textReply(5, 5, "done")
		}, 2, noeta.DecisionFinish, "", 1, 5, "attempt 1: HTTP 429 Too Many Requests: Rate limit reached; retrying", false},
		{"500s until the budget is spent", func(n int) (int, string) {
			return 500, errorReply("internal", "server_error")
		}, 3, noeta.DecisionFail, "openai gpt-test: HTTP 500 Internal Server Error: internal; gave up after 3 attempts (max_retries: 2)", 2, 0, "attempt 2: HTTP 500", false},
		{"400 is final", func(n int) (int, string) {
			return 400, errorReply("bad tools", "invalid_request_error")
		}, 1, noeta.DecisionFail, "HTTP 400 Bad Request: bad tools", 0, 0, "", false},
		{"empty reply retried, then spent", func(n int) (int, string) {
			return 200, textReply(7, 0, "")
		}, 3, noeta.DecisionFail, "an empty reply (no text, no tool calls); gave up after 3 attempts", 2, 21, "attempt 1: an empty reply", false},
		{"empty reply then an answer", func(n int) (int, string) {
			if n == 1 {
				return 200, `{"id":"x","object":"chat.completion","created":1,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":0,"total_tokens":4}}`
			}
			return 200, textReply(4, 1, "fine")
		}, 2, noeta.DecisionFinish, "", 1, 8, "an empty reply", false},
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
			if len(d.Notes) != tt.notes || (tt.noteHas != "" && !strings.Contains(strings.Join(d.Notes, "\n"), tt.noteHas)) {
				t.Errorf("notes %q, want %d with %q", d.Notes, tt.notes, tt.noteHas)
			}
			if d.InputTokens != tt.inTokens {
				t.Errorf("input tokens %d, want %d (every reply is paid for)", d.InputTokens, tt.inTokens)
			}
		})
	}
}

// TestCallsThatCannotRun: malformed argument JSON, an unknown tool, and
// arguments that are not an object become calls with Invalid set — a
// valid decision, never an error — beside the calls that can run.
func TestCallsThatCannotRun(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, toolCallsReply(1, 1,
			[2]string{"echo", `{"text": "unterminated`},
			[2]string{"rm_everything", `{}`},
			[2]string{"echo", `["a"]`},
			[2]string{"echo", `{"text":"fine"}`},
			[2]string{"echo", ``},
		)
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 3, Context: goal("g"), Tools: []noeta.ToolSpec{echoSpec}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, tool, args, invalid string }{
		{"call-3-0", "echo", "", `the arguments are not valid JSON: "{\"text\": \"unterminated"`},
		{"call-3-1", "rm_everything", "{}", `unknown tool "rm_everything" (the tools: echo)`},
		{"call-3-2", "echo", `["a"]`, `the arguments must be a JSON object, not ["a"]`},
		{"call-3-3", "echo", `{"text":"fine"}`, ""},
		{"call-3-4", "echo", `{}`, ""},
	}
	if len(d.ToolCalls) != len(want) {
		t.Fatalf("calls %+v", d.ToolCalls)
	}
	for i, w := range want {
		c := d.ToolCalls[i]
		if c.CallID != w.id || c.Tool != w.tool || string(c.Args) != w.args || c.Invalid != w.invalid {
			t.Errorf("call %d = %+v %s, want %+v", i, c, c.Args, w)
		}
	}
}

// TestSpawnAndAskHuman: spawn_subtask calls alone are a spawn decision,
// ask_human alone a yield; mixed with other calls, or with bad arguments,
// they are invalid calls the model is told about.
func TestSpawnAndAskHuman(t *testing.T) {
	tests := []struct {
		name  string
		calls [][2]string
		check func(t *testing.T, d noeta.Decision)
	}{
		{"fan-out", [][2]string{{"spawn_subtask", `{"agent":"helper","goal":"a"}`}, {"spawn_subtask", `{"agent":"helper","goal":"b"}`}}, func(t *testing.T, d noeta.Decision) {
			want := []noeta.SpawnSpec{{Agent: "helper", Goal: "a"}, {Agent: "helper", Goal: "b"}}
			if d.Kind != noeta.DecisionSpawn || !reflect.DeepEqual(d.Spawn, want) {
				t.Errorf("%+v", d)
			}
		}},
		{"ask", [][2]string{{"ask_human", `{"question":"which branch?"}`}}, func(t *testing.T, d noeta.Decision) {
			if d.Kind != noeta.DecisionYieldForHuman || d.Question != "which branch?" {
				t.Errorf("%+v", d)
			}
		}},
		{"spawn of an agent not allowed", [][2]string{{"spawn_subtask", `{"agent":"root","goal":"a"}`}}, func(t *testing.T, d noeta.Decision) {
			if d.Kind != noeta.DecisionToolCalls || !strings.Contains(d.ToolCalls[0].Invalid, `agent "root" is not one this task may spawn (helper)`) {
				t.Errorf("%+v", d)
			}
		}},
		{"spawn mixed with a tool", [][2]string{{"echo", `{"text":"x"}`}, {"spawn_subtask", `{"agent":"helper","goal":"a"}`}}, func(t *testing.T, d noeta.Decision) {
			if d.Kind != noeta.DecisionToolCalls || d.ToolCalls[0].Invalid != "" || !strings.Contains(d.ToolCalls[1].Invalid, "must not be mixed") {
				t.Errorf("%+v", d)
			}
		}},
		{"ask with an unknown field", [][2]string{{"ask_human", `{"question":"q","urgent":true}`}}, func(t *testing.T, d noeta.Decision) {
			if d.Kind != noeta.DecisionToolCalls || !strings.Contains(d.ToolCalls[0].Invalid, "schema") {
				t.Errorf("%+v", d)
			}
		}},
		{"two asks", [][2]string{{"ask_human", `{"question":"a"}`}, {"ask_human", `{"question":"b"}`}}, func(t *testing.T, d noeta.Decision) {
			if d.Kind != noeta.DecisionToolCalls || !strings.Contains(d.ToolCalls[1].Invalid, "only call") {
				t.Errorf("%+v", d)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, toolCallsReply(1, 1, tt.calls...) })
			p := newPolicy(t, srv.model(), llm.Agent{})
			d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g"), Tools: []noeta.ToolSpec{echoSpec}, SpawnAgents: []string{"helper"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Validate(); err != nil {
				t.Fatal(err)
			}
			tt.check(t, d)
			// spawn_subtask is offered with the agents as an enum.
			tools := srv.requests()[0].body["tools"].([]any)
			if len(tools) != 3 || !strings.Contains(mustJSON(tools[1]), `"enum":["helper"]`) {
				t.Errorf("tools offered: %s", mustJSON(tools))
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestKeyNeverRecorded: a server that echoes the key in its error message
// (a proxy that reflects the request, say) does not get it into the
// decision, which is recorded, nor into its notes.
func TestKeyNeverRecorded(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		if n == 1 {
			return 503, errorReply("overloaded for Bearer "+testKey, "server_error")
		}
		return 401, errorReply("invalid key "+testKey, "invalid_request_error")
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(d)
	if strings.Contains(string(all), "SECRET") || strings.Contains(string(d.Response), "SECRET") {
		t.Errorf("the key is in the decision: %s", all)
	}
	if d.Kind != noeta.DecisionFail || !strings.Contains(d.Error, "HTTP 401") || !strings.Contains(d.Error, "[redacted]") {
		t.Errorf("decision = %+v", d)
	}
}

// TestKeyFromEnvironment: the key comes from the variable the config
// names, and only from there; the SDK's own variables (OPENAI_BASE_URL,
// OPENAI_ORG_ID, …) are not read — they would send the calls elsewhere or
// as another organisation than the config says.
func TestKeyFromEnvironment(t *testing.T) {
	other := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "wrong server") })
	t.Setenv("OPENAI_BASE_URL", other.srv.URL)
	t.Setenv("OPENAI_ORG_ID", "org-elsewhere")
	t.Setenv("OPENAI_API_KEY", "sk-from-sdk-default")
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "ok") })

	p := newPolicy(t, srv.model(), llm.Agent{})
	if _, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")}); err != nil {
		t.Fatal(err)
	}
	if len(other.requests()) != 0 || len(srv.requests()) != 1 {
		t.Fatalf("requests: configured server %d, OPENAI_BASE_URL's %d", len(srv.requests()), len(other.requests()))
	}
	h := srv.requests()[0].header
	if h.Get("Authorization") != "Bearer "+testKey || h.Get("OpenAI-Organization") != "" {
		t.Errorf("headers: Authorization %q, OpenAI-Organization %q", h.Get("Authorization"), h.Get("OpenAI-Organization"))
	}

	// A variable named by api_key_env must be set; the error names it.
	m := srv.model()
	m.APIKeyEnv = "NOT_SET_ANYWHERE"
	_, err := openai.New(m, llm.Agent{}, openai.Options{LookupEnv: env})
	if !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), "NOT_SET_ANYWHERE") {
		t.Errorf("New with an unset key variable: %v", err)
	}
	// The default variable may be unset for a local server (base_url):
	// no Authorization header is sent.
	m.APIKeyEnv = ""
	p, err = openai.New(m, llm.Agent{}, openai.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")}); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests()[1].header.Get("Authorization"); got != "" {
		t.Errorf("Authorization without a key = %q", got)
	}
	// Against OpenAI itself (no base_url) the key is required.
	m.BaseURL = ""
	if _, err := openai.New(m, llm.Agent{}, openai.Options{LookupEnv: func(string) (string, bool) { return "", false }}); !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("New without a key for api.openai.com: %v", err)
	}
}

// TestNoTranscript: an input without a transcript is a fail decision, not
// a request with nothing in it.
func TestNoTranscript(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "x") })
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFail || len(srv.requests()) != 0 {
		t.Errorf("decision %+v after %d requests", d, len(srv.requests()))
	}
}

// TestCanceled: a ctx that ends while retrying is Decide's error, not a
// decision (the engine must not record a turn it did not finish deciding).
func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		cancel()
		return http.StatusServiceUnavailable, errorReply("busy", "server_error")
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	if d, err := p.Decide(ctx, noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")}); !errors.Is(err, context.Canceled) {
		t.Errorf("Decide = %+v, %v; want context.Canceled", d, err)
	}
}

// TestMaxCompletionTokensForOpenAI: against OpenAI itself the cap is sent
// as max_completion_tokens (max_tokens is refused by its newer models);
// against another server as max_tokens, which they all know.
func TestMaxCompletionTokensForOpenAI(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) { return 200, textReply(1, 1, "x") })
	m := srv.model()
	m.BaseURL = ""
	m.MaxTokens = 77
	p, err := openai.New(m, llm.Agent{}, openai.Options{LookupEnv: env, Backoff: noWait,
		HTTPClient: &http.Client{Transport: redirect{srv.srv.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")}); err != nil {
		t.Fatal(err)
	}
	body := srv.requests()[0].body
	if body["max_completion_tokens"] != 77.0 || body["max_tokens"] != nil {
		t.Errorf("max tokens fields: %v, %v", body["max_completion_tokens"], body["max_tokens"])
	}
}

// redirect sends every request to the fake server, keeping its path.
type redirect struct{ to string }

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	u := *req.URL
	u.Scheme, u.Host = "http", strings.TrimPrefix(r.to, "http://")
	req = req.Clone(req.Context())
	req.URL = &u
	req.Host = u.Host
	return http.DefaultTransport.RoundTrip(req)
}

// TestResponseBounded: a response body over llm.MaxResponseBytes is cut
// and the turn fails without a retry: a server cannot make a worker buffer
// without limit.
func TestResponseBounded(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, `{"id":"` + strings.Repeat("a", llm.MaxResponseBytes) + `"}`
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFail || !strings.Contains(d.Error, "over 16 MiB") || len(srv.requests()) != 1 {
		t.Errorf("decision %s %q after %d requests", d.Kind, d.Error, len(srv.requests()))
	}
}

// TestTruncatedNoted: an answer cut at max_tokens still finishes (the text
// is what the model said) but the decision notes the cut, so the log shows
// why an answer stops mid-sentence.
func TestTruncatedNoted(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, strings.Replace(textReply(1, 256, "The answer is"), `"finish_reason":"stop"`, `"finish_reason":"length"`, 1)
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: 1, Context: goal("g")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFinish || len(d.Notes) != 1 || d.Notes[0] != "the reply was cut at max_tokens (256)" {
		t.Errorf("decision %+v", d)
	}
}

// TestConcurrentDecides: one policy serves every task of its agent; Decides
// run concurrently (under -race) and each gets its own turn's call ids.
func TestConcurrentDecides(t *testing.T) {
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		return 200, toolCallsReply(1, 1, [2]string{"echo", `{"text":"x"}`})
	})
	p := newPolicy(t, srv.model(), llm.Agent{})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			d, err := p.Decide(context.Background(), noeta.PolicyInput{Task: "t", Turn: i + 1, Context: goal("g"), Tools: []noeta.ToolSpec{echoSpec}})
			if err == nil && (d.Kind != noeta.DecisionToolCalls || d.ToolCalls[0].CallID != "call-"+strconv.Itoa(i+1)+"-0") {
				err = errors.New("decision " + mustJSON(d))
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkDecide is one turn's policy overhead against a local server
// answering at once: request mapping, the SDK, HTTP on loopback, the reply
// mapped to a decision, over a 40-message transcript.
func BenchmarkDecide(b *testing.B) {
	srv := newServer(b, func(req map[string]any, n int) (int, string) {
		return 200, toolCallsReply(1, 1, [2]string{"echo", `{"text":"x"}`})
	})
	p := newPolicy(b, srv.model(), llm.Agent{SystemPrompt: "You are careful."})
	tr := goal("g")
	for i := range 13 {
		id := "call-" + strconv.Itoa(i+1) + "-0"
		tr.Messages = append(tr.Messages,
			noeta.Message{Role: noeta.RoleAssistant, ToolCalls: []noeta.ToolCall{{CallID: id, Tool: "echo", Args: json.RawMessage(`{"text":"hello"}`)}}},
			noeta.Message{Role: noeta.RoleTool, ToolCallID: id, ToolName: "echo", Text: strings.Repeat("output ", 40)},
			noeta.Message{Role: noeta.RoleUser, Text: "go on"})
	}
	in := noeta.PolicyInput{Task: "t", Turn: 14, Context: tr, Tools: []noeta.ToolSpec{echoSpec}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Decide(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestArgsThatCannotBeRecorded: arguments text that encoding/json accepts
// but canonical JSON refuses is an invalid call, its arguments not kept,
// the decision valid and recordable. Before, such a call was a call that
// could run, and the engine then failed to record its PolicyDecided: the
// segment was retried, the model asked and billed again each time, until
// the task ended with no terminal record. argsWire is the arguments
// member as the server sends it (a JSON string of the model's text).
func TestArgsThatCannotBeRecorded(t *testing.T) {
	tests := []struct {
		name, argsWire string
		invalid        string // "" when the call can run
		args           string // what a call that can run keeps
	}{
		{"duplicate key", `"{\"text\":\"a\",\"text\":\"b\"}"`, `duplicate object key "text"`, ""},
		{"lone surrogate in the text", `"{\"text\":\"\\ud800\"}"`, "unpaired surrogate", ""},
		// Decoding the wire's string already replaced the surrogate.
		{"lone surrogate on the wire", `"{\"text\":\"\ud800\"}"`, "", "{\"text\":\"\uFFFD\"}"},
		{"number out of range", `"{\"text\":\"x\",\"n\":1e999}"`, "overflows float64", ""},
		// The SDK keeps the wire's bytes as they came.
		{"invalid UTF-8 on the wire", "\"{\\\"text\\\":\\\"\xff\\\"}\"", "invalid UTF-8", ""},
		{"NaN", `"{\"n\":NaN}"`, "not valid JSON", ""},
		{"an array", `"[1]"`, "must be a JSON object", "[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, func(req map[string]any, n int) (int, string) {
				return 200, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_srv0","type":"function","function":{"name":"echo","arguments":` + tt.argsWire + `}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
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

// TestTextBesideCalls: the words a reply carries beside its calls (or
// beside an ask_human) are the decision's Text, and go back on a later
// turn as the assistant message's content next to its calls; a reply that
// is only text is a finish whose answer is that text, with no Text.
func TestTextBesideCalls(t *testing.T) {
	askSpec := `{"question":"Which file?"}`
	srv := newServer(t, func(req map[string]any, n int) (int, string) {
		switch n {
		case 1:
			return 200, withContent(toolCallsReply(10, 5, [2]string{"echo", `{"text":"hi"}`}), "Let me check the file first.\nThen I answer.")
		case 2:
			return 200, withContent(toolCallsReply(10, 5, [2]string{llm.ToolAskHuman, askSpec}), "I need to know one thing.")
		}
		return 200, textReply(10, 5, "all done")
	})
	p := newPolicy(t, srv.model(), llm.Agent{Model: "fast"})
	ctx := context.Background()
	in := noeta.PolicyInput{Task: "t1", Turn: 1, Agent: "a", Context: goal("say hi"), Tools: []noeta.ToolSpec{echoSpec}}
	for _, tt := range []struct {
		kind noeta.DecisionKind
		text string
	}{
		{noeta.DecisionToolCalls, "Let me check the file first.\nThen I answer."},
		{noeta.DecisionYieldForHuman, "I need to know one thing."},
		{noeta.DecisionFinish, ""},
	} {
		if in.Turn == 2 {
			in.Context = &noeta.Transcript{Messages: []noeta.Message{
				{Role: noeta.RoleUser, Text: "say hi"},
				{Role: noeta.RoleAssistant, Text: "Let me check the file first.\nThen I answer.", ToolCalls: []noeta.ToolCall{{CallID: "call-1-0", Tool: "echo", Args: json.RawMessage(`{"text":"hi"}`)}}},
				{Role: noeta.RoleTool, ToolCallID: "call-1-0", ToolName: "echo", Text: "hi"},
			}}
		}
		d, err := p.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
		if d.Kind != tt.kind || d.Text != tt.text {
			t.Errorf("turn %d: %s with text %q, want %s with %q", in.Turn, d.Kind, d.Text, tt.kind, tt.text)
		}
		in.Turn++
	}
	reqs := srv.requests()
	msgs := reqs[1].body["messages"].([]any)
	asst := msgs[1].(map[string]any)
	if asst["role"] != "assistant" || asst["content"] != "Let me check the file first.\nThen I answer." || asst["tool_calls"] == nil {
		t.Errorf("turn 2's request replays the assistant turn as %v, want its text beside its calls", asst)
	}
}

// withContent sets the message content of a tool-calls reply.
func withContent(reply, text string) string {
	b, _ := json.Marshal(text)
	return strings.Replace(reply, `"content":null`, `"content":`+string(b), 1)
}
