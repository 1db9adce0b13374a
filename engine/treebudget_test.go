package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// treeBudgetConfig: boss has budgets, spender none of its own, so whatever
// bounds a spender is its share of the boss's.
const treeBudgetConfig = `
agents:
  boss:
    tools: [echo]
    budget: {max_cost_usd: 3, max_tool_calls: 3}
    permissions:
      allowed_subtask_agents: [spender]
  spender:
    tools: [echo]
    permissions:
      allowed_subtask_agents: [spender]
`

// spendingScript is a scripted model that bills cost for each of turns
// turns, each making one echo call, and then finishes.
func spendingScript(turns int, cost float64) string {
	steps := make([]string, 0, turns+1)
	for i := range turns {
		steps = append(steps, fmt.Sprintf(`{"tool_calls":[{"tool":"echo","args":{"text":"t%d"}}],"cost_usd":%v}`, i, cost))
	}
	steps = append(steps, `{"finish":{"answer":"spent"}}`)
	return "[" + strings.Join(steps, ",") + "]"
}

// eachTreeBackend runs f on memlog and on embedded JetStream with the tree
// budget config.
func eachTreeBackend(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, treeBudgetConfig)
			h.start(2)
			f(t, h)
		})
	}
}

func (h *harness) submitScript(agent, script string) string {
	h.t.Helper()
	id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: agent, Goal: "g", Script: json.RawMessage(script)})
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	return id
}

// tree returns every task of the tree under root, root first, each ended.
func (h *harness) tree(root string) []*engine.State {
	h.t.Helper()
	var out []*engine.State
	queue := []string{root}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		out = append(out, h.waitStatus(id, noeta.StatusTerminal))
		for _, env := range h.log(id) {
			if env.Type == noeta.TypeSubtaskSpawned {
				var p noeta.SubtaskSpawned
				if err := json.Unmarshal(env.Payload, &p); err != nil {
					h.t.Fatal(err)
				}
				queue = append(queue, p.SubtaskID)
			}
		}
	}
	return out
}

// treeSpent sums what the tasks of a tree spent and ran, each its own.
func treeSpent(sts []*engine.State) (cost float64, calls int) {
	for _, st := range sts {
		cost += st.Governance.CostUSD
		calls += st.Governance.ToolCalls
	}
	return cost, calls
}

// TestTreeCostBudget is the root that spends through a subtask. A root
// under max_cost_usd: 3 spawned a child of an agent with no budget of its
// own, and the child spent $2 a turn for 60 turns: $120 under a $3 cap,
// and the root then finished as if within it. Budgets applied per task
// only. Now the child gets what the root had left ($3) as its allotment,
// is stopped one model call past it ($4), and the root, charged the child's
// spend, ends failed by the budget with the tree's numbers.
func TestTreeCostBudget(t *testing.T) {
	eachTreeBackend(t, func(t *testing.T, h *harness) {
		root := h.submitScript("boss", fmt.Sprintf(`[{"spawn":[{"agent":"spender","goal":"spend","script":%s}]},{"finish":{"answer":"done"}}]`, spendingScript(60, 2)))
		sts := h.tree(root)
		cost, _ := treeSpent(sts)
		// The bound: the cap plus one model call for the one task running.
		if cost > 3+2 {
			t.Fatalf("the tree spent $%v under max_cost_usd 3 (one call is $2)\nroot:\n%s", cost, h.dump(root))
		}
		st := sts[0]
		if st.Guard != "budget" || !strings.Contains(st.Reason, "max_cost_usd=3 reached by the task tree: $4 spent") {
			t.Fatalf("root ended %s guard %q reason %q; want failed by the budget naming the tree's $4\n%s", st.Status, st.Guard, st.Reason, h.dump(root))
		}
		child := sts[1]
		if child.Guard != "budget" || !strings.Contains(child.Reason, "allotment of 3") {
			t.Errorf("child ended guard %q reason %q; want its allotment of 3", child.Guard, child.Reason)
		}
	})
}

