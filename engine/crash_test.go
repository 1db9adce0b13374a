package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// crashConfig governs the crash and determinism tests: no approvals, so
// every task can run to its end unattended.
const crashConfig = `
agents:
  worker:
    tools: [echo, sleep, count]
    permission_mode: bypassPermissions
    permissions: {allowed_subtask_agents: [helper]}
  helper:
    tools: [echo, count]
    permission_mode: bypassPermissions
`

// runCounter is a tool that counts how often each token it is given ran,
// so a test can tell a call that ran twice.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) tool() tools.Tool {
	return tools.Define(tools.Def{Name: "count", Risk: tools.RiskLow, Run: func(ctx context.Context, call tools.Call) (tools.Result, error) {
		var a struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(call.Args, &a); err != nil {
			return tools.Failf("count: %v", err), nil
		}
		c.mu.Lock()
		c.runs[a.Token]++
		c.mu.Unlock()
		// Give a kill a window between the run and its record.
		time.Sleep(time.Millisecond)
		return tools.Succeed(map[string]string{"counted": a.Token})
	}})
}

func withCounter(c *runCounter) func(*engine.Config) {
	return func(cfg *engine.Config) {
		builtins, _ := tools.Builtins(tools.BuiltinConfig{})
		reg, err := tools.NewRegistry(append(builtins, c.tool())...)
		if err != nil {
			panic(err)
		}
		cfg.Tools = reg
	}
}

