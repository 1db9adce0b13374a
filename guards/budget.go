package guards

import (
	"context"
	"fmt"
	"strconv"

	"github.com/noeta-go/noeta"
)

// BudgetLimits caps what a task may spend. A nil field is no cap. The counters
// span the task's whole life — on a conversation, the whole conversation — and
// are never reset.
type BudgetLimits struct {
	// MaxIterations caps steps. The current step is already counted when the
	// guard runs, so the cap is strict: MaxIterations=1 allows exactly one
	// step, and 0 denies from the first.
	MaxIterations *int
	// MaxCostUSD caps spending: the task is refused once it has spent this much.
	MaxCostUSD *float64
	// MaxToolCalls caps executed tool calls: 2 lets two run and denies the third.
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
//  2. cost_usd >= max_cost_usd (all action points)
//  3. tool_calls >= max_tool_calls (tool calls only)
//  4. spawned_subtasks >= max_spawned_subtasks (tool calls and spawns)
//  5. subtask_depth >= max_subtask_depth (spawns only)
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
	if b.has[1] && !(g.CostUSD < b.cost) {
		return b.reasons[1], true
	}
	return "", false
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
	// !(x < max) rather than x >= max, so that a NaN cost is refused.
	if b.has[1] && !(g.CostUSD < b.cost) {
		return noeta.Deny(b.reasons[1]), nil
	}
	switch k {
	case kindToolCall:
		if b.has[2] && g.ToolCalls >= b.toolCalls {
			return noeta.Deny(b.reasons[2]), nil
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
