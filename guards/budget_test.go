package guards

import (
	"math"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

func TestBudget(t *testing.T) {
	type state struct {
		iter, tools, spawned, depth int
		cost                        float64
	}
	tests := []struct {
		name    string
		limits  BudgetLimits
		s       state
		a       noeta.ProposedAction
		verdict noeta.Verdict
		reason  string
	}{
		// 1. iterations: strict >, all three action points.
		{"iterations at cap allow (current step counted)", BudgetLimits{MaxIterations: new(1)}, state{iter: 1}, toolCall("echo", ""), noeta.VerdictAllow, ""},
		{"iterations over cap deny a tool call", BudgetLimits{MaxIterations: new(1)}, state{iter: 2}, toolCall("echo", ""), noeta.VerdictDeny, "max_iterations=1 exceeded"},
		{"iterations over cap deny a spawn", BudgetLimits{MaxIterations: new(1)}, state{iter: 2}, spawn("a"), noeta.VerdictDeny, "max_iterations=1 exceeded"},
		{"iterations over cap deny finish", BudgetLimits{MaxIterations: new(1)}, state{iter: 2}, finish(), noeta.VerdictDeny, "max_iterations=1 exceeded"},
		{"max_iterations=0 denies the first step", BudgetLimits{MaxIterations: new(0)}, state{iter: 1}, finish(), noeta.VerdictDeny, "max_iterations=0 exceeded"},
		// 2. cost: >=, all three.
		{"cost below cap allows", BudgetLimits{MaxCostUSD: new(1.0)}, state{cost: 0.999}, toolCall("echo", ""), noeta.VerdictAllow, ""},
		{"cost at cap denies a tool call", BudgetLimits{MaxCostUSD: new(1.0)}, state{cost: 1.0}, toolCall("echo", ""), noeta.VerdictDeny, "max_cost_usd=1 reached"},
		{"cost at cap denies a spawn", BudgetLimits{MaxCostUSD: new(0.5)}, state{cost: 0.5}, spawn("a"), noeta.VerdictDeny, "max_cost_usd=0.5 reached"},
		{"cost over cap denies finish", BudgetLimits{MaxCostUSD: new(0.5)}, state{cost: 3}, finish(), noeta.VerdictDeny, "max_cost_usd=0.5 reached"},
		{"cost cap 0 denies with nothing spent", BudgetLimits{MaxCostUSD: new(0.0)}, state{}, finish(), noeta.VerdictDeny, "max_cost_usd=0 reached"},
		{"a NaN cost is refused", BudgetLimits{MaxCostUSD: new(1.0)}, state{cost: math.NaN()}, finish(), noeta.VerdictDeny, "max_cost_usd=1 reached"},
		// 3a. tool calls: >=, tool calls only.
		{"tool calls below cap allow", BudgetLimits{MaxToolCalls: new(2)}, state{tools: 1}, toolCall("echo", ""), noeta.VerdictAllow, ""},
		{"tool calls at cap deny the next call", BudgetLimits{MaxToolCalls: new(2)}, state{tools: 2}, toolCall("echo", ""), noeta.VerdictDeny, "max_tool_calls=2 reached"},
		{"tool calls at cap do not stop a spawn", BudgetLimits{MaxToolCalls: new(2)}, state{tools: 2}, spawn("a"), noeta.VerdictAllow, ""},
		{"tool calls at cap do not stop finish", BudgetLimits{MaxToolCalls: new(2)}, state{tools: 5}, finish(), noeta.VerdictAllow, ""},
		// 3b. spawned subtasks: >=, tool calls and spawns.
		{"spawned below cap allows a spawn", BudgetLimits{MaxSpawnedSubtasks: new(2)}, state{spawned: 1}, spawn("a"), noeta.VerdictAllow, ""},
		{"spawned at cap denies a spawn", BudgetLimits{MaxSpawnedSubtasks: new(2)}, state{spawned: 2}, spawn("a"), noeta.VerdictDeny, "max_spawned_subtasks=2 reached"},
		{"spawned at cap denies a tool call too", BudgetLimits{MaxSpawnedSubtasks: new(2)}, state{spawned: 2}, toolCall("echo", ""), noeta.VerdictDeny, "max_spawned_subtasks=2 reached"},
		{"max_spawned_subtasks=0 denies the first spawn", BudgetLimits{MaxSpawnedSubtasks: new(0)}, state{}, spawn("a"), noeta.VerdictDeny, "max_spawned_subtasks=0 reached"},
		{"spawned at cap does not stop finish", BudgetLimits{MaxSpawnedSubtasks: new(0)}, state{spawned: 3}, finish(), noeta.VerdictAllow, ""},
		// 4. depth: >=, spawns only.
		{"depth below cap allows a spawn", BudgetLimits{MaxSubtaskDepth: new(3)}, state{depth: 2}, spawn("a"), noeta.VerdictAllow, ""},
		{"depth at cap denies a spawn", BudgetLimits{MaxSubtaskDepth: new(3)}, state{depth: 3}, spawn("a"), noeta.VerdictDeny, "max_subtask_depth=3 reached"},
		{"depth at cap does not stop a tool call", BudgetLimits{MaxSubtaskDepth: new(3)}, state{depth: 3}, toolCall("echo", ""), noeta.VerdictAllow, ""},
		{"depth at cap does not stop finish", BudgetLimits{MaxSubtaskDepth: new(0)}, state{depth: 1}, finish(), noeta.VerdictAllow, ""},
		// Order: the first cap to trip decides.
		{"iterations win over cost and tool calls", BudgetLimits{MaxIterations: new(1), MaxCostUSD: new(1.0), MaxToolCalls: new(1)}, state{iter: 2, cost: 5, tools: 5}, toolCall("echo", ""), noeta.VerdictDeny, "max_iterations=1 exceeded"},
		{"cost wins over tool calls", BudgetLimits{MaxCostUSD: new(1.0), MaxToolCalls: new(1)}, state{cost: 5, tools: 5}, toolCall("echo", ""), noeta.VerdictDeny, "max_cost_usd=1 reached"},
		{"tool calls win over spawned on a tool call", BudgetLimits{MaxToolCalls: new(1), MaxSpawnedSubtasks: new(1)}, state{tools: 1, spawned: 1}, toolCall("echo", ""), noeta.VerdictDeny, "max_tool_calls=1 reached"},
		{"spawned wins over depth on a spawn", BudgetLimits{MaxSpawnedSubtasks: new(1), MaxSubtaskDepth: new(1)}, state{spawned: 1, depth: 1}, spawn("a"), noeta.VerdictDeny, "max_spawned_subtasks=1 reached"},
		// No caps.
		{"no caps allow anything", BudgetLimits{}, state{iter: 1e6, tools: 1e6, spawned: 1e6, depth: 1e6, cost: 1e9}, spawn("a"), noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			c := gctx(noeta.GovernanceState{Iterations: tt.s.iter, ToolCalls: tt.s.tools, SpawnedSubtasks: tt.s.spawned, CostUSD: tt.s.cost}, tt.s.depth)
			wantVerdict(t, checkGuard(t, b, tt.a, c), tt.verdict, tt.reason)
		})
	}
}