// TestTreeToolCallBudget: under max_tool_calls: 3, a root that ran one call
// spawned a child that ran five: six in the tree. Now the child's allotment
// is the two calls left; its third is denied by the budget naming the
// allotment, and the root's next call is denied naming the tree's three.
func TestTreeToolCallBudget(t *testing.T) {
	eachTreeBackend(t, func(t *testing.T, h *harness) {
		five := `[{"tool_calls":[{"tool":"echo","args":{"text":"a"}},{"tool":"echo","args":{"text":"b"}},{"tool":"echo","args":{"text":"c"}},{"tool":"echo","args":{"text":"d"}},{"tool":"echo","args":{"text":"e"}}]},{"finish":{"answer":"ok"}}]`
		root := h.submitScript("boss", fmt.Sprintf(`[{"tool_calls":[{"tool":"echo","args":{"text":"mine"}}]},{"spawn":[{"agent":"spender","goal":"call","script":%s}]},{"tool_calls":[{"tool":"echo","args":{"text":"again"}}]},{"finish":{"answer":"done"}}]`, five))
		sts := h.tree(root)
		if _, calls := treeSpent(sts); calls != 3 {
			t.Fatalf("the tree ran %d tool calls under max_tool_calls 3\nroot:\n%s", calls, h.dump(root))
		}
		child := sts[1]
		if n := len(child.Governance.Denials); n != 3 || child.Governance.Denials[0].Guard != "budget" ||
			!strings.Contains(child.Governance.Denials[0].Reason, "max_tool_calls allotment of 2") {
			t.Fatalf("child denials %+v; want three by the budget naming the allotment of 2", child.Governance.Denials)
		}
		d := sts[0].Governance.Denials
		if len(d) != 1 || d[0].Guard != "budget" || !strings.Contains(d[0].Reason, "max_tool_calls=3 reached by the task tree: 3 tool calls run or reserved (1 by this task, 2 by ended subtasks") {
			t.Fatalf("root denials %+v; want the budget's naming the tree's three calls", d)
		}
		if sts[0].Status != noeta.StatusTerminal || sts[0].Answer == nil {
			t.Errorf("root should finish: a tool-call cap leaves finishing allowed; %s %q", sts[0].Reason, sts[0].Answer)
		}
	})
}

// TestTreeBudgetSiblingsOvershootBounded: three siblings spawned at once
// under max_cost_usd: 3, each billing $0.75 a turn for 20 turns, spent $45.
// Now each is given a third of what the root had left and is stopped one
// call past it: the tree overshoots the cap by at most one model call per
// running task, whatever order the siblings run in.
func TestTreeBudgetSiblingsOvershootBounded(t *testing.T) {
	eachTreeBackend(t, func(t *testing.T, h *harness) {
		s := spendingScript(20, 0.75)
		root := h.submitScript("boss", fmt.Sprintf(`[{"spawn":[{"agent":"spender","goal":"a","script":%s},{"agent":"spender","goal":"b","script":%s},{"agent":"spender","goal":"c","script":%s}]},{"finish":{"answer":"done"}}]`, s, s, s))
		sts := h.tree(root)
		if len(sts) != 4 {
			t.Fatalf("tree of %d tasks", len(sts))
		}
		cost, _ := treeSpent(sts)
		if cost > 3+3*0.75 {
			t.Fatalf("three siblings spent $%v under max_cost_usd 3: more than one $0.75 call each past the cap", cost)
		}
		for _, c := range sts[1:] {
			tc := payload[map[string]any](t, h.log(c.Task), noeta.TypeTaskCreated)
			if b, _ := tc["budget"].(map[string]any); b == nil || b["cost_usd"] != 1.0 {
				t.Errorf("child %s created with budget %v, want cost_usd 1 (a third of 3)", c.Task, tc["budget"])
			}
		}
		if st := sts[0]; st.Guard != "budget" {
			t.Errorf("root ended guard %q reason %q, want the budget", st.Guard, st.Reason)
		}
	})
}

// TestTreeBudgetDeepTree: a grandchild's spend counts against the root. A
// chain root -> child -> grandchild, where only the grandchild spends: the
// child passes on what it was given, and the root is charged the
// grandchild's spend through the child's result.
func TestTreeBudgetDeepTree(t *testing.T) {
	eachTreeBackend(t, func(t *testing.T, h *harness) {
		grand := spendingScript(30, 1)
		child := fmt.Sprintf(`[{"spawn":[{"agent":"spender","goal":"deeper","script":%s}]},{"finish":{"answer":"passed on"}}]`, grand)
		root := h.submitScript("boss", fmt.Sprintf(`[{"spawn":[{"agent":"spender","goal":"pass","script":%s}]},{"finish":{"answer":"done"}}]`, child))
		sts := h.tree(root)
		if len(sts) != 3 {
			t.Fatalf("tree of %d tasks", len(sts))
		}
		cost, _ := treeSpent(sts)
		if cost > 3+1 {
			t.Fatalf("the tree spent $%v under max_cost_usd 3\n%s", cost, h.dump(root))
		}
		if sts[0].Guard != "budget" || !strings.Contains(sts[0].Reason, "by the task tree") {
			t.Errorf("root ended guard %q reason %q", sts[0].Guard, sts[0].Reason)
		}
	})
}

