package telemetry

import (
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// modelRun is two records of a model-decided task: its creation and a turn
// decided by a model (latency 250 ms, 1200 in, 80 out, $0.0042).
func modelRun(t *testing.T) []eventlog.Envelope {
	t.Helper()
	task := noeta.NewTaskID()
	at := telemetryStart
	var out []eventlog.Envelope
	for i, p := range []noeta.Payload{
		noeta.TaskCreated{TaskID: task, Agent: "researcher", Goal: "g", RootTaskID: task},
		noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionFinish, Version: 2, Answer: []byte(`"done"`),
			Model: "gpt-4.1-mini", Provider: "openai", LatencyMS: 250, InputTokens: 1200, OutputTokens: 80, CostUSD: 0.0042},
	} {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "engine", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.Time, env.CorrelationID = uint64(i+1), at.Add(time.Duration(i)*time.Second), task
		out = append(out, env)
	}
	return out
}

// TestMetricsOfModelCalls: a model's decision counts a call, its tokens by
// type and its cost under its agent, provider and model, and its latency.
func TestMetricsOfModelCalls(t *testing.T) {
	m, srv := newTestMetrics(t, MetricsConfig{})
	for _, env := range modelRun(t) {
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, srv)
	who := "agent=researcher,model=gpt-4.1-mini,provider=openai"
	wantSeries(t, fams, "noeta_gen_ai_calls_total", map[string]float64{who: 1})
	wantSeries(t, fams, "noeta_gen_ai_tokens_total", map[string]float64{who + ",type=input": 1200, who + ",type=output": 80})
	wantSeries(t, fams, "noeta_gen_ai_cost_USD_total", map[string]float64{who: 0.0042})
	if _, ok := fams["gen_ai_client_operation_duration_seconds"]; !ok {
		t.Errorf("no gen_ai.client.operation.duration histogram among %d families", len(fams))
	}
}

// TestTraceOfModelCalls: a model's decision is a "chat <model>" CLIENT span
// under its task's span, as long as the call's latency, with the GenAI
// attributes.
func TestTraceOfModelCalls(t *testing.T) {
	tr, mem, _ := newTestTrace(t, TraceConfig{})
	envs := modelRun(t)
	feed(t, tr, envs)
	s := spanNamed(t, mem.GetSpans(), "chat gpt-4.1-mini", DeriveChatSpanID(envs[0].Task, 1))
	if s.Parent.SpanID() != DeriveTaskSpanID(envs[0].Task) || s.EndTime.Sub(s.StartTime) != 250*time.Millisecond {
		t.Errorf("chat span: parent %s, took %v", s.Parent.SpanID(), s.EndTime.Sub(s.StartTime))
	}
	got := map[string]string{}
	for _, a := range s.Attributes {
		got[string(a.Key)] = a.Value.Emit()
	}
	for k, v := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4.1-mini",
		"gen_ai.usage.input_tokens": "1200", "gen_ai.usage.output_tokens": "80", "noeta.turn": "1",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
