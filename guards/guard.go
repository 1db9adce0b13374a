package guards

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta"
)

// Guard decides whether a proposed action may happen.
type Guard interface {
	// Name identifies the guard in reasons and in the audit trail; it is
	// unique within a stack.
	Name() string
	// Priority places the guard in a stack: lower runs first. The stack reads
	// it once, when it is built.
	Priority() int
	// Check answers for one action. It must not modify a or c, and it should
	// be a deterministic function of its configuration and of a and c. An
	// error means the guard could not decide; the stack turns it into a DENY
	// naming the guard, as it does a panic. ctx carries the stack's per-check
	// deadline to guards that do IO.
	Check(ctx context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error)
}

// The priorities of the built-in guards. User guards run at MinUserPriority or
// above, after every built-in.
const (
	PriorityBudget     = 10
	PriorityPermission = 20
	PriorityRepetition = 30
	PriorityRateLimit  = 40
	PriorityRules      = 100
	MinUserPriority    = 100
)

// The names of the built-in guards, as they appear in the audit trail.
const (
	NameBudget     = "budget"
	NamePermission = "permission"
	NameRepetition = "repetition"
	NameRateLimit  = "rate_limit"
	NameRules      = "rules"
)

// CheckFunc is the signature of [Guard.Check].
type CheckFunc func(ctx context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error)

// Func returns a Guard with the given name and priority that answers with f.
func Func(name string, priority int, f CheckFunc) Guard {
	return &funcGuard{name: name, priority: priority, f: f}
}

type funcGuard struct {
	name     string
	priority int
	f        CheckFunc
}

func (g *funcGuard) Name() string  { return g.name }
func (g *funcGuard) Priority() int { return g.priority }
func (g *funcGuard) Check(ctx context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	return g.f(ctx, a, c)
}

// inlineGuard marks the guards of this package: pure, bounded functions of
// their inputs that the stack may run on the caller's goroutine. Only this
// package can implement it, because a guard that blocks forever on the
// caller's goroutine would wedge the engine step past any deadline.
type inlineGuard interface {
	Guard
	inline()
}

// actionKind classifies a proposed action. ProposedAction is a closed set, but
// both value and pointer forms satisfy it, and it can be nil.
type actionKind uint8

const (
	kindUnknown actionKind = iota
	kindToolCall
	kindSpawn
	kindFinish
)

func kindOf(a noeta.ProposedAction) actionKind {
	switch a := a.(type) {
	case noeta.ProposedToolCall:
		return kindToolCall
	case *noeta.ProposedToolCall:
		if a != nil {
			return kindToolCall
		}
	case noeta.ProposedSpawnSubtask:
		return kindSpawn
	case *noeta.ProposedSpawnSubtask:
		if a != nil {
			return kindSpawn
		}
	case noeta.ProposedFinish:
		return kindFinish
	case *noeta.ProposedFinish:
		if a != nil {
			return kindFinish
		}
	}
	return kindUnknown
}

// toolCallOf returns the call of a tool-call action.
// It returns the call by value: a pointer into a type-switched copy would make
// the copy escape to the heap on every check.
func toolCallOf(a noeta.ProposedAction) (noeta.ToolCall, bool) {
	switch a := a.(type) {
	case noeta.ProposedToolCall:
		return a.Call, true
	case *noeta.ProposedToolCall:
		if a != nil {
			return a.Call, true
		}
	}
	return noeta.ToolCall{}, false
}

// spawnOf returns the spawn of a spawn action.
func spawnOf(a noeta.ProposedAction) (noeta.SpawnSubtask, bool) {
	switch a := a.(type) {
	case noeta.ProposedSpawnSubtask:
		return a.Spawn, true
	case *noeta.ProposedSpawnSubtask:
		if a != nil {
			return a.Spawn, true
		}
	}
	return noeta.SpawnSubtask{}, false
}

// errUnsupportedAction is what a built-in returns for an action it does not
// know; the stack refuses such actions before any guard runs, so only a guard
// called directly sees it.
func errUnsupportedAction(a noeta.ProposedAction) error {
	return fmt.Errorf("guards: unsupported action %T", a)
}