func TestBudgetLimitsAreCopied(t *testing.T) {
	n := 1
	b, err := NewBudget(BudgetLimits{MaxToolCalls: &n})
	if err != nil {
		t.Fatal(err)
	}
	n = 100
	wantVerdict(t, checkGuard(t, b, toolCall("echo", ""), gctx(noeta.GovernanceState{ToolCalls: 1}, 0)), noeta.VerdictDeny, "max_tool_calls=1 reached")
}

func TestBudgetValidate(t *testing.T) {
	tests := []struct {
		name   string
		limits BudgetLimits
		want   string
	}{
		{"negative iterations", BudgetLimits{MaxIterations: new(-1)}, "max_iterations: must be >= 0"},
		{"negative tool calls", BudgetLimits{MaxToolCalls: new(-1)}, "max_tool_calls: must be >= 0"},
		{"negative cost", BudgetLimits{MaxCostUSD: new(-0.01)}, "max_cost_usd: must be >= 0"},
		{"NaN cost", BudgetLimits{MaxCostUSD: new(math.NaN())}, "max_cost_usd: must be >= 0"},
		{"negative spawned", BudgetLimits{MaxSpawnedSubtasks: new(-2)}, "max_spawned_subtasks: must be >= 0"},
		{"negative depth", BudgetLimits{MaxSubtaskDepth: new(-3)}, "max_subtask_depth: must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewBudget(tt.limits)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := (BudgetLimits{MaxCostUSD: new(math.Inf(1)), MaxIterations: new(0)}).Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
}

func TestBuiltinsRefuseUnknownActions(t *testing.T) {
	b, _ := NewBudget(BudgetLimits{})
	p, _ := NewPermission(PermissionPolicy{Mode: ModeBypassPermissions}, nil)
	r, _ := NewRepetition(RepetitionPolicy{Threshold: 2})
	rules, _ := NewRules([]Rule{{MatchTool: "*", Action: noeta.VerdictAllow}})
	for _, g := range []Guard{b, p, r, rules} {
		if res, err := g.Check(t.Context(), nil, gctx(noeta.GovernanceState{}, 0)); err == nil || res.IsAllow() {
			t.Errorf("%s: got %v, %v for a nil action, want an error", g.Name(), res, err)
		}
	}
}

// TestBudgetExhausted: exhausted exactly when the caps that deny every
// action point trip (iterations, cost); the tool, spawn and depth caps
// leave a finish possible, so they do not exhaust the budget.
func TestBudgetExhausted(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits BudgetLimits
		gov    noeta.GovernanceState
		reason string
	}{
		{"iterations at cap", BudgetLimits{MaxIterations: new(2)}, noeta.GovernanceState{Iterations: 2}, ""},
		{"iterations over cap", BudgetLimits{MaxIterations: new(2)}, noeta.GovernanceState{Iterations: 3}, "max_iterations=2 exceeded"},
		{"cost below cap", BudgetLimits{MaxCostUSD: new(0.5)}, noeta.GovernanceState{CostUSD: 0.49}, ""},
		{"cost at cap", BudgetLimits{MaxCostUSD: new(0.5)}, noeta.GovernanceState{CostUSD: 0.5}, "max_cost_usd=0.5 reached"},
		{"tool calls at cap", BudgetLimits{MaxToolCalls: new(1)}, noeta.GovernanceState{ToolCalls: 9}, ""},
		{"spawned at cap", BudgetLimits{MaxSpawnedSubtasks: new(0)}, noeta.GovernanceState{SpawnedSubtasks: 3}, ""},
	} {
		b, err := NewBudget(tt.limits)
		if err != nil {
			t.Fatal(err)
		}
		reason, ok := b.Exhausted(gctx(tt.gov, 0))
		if ok != (tt.reason != "") || reason != tt.reason {
			t.Errorf("%s: exhausted %v %q, want %q", tt.name, ok, reason, tt.reason)
		}
		s, err := NewStack([]Guard{b})
		if err != nil {
			t.Fatal(err)
		}
		if guard, r, ok := s.Exhausted(gctx(tt.gov, 0)); ok != (tt.reason != "") || r != tt.reason || (ok && guard != NameBudget) {
			t.Errorf("%s: stack: %q %q %v", tt.name, guard, r, ok)
		}
	}
}

// TestBudgetOverTheTree: the cost and tool-call caps compare the task's tree
// — its own spend, its ended subtasks' and its running subtasks'
// allotments — and the allotment its ancestors left it, even with no cap of
// its own. Before, only the task's own counters were compared, so a task
// whose subtasks had spent the cap many times over was allowed, and a
// subtask of an agent with no budget had no bound at all.
func TestBudgetOverTheTree(t *testing.T) {
	type want struct {
		verdict noeta.Verdict
		reason  string // a prefix of the reason
	}
	tests := []struct {
		name   string
		limits BudgetLimits
		g      noeta.GovernanceState
		a      noeta.ProposedAction
		want   want
	}{
		{"ended subtasks' cost counts", BudgetLimits{MaxCostUSD: new(3.0)},
			noeta.GovernanceState{CostUSD: 0.5, SubtaskCostUSD: 2.5}, finish(),
			want{noeta.VerdictDeny, "max_cost_usd=3 reached by the task tree: $3 spent or reserved ($0.5 by this task, $2.5 by ended subtasks, $0 reserved for running ones)"}},
		{"a running subtask's allotment counts", BudgetLimits{MaxCostUSD: new(3.0)},
			noeta.GovernanceState{CostUSD: 1, Reserved: map[string]noeta.BudgetAllotment{"c": {CostUSD: new(2.0)}}}, spawn("a"),
			want{noeta.VerdictDeny, "max_cost_usd=3 reached by the task tree: $3 spent or reserved ($1 by this task, $0 by ended subtasks, $2 reserved for running ones)"}},
		{"a tree under the cap is allowed", BudgetLimits{MaxCostUSD: new(3.0)},
			noeta.GovernanceState{CostUSD: 1, SubtaskCostUSD: 1.5}, toolCall("echo", ""), want{noeta.VerdictAllow, ""}},
		{"the allotment binds a task with no cap of its own", BudgetLimits{},
			noeta.GovernanceState{CostUSD: 1, Allotment: &noeta.BudgetAllotment{CostUSD: new(1.0)}}, toolCall("echo", ""),
			want{noeta.VerdictDeny, "the max_cost_usd allotment of 1 its ancestors left this subtask reached by its tree: $1 spent"}},
		{"the allotment binds below the task's own cap", BudgetLimits{MaxCostUSD: new(10.0)},
			noeta.GovernanceState{CostUSD: 2, Allotment: &noeta.BudgetAllotment{CostUSD: new(1.5)}}, finish(),
			want{noeta.VerdictDeny, "the max_cost_usd allotment of 1.5"}},
		{"an allotment never loosens the task's own cap", BudgetLimits{MaxCostUSD: new(1.0)},
			noeta.GovernanceState{CostUSD: 1, Allotment: &noeta.BudgetAllotment{CostUSD: new(100.0)}}, finish(),
			want{noeta.VerdictDeny, "max_cost_usd=1 reached"}},
		{"ended subtasks' tool calls count", BudgetLimits{MaxToolCalls: new(3)},
			noeta.GovernanceState{ToolCalls: 1, SubtaskToolCalls: 2}, toolCall("echo", ""),
			want{noeta.VerdictDeny, "max_tool_calls=3 reached by the task tree: 3 tool calls run or reserved (1 by this task, 2 by ended subtasks, 0 reserved for running ones)"}},
		{"the tool-call allotment binds", BudgetLimits{},
			noeta.GovernanceState{ToolCalls: 2, Allotment: &noeta.BudgetAllotment{ToolCalls: new(2)}}, toolCall("echo", ""),
			want{noeta.VerdictDeny, "the max_tool_calls allotment of 2"}},
		{"a tool-call allotment of 0 still lets the task finish", BudgetLimits{},
			noeta.GovernanceState{Allotment: &noeta.BudgetAllotment{ToolCalls: new(0)}}, finish(), want{noeta.VerdictAllow, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			v := checkGuard(t, b, tt.a, gctx(tt.g, 1))
			if v.Verdict != tt.want.verdict || !strings.HasPrefix(v.Reason, tt.want.reason) {
				t.Errorf("got %s %q, want %s %q…", v.Verdict, v.Reason, tt.want.verdict, tt.want.reason)
			}
		})
	}
}

// TestBudgetRemaining: what a spawn may carve from is the smaller of the
// cap and the allotment, less the tree's spend and reservations, never
// below 0; nil where neither caps.
func TestBudgetRemaining(t *testing.T) {
	b, err := NewBudget(BudgetLimits{MaxCostUSD: new(3.0), MaxToolCalls: new(10)})
	if err != nil {
		t.Fatal(err)
	}
	r := b.Remaining(gctx(noeta.GovernanceState{CostUSD: 0.5, SubtaskCostUSD: 0.5, ToolCalls: 4,
		Reserved: map[string]noeta.BudgetAllotment{"c": {ToolCalls: new(3)}}}, 0))
	if r.CostUSD == nil || *r.CostUSD != 2 || r.ToolCalls == nil || *r.ToolCalls != 3 {
		t.Errorf("remaining %v %v, want 2 and 3", r.CostUSD, r.ToolCalls)
	}
	r = b.Remaining(gctx(noeta.GovernanceState{CostUSD: 5, Allotment: &noeta.BudgetAllotment{ToolCalls: new(2)}}, 0))
	if *r.CostUSD != 0 || *r.ToolCalls != 2 {
		t.Errorf("remaining %v %v, want 0 and 2", *r.CostUSD, *r.ToolCalls)
	}
	none, _ := NewBudget(BudgetLimits{})
	if r := none.Remaining(gctx(noeta.GovernanceState{}, 0)); r.CostUSD != nil || r.ToolCalls != nil {
		t.Errorf("no caps: remaining %+v, want none", r)
	}
}