// randomScript returns a script of 1 to 6 turns ending in a finish: tool
// calls (count with a token unique to the call, echo, short sleeps), state
// patches, short timers and spawns of one to three helpers with scripts of
// their own. Every count token starts with id.
func randomScript(r *rand.Rand, id string, depth int) policy.Script {
	var s policy.Script
	turns := 1 + r.IntN(5)
	for turn := 1; turn <= turns; turn++ {
		switch k := r.IntN(10); {
		case k < 5:
			n := 1 + r.IntN(3)
			var calls []noeta.ToolCall
			for i := range n {
				tok := fmt.Sprintf("%s/t%d/c%d", id, turn, i)
				switch r.IntN(4) {
				case 0:
					calls = append(calls, noeta.ToolCall{Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, r.IntN(3)))})
				case 1:
					calls = append(calls, noeta.ToolCall{Tool: "sleep", Args: json.RawMessage(`{"seconds":0.002}`)})
				default:
					calls = append(calls, noeta.ToolCall{Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"token":%q}`, tok))})
				}
			}
			s = append(s, noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: calls, CostUSD: float64(r.IntN(4)) / 100})
		case k < 6:
			s = append(s, noeta.Decision{Kind: noeta.DecisionStatePatch, Patch: json.RawMessage(fmt.Sprintf(`{"k%d":{"v":%d,"big":12345678901234567890}}`, r.IntN(3), r.IntN(100)))})
		case k < 7:
			s = append(s, noeta.Decision{Kind: noeta.DecisionWaitTimer, WaitSeconds: 0.01})
		case depth == 0:
			n := 1 + r.IntN(3)
			var spawn []noeta.SpawnSpec
			for i := range n {
				child := randomScript(r, fmt.Sprintf("%s/t%d/k%d", id, turn, i), depth+1)
				b, _ := json.Marshal(child)
				spawn = append(spawn, noeta.SpawnSpec{Agent: "helper", Goal: "help", Script: b})
			}
			s = append(s, noeta.Decision{Kind: noeta.DecisionSpawn, Spawn: spawn})
		default:
			tok := fmt.Sprintf("%s/t%d/c0", id, turn)
			s = append(s, noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{Tool: "count", Args: json.RawMessage(fmt.Sprintf(`{"token":%q}`, tok))}}})
		}
	}
	if depth > 0 {
		// Helpers may only use their own tools.
		for i, d := range s {
			for j, c := range d.ToolCalls {
				if c.Tool == "sleep" {
					s[i].ToolCalls[j] = noeta.ToolCall{Tool: "echo", Args: json.RawMessage(`{}`)}
				}
			}
		}
	}
	return append(s, noeta.Decision{Kind: noeta.DecisionFinish, Answer: json.RawMessage(fmt.Sprintf("%q", id))})
}

func submitScript(t testing.TB, h *harness, agent string, s policy.Script) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: agent, Goal: "random", Script: b})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// freshIDs makes every policy of resolve decide like a model: the calls of a
// turn get new ids every time it is asked, so a turn asked again after its
// decision was recorded would propose calls the log does not know.
func freshIDs(resolve engine.PolicyResolver) engine.PolicyResolver {
	var serial atomic.Int64
	return func(ctx context.Context, st *engine.State) (engine.Policy, error) {
		p, err := resolve(ctx, st)
		if err != nil {
			return nil, err
		}
		return policyFunc(func(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
			d, err := p.Decide(ctx, in)
			for i := range d.ToolCalls {
				d.ToolCalls[i].CallID = fmt.Sprintf("c%d-%d-%d", in.Turn, i, serial.Add(1))
			}
			return d, err
		}), nil
	}
}

// TestCrashRecovery runs 200 scripted tasks on 3 workers while workers are
// killed at random points (their context cancelled mid-step: they stop
// where they are, release nothing, and their leases run out) and new ones
// started. The policies decide like models (fresh call ids on every ask):
// a turn resumed after its decision was recorded is carried out from the
// record. Every task must end completed, with a dense log, exactly one
// TaskWoken for every suspend, no tool call run twice, and a fold that does
// not depend on how often it was interrupted.
func TestCrashRecovery(t *testing.T) {
	const tasks = 200
	counter := &runCounter{runs: map[string]int{}}
	b := memBackend(t, 300*time.Millisecond)
	h := newHarness(t, b, crashConfig, withCounter(counter), func(c *engine.Config) {
		c.HeartbeatEvery = 50 * time.Millisecond
		c.AbandonCap = 1000 // parking is tested on its own
		c.Policies = freshIDs(c.Policies)
	})
	r := rand.New(rand.NewPCG(1, 2))
	var roots []string
	for i := range tasks {
		roots = append(roots, submitScript(t, h, "worker", randomScript(r, fmt.Sprintf("r%d", i), 0)))
	}

	// Three worker slots; the chaos loop kills the worker of a random slot
	// every few milliseconds and starts a new one in its place.
	ctx, stopAll := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	kills := 0
	cancels := make([]context.CancelFunc, 3)
	startSlot := func(slot, gen int) {
		wctx, cancel := context.WithCancel(ctx)
		cancels[slot] = cancel
		w := h.eng.NewWorker(fmt.Sprintf("slot%d-gen%d", slot, gen))
		wg.Go(func() { _ = w.Run(wctx) })
	}
	mu.Lock()
	for s := range 3 {
		startSlot(s, 0)
	}
	mu.Unlock()
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		cr := rand.New(rand.NewPCG(3, 4))
		for gen := 1; ; gen++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(5+cr.IntN(30)) * time.Millisecond):
			}
			slot := cr.IntN(3)
			mu.Lock()
			cancels[slot]()
			kills++
			startSlot(slot, gen)
			mu.Unlock()
		}
	}()
	defer func() {
		stopAll()
		<-chaosDone
		wg.Wait()
	}()

	all := map[string]bool{}
	for _, id := range roots {
		h.waitStatus(id, noeta.StatusTerminal)
		all[id] = true
	}
	// Children of every root, found through the logs.
	queue := append([]string(nil), roots...)
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, env := range h.log(id) {
			if env.Type == noeta.TypeSubtaskSpawned {
				var p noeta.SubtaskSpawned
				_ = json.Unmarshal(env.Payload, &p)
				if !all[p.SubtaskID] {
					all[p.SubtaskID] = true
					queue = append(queue, p.SubtaskID)
					h.waitStatus(p.SubtaskID, noeta.StatusTerminal)
				}
			}
		}
	}
	stopAll()
	<-chaosDone
	wg.Wait()

	seals := 0
	for id := range all {
		envs := h.log(id)
		types(t, envs) // dense
		st, err := engine.Fold(envs)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if st.Status != noeta.StatusTerminal || st.Answer == nil {
			t.Errorf("task %s ended %s %q, want completed\n%s", id, st.Status, st.Reason, h.dump(id))
		}
		checkWokenOncePerSuspend(t, h, id, envs)
		checkFoldDeterministic(t, h, id, envs)
		for _, env := range envs {
			if env.Type == noeta.TypeStepAttemptAbandoned {
				seals++
			}
		}
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for tok, n := range counter.runs {
		if n > 1 {
			t.Errorf("call %s ran %d times", tok, n)
		}
	}
	mu.Lock()
	t.Logf("%d tasks (%d with children), %d workers killed, %d turns resumed after a kill, %d counted calls", tasks, len(all), kills, seals, len(counter.runs))
	mu.Unlock()
	if kills < 20 {
		t.Errorf("only %d kills: the test did not exercise recovery", kills)
	}
}

// checkWokenOncePerSuspend: after every TaskSuspended comes exactly one
// TaskWoken, and it carries a wake that matches the suspend's condition,
// before the next suspend or the end.
func checkWokenOncePerSuspend(t *testing.T, h *harness, id string, envs []eventlog.Envelope) {
	t.Helper()
	var cond *noeta.Wake
	woken := 0
	for _, env := range envs {
		switch env.Type {
		case noeta.TypeTaskSuspended:
			if cond != nil && woken != 1 {
				t.Errorf("task %s: %d TaskWoken after the suspend before seq %d\n%s", id, woken, env.Seq, h.dump(id))
			}
			var p noeta.TaskSuspended
			_ = json.Unmarshal(env.Payload, &p)
			cond, woken = &p.WakeOn, 0
		case noeta.TypeTaskWoken:
			var p noeta.TaskWoken
			_ = json.Unmarshal(env.Payload, &p)
			if cond == nil || !noeta.Matches(cond, &p.WakeEvent) {
				t.Errorf("task %s seq %d: TaskWoken %+v does not match the suspend %+v", id, env.Seq, p.WakeEvent, cond)
			}
			woken++
		}
	}
	if cond != nil && woken != 1 {
		t.Errorf("task %s: %d TaskWoken after its last suspend\n%s", id, woken, h.dump(id))
	}
}

// checkFoldDeterministic: two folds of the log give the same bytes, and so
// does a fold that starts from the latest snapshot.
func checkFoldDeterministic(t *testing.T, h *harness, id string, envs []eventlog.Envelope) {
	t.Helper()
	a, err := engine.Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := engine.Fold(h.log(id))
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := a.Canonical()
	bb, _ := b.Canonical()
	if !bytes.Equal(ab, bb) {
		t.Errorf("task %s: two folds differ:\n%s\n%s", id, ab, bb)
	}
	c, note, err := engine.FoldTask(context.Background(), h.b.log, h.b.content, id)
	if err != nil || note != "" {
		t.Fatalf("task %s: FoldTask: %v %s", id, err, note)
	}
	cb, _ := c.Canonical()
	if !bytes.Equal(ab, cb) {
		t.Errorf("task %s: fold from the snapshot differs from the fold from genesis:\n%s\n%s", id, cb, ab)
	}
}

// TestFoldDeterminismProperty runs random scripts to their end and checks,
// for every task, that the fold is a function of the log alone (two folds,
// and a fold from the latest snapshot, give the same bytes) and that its
// counters are what the script implies: a turn per step, every call of the
// script started, the script's costs summed.
func TestFoldDeterminismProperty(t *testing.T) {
	counter := &runCounter{runs: map[string]int{}}
	b := memBackend(t, 2*time.Second)
	h := newHarness(t, b, crashConfig, withCounter(counter))
	h.start(4)
	type tc struct {
		id     string
		script policy.Script
	}
	var roots []tc
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 99))
		s := randomScript(r, fmt.Sprintf("p%d", seed), 0)
		roots = append(roots, tc{submitScript(t, h, "worker", s), s})
	}
	for _, c := range roots {
		st := h.waitStatus(c.id, noeta.StatusTerminal)
		envs := h.log(c.id)
		checkFoldDeterministic(t, h, c.id, envs)
		calls, spawned := 0, 0
		cost := 0.0
		for _, d := range c.script {
			calls += len(d.ToolCalls)
			spawned += len(d.Spawn)
			cost += d.CostUSD
		}
		g := st.Governance
		if g.Iterations != len(c.script) || g.ToolCalls != calls || g.SpawnedSubtasks != spawned || len(g.SubtaskResults) != spawned {
			t.Errorf("task %s: iterations %d tool calls %d spawned %d results %d; the script has %d steps, %d calls, %d children",
				c.id, g.Iterations, g.ToolCalls, g.SpawnedSubtasks, len(g.SubtaskResults), len(c.script), calls, spawned)
		}
		if diff := g.CostUSD - cost; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("task %s: cost %v, the script's %v", c.id, g.CostUSD, cost)
		}
		if string(st.Answer) == "" {
			t.Errorf("task %s: no answer: %s", c.id, st.Reason)
		}
	}
}
