package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/llm"
)

// scripted is a Provider answering from a list, one entry per attempt; an
// entry with block set waits for the attempt's ctx to end.
type scripted struct {
	mu    sync.Mutex
	steps []step
	reqs  []llm.Request
}

type step struct {
	reply llm.Reply
	err   error
	block bool
}

func (s *scripted) Send(ctx context.Context, req llm.Request) (llm.Reply, error) {
	s.mu.Lock()
	st := s.steps[len(s.reqs)]
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	if st.block {
		<-ctx.Done()
		return llm.Reply{}, ctx.Err()
	}
	return st.reply, st.err
}

func (s *scripted) Classify(_ context.Context, err error) llm.Failure {
	return llm.Failure{Retry: true, Msg: err.Error()}
}

func model() llm.Model {
	return llm.Model{Name: "m", Provider: "fake", Model: "fake-1", MaxTokens: 10, TimeoutSeconds: 1, MaxRetries: 2,
		MaxContextChars: 1000, Price: llm.Price{InputPerMTok: 1, OutputPerMTok: 1}}
}

func newPolicy(t *testing.T, p llm.Provider) *llm.Policy {
	t.Helper()
	pol, err := llm.New("fake", model(), llm.Agent{}, "", p, llm.Options{Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func input() noeta.PolicyInput {
	return noeta.PolicyInput{Task: "t", Turn: 1, Context: &noeta.Transcript{Messages: []noeta.Message{{Role: noeta.RoleUser, Text: "g"}}}}
}

// TestAttemptTimeout: an attempt with no reply within timeout_seconds is
// cut, noted and retried; the turn does not hang on a silent server.
func TestAttemptTimeout(t *testing.T) {
	p := &scripted{steps: []step{{block: true}, {reply: llm.Reply{Text: "late but fine"}}}}
	d, err := newPolicy(t, p).Decide(context.Background(), input())
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFinish || len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "attempt 1: timeout: no reply within timeout_seconds (1s); retrying") {
		t.Errorf("decision %+v", d)
	}
}

// TestRequestErrorNotRetried: a request the provider cannot build is
// final, not retried.
func TestRequestErrorNotRetried(t *testing.T) {
	p := &scripted{steps: []step{{err: llm.ErrRequest}}}
	d, err := newPolicy(t, p).Decide(context.Background(), input())
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFail || len(p.reqs) != 1 {
		t.Errorf("decision %+v after %d attempts", d, len(p.reqs))
	}
}

// TestReservedToolName: an agent tool named like one the policy offers
// itself would make its calls ambiguous: the turn fails, saying so.
func TestReservedToolName(t *testing.T) {
	p := &scripted{}
	in := input()
	in.Tools = []noeta.ToolSpec{{Name: "ask_human", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	d, err := newPolicy(t, p).Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != noeta.DecisionFail || !strings.Contains(d.Error, `"ask_human"`) || len(p.reqs) != 0 {
		t.Errorf("decision %+v", d)
	}
}

// TestTooManyCalls: calls past MaxCallsPerReply are invalid, not run.
func TestTooManyCalls(t *testing.T) {
	calls := make([]llm.Call, llm.MaxCallsPerReply+3)
	for i := range calls {
		calls[i] = llm.Call{Name: "echo", Args: `{"text":"x"}`}
	}
	p := &scripted{steps: []step{{reply: llm.Reply{Calls: calls}}}}
	in := input()
	in.Tools = []noeta.ToolSpec{{Name: "echo"}}
	d, err := newPolicy(t, p).Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, c := range d.ToolCalls {
		if (i < llm.MaxCallsPerReply) != (c.Invalid == "") {
			t.Errorf("call %d: %+v", i, c)
		}
	}
	// The request offered echo with an object schema filled in, and
	// ask_human.
	if got := p.reqs[0].Tools; len(got) != 2 || string(got[0].InputSchema) != `{"type":"object"}` || got[1].Name != "ask_human" {
		t.Errorf("tools %+v", got)
	}
}

func TestStatusFailure(t *testing.T) {
	res := &http.Response{Header: http.Header{"Retry-After": {"7"}}}
	tests := []struct {
		status int
		retry  bool
		msg    string
	}{
		{429, true, "HTTP 429 Too Many Requests: m"},
		{408, true, "HTTP 408 Request Timeout: m"},
		{500, true, "HTTP 500 Internal Server Error: m"},
		{529, true, "HTTP 529: m"},
		{400, false, "HTTP 400 Bad Request: m"},
		{401, false, "HTTP 401 Unauthorized: m"},
		{404, false, "HTTP 404 Not Found: m"},
	}
	for _, tt := range tests {
		f := llm.StatusFailure(tt.status, "m", res)
		if f.Retry != tt.retry || f.Msg != tt.msg || f.After != 7*time.Second {
			t.Errorf("StatusFailure(%d) = %+v", tt.status, f)
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := llm.DefaultBackoff(i + 1); got != w {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

func TestKey(t *testing.T) {
	lookup := func(name string) (string, bool) {
		if name == "SET" {
			return "k", true
		}
		return "", false
	}
	tests := []struct {
		name    string
		m       llm.Model
		want    string
		wantErr string
	}{
		{"named and set", llm.Model{APIKeyEnv: "SET"}, "k", ""},
		{"named and unset", llm.Model{Name: "m", APIKeyEnv: "UNSET", BaseURL: "http://x"}, "", "UNSET"},
		{"default unset, own server", llm.Model{BaseURL: "http://x"}, "", ""},
		{"default unset, provider's server", llm.Model{Name: "m"}, "", "DEFAULT_KEY"},
	}
	for _, tt := range tests {
		got, err := llm.Key(tt.m, "DEFAULT_KEY", lookup)
		if got != tt.want || (tt.wantErr == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, llm.ErrConfig))) {
			t.Errorf("%s: Key = %q, %v", tt.name, got, err)
		}
	}
}

// TestArrange: tool results follow their call's assistant message in call
// order, a missing result is an error result, an orphan result is told as
// user text, and nothing else moves.
func TestArrange(t *testing.T) {
	call := func(id string) noeta.ToolCall { return noeta.ToolCall{CallID: id, Tool: "echo"} }
	user := func(s string) noeta.Message { return noeta.Message{Role: noeta.RoleUser, Text: s} }
	res := func(id, s string) noeta.Message {
		return noeta.Message{Role: noeta.RoleTool, ToolCallID: id, ToolName: "echo", Text: s}
	}
	asst := func(ids ...string) noeta.Message {
		m := noeta.Message{Role: noeta.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, call(id))
		}
		return m
	}
	missing := noeta.Message{Role: noeta.RoleTool, ToolCallID: "b", ToolName: "echo", IsError: true, Text: "no result was recorded for this call: it did not run"}
	tests := []struct {
		name     string
		in, want []noeta.Message
	}{
		{"in order already", []noeta.Message{user("g"), asst("a"), res("a", "1"), user("w")}, []noeta.Message{user("g"), asst("a"), res("a", "1"), user("w")}},
		{"approval between", []noeta.Message{user("g"), asst("a", "b"), res("b", "2"), user("approved"), res("a", "1")},
			[]noeta.Message{user("g"), asst("a", "b"), res("a", "1"), res("b", "2"), user("approved")}},
		{"missing result", []noeta.Message{user("g"), asst("a", "b"), res("a", "1")}, []noeta.Message{user("g"), asst("a", "b"), res("a", "1"), missing}},
		{"orphan", []noeta.Message{user("g"), res("z", "?")}, []noeta.Message{user("g"), {Role: noeta.RoleUser, Text: "[result of echo call z] ?"}}},
		{"two turns", []noeta.Message{user("g"), asst("a"), res("a", "1"), asst("c"), res("c", "3")}, []noeta.Message{user("g"), asst("a"), res("a", "1"), asst("c"), res("c", "3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := llm.Arrange(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Arrange =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestNewRefusesUnpriced: a Model built in Go with no price (neither
// prices nor Free) is refused, as config refuses it in noeta.yaml: read as
// $0 it would make max_cost_usd a budget that never spends.
func TestNewRefusesUnpriced(t *testing.T) {
	m := model()
	m.Price = llm.Price{}
	if _, err := llm.New("fake", m, llm.Agent{}, "", &scripted{}, llm.Options{}); !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), "no price") {
		t.Errorf("New of an unpriced model: %v", err)
	}
	m.Price = llm.Price{Free: true}
	if _, err := llm.New("fake", m, llm.Agent{}, "", &scripted{}, llm.Options{}); err != nil {
		t.Errorf("New of a free model: %v", err)
	}
}

func TestHistoryToolName(t *testing.T) {
	for in, want := range map[string]string{
		"echo": "echo", "read_file": "read_file", "": "unknown_tool", "functions.echo": "functions_echo",
		"a b/c": "a_b_c", "é": "__", strings.Repeat("x", 100): strings.Repeat("x", 61) + "___",
	} {
		if got := llm.HistoryToolName(in); got != want {
			t.Errorf("HistoryToolName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestArgsThatCannotBeRecorded: arguments that encoding/json accepts but
// the log cannot hold (canonical JSON refuses them) are an invalid call,
// with no arguments kept and the reason quoted to the model. Before, a
// duplicate key, a lone surrogate, an out-of-range number or invalid
// UTF-8 passed json.Valid and became a call that could run; recording
// its PolicyDecided then failed, the segment was retried (the model asked
// and billed again) until the dispatcher ended the task with no terminal
// record.
func TestArgsThatCannotBeRecorded(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	tooDeep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	tests := []struct {
		name, tool, args string
		invalid          string // "" when the call can run
	}{
		{"duplicate key", "echo", `{"command":"a","command":"b"}`, `duplicate object key "command"`},
		{"duplicate key, other case", "echo", `{"text":"a","TEXT":"b"}`, ""},
		{"lone surrogate", "echo", `{"text":"\ud800"}`, `unpaired surrogate`},
		{"lone surrogate in a key", "echo", `{"\udc00":"x"}`, `unpaired surrogate`},
		{"number out of range", "echo", `{"text":"x","n":1e999}`, `overflows float64`},
		{"negative number out of range", "echo", `{"text":"x","n":-1e999}`, `overflows float64`},
		{"large integer in range", "echo", `{"text":"x","n":123456789012345678901234567890}`, ""},
		{"invalid UTF-8", "echo", "{\"text\":\"\xff\xfe\"}", `invalid UTF-8`},
		{"NaN", "echo", `{"n":NaN}`, `not valid JSON`},
		{"Infinity", "echo", `{"n":Infinity}`, `not valid JSON`},
		{"an array", "echo", `[1,2]`, `must be a JSON object`},
		{"a string", "echo", `"echo hi"`, `must be a JSON object`},
		{"null", "echo", `null`, `must be a JSON object`},
		{"nested 5,000 deep", "echo", deep, ""},
		{"nested past the limit", "echo", tooDeep, `not valid JSON`},
		{"ask_human, duplicate key", llm.ToolAskHuman, `{"question":"a","question":"b"}`, `duplicate object key "question"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &scripted{steps: []step{{reply: llm.Reply{Calls: []llm.Call{{Name: tt.tool, Args: tt.args}}}}}}
			in := input()
			in.Tools = []noeta.ToolSpec{{Name: "echo"}}
			d, err := newPolicy(t, p).Decide(context.Background(), in)
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
			if tt.invalid == "" {
				if c.Invalid != "" {
					t.Fatalf("call refused: %s", c.Invalid)
				}
			} else if !strings.Contains(c.Invalid, tt.invalid) {
				t.Fatalf("invalid %q, want it to say %q", c.Invalid, tt.invalid)
			}
			// What is kept must be recordable: the arguments canonical
			// JSON, the reason valid UTF-8 of bounded length.
			if len(c.Args) > 0 {
				if _, err := noeta.CanonicalizeJSON(c.Args); err != nil {
					t.Errorf("the call keeps arguments the log cannot hold: %v", err)
				}
			}
			if !utf8.ValidString(c.Invalid) || len(c.Invalid) > 600 {
				t.Errorf("reason not valid UTF-8 or too long (%d bytes): %q", len(c.Invalid), c.Invalid)
			}
		})
	}
}
