package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/tools"
)

// modelConfig governs the replay tests: a worker that may call echo, count
// and crash (and read_file and shell, the latter denied), and spawn helper.
const modelConfig = `
agents:
  worker:
    tools: [echo, count, crash, read_file, shell]
    permission_mode: bypassPermissions
    permissions:
      denied_tools: [shell]
      allowed_subtask_agents: [helper, analyst, helper]
  gated:
    tools: [echo, count]
    permissions: {require_approval_tools: [count]}
  nospawn:
    tools: [echo]
    permission_mode: bypassPermissions
    permissions: {allowed_subtask_agents: [helper]}
    budget: {max_spawned_subtasks: 0}
  helper:
    tools: [echo]
    permission_mode: bypassPermissions
  analyst:
    tools: [echo]
    permission_mode: bypassPermissions
`

// modelLike is a policy that behaves like a model: it never decides a turn
// the same way twice (every call id is fresh, as a model's are), and it
// counts how often each turn was asked. decide gives the decision of a turn
// by its number; ids are added.
type modelLike struct {
	decide func(turn int) noeta.Decision
	mu     sync.Mutex
	asks   map[int]int
	inputs []noeta.PolicyInput
	serial atomic.Int64
}

func newModelLike(decide func(turn int) noeta.Decision) *modelLike {
	return &modelLike{decide: decide, asks: map[int]int{}}
}

func (m *modelLike) Decide(_ context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	m.mu.Lock()
	m.asks[in.Turn]++
	m.inputs = append(m.inputs, in)
	m.mu.Unlock()
	d := m.decide(in.Turn)
	for i := range d.ToolCalls {
		d.ToolCalls[i].CallID = fmt.Sprintf("call-%d-%d-%d", in.Turn, i, m.serial.Add(1))
	}
	return d, nil
}

func (m *modelLike) askCounts() map[int]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]int{}
	for k, v := range m.asks {
		out[k] = v
	}
	return out
}

// crasher is a tool that stops the worker running it the first time it
// runs: the test's stop function cancels the segment's context, so the call
// has a ToolCallStarted and never a ToolCallFinished, as when a worker dies
// mid-call.
type crasher struct {
	stop  atomic.Pointer[context.CancelFunc]
	runs  atomic.Int64
	fired atomic.Bool
}

func (c *crasher) tool() tools.Tool {
	return tools.Define(tools.Def{Name: "crash", Risk: tools.RiskLow, Run: func(ctx context.Context, call tools.Call) (tools.Result, error) {
		c.runs.Add(1)
		if stop := c.stop.Load(); stop != nil && c.fired.CompareAndSwap(false, true) {
			(*stop)()
			<-ctx.Done()
			return tools.Result{}, fmt.Errorf("crash: %w", ctx.Err())
		}
		return tools.Succeed("no crash")
	}})
}

func withModel(m *modelLike, counter *runCounter, cr *crasher) func(*engine.Config) {
	return func(cfg *engine.Config) {
		builtins, _ := tools.Builtins(tools.BuiltinConfig{})
		reg, err := tools.NewRegistry(append(builtins, counter.tool(), cr.tool())...)
		if err != nil {
			panic(err)
		}
		cfg.Tools = reg
		cfg.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return m, nil }
	}
}

