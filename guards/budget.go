package guards

import (
	"context"
	"fmt"
	"strconv"

	"github.com/noeta-go/noeta"
)

// BudgetLimits caps what a task may spend. A nil field is no cap. The counters
// span the task's whole life — on a conversation, the whole conversation — and
// are never reset. MaxCostUSD and MaxToolCalls bound the task's whole tree:
// every subtask's spend counts against every ancestor (docs/adr/0054); the
// other caps are the task's own.
type BudgetLimits struct {
	// MaxIterations caps steps. The current step is already counted when the
	// guard runs, so the cap is strict: MaxIterations=1 allows exactly one
	// step, and 0 denies from the first.
	MaxIterations *int
	// MaxCostUSD caps spending: the task is refused once its tree has spent
	// this much.
	MaxCostUSD *float64
	// MaxToolCalls caps executed tool calls in the task's tree: 2 lets two
	// run and denies the third.
	MaxToolCalls *int
	// MaxSpawnedSubtasks caps spawned subtasks. Reaching it also refuses every
	// further tool call, as in the reference.
	MaxSpawnedSubtasks *int
	// MaxSubtaskDepth caps how deep a tree of subtasks grows: a task at depth
	// d may spawn only while d < MaxSubtaskDepth.
	MaxSubtaskDepth *int
}

// Validate reports a negative or NaN cap, naming the field as it is named in
// the config file.
func (l BudgetLimits) Validate() error {
	var errs configErrors
	l.validate("", &errs)
	return errs.err()
}

func (l BudgetLimits) validate(path string, errs *configErrors) {
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"max_iterations", l.MaxIterations},
		{"max_tool_calls", l.MaxToolCalls},
		{"max_spawned_subtasks", l.MaxSpawnedSubtasks},
		{"max_subtask_depth", l.MaxSubtaskDepth},
	} {
		if f.v != nil && *f.v < 0 {
			errs.add(join(path, f.name), "must be >= 0")
		}
	}
	// Written so that NaN fails too.
	if l.MaxCostUSD != nil && !(*l.MaxCostUSD >= 0) {
		errs.add(join(path, "max_cost_usd"), "must be >= 0")
	}
}

// Budget denies an action once the task has used up its budget. The checks run
// in the reference's order and the first that trips decides:
//
//  1. iterations > max_iterations (all action points)
//  2. tree cost >= max_cost_usd, or >= the cost allotment (all action points)
//  3. tree tool calls >= max_tool_calls, or >= the tool-call allotment (tool
//     calls only)
//  4. spawned_subtasks >= max_spawned_subtasks (tool calls and spawns)
//  5. subtask_depth >= max_subtask_depth (spawns only)
//
// Cost and tool calls are the task's tree's ([noeta.GovernanceState.Tree]):
// its own, its ended subtasks' trees' and its running subtasks' allotments.
// The allotment is what the task's ancestors left it when it was spawned, so
// a root's caps bound its whole tree (docs/adr/0054). Iterations, spawned
// subtasks and depth are the task's own.
//
// Finishing is bound only by 1 and 2, so a task at its tool or spawn cap can
// still end.
type Budget struct {
	iter, toolCalls, spawned, depth int
	cost                            float64
	has                             [5]bool // iterations, cost, tool calls, spawned, depth
	// The reasons depend only on the limits, so they are built once and a
	// denial costs no allocation either.
	reasons [5]string
}

var _ inlineGuard = (*Budget)(nil)

// NewBudget returns a Budget guard for l.
func NewBudget(l BudgetLimits) (*Budget, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("guards: budget: %w", err)
	}
	b := &Budget{}
	if l.MaxIterations != nil {
		b.iter, b.has[0] = *l.MaxIterations, true
		b.reasons[0] = "max_iterations=" + strconv.Itoa(b.iter) + " exceeded"
	}
	if l.MaxCostUSD != nil {
		b.cost, b.has[1] = *l.MaxCostUSD, true
		b.reasons[1] = "max_cost_usd=" + strconv.FormatFloat(b.cost, 'g', -1, 64) + " reached"
	}
	if l.MaxToolCalls != nil {
		b.toolCalls, b.has[2] = *l.MaxToolCalls, true
		b.reasons[2] = "max_tool_calls=" + strconv.Itoa(b.toolCalls) + " reached"
	}
	if l.MaxSpawnedSubtasks != nil {
		b.spawned, b.has[3] = *l.MaxSpawnedSubtasks, true
		b.reasons[3] = "max_spawned_subtasks=" + strconv.Itoa(b.spawned) + " reached"
	}
	if l.MaxSubtaskDepth != nil {
		b.depth, b.has[4] = *l.MaxSubtaskDepth, true
		b.reasons[4] = "max_subtask_depth=" + strconv.Itoa(b.depth) + " reached"
	}
	return b, nil
}

// Name is "budget".
func (*Budget) Name() string { return NameBudget }

// Priority is 10.
func (*Budget) Priority() int { return PriorityBudget }

func (*Budget) inline() {}

