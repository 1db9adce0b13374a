package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
)

const benchConfig = `
agents:
  bench:
    tools: [echo]
    permission_mode: bypassPermissions
    budget: {max_tool_calls: 100000000, max_iterations: 100000000}
`

// loopPolicy calls echo once a turn until turn n, then finishes.
type loopPolicy struct{ n int }

func (p loopPolicy) Decide(_ context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	if in.Turn > p.n {
		return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}, nil
	}
	return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{
		CallID: "call-" + strconv.Itoa(in.Turn) + "-0", Tool: "echo", Args: json.RawMessage(`{"i":` + strconv.Itoa(in.Turn) + `,"text":"hello"}`),
	}}}, nil
}

func benchBackends() []struct {
	name string
	mk   func(testing.TB) backend
} {
	return []struct {
		name string
		mk   func(testing.TB) backend
	}{
		{"memlog", func(t testing.TB) backend { return memBackend(t, 30*time.Second) }},
		{"jetstream", func(t testing.TB) backend { return jsBackend(t, 30*time.Second) }},
	}
}

// BenchmarkEngineOverhead compares the time per record of a task the engine
// runs (a turn is TurnStarted, PolicyDecided, ToolCallStarted, a call of
// echo, ToolCallFinished; a snapshot every 20 turns) with fenced appends of
// the same records straight to the log under one lease. ns/event is the
// figure to compare; the engine's extra is policy, guards, fold, tool run,
// spills and snapshots.
func BenchmarkEngineOverhead(b *testing.B) {
	for _, bk := range benchBackends() {
		b.Run(bk.name, func(b *testing.B) {
			b.Run("fenced", func(b *testing.B) {
				be := bk.mk(b)
				h := newHarness(b, be, benchConfig)
				id := h.submit("agent: bench\ngoal: g\nscript: [{finish: {answer: x}}]\n")
				ctx := context.Background()
				lease, err := be.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: id, TTL: be.ttl})
				if err != nil {
					b.Fatal(err)
				}
				recs := turnRecords(b, id)
				last := uint64(1)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					env := recs[i%len(recs)]
					stored, err := be.log.Emit(ctx, lease, env, eventlog.EmitOptions{ExpectLastSeq: last})
					if err != nil {
						b.Fatal(err)
					}
					last = stored.Seq
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
			})
			b.Run("engine", func(b *testing.B) {
				be := bk.mk(b)
				turns := max(b.N/4, 1)
				h := newHarness(b, be, benchConfig, func(c *engine.Config) {
					c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return loopPolicy{turns}, nil }
				})
				id := h.submit("agent: bench\ngoal: g\nscript: [{finish: {answer: x}}]\n")
				ctx := context.Background()
				lease, err := be.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: id, TTL: be.ttl})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				out, err := h.eng.RunLease(ctx, lease)
				b.StopTimer()
				if err != nil || out.Status != noeta.StatusTerminal {
					b.Fatalf("%+v %v", out, err)
				}
				events := len(h.log(id)) - 1 // the genesis is not the engine's
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			})
		})
	}
}