func count(tok string) noeta.ToolCall {
	return noeta.ToolCall{Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"token":%q}`, tok))}
}

// runUntilCrash leases task and runs it until the crash tool stops it.
func runUntilCrash(t *testing.T, h *harness, cr *crasher, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cr.stop.Store(&cancel)
	lease, err := h.b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "first", Task: id, TTL: h.b.ttl})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.RunLease(ctx, lease); !errors.Is(err, context.Canceled) {
		t.Fatalf("the crashed segment ended with %v, want context.Canceled", err)
	}
	if !cr.fired.Load() {
		t.Fatal("the crash tool never ran")
	}
}

// resume takes the task over as another worker would once the first
// worker's lease is gone, and runs it to its next stop.
func resume(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := context.Background()
	if err := h.b.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	lease, err := h.b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "second", Task: id, TTL: h.b.ttl})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.RunLease(ctx, lease); err != nil {
		t.Fatalf("resumed segment: %v\n%s", err, h.dump(id))
	}
}

// TestDecidedTurnIsReplayed is the contract of replay: a worker that stops
// after a turn's PolicyDecided and before its calls finish leaves the turn
// to the next worker, which carries it out from the record. The policy is
// never asked again for that turn (it would decide differently: its call ids
// are fresh on every ask), no call runs twice, the call that was running is
// recorded as interrupted, and large args come back from the content store
// exactly as recorded. A decision too large to fit even with its args by ref
// is recorded whole under decision_ref and replays the same way.
//
// Before: the resumed worker asked the policy again for the turn; a
// model-backed policy answers with new call ids, and the turn failed with
// "the policy proposed turn 1 again without call …" (or, with equal ids,
// paid for the model call twice).
func TestDecidedTurnIsReplayed(t *testing.T) {
	big := strings.Repeat("x", 3000)
	for _, tt := range []struct {
		name  string
		calls []noeta.ToolCall
		// wantRef is which ref the record must use.
		wantRef string
	}{
		{"inline", []noeta.ToolCall{count("a"), {Tool: "crash", Args: json.RawMessage(`{}`)}, count("b")}, ""},
		{"args by ref", []noeta.ToolCall{
			{Tool: "echo", Args: json.RawMessage(`{"pad":"` + big + `"}`)}, count("a"), {Tool: "crash", Args: json.RawMessage(`{}`)},
			{Tool: "echo", Args: json.RawMessage(`{"pad2":"` + big + `"}`)}, count("b"),
		}, "args_ref"},
		{"decision by ref", func() []noeta.ToolCall {
			cs := []noeta.ToolCall{count("a"), {Tool: "crash", Args: json.RawMessage(`{}`)}}
			for i := range 60 {
				cs = append(cs, count(fmt.Sprintf("n%02d", i)))
			}
			return cs
		}(), "decision_ref"},
	} {
		for _, mk := range backends(t) {
			t.Run(tt.name+"/"+mk(t).name, func(t *testing.T) {
				b := mk(t)
				counter := &runCounter{runs: map[string]int{}}
				cr := &crasher{}
				m := newModelLike(func(turn int) noeta.Decision {
					if turn == 1 {
						return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: slices.Clone(tt.calls), CostUSD: 0.25, InputTokens: 100, OutputTokens: 10, Model: "m", Provider: "p", Response: []byte(`{"raw":true}`)}
					}
					return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}
				})
				h := newHarness(t, b, modelConfig, withModel(m, counter, cr))
				id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "worker", Goal: "replay"})
				if err != nil {
					t.Fatal(err)
				}
				runUntilCrash(t, h, cr, id)
				resume(t, h, id)

				st := h.waitStatus(id, noeta.StatusTerminal)
				if string(st.Answer) != `"done"` {
					t.Fatalf("ended %q %s\n%s", st.Answer, st.Reason, h.dump(id))
				}
				if got := m.askCounts(); got[1] != 1 || got[2] != 1 || len(got) != 2 {
					t.Errorf("the policy was asked %v times per turn; want once for each of turns 1 and 2", got)
				}
				if n := cr.runs.Load(); n != 1 {
					t.Errorf("the crash call ran %d times", n)
				}
				counter.mu.Lock()
				for tok, n := range counter.runs {
					if n != 1 {
						t.Errorf("call %s ran %d times", tok, n)
					}
				}
				if counter.runs["a"] != 1 || counter.runs["b"]+counter.runs["n59"] != 1 {
					t.Errorf("runs %v: the calls after the interrupted one did not run", counter.runs)
				}
				counter.mu.Unlock()

				envs := h.log(id)
				var decided []noeta.PolicyDecided
				interrupted := 0
				for _, env := range envs {
					switch env.Type {
					case noeta.TypePolicyDecided:
						if len(env.Payload) > noeta.PayloadMaxBytes {
							t.Errorf("PolicyDecided of %d bytes", len(env.Payload))
						}
						var p noeta.PolicyDecided
						_ = json.Unmarshal(env.Payload, &p)
						decided = append(decided, p)
					case noeta.TypeToolCallFinished:
						var p noeta.ToolCallFinished
						_ = json.Unmarshal(env.Payload, &p)
						if strings.HasPrefix(p.Error, "interrupted") {
							interrupted++
						}
					}
				}
				if interrupted != 1 {
					t.Errorf("%d calls recorded as interrupted, want 1\n%s", interrupted, h.dump(id))
				}
				if len(decided) != 2 {
					t.Fatalf("%d PolicyDecided records, want 2", len(decided))
				}
				rec := decided[0]
				if rec.Version != 2 || rec.Model != "m" || rec.Provider != "p" || rec.ResponseRef == nil || rec.CostUSD != 0.25 {
					t.Errorf("turn 1 record %+v", rec)
				}
				if body, err := b.content.Get(context.Background(), *rec.ResponseRef); err != nil || string(body) != `{"raw":true}` {
					t.Errorf("response_ref holds %q (%v)", body, err)
				}
				switch tt.wantRef {
				case "":
					if rec.DecisionRef != nil || len(rec.ToolCalls) != len(tt.calls) || rec.ToolCalls[0].Args == nil {
						t.Errorf("record %+v: want every call inline", rec)
					}
				case "args_ref":
					refs := 0
					for _, c := range rec.ToolCalls {
						if c.ArgsRef != nil {
							refs++
						}
					}
					// Largest first, and only until it fits: one of the two
					// large args goes, the small ones stay inline.
					if rec.DecisionRef != nil || refs != 1 || rec.ToolCalls[1].Args == nil || rec.ToolCalls[4].Args == nil {
						t.Errorf("record with %d refs (decision_ref %v): want one large args by ref, the small inline", refs, rec.DecisionRef)
					}
				case "decision_ref":
					if rec.DecisionRef == nil || rec.ToolCalls != nil {
						t.Errorf("record %+v: want the parts under decision_ref", rec)
					}
				}
				// The budget counted the decision once.
				if st.Governance.CostUSD != 0.25 || st.Governance.InputTokens != 100 {
					t.Errorf("cost %v tokens %d: the decision's cost counted other than once", st.Governance.CostUSD, st.Governance.InputTokens)
				}
				checkFoldDeterministic(t, h, id, envs)
			})
		}
	}
}

// TestDecidedTurnIsReplayedAfterApproval: a turn suspended for an approval
// is carried out from its record when the approval comes, with exactly the
// recorded args; the policy is asked once per turn in total.
//
// Before: the resumed turn asked the policy again, and a model's fresh call
// ids failed the task.
func TestDecidedTurnIsReplayedAfterApproval(t *testing.T) {
	b := memBackend(t, 2*time.Second)
	counter := &runCounter{runs: map[string]int{}}
	m := newModelLike(func(turn int) noeta.Decision {
		if turn == 1 {
			return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{count("approved-token"), {Tool: "echo", Args: json.RawMessage(`{"after":1}`)}}}
		}
		return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}
	})
	h := newHarness(t, b, modelConfig, withModel(m, counter, &crasher{}))
	h.start(1)
	id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "gated", Goal: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	st := h.waitFor(id, "an approval request", func(s *engine.State) bool { return len(s.Governance.PendingApprovals) == 1 })
	h.waitReleased(id, eventlog.DispatchSuspended)
	var handle string
	for hd := range st.Governance.PendingApprovals {
		handle = hd
	}
	if err := h.eng.Approve(context.Background(), id, handle, noeta.ApprovalApprove, "alice", "fine", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	st = h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` {
		t.Fatalf("ended %s %s\n%s", st.Answer, st.Reason, h.dump(id))
	}
	if got := m.askCounts(); got[1] != 1 || got[2] != 1 || len(got) != 2 {
		t.Errorf("asks per turn %v; want once for each of turns 1 and 2", got)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if counter.runs["approved-token"] != 1 {
		t.Errorf("the approved call ran %d times with its recorded args", counter.runs["approved-token"])
	}
}

// TestVersion1RecordAsksAgain: a turn whose PolicyDecided was written before
// decisions were recorded (version 1: kind and cost only) is decided again
// on resume, as it always was, and held to the recorded kind and call ids.
func TestVersion1RecordAsksAgain(t *testing.T) {
	for _, tt := range []struct {
		name     string
		decide   noeta.Decision
		wantFail string
	}{
		{"same decision", noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`)}, {CallID: "c2", Tool: "echo", Args: json.RawMessage(`{}`)}}}, ""},
		{"another kind", noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"x"`)}, "decided finish for turn 1 when it was resumed; tool_calls was recorded"},
		{"another call id", noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{CallID: "other", Tool: "echo", Args: json.RawMessage(`{}`)}}}, "without call c1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := memBackend(t, 2*time.Second)
			var asks atomic.Int64
			pol := policyFunc(func(_ context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
				asks.Add(1)
				if in.Turn == 1 {
					return tt.decide.Clone(), nil
				}
				return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}, nil
			})
			h := newHarness(t, b, modelConfig, withModel(nil, &runCounter{runs: map[string]int{}}, &crasher{}), func(c *engine.Config) {
				c.Policies = func(context.Context, *engine.State) (engine.Policy, error) { return pol, nil }
			})
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "worker", Goal: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "first", Task: id, TTL: b.ttl})
			if err != nil {
				t.Fatal(err)
			}
			last := uint64(1)
			for _, p := range []noeta.Payload{
				noeta.TurnStarted{Turn: 1},
				noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, CostUSD: 0.5},
				noeta.ToolCallStarted{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1},
			} {
				env, _ := eventlog.NewEnvelope(id, eventlog.OriginEngine, "first", p)
				stored, err := b.log.Emit(ctx, lease, env, eventlog.EmitOptions{ExpectLastSeq: last})
				if err != nil {
					t.Fatal(err)
				}
				last = stored.Seq
			}
			resume(t, h, id)
			st := h.waitStatus(id, noeta.StatusTerminal)
			if asks.Load() == 0 {
				t.Fatal("the policy was not asked for the version 1 turn")
			}
			if tt.wantFail != "" {
				if st.Answer != nil || !strings.Contains(st.Reason, tt.wantFail) {
					t.Fatalf("ended %s %q; want a failure containing %q", st.Answer, st.Reason, tt.wantFail)
				}
				return
			}
			if string(st.Answer) != `"done"` || st.Governance.CostUSD != 0.5 {
				t.Fatalf("ended %s %q cost %v\n%s", st.Answer, st.Reason, st.Governance.CostUSD, h.dump(id))
			}
			if asks.Load() != 2 {
				t.Errorf("asked %d times, want 2 (turn 1 again, turn 2)", asks.Load())
			}
			// c1 was started by the first worker: recorded interrupted, not run.
			if st.Governance.ToolCalls != 2 {
				t.Errorf("%d calls started, want 2 (c1 once, c2)\n%s", st.Governance.ToolCalls, h.dump(id))
			}
		})
	}
}

