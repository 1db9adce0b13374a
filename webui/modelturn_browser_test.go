package webui

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
)

// modelWords is what the model says beside its call: words, a line break,
// and a right-to-left override the page must show escaped.
const modelWords = "Let me check the file first.\nThen I answer \u202eexe."

// fakeOpenAI is a local Chat Completions server: its first reply asks for
// echo with modelWords beside the call, every later one answers; each
// reply reports 50 input and 10 output tokens.
func fakeOpenAI(t *testing.T) string {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		usage := `"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}`
		if n.Add(1) == 1 {
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[{"id":"x","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hello\"}"}}]},"finish_reason":"tool_calls"}],%s}`, modelWords, usage)
			return
		}
		fmt.Fprintf(w, `{"id":"c2","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"It said hello."},"finish_reason":"stop"}],%s}`, usage)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestModelTurnInBrowser: the task page of a task run by a model shows
// each model turn with its tokens and cost, and the model's words beside
// its call, whole, line break kept, a control character escaped; a turn
// without words (the final answer) shows none.
func TestModelTurnInBrowser(t *testing.T) {
	h := openHostWith(t, 1, fmt.Sprintf(`
models:
  m:
    provider: openai
    model: gpt-test
    base_url: %s
    max_retries: 0
    price: {input_per_mtok: 1000, output_per_mtok: 1000}
agents:
  writer:
    model: m
    tools: [echo]
`, fakeOpenAI(t)))
	base := pageServer(t, h)
	ctx := browser(t)
	id, err := h.Submit(t.Context(), host.Submission{Agent: "writer", Goal: "say hello with echo"})
	if err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "log in and open the task",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#login-token")),
		chromedp.SendKeys(chromedp.CSS("#login-token"), aliceToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")),
		chromedp.Navigate(base+"/#/task/"+id),
		chromedp.WaitVisible(chromedp.CSS(`#task-status[data-status="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.PolicyDecided .said`)))
	read := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	turns := read(`JSON.stringify([...document.querySelectorAll("#timeline li.PolicyDecided")].map(li => li.textContent))`)
	said := read(`document.querySelector("#timeline li.PolicyDecided .said").textContent`)
	if want := strings.Replace(modelWords, "\u202e", `\u202E`, 1); said != want {
		t.Errorf("the page shows the words as %q, want %q", said, want)
	}
	for _, want := range []string{"turn 1: tool_calls · gpt-test (openai) · tokens 50 in / 10 out · $0.06", "turn 2: finish · gpt-test (openai) · tokens 50 in / 10 out · $0.06"} {
		if !strings.Contains(turns, want) {
			t.Errorf("the model turns %s lack %q", turns, want)
		}
	}
	if n := read(`String(document.querySelectorAll("#timeline li.PolicyDecided .said").length)`); n != "1" {
		t.Errorf("%s turns show words, want 1 (the answer's turn has none): %s", n, turns)
	}
	// The page shows what the log holds.
	envs, err := h.Events(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envs {
		if env.Type != noeta.TypePolicyDecided {
			continue
		}
		p, _, err := env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if d := p.(*noeta.PolicyDecided); d.Turn == 1 && d.Text != modelWords {
			t.Errorf("turn 1 recorded the words %q, want %q", d.Text, modelWords)
		}
	}
}