// Exhausted reports whether caps 1 or 2 (iterations, cost) have tripped:
// then every action point is denied — a tool call, a spawn and a finish
// alike — and nothing a policy could decide would happen. reason is the
// denial's.
func (b *Budget) Exhausted(c *Context) (reason string, ok bool) {
	if c == nil {
		return "", false
	}
	g := &c.gov
	if b.has[0] && g.Iterations > b.iter {
		return b.reasons[0], true
	}
	return b.costOut(g)
}

// costOut applies cap 2. !(x < max) rather than x >= max, so that a NaN
// cost is refused.
func (b *Budget) costOut(g *noeta.GovernanceState) (string, bool) {
	own, alloc := b.has[1], g.Allotment != nil && g.Allotment.CostUSD != nil
	if !own && !alloc {
		return "", false
	}
	t := g.Tree()
	if own && !(t.CostUSD < b.cost) {
		if g.SubtaskCostUSD == 0 && len(g.Reserved) == 0 {
			return b.reasons[1], true // no subtask in it: the task's own spend
		}
		return b.reasons[1] + " by the task tree: " + treeCost(g, t), true
	}
	if alloc && !(t.CostUSD < *g.Allotment.CostUSD) {
		return "the max_cost_usd allotment of " + strconv.FormatFloat(*g.Allotment.CostUSD, 'g', 6, 64) +
			" its ancestors left this subtask reached by its tree: " + treeCost(g, t), true
	}
	return "", false
}

// toolCallsOut applies cap 3.
func (b *Budget) toolCallsOut(g *noeta.GovernanceState) (string, bool) {
	own, alloc := b.has[2], g.Allotment != nil && g.Allotment.ToolCalls != nil
	if !own && !alloc {
		return "", false
	}
	t := g.Tree()
	if own && t.ToolCalls >= b.toolCalls {
		if g.SubtaskToolCalls == 0 && len(g.Reserved) == 0 {
			return b.reasons[2], true
		}
		return b.reasons[2] + " by the task tree: " + treeCalls(g, t), true
	}
	if alloc && t.ToolCalls >= *g.Allotment.ToolCalls {
		return "the max_tool_calls allotment of " + strconv.Itoa(*g.Allotment.ToolCalls) +
			" its ancestors left this subtask reached by its tree: " + treeCalls(g, t), true
	}
	return "", false
}

// treeCost and treeCalls name a tree's numbers in a denial.
func treeCost(g *noeta.GovernanceState, t noeta.TreeSpend) string {
	return fmt.Sprintf("$%.6g spent or reserved ($%.6g by this task, $%.6g by ended subtasks, $%.6g reserved for running ones)",
		t.CostUSD, g.CostUSD, g.SubtaskCostUSD, t.CostUSD-g.CostUSD-g.SubtaskCostUSD)
}

func treeCalls(g *noeta.GovernanceState, t noeta.TreeSpend) string {
	return fmt.Sprintf("%d tool calls run or reserved (%d by this task, %d by ended subtasks, %d reserved for running ones)",
		t.ToolCalls, g.ToolCalls, g.SubtaskToolCalls, t.ToolCalls-g.ToolCalls-g.SubtaskToolCalls)
}

// Remaining is what the task's tree may still spend under this budget and
// the task's allotment: the part a spawn reserves for its children. A nil
// member is no cap from either; a member is never negative.
func (b *Budget) Remaining(c *Context) noeta.BudgetAllotment {
	var r noeta.BudgetAllotment
	if c == nil {
		return r
	}
	g := &c.gov
	t := g.Tree()
	var cost *float64
	if b.has[1] {
		cost = &b.cost
	}
	if g.Allotment != nil && g.Allotment.CostUSD != nil && (cost == nil || *g.Allotment.CostUSD < *cost) {
		cost = g.Allotment.CostUSD
	}
	if cost != nil {
		v := *cost - t.CostUSD
		if !(v > 0) {
			v = 0
		}
		r.CostUSD = &v
	}
	var calls *int
	if b.has[2] {
		calls = &b.toolCalls
	}
	if g.Allotment != nil && g.Allotment.ToolCalls != nil && (calls == nil || *g.Allotment.ToolCalls < *calls) {
		calls = g.Allotment.ToolCalls
	}
	if calls != nil {
		v := max(*calls-t.ToolCalls, 0)
		r.ToolCalls = &v
	}
	return r
}

// Check applies the caps to a.
func (b *Budget) Check(_ context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	k := kindOf(a)
	if k == kindUnknown {
		return noeta.VerdictResult{}, errUnsupportedAction(a)
	}
	g := &c.gov
	if b.has[0] && g.Iterations > b.iter {
		return noeta.Deny(b.reasons[0]), nil
	}
	if r, out := b.costOut(g); out {
		return noeta.Deny(r), nil
	}
	switch k {
	case kindToolCall:
		if r, out := b.toolCallsOut(g); out {
			return noeta.Deny(r), nil
		}
		if b.has[3] && g.SpawnedSubtasks >= b.spawned {
			return noeta.Deny(b.reasons[3]), nil
		}
	case kindSpawn:
		if b.has[3] && g.SpawnedSubtasks >= b.spawned {
			return noeta.Deny(b.reasons[3]), nil
		}
		if b.has[4] && c.depth >= b.depth {
			return noeta.Deny(b.reasons[4]), nil
		}
	}
	return noeta.Allow(), nil
}