// TestTreeBudgetReplayChargesOnce: the charge of a subtask is a fold of the
// parent's log, so folding it again — from genesis, from a snapshot, or
// with the result recorded twice (a segment redone after a crash) — counts
// the child's spend once.
func TestTreeBudgetReplayChargesOnce(t *testing.T) {
	eachTreeBackend(t, func(t *testing.T, h *harness) {
		root := h.submitScript("boss", fmt.Sprintf(`[{"spawn":[{"agent":"spender","goal":"spend","script":%s}]},{"finish":{"answer":"done"}}]`, spendingScript(1, 0.5)))
		sts := h.tree(root)
		envs := h.log(root)
		fromGenesis, err := engine.Fold(envs)
		if err != nil {
			t.Fatal(err)
		}
		want := sts[1].Governance.CostUSD
		if got := fromGenesis.Governance.SubtaskCostUSD; got != want {
			t.Fatalf("fold from genesis charges $%v for the child, which spent $%v", got, want)
		}
		if got := sts[0].Governance.SubtaskCostUSD; got != want {
			t.Fatalf("fold from the snapshot charges $%v for the child, which spent $%v", got, want)
		}
		var dup eventlog.Envelope
		for _, e := range envs {
			if e.Type == noeta.TypeSubtaskResultRecorded {
				dup = e
			}
		}
		dup.Seq = envs[len(envs)-1].Seq + 1
		again, err := engine.Fold(append(envs, dup))
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Governance.SubtaskCostUSD; got != want {
			t.Fatalf("a result recorded twice charges $%v, want $%v once", got, want)
		}
		if sts[0].Status != noeta.StatusTerminal || sts[0].Answer == nil {
			t.Errorf("a tree within its budget finishes; root %s %q", sts[0].Reason, sts[0].Answer)
		}
	})
}

// TestTreeBudgetResumedSpawnCarvesTheSameShares: a spawn of three cut short
// after its first child was recorded is resumed by another segment. The
// recorded child's reservation is part of the turn's own spawn, so the rest
// are carved from the remaining as it was before the spawn: every child
// gets a third, as an uninterrupted spawn gives, not a third of what the
// first child's reservation left.
func TestTreeBudgetResumedSpawnCarvesTheSameShares(t *testing.T) {
	h := newHarness(t, memBackend(t, 2*time.Second), treeBudgetConfig)
	root := "01JROOTROOTROOTROOTROOTROOT"
	kids := engine.ChildIDs(root, 1, 3)
	one, calls := 1.0, 1
	var envs []eventlog.Envelope
	for _, p := range []noeta.Payload{
		noeta.TaskCreated{TaskID: root, Agent: "boss", Goal: "g", RootTaskID: root},
		noeta.TurnStarted{Turn: 1},
		noeta.SubtaskSpawned{SubtaskID: kids[0], Agent: "spender", Goal: "a", Budget: &noeta.BudgetAllotment{CostUSD: &one, ToolCalls: &calls}},
	} {
		env, err := eventlog.NewEnvelope(root, eventlog.OriginEngine, "engine-test", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq = uint64(len(envs) + 1)
		envs = append(envs, env)
	}
	for _, tc := range []struct {
		name    string
		records int
	}{{"fresh", 2}, {"resumed after one child", 3}} {
		st, err := engine.Fold(envs[:tc.records])
		if err != nil {
			t.Fatal(err)
		}
		got, err := engine.Allotments(h.eng, st, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range got {
			if a == nil || a.CostUSD == nil || *a.CostUSD != 1 || a.ToolCalls == nil || *a.ToolCalls != 1 {
				j, _ := json.Marshal(a)
				t.Errorf("%s: child %d allotted %s, want $1 and 1 call (a third of $3 and 3 calls)", tc.name, i, j)
			}
		}
	}
}
