package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// fakeOpenAI is a local server that speaks the OpenAI Chat Completions wire
// format (POST {base}/chat/completions) with replies chosen by reply from
// the request it got; it keeps every request.
type fakeOpenAI struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []chatRequest
	reply func(req chatRequest) chatReply
}

// chatRequest is what the tests read of a request.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolCalls  []chatToolCall  `json:"tool_calls,omitempty"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// text is a message's content as text (a string, or the text parts).
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	for _, p := range parts {
		s += p.Text
	}
	return s
}

// chatReply is one reply: tool calls (name, JSON arguments) or text, with
// usage; status other than 0/200 answers an error.
type chatReply struct {
	Status    int
	Text      string
	ToolCalls [][2]string
	In, Out   int
}

func newFakeOpenAI(t *testing.T, reply func(req chatRequest) chatReply) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{reply: reply}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// baseURL is the base_url of a models: entry for the server.
func (f *fakeOpenAI) baseURL() string { return f.srv.URL + "/v1" }

// requests returns the requests so far.
func (f *fakeOpenAI) requests() []chatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]chatRequest(nil), f.reqs...)
}

func (f *fakeOpenAI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	n := len(f.reqs)
	f.mu.Unlock()
	rep := f.reply(req)
	w.Header().Set("Content-Type", "application/json")
	if rep.Status != 0 && rep.Status != http.StatusOK {
		w.WriteHeader(rep.Status)
		fmt.Fprintf(w, `{"error":{"message":"fake error %d","type":"server_error"}}`, rep.Status)
		return
	}
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		var calls []map[string]any
		for i, c := range rep.ToolCalls {
			calls = append(calls, map[string]any{
				"id": fmt.Sprintf("call_fake_%d_%d", n, i), "type": "function",
				"function": map[string]any{"name": c[0], "arguments": c[1]},
			})
		}
		msg["tool_calls"] = calls
		if rep.Text == "" {
			msg["content"] = nil
		}
		finish = "tool_calls"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake-%d", n), "object": "chat.completion", "created": 1764547200, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": rep.In, "completion_tokens": rep.Out, "total_tokens": rep.In + rep.Out},
	})
}

// turn is how many assistant messages a request carries: the turn it asks
// for is turn+1.
func (r chatRequest) turn() int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// lastTool is the text of the request's last tool message.
func (r chatRequest) lastTool() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "tool" {
			return r.Messages[i].text()
		}
	}
	return ""
}
