package anthropic_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy/anthropic"
	"github.com/noeta-go/noeta/policy/llm"
)

// fakeServer speaks the Messages wire format
// (POST /v1/messages): each request is recorded, and the reply is
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
		Name: "fast", Provider: anthropic.Provider, Model: "claude-test", BaseURL: f.srv.URL,
		APIKeyEnv: "TEST_ANTHROPIC_KEY", MaxTokens: 256, TimeoutSeconds: 30, MaxRetries: 2,
		MaxContextChars: 100_000, Price: llm.Price{InputPerMTok: 2, OutputPerMTok: 8},
	}
}

const testKey = "sk-test-SECRET-0123456789"

func env(name string) (string, bool) {
	if name == "TEST_ANTHROPIC_KEY" {
		return testKey, true
	}
	return "", false
}

func noWait(int) time.Duration { return 0 }

func newPolicy(t testing.TB, m llm.Model, a llm.Agent) *anthropic.Policy {
	t.Helper()
	p, err := anthropic.New(m, a, anthropic.Options{LookupEnv: env, Backoff: noWait})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Replies in the wire format.

func toolCallsReply(in, out int, calls ...[2]string) string {
	blocks := []string{`{"type":"text","text":"Let me check."}`}
	for i, c := range calls {
		input := c[1]
		if !json.Valid([]byte(input)) {
			// The API sends input as an object; a model's broken JSON
			// arrives as a string in some gateways: keep it a JSON value.
			b, _ := json.Marshal(input)
			input = string(b)
		}
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":%q,"input":%s}`, i, c[0], input))
	}
	return fmt.Sprintf(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[%s],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, strings.Join(blocks, ","), in, out)
}

func textReply(in, out int, text string) string {
	content := "[]"
	if text != "" {
		b, _ := json.Marshal(text)
		content = fmt.Sprintf(`[{"type":"text","text":%s}]`, b)
	}
	return fmt.Sprintf(`{"id":"msg_2","type":"message","role":"assistant","model":"claude-test","content":%s,"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, content, in, out)
}

func errorReply(msg, typ string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
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
