package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/tools"
)

// syntheticLog returns a task log of about n records as the engine writes
// them: turns of one echo call each, every tenth call denied by a guard, a
// snapshot every 20 turns.
func syntheticLog(tb testing.TB, n int) []eventlog.Envelope {
	tb.Helper()
	var out []eventlog.Envelope
	add := func(origin eventlog.Origin, p noeta.Payload) {
		env, err := eventlog.NewEnvelope("T", origin, "bench", p)
		if err != nil {
			tb.Fatal(err)
		}
		env.Seq, env.LeaseGen = uint64(len(out)+1), 1
		out = append(out, env)
	}
	add(eventlog.OriginSystem, noeta.TaskCreated{TaskID: "T", Agent: "bench", Goal: "g", RootTaskID: "T"})
	add(eventlog.OriginEngine, noeta.LeaseGranted{LeaseID: "L", Generation: 1, Worker: "w"})
	ref := noeta.RefFor([]byte("{}"), eventlog.MediaTypeJSON)
	for turn := 1; len(out) < n; turn++ {
		id := "call-" + strconv.Itoa(turn) + "-0"
		args := json.RawMessage(`{"i":` + strconv.Itoa(turn%7) + `,"text":"hello"}`)
		add(eventlog.OriginEngine, noeta.TurnStarted{Turn: turn})
		add(eventlog.OriginEngine, noeta.PolicyDecided{Turn: turn, Decision: noeta.DecisionToolCalls, CostUSD: 0.0001})
		if turn%10 == 0 {
			add(eventlog.OriginEngine, noeta.ToolCallDenied{CallID: id, Tool: "echo", Guard: "rules", Reason: "no tens"})
		} else {
			add(eventlog.OriginEngine, noeta.ToolCallStarted{CallID: id, Tool: "echo", Args: args, Turn: turn})
			add(eventlog.OriginTool, noeta.ToolCallFinished{CallID: id, Tool: "echo", OK: true, Output: args, DurationMS: 1})
		}
		if turn%20 == 0 {
			add(eventlog.OriginEngine, noeta.TaskSnapshot{StateRef: ref, UptoSeq: uint64(len(out))})
		}
	}
	return out
}

// BenchmarkFold10k folds a log of 10,000 records from genesis.
func BenchmarkFold10k(b *testing.B) {
	envs := syntheticLog(b, 10000)
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, err := Fold(envs); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

const benchGovernance = `
agents:
  bench:
    tools: [echo, read_file, shell]
    budget: {max_iterations: 100000, max_tool_calls: 100000, max_cost_usd: 100}
    repetition: {threshold: 3}
rules:
  - {match_tool: shell, match_arg: {path: command, regex: "rm\\s+-rf"}, action: deny, reason: destructive}
`

// BenchmarkGuardCheck is what the engine does for each proposed call: build
// the guards' context from the folded state and run the agent's default
// stack (Budget, Permission, Repetition, Rules), at a task with 100, 1,000
// and 10,000 records in its history. Past the first hundred records (when the
// recent-calls window is full) the cost should not grow.
func BenchmarkGuardCheck(b *testing.B) {
	cf, err := config.Parse("", []byte(benchGovernance))
	if err != nil {
		b.Fatal(err)
	}
	gov := cf.Governance
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		b.Fatal(err)
	}
	e := &Engine{cfg: Config{Governance: gov, Tools: reg}, stacks: map[string]*guards.Stack{}}
	e.log = discardLogger()
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			st, err := Fold(syntheticLog(b, n))
			if err != nil {
				b.Fatal(err)
			}
			g := &segment{e: e, ctx: b.Context(), st: st}
			call := noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "call-x-0", Tool: "echo", Args: json.RawMessage(`{"text":"new"}`)}}
			if d, err := g.check(call); err != nil || !d.IsAllow() {
				b.Fatalf("not allowed: %+v %v", d, err)
			}
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				g.check(call)
			}
			reportCPU(b, start)
		})
	}
}
