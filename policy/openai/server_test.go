package openai_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/openai"
)

// fakeServer speaks the Chat Completions wire format
// (POST /chat/completions): each request is recorded, and the reply is
// chosen by respond from what the request contains.
type fakeServer struct {
	t       testing.TB
	srv     *httptest.Server
	respond func(req map[string]any, n int) (int, string)

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	path   string
	header http.Header
	body   map[string]any
	raw    string
}

func newServer(t testing.TB, respond func(req map[string]any, n int) (int, string)) *fakeServer {
	f := &fakeServer{t: t, respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, `{"error":{"message":"not JSON","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body, raw: string(raw)})
	n := len(f.reqs)
	f.mu.Unlock()
	status, out := f.respond(body, n)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, out)
}

func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// model is a model entry pointing at the fake server.
func (f *fakeServer) model() llm.Model {
	return llm.Model{
		Name: "fast", Provider: openai.Provider, Model: "gpt-test", BaseURL: f.srv.URL + "/v1",
		APIKeyEnv: "TEST_OPENAI_KEY", MaxTokens: 256, TimeoutSeconds: 30, MaxRetries: 2,
		MaxContextChars: 100_000, Price: llm.Price{InputPerMTok: 2, OutputPerMTok: 8},
	}
}

const testKey = "sk-test-SECRET-0123456789"

func env(name string) (string, bool) {
	if name == "TEST_OPENAI_KEY" {
		return testKey, true
	}
	return "", false
}

func noWait(int) time.Duration { return 0 }

func newPolicy(t testing.TB, m llm.Model, a llm.Agent) *openai.Policy {
	t.Helper()
	p, err := openai.New(m, a, openai.Options{LookupEnv: env, Backoff: noWait})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Replies in the wire format.

func toolCallsReply(in, out int, calls ...[2]string) string {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type tc struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	list := make([]tc, len(calls))
	for i, c := range calls {
		list[i] = tc{ID: fmt.Sprintf("call_srv%d", i), Type: "function", Function: fn{c[0], c[1]}}
	}
	b, _ := json.Marshal(list)
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":%s},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, b, in, out, in+out)
}

func textReply(in, out int, text string) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, b, in, out, in+out)
}

func errorReply(msg, typ string) string {
	return fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":null}}`, msg, typ)
}

var echoSpec = noeta.ToolSpec{
	Name: "echo", Description: "Echo the text back.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
}

func goal(text string) *noeta.Transcript {
	return &noeta.Transcript{Messages: []noeta.Message{{Role: noeta.RoleUser, Text: text}}}
}

// lastMessage is the last message of a recorded request.
func lastMessage(req map[string]any) map[string]any {
	msgs, _ := req["messages"].([]any)
	if len(msgs) == 0 {
		return nil
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	return m
}