type policyFunc func(context.Context, noeta.PolicyInput) (noeta.Decision, error)

func (f policyFunc) Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	return f(ctx, in)
}

// checkCounter is a user guard that counts what it was asked about.
type checkCounter struct{ n atomic.Int64 }

func (*checkCounter) Name() string  { return "counter" }
func (*checkCounter) Priority() int { return guards.MinUserPriority }
func (c *checkCounter) Check(context.Context, noeta.ProposedAction, *guards.Context) (noeta.VerdictResult, error) {
	c.n.Add(1)
	return noeta.Allow(), nil
}

// TestInvalidCallsAreRefusedNotRun: a call that cannot run (marked invalid by
// the policy, a tool the registry does not have, args its schema refuses) is
// recorded as a ToolCallDenied by guard "schema" with the reason, is never
// run, is not put to the guards, does not count toward max_tool_calls, and
// does not stop the calls after it.
//
// Before: an unknown tool was put to the guards (and, allowed, run: a failed
// result "unknown tool"); args a tool cannot take reached the tool; a call
// marked invalid was a decision the engine could not act on.
func TestInvalidCallsAreRefusedNotRun(t *testing.T) {
	for _, tt := range []struct {
		name     string
		call     noeta.ToolCall
		wantTool string
		want     string
	}{
		{"marked invalid", noeta.ToolCall{Tool: "count", Invalid: "arguments are not JSON: unexpected end of input"}, "count", "arguments are not JSON"},
		{"marked invalid without a tool", noeta.ToolCall{Invalid: "no tool named"}, "(none)", "no tool named"},
		{"unknown tool", noeta.ToolCall{Tool: "launch_missiles", Args: json.RawMessage(`{}`)}, "launch_missiles", `unknown tool "launch_missiles"`},
		{"args against the schema", noeta.ToolCall{Tool: "read_file", Args: json.RawMessage(`{"file":"a"}`)}, "read_file", "read_file: args: "},
		{"args of the wrong type", noeta.ToolCall{Tool: "read_file", Args: json.RawMessage(`{"path":3}`)}, "read_file", "args.path: got number, want string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := memBackend(t, 2*time.Second)
			counter := &runCounter{runs: map[string]int{}}
			guard := &checkCounter{}
			m := newModelLike(func(turn int) noeta.Decision {
				if turn == 1 {
					return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{tt.call, count("after")}}
				}
				return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}
			})
			h := newHarness(t, b, modelConfig, withModel(m, counter, &crasher{}), func(c *engine.Config) { c.UserGuards = []guards.Guard{guard} })
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: "worker", Goal: "invalid"})
			if err != nil {
				t.Fatal(err)
			}
			st := h.waitStatus(id, noeta.StatusTerminal)
			if string(st.Answer) != `"done"` {
				t.Fatalf("ended %s %q\n%s", st.Answer, st.Reason, h.dump(id))
			}
			envs := h.log(id)
			den := payload[noeta.ToolCallDenied](t, envs, noeta.TypeToolCallDenied)
			if den.Guard != engine.GuardSchema || den.Tool != tt.wantTool || !strings.Contains(den.Reason, tt.want) {
				t.Errorf("denial %+v; want guard %q tool %q reason containing %q", den, engine.GuardSchema, tt.wantTool, tt.want)
			}
			started := payload[noeta.ToolCallStarted](t, envs, noeta.TypeToolCallStarted)
			if started.Tool != "count" || st.Governance.ToolCalls != 1 {
				t.Errorf("first started call %+v, %d started; want only the valid call after it", started, st.Governance.ToolCalls)
			}
			// The guards saw the valid call and the finish, not the invalid one.
			if n := guard.n.Load(); n != 2 {
				t.Errorf("the guards were asked %d times, want 2 (the valid call, the finish)", n)
			}
			if len(st.Governance.Denials) != 1 || st.Governance.Denials[0].Guard != engine.GuardSchema {
				t.Errorf("denials %+v", st.Governance.Denials)
			}
			// A second worker folding the log replays it the same way.
			checkFoldDeterministic(t, h, id, envs)
		})
	}
}

