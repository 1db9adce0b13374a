package engine_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/noeta-go/noeta/eventlog"
)

// newMalformedServer is a model server whose first reply calls echo with
// the arguments given as they go on the wire (openai: the arguments
// member, a JSON string; anthropic: the tool_use input), and whose later
// replies are a final answer. told is set when the second request carries
// denial: the model was told why its call was refused.
func newMalformedServer(t *testing.T, provider, argsWire, denial string) (m *modelServer, told *atomic.Bool) {
	m = &modelServer{provider: provider}
	told = new(atomic.Bool)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := m.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case n == 1 && provider == config.ProviderOpenAI:
			io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"echo","arguments":`+argsWire+`}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`)
		case n == 1:
			io.WriteString(w, `{"id":"m1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"tool_use","id":"toolu_1","name":"echo","input":`+argsWire+`}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":10}}`)
		default:
			if n == 2 && strings.Contains(string(body), denial) {
				told.Store(true)
			}
			if provider == config.ProviderOpenAI {
				io.WriteString(w, `{"id":"c2","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"Understood."},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`)
			} else {
				io.WriteString(w, `{"id":"m2","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"Understood."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":10}}`)
			}
		}
	}))
	t.Cleanup(m.srv.Close)
	return m, told
}

// TestModelMalformedArgs: a model's call whose arguments are JSON that the
// log cannot hold (or no JSON object at all) is refused as guard schema,
// the model is asked once more with the refusal in its transcript, each
// turn billed once, and the task completes. Before, a duplicate key, a
// lone surrogate, a number past float64 or invalid UTF-8 passed as a call
// that could run; its PolicyDecided could not be recorded, the segment
// failed as retryable, the model was asked (and billed) again on every
// retry, and the dispatcher ended the task with no terminal record.
func TestModelMalformedArgs(t *testing.T) {
	shapes := []struct {
		name, openai, anthropic, denial string
	}{
		{"duplicate key", `"{\"text\":\"a\",\"text\":\"b\"}"`, `{"text":"a","text":"b"}`, "duplicate object key"},
		{"lone surrogate", `"{\"text\":\"\\ud800\"}"`, `{"text":"\ud800"}`, "unpaired surrogate"},
		{"number out of range", `"{\"text\":\"x\",\"n\":1e999}"`, `{"text":"x","n":1e999}`, "overflows float64"},
		{"invalid UTF-8", "\"{\\\"text\\\":\\\"\xff\\\"}\"", "{\"text\":\"\xff\"}", "invalid UTF-8"},
		{"not an object", `"[\"hello\"]"`, `["hello"]`, "must be a JSON object"},
		{"NaN", `"{\"text\":NaN}"`, "", "not valid JSON"},
	}
	for _, provider := range []string{config.ProviderOpenAI, config.ProviderAnthropic} {
		for _, mk := range backends(t) {
			for _, sh := range shapes {
				wire := sh.openai
				if provider == config.ProviderAnthropic {
					wire = sh.anthropic
				}
				if wire == "" {
					continue // not a body the provider could send
				}
				b := mk(t)
				t.Run(provider+"/"+b.name+"/"+sh.name, func(t *testing.T) {
					ms, told := newMalformedServer(t, provider, wire, sh.denial)
					doc := ms.doc(1.0)
					h := newHarness(t, b, doc, func(c *engine.Config) { c.Policies = modelPolicies(t, doc) })
					h.start(1)
					id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "Say hello with echo."})
					if err != nil {
						t.Fatal(err)
					}
					st := h.waitStatus(id, noeta.StatusTerminal)
					if string(st.Answer) != `"Understood."` {
						t.Fatalf("answer %s, reason %q\n%s", st.Answer, st.Reason, h.dump(id))
					}
					envs := h.log(id)
					den := payload[noeta.ToolCallDenied](t, envs, noeta.TypeToolCallDenied)
					if den.Guard != "schema" || !strings.Contains(den.Reason, sh.denial) {
						t.Errorf("denial %+v, want guard schema saying %q", den, sh.denial)
					}
					for _, e := range envs {
						if e.Type == noeta.TypeToolCallStarted {
							t.Errorf("a refused call was started: %s", e.Payload)
						}
					}
					if n := ms.requests.Load(); n != 2 {
						t.Errorf("the model was asked %d times, want 2 (once per turn)", n)
					}
					if !told.Load() {
						t.Errorf("the second request did not carry the refusal %q", sh.denial)
					}
					if got := st.Governance.CostUSD; got < 0.12-1e-9 || got > 0.12+1e-9 {
						t.Errorf("cost %v, want 0.12 (2 replies, each billed once)", got)
					}
				})
			}
		}
	}
}

const echoAgentDoc = `
agents:
  researcher:
    tools: [echo]
`

// rawArgsPolicy decides turn 1 as one echo call with args exactly as
// given, marked valid, and every later turn as a finish.
type rawArgsPolicy struct{ args string }

func (p rawArgsPolicy) Decide(_ context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	if in.Turn == 1 {
		return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{
			{CallID: "c1", Tool: "echo", Args: json.RawMessage(p.args)},
		}}, nil
	}
	return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}, nil
}

// TestPolicyArgsThatCannotBeRecorded: whatever policy hands the engine a
// call whose arguments canonical JSON refuses (a policy other than the
// model policies, which refuse them themselves), the engine records the
// call as invalid and refuses it as guard schema; the task goes on.
// Before, recording the turn's PolicyDecided failed, the segment failed
// as retryable every time, and the task ended with no terminal record.
func TestPolicyArgsThatCannotBeRecorded(t *testing.T) {
	for _, args := range []string{`{"text":"a","text":"b"}`, `{"text":"\ud800"}`, `{"text":"x","n":1e999}`, "{\"text\":\"\xff\"}"} {
		t.Run(args, func(t *testing.T) {
			h := newHarness(t, memBackend(t, 2*time.Second), echoAgentDoc, func(c *engine.Config) {
				c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return rawArgsPolicy{args}, nil }
			})
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "g"})
			if err != nil {
				t.Fatal(err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			if string(st.Answer) != `"done"` {
				t.Fatalf("answer %s, reason %q\n%s", st.Answer, st.Reason, h.dump(id))
			}
			den := payload[noeta.ToolCallDenied](t, h.log(id), noeta.TypeToolCallDenied)
			if den.Guard != "schema" || den.CallID != "c1" || !strings.Contains(den.Reason, "not valid JSON") {
				t.Errorf("denial %+v", den)
			}
		})
	}
}

// TestScriptArgsThatCannotBeRecorded: the scripted policy cannot carry
// such arguments: a script is canonicalized when the task is submitted,
// so one that holds them is refused then, naming what is wrong, and no
// task is created.
func TestScriptArgsThatCannotBeRecorded(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), echoAgentDoc)
	for _, args := range []string{`{"text":"a","text":"b"}`, `{"text":"\ud800"}`, `{"text":"x","n":1e999}`, "{\"text\":\"\xff\"}"} {
		script := `[{"tool_calls":[{"tool":"echo","args":` + args + `}]},{"finish":{"answer":"done"}}]`
		_, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "researcher", Goal: "g", Script: json.RawMessage(script)})
		if !errors.Is(err, eventlog.ErrInvalidArgument) || !strings.Contains(err.Error(), "script") {
			t.Errorf("script with args %q: Submit error %v, want an invalid argument naming the script", args, err)
		}
	}
}