// turnRecords are the records of one engine turn, for the fenced baseline.
func turnRecords(b *testing.B, task string) []eventlog.Envelope {
	args := json.RawMessage(`{"i":1,"text":"hello"}`)
	ps := []struct {
		o eventlog.Origin
		p noeta.Payload
	}{
		{eventlog.OriginEngine, noeta.TurnStarted{Turn: 1}},
		{eventlog.OriginEngine, noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls}},
		{eventlog.OriginEngine, noeta.ToolCallStarted{CallID: "call-1-0", Tool: "echo", Args: args, Turn: 1}},
		{eventlog.OriginTool, noeta.ToolCallFinished{CallID: "call-1-0", Tool: "echo", OK: true, Output: args}},
	}
	var out []eventlog.Envelope
	for _, x := range ps {
		env, err := eventlog.NewEnvelope(task, x.o, "bench", x.p)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

// BenchmarkTasks runs scripted tasks of 20 tool calls (20 turns of one echo
// call, then a finish) with 1 and 4 workers and reports tasks per second.
func BenchmarkTasks(b *testing.B) {
	var steps []string
	for i := range 20 {
		steps = append(steps, fmt.Sprintf("  - tool_calls: [{tool: echo, args: {i: %d}}]", i))
	}
	task := "agent: bench\ngoal: twenty calls\nscript:\n" + joinLines(steps) + "  - finish: {answer: done}\n"
	for _, bk := range benchBackends() {
		for _, workers := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/workers=%d", bk.name, workers), func(b *testing.B) {
				be := bk.mk(b)
				h := newHarness(b, be, benchConfig)
				tf, err := policy.ParseTaskFile("bench.yaml", []byte(task))
				if err != nil {
					b.Fatal(err)
				}
				script, _ := json.Marshal(tf.Script)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan string, 1024)
				pool := h.eng.NewPool("bench", workers)
				for _, w := range pool.Workers {
					w.OnSegment = func(out engine.Outcome, err error) {
						if err == nil && out.Status == noeta.StatusTerminal {
							done <- out.Task
						}
					}
				}
				go pool.Run(ctx)
				b.ResetTimer()
				start := engine.CPUTime()
				go func() {
					for range b.N {
						if _, err := h.eng.Submit(ctx, engine.Submission{Agent: "bench", Goal: "g", Script: script}); err != nil && ctx.Err() == nil {
							panic(err)
						}
					}
				}()
				for range b.N {
					<-done
				}
				b.StopTimer()
				engine.ReportCPU(b, start)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			})
		}
	}
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l + "\n"
	}
	return out
}

// BenchmarkObserversCannotSlowTheEngine runs the engine on memlog (where
// only CPU counts, so an observer's cost would show) with in-process
// observers behind their bounded queues: none, one that panics on every
// record, one that blocks forever. Report ns/event; the two bad observers'
// records are dropped and counted (drops/event).
func BenchmarkObserversCannotSlowTheEngine(b *testing.B) {
	panicking := observerFunc{"panicking", func(context.Context, eventlog.Envelope) error { panic("observer bug") }}
	block := make(chan struct{})
	blocked := observerFunc{"blocked", func(ctx context.Context, _ eventlog.Envelope) error {
		<-block
		return nil
	}}
	b.Cleanup(func() { close(block) })
	for _, c := range []struct {
		name string
		obs  []observers.Observer
	}{
		{"none", nil},
		{"panicking", []observers.Observer{panicking}},
		{"blocked", []observers.Observer{blocked}},
	} {
		b.Run(c.name, func(b *testing.B) {
			be := memBackend(b, 30*time.Second)
			turns := max(b.N/4, 1)
			h := newHarness(b, be, benchConfig, func(cfg *engine.Config) {
				cfg.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return loopPolicy{turns}, nil }
			})
			var runner *observers.InProcess
			if c.obs != nil {
				runner = observers.NewInProcess(be.log, observers.InProcessConfig{Logger: discard()}, c.obs...)
				b.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					defer cancel()
					_ = runner.Close(ctx)
				})
			}
			id := h.submit("agent: bench\ngoal: g\nscript: [{finish: {answer: x}}]\n")
			ctx := context.Background()
			lease, err := be.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: id, TTL: be.ttl})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			out, err := h.eng.RunLease(ctx, lease)
			b.StopTimer()
			if err != nil || out.Status != noeta.StatusTerminal {
				b.Fatalf("%+v %v", out, err)
			}
			events := len(h.log(id)) - 1
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			if runner != nil {
				for _, s := range runner.Stats() {
					b.ReportMetric(float64(s.Dropped+s.Panicked)/float64(events), "lost/event")
				}
			}
		})
	}
}

type observerFunc struct {
	name string
	f    func(context.Context, eventlog.Envelope) error
}

func (o observerFunc) Name() string { return o.name }
func (o observerFunc) Observe(ctx context.Context, env eventlog.Envelope) error {
	return o.f(ctx, env)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
