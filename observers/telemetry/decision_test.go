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

// TestMetricsOfModelCalls: a model's decision counts a call and its cost,
// and records its tokens by type and its latency in the GenAI conventions'
// histograms, under its agent, provider and model; a scripted turn is no
// model call and counts in none of them.
func TestMetricsOfModelCalls(t *testing.T) {
	m, srv := newTestMetrics(t, MetricsConfig{})
	envs := modelRun(t)
	scripted, err := eventlog.NewEnvelope(envs[0].Task, eventlog.OriginEngine, "engine",
		noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionFinish, Version: 2, Answer: []byte(`"done"`)})
	if err != nil {
		t.Fatal(err)
	}
	scripted.Seq, scripted.Time, scripted.CorrelationID = 3, telemetryStart.Add(2*time.Second), envs[0].Task
	for _, env := range append(envs, scripted) {
		if err := m.Observe(t.Context(), env); err != nil {
			t.Fatal(err)
		}
	}
	fams := scrape(t, srv)
	who := "gen_ai_agent_name=researcher,gen_ai_operation_name=chat,gen_ai_provider_name=openai,gen_ai_request_model=gpt-4.1-mini"
	wantSeries(t, fams, "noeta_gen_ai_calls_total", map[string]float64{who: 1})
	wantSeries(t, fams, "noeta_gen_ai_cost_usd_total", map[string]float64{who: 0.0042})
	// A histogram's series is its count; its sum is the tokens.
	wantSeries(t, fams, "gen_ai_client_token_usage", map[string]float64{who + ",gen_ai_token_type=input": 1, who + ",gen_ai_token_type=output": 1})
	sums := map[string]float64{}
	for _, mt := range fams["gen_ai_client_token_usage"].GetMetric() {
		for _, l := range mt.GetLabel() {
			if l.GetName() == "gen_ai_token_type" {
				sums[l.GetValue()] = mt.GetHistogram().GetSampleSum()
			}
		}
	}
	if sums["input"] != 1200 || sums["output"] != 80 {
		t.Errorf("token sums %v, want input 1200, output 80", sums)
	}
	wantSeries(t, fams, "gen_ai_client_operation_duration_seconds", map[string]float64{who: 1})
	wantSeries(t, fams, "noeta_events_total", map[string]float64{"origin=engine,type=TaskCreated": 1, "origin=engine,type=PolicyDecided": 2})
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
