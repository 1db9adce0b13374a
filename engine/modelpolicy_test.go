package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/policy/llm"
	"github.com/noeta-go/noeta/policy/models"
)

// modelServer is a local model server speaking one provider's wire format:
// the first request of a task is answered with a call of echo and the
// words "Let me check the file first." beside it, every later
// one with a final answer; each reply reports 50 input and 10 output tokens.
type modelServer struct {
	provider string
	srv      *httptest.Server
	requests atomic.Int64
	last     atomic.Value // the last request's body, a string
}

func newModelServer(t *testing.T, provider string) *modelServer {
	m := &modelServer{provider: provider}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := m.requests.Add(1)
		m.last.Store(string(body))
		// A tool result in the request means the call ran: answer. The
		// first request of the task has none.
		answered := strings.Contains(string(body), `"role":"tool"`) || strings.Contains(string(body), `"tool_result"`) || n > 1
		w.Header().Set("Content-Type", "application/json")
		switch {
		case provider == config.ProviderOpenAI && !answered:
			io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"Let me check the file first.","tool_calls":[{"id":"x","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hello\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`)
		case provider == config.ProviderOpenAI:
			io.WriteString(w, `{"id":"c2","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"It said hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`)
		case !answered:
			io.WriteString(w, `{"id":"m1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"Let me check the file first."},{"type":"tool_use","id":"toolu_1","name":"echo","input":{"text":"hello"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":10}}`)
		default:
			io.WriteString(w, `{"id":"m2","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"It said hello."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":10}}`)
		}
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// modelsDoc is a config whose agent runs the model of m; at $1000 per
// million tokens each reply (60 tokens) costs $0.06.
func (m *modelServer) doc(maxCost float64) string {
	base := m.srv.URL
	if m.provider == config.ProviderOpenAI {
		base += "/v1"
	}
	return fmt.Sprintf(`
models:
  m:
    provider: %s
    model: model-test
    base_url: %s
    api_key_env: NOETA_TEST_MODEL_KEY
    max_retries: 0
    price: {input_per_mtok: 1000, output_per_mtok: 1000}
agents:
  researcher:
    model: m
    system_prompt: "You are careful."
    tools: [echo]
    budget: {max_cost_usd: %v}
`, m.provider, base, maxCost)
}

var echoToolSpec = noeta.ToolSpec{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}

// modelPolicies resolves every task's policy to its agent's model policy.
//
// Until the engine composes the transcript and lists the agent's tools in
// PolicyInput, the input's Context and Tools are filled here when the
// engine left them empty (the goal alone; echo): the model server answers
// from the request count then.
func modelPolicies(t *testing.T, doc string) engine.PolicyResolver {
	cf, err := config.Parse("noeta.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	opts := llm.Options{LookupEnv: func(string) (string, bool) { return "sk-test", true }, Backoff: func(int) time.Duration { return 0 }}
	return func(ctx context.Context, st *engine.State) (engine.Policy, error) {
		p, err := models.ForAgent(cf, st.Agent, opts)
		if err != nil {
			return nil, err
		}
		return fillInput{p, st.Goal}, nil
	}
}

type fillInput struct {
	p    engine.Policy
	goal string
}

func (f fillInput) Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	if in.Context == nil {
		in.Context = &noeta.Transcript{Messages: []noeta.Message{{Role: noeta.RoleUser, Text: f.goal}}}
	}
	if in.Tools == nil {
		in.Tools = []noeta.ToolSpec{echoToolSpec}
	}
	return f.p.Decide(ctx, in)
}

// TestModelAgent: an agent on a model completes a two-turn task — a tool
// call that runs, then the model's answer — on memlog and embedded
// JetStream, for both providers; the model is asked once per turn, and
// the cost recorded is the usage × the configured price.
func TestModelAgent(t *testing.T) {
	for _, provider := range []string{config.ProviderOpenAI, config.ProviderAnthropic} {
		for _, mk := range backends(t) {
			b := mk(t)
			t.Run(provider+"/"+b.name, func(t *testing.T) {
				ms := newModelServer(t, provider)
				doc := ms.doc(1.0)
				h := newHarness(t, b, doc, func(c *engine.Config) { c.Policies = modelPolicies(t, doc) })
				h.start(1)
				id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "Say hello with echo."})
				if err != nil {
					t.Fatal(err)
				}
				st := h.waitStatus(id, noeta.StatusTerminal)
				if string(st.Answer) != `"It said hello."` {
					t.Fatalf("answer %s, reason %q\n%s", st.Answer, st.Reason, h.dump(id))
				}
				envs := h.log(id)
				fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
				if !fin.OK || fin.CallID != "call-1-0" || !strings.Contains(string(fin.Output), "hello") {
					t.Errorf("echo's result %+v", fin)
				}
				if n := ms.requests.Load(); n != 2 {
					t.Errorf("the model was asked %d times, want 2 (once per turn)", n)
				}
				if got := st.Governance.CostUSD; got < 0.12-1e-9 || got > 0.12+1e-9 {
					t.Errorf("cost %v, want 0.12 (2 replies × 60 tokens × $1000/M)", got)
				}
				pd := payload[noeta.PolicyDecided](t, envs, noeta.TypePolicyDecided)
				if pd.InputTokens != 50 || pd.OutputTokens != 10 {
					t.Errorf("PolicyDecided %+v", pd)
				}
				// The model's words beside its call are recorded with it
				// and sent back to it as its own on the next turn
				// (docs/adr/0084).
				if pd.Text != "Let me check the file first." || pd.TextRef != nil {
					t.Errorf("PolicyDecided text %q (ref %v), want the reply's words", pd.Text, pd.TextRef)
				}
				if last, _ := ms.last.Load().(string); !strings.Contains(last, "Let me check the file first.") {
					t.Errorf("the second request does not carry the first turn's words: %s", last)
				}
			})
		}
	}
}

// TestModelAgentCostBudget: max_cost_usd stops a model agent by real usage
// × price: the first reply ($0.06) is under $0.10 and its call runs; the
// second brings the task to $0.12, and the budget guard refuses its finish.
func TestModelAgentCostBudget(t *testing.T) {
	for _, provider := range []string{config.ProviderOpenAI, config.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			ms := newModelServer(t, provider)
			doc := ms.doc(0.10)
			h := newHarness(t, memBackend(t, 2*time.Second), doc, func(c *engine.Config) { c.Policies = modelPolicies(t, doc) })
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "Say hello with echo."})
			if err != nil {
				t.Fatal(err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			if st.Guard != "budget" || !strings.Contains(st.Reason, "max_cost_usd") {
				t.Fatalf("task ended with guard %q reason %q, want the budget's max_cost_usd\n%s", st.Guard, st.Reason, h.dump(id))
			}
			fin := payload[noeta.ToolCallFinished](t, h.log(id), noeta.TypeToolCallFinished)
			if !fin.OK {
				t.Errorf("the first call, under budget, did not run: %+v", fin)
			}
			if n := ms.requests.Load(); n != 2 {
				t.Errorf("the model was asked %d times, want 2", n)
			}
		})
	}
}
