package hostconfig

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
)

// turnsPerTask is how many turns each benchmark task runs: an echo call a
// turn, then a finish.
const turnsPerTask = 20

// fastOpenAI answers Chat Completions at once: an echo call until the
// request carries turnsPerTask assistant messages, then a text answer.
func fastOpenAI(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		turn := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				turn++
			}
		}
		msg := `{"role":"assistant","content":"done"}`
		finish := "stop"
		if turn < turnsPerTask {
			msg = fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"echo","arguments":"{\"text\":\"turn %d\"}"}}]}`, turn, turn)
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110}}`, req.Model, msg, finish)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkModelTurn is what a model-decided turn costs on the embedded
// default (sync always) with a model that answers at once: the request and
// its reply through the SDK and loopback HTTP, the composed transcript, the
// guards, an echo call and the four records of the turn. ns/op is per turn.
func BenchmarkModelTurn(b *testing.B) {
	srv := fastOpenAI(b)
	cfg, err := config.Parse("noeta.yaml", []byte(`
models:
  fast: {provider: openai, model: fast-1, base_url: "`+srv.URL+`/v1", price: free}
agents:
  bench: {model: fast, tools: [echo], budget: {max_iterations: 1000}}
`))
	if err != nil {
		b.Fatal(err)
	}
	h, err := Open(b.Context(), Options{DataDir: b.TempDir(), Config: cfg, Workers: 1, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	tasks := max(1, b.N/turnsPerTask)
	b.ResetTimer()
	for range tasks {
		id, err := h.Submit(b.Context(), host.Submission{Agent: "bench", Goal: "echo twenty times"})
		if err != nil {
			b.Fatal(err)
		}
		rest, err := h.Wait(b.Context(), id)
		if err != nil || rest.Status != host.RestCompleted {
			b.Fatalf("%+v %v", rest, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tasks*(turnsPerTask+1)), "ns/turn")
}

// BenchmarkScriptedTurn is BenchmarkModelTurn's turn decided by a script:
// the difference is the model policy's share (SDK, HTTP, transcript).
func BenchmarkScriptedTurn(b *testing.B) {
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  bench: {tools: [echo], budget: {max_iterations: 1000}}\n"))
	if err != nil {
		b.Fatal(err)
	}
	h, err := Open(b.Context(), Options{DataDir: b.TempDir(), Config: cfg, Workers: 1, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	var script []map[string]any
	for i := range turnsPerTask {
		script = append(script, map[string]any{"tool_calls": []any{map[string]any{"tool": "echo", "args": map[string]any{"text": fmt.Sprintf("turn %d", i)}}}})
	}
	script = append(script, map[string]any{"finish": map[string]any{"answer": "done"}})
	body, err := json.Marshal(script)
	if err != nil {
		b.Fatal(err)
	}
	tasks := max(1, b.N/turnsPerTask)
	b.ResetTimer()
	for range tasks {
		id, err := h.Submit(b.Context(), host.Submission{Agent: "bench", Goal: "echo twenty times", Script: body})
		if err != nil {
			b.Fatal(err)
		}
		rest, err := h.Wait(b.Context(), id)
		if err != nil || rest.Status != host.RestCompleted {
			b.Fatalf("%+v %v", rest, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tasks*(turnsPerTask+1)), "ns/turn")
}