// TestPolicyInputOffer: the policy is told the agent, the composed context,
// exactly the tools the agent may call (its tools: list, minus denied_tools)
// with their schemas, and the agents it may spawn (allowed_subtask_agents,
// none when max_spawned_subtasks is 0).
func TestPolicyInputOffer(t *testing.T) {
	for _, tt := range []struct {
		agent      string
		wantTools  []string
		wantSpawns []string
	}{
		{"worker", []string{"count", "crash", "echo", "read_file"}, []string{"analyst", "helper"}}, // in the registry's order
		{"nospawn", []string{"echo"}, nil},
		{"helper", []string{"echo"}, nil},
	} {
		t.Run(tt.agent, func(t *testing.T) {
			b := memBackend(t, 2*time.Second)
			m := newModelLike(func(int) noeta.Decision {
				return noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(`"done"`)}
			})
			h := newHarness(t, b, modelConfig, withModel(m, &runCounter{runs: map[string]int{}}, &crasher{}))
			h.start(1)
			id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: tt.agent, Goal: "offer"})
			if err != nil {
				t.Fatal(err)
			}
			h.waitStatus(id, noeta.StatusTerminal)
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.inputs) != 1 {
				t.Fatalf("%d inputs", len(m.inputs))
			}
			in := m.inputs[0]
			if in.Task != id || in.Turn != 1 || in.Agent != tt.agent || in.Context == nil {
				t.Errorf("input %+v", in)
			}
			var names []string
			for _, s := range in.Tools {
				names = append(names, s.Name)
				if len(s.InputSchema) == 0 || s.Risk == "" {
					t.Errorf("tool %s offered without its schema or risk: %+v", s.Name, s)
				}
			}
			if !slices.Equal(names, tt.wantTools) {
				t.Errorf("tools offered %v, want %v", names, tt.wantTools)
			}
			if !slices.Equal(in.SpawnAgents, tt.wantSpawns) {
				t.Errorf("spawnable agents %v, want %v", in.SpawnAgents, tt.wantSpawns)
			}
		})
	}
}
