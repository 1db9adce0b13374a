package guards

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
)

// DefaultTimeout is the per-check deadline of a guard in a [Stack] built
// without [WithTimeout]. The built-ins answer in microseconds; the margin is
// for user guards that consult a policy service.
const DefaultTimeout = time.Second

// StackName is the Guard of a [Decision] the stack itself made, before any
// guard ran: a nil stack, a nil context, an action of an unknown kind.
const StackName = "stack"

// Decision is a stack's answer: the verdict and the guard that gave it.
type Decision struct {
	noeta.VerdictResult
	// Guard names the guard whose verdict decided. It is empty when every
	// guard allowed (or there were none), and [StackName] when the stack
	// refused before asking any guard.
	Guard string
	// Shadows are the answers of the shadow rules that matched the action,
	// in stack order: what they would have decided. They never count; nil
	// when there are none.
	Shadows []ShadowVerdict
}

// FanOutDecision is a stack's answer for a fan-out batch.
type FanOutDecision struct {
	Decision
	// Member is the index of the member that was refused, or -1.
	Member int
}

// Stack runs guards in ascending priority, registration order among equal
// priorities, and stops at the first answer that is not ALLOW. It is
// immutable once built and safe for concurrent use.
type Stack struct {
	entries []stackEntry
	timeout time.Duration
	log     *slog.Logger
	edits   func(tool string) bool // for AgentStack's Permission guard
	// rates and rateNow are for AgentStack's RateLimiter.
	rates   RateCounter
	rateNow func() time.Time
	// shadowed: some guard has shadow rules, judged after each decision.
	shadowed bool
}

type stackEntry struct {
	g        Guard
	name     string
	priority int
	inline   bool
	shadow   shadowJudge // nil: the guard has no shadow rules
}

// StackOption configures [NewStack].
type StackOption func(*Stack) error

// WithEditTools tells the Permission guard of a stack built by
// [Config.AgentStack] which tools are edit tools (acceptEdits runs them
// unasked), e.g. a tools registry's Edits method. Without it the guard knows
// edit_file, write_file, Edit and Write by name. Stacks built by [NewStack]
// ignore it.
func WithEditTools(edits func(tool string) bool) StackOption {
	return func(s *Stack) error {
		if edits == nil {
			return errors.New("guards: WithEditTools: nil function")
		}
		s.edits = edits
		return nil
	}
}

// WithTimeout sets the per-check deadline of each guard; d must be positive.
func WithTimeout(d time.Duration) StackOption {
	return func(s *Stack) error {
		if d <= 0 {
			return fmt.Errorf("guards: timeout %v must be positive", d)
		}
		s.timeout = d
		return nil
	}
}

// WithLogger sets where the stack reports guards that fail (panic, error,
// deadline), with the stack trace of a panic. By default nothing is logged:
// the reason of the DENY is recorded in the task's log either way.
func WithLogger(l *slog.Logger) StackOption {
	return func(s *Stack) error {
		s.log = l
		return nil
	}
}

// NewStack returns a stack of guards. Each guard's Priority is read once,
// here. A nil guard, an empty name or a name used twice is refused: the audit
// trail must be able to say which guard decided. A stack of no guards allows
// everything, as the reference's does.
func NewStack(guards []Guard, opts ...StackOption) (*Stack, error) {
	s := &Stack{timeout: DefaultTimeout, entries: make([]stackEntry, 0, len(guards))}
	seen := make(map[string]bool, len(guards))
	for i, g := range guards {
		if g == nil {
			return nil, fmt.Errorf("guards: guard %d is nil", i)
		}
		name := g.Name()
		if name == "" {
			return nil, fmt.Errorf("guards: guard %d (%T) has no name", i, g)
		}
		if seen[name] {
			return nil, fmt.Errorf("guards: two guards are named %q", name)
		}
		seen[name] = true
		_, inline := g.(inlineGuard)
		e := stackEntry{g: g, name: name, priority: g.Priority(), inline: inline}
		if sj, ok := g.(shadowJudge); ok && sj.Shadowed() {
			e.shadow = sj
			s.shadowed = true
		}
		s.entries = append(s.entries, e)
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(s.entries, func(a, b stackEntry) int { return cmp.Compare(a.priority, b.priority) })
	return s, nil
}

// Guards returns the stack's guards in the order they run.
func (s *Stack) Guards() []Guard {
	if s == nil {
		return nil
	}
	gs := make([]Guard, len(s.entries))
	for i, e := range s.entries {
		gs[i] = e.g
	}
	return gs
}

// Exhausted reports whether a budget of the stack has run out for every
// action point (its iterations or its cost; see [Budget.Exhausted]): then no
// decision of a policy can be carried out, and asking one (a model, which
// bills) would only spend more. guard and reason are the budget's denial.
func (s *Stack) Exhausted(c *Context) (guard, reason string, ok bool) {
	if s == nil {
		return "", "", false
	}
	for _, e := range s.entries {
		if b, isBudget := e.g.(*Budget); isBudget {
			if r, out := b.Exhausted(c); out {
				return e.name, r, true
			}
		}
	}
	return "", "", false
}

// Remaining is what the task's tree may still spend under the stack's
// budgets and the task's allotment (see [Budget.Remaining]): what a spawn
// may carve its children's allotments from. A stack without a budget still
// passes the allotment on, so a tree's bound never ends at such a task.
func (s *Stack) Remaining(c *Context) noeta.BudgetAllotment {
	var none Budget
	r := none.Remaining(c)
	if s == nil {
		return r
	}
	for _, e := range s.entries {
		if b, isBudget := e.g.(*Budget); isBudget {
			br := b.Remaining(c)
			if br.CostUSD != nil && (r.CostUSD == nil || *br.CostUSD < *r.CostUSD) {
				r.CostUSD = br.CostUSD
			}
			if br.ToolCalls != nil && (r.ToolCalls == nil || *br.ToolCalls < *r.ToolCalls) {
				r.ToolCalls = br.ToolCalls
			}
		}
	}
	return r
}

// Check asks the guards about a, in order, and returns the first answer that is
// not ALLOW, or ALLOW. A guard that panics, returns an error, returns no verdict
// or overruns its deadline is a DENY naming it, and so is a guard that was not
// asked because ctx was done. A DENY or REQUIRE_APPROVAL always has a reason.
//
// A guard from outside this package runs on its own goroutine, so that its
// deadline holds even if it never returns; such a guard may still be reading a
// and c after Check has returned, so the caller must not modify them.
//
// Once the decision is made, whatever it is, the shadow rules of the stack's
// guards are judged and their answers put in the Decision's Shadows; they
// cannot change it.
func (s *Stack) Check(ctx context.Context, a noeta.ProposedAction, c *Context) Decision {
	d := s.decide(ctx, a, c)
	if s != nil && s.shadowed && c != nil && kindOf(a) != kindUnknown {
		if ctx == nil {
			ctx = context.Background()
		}
		// Appended to a Decision value returned to the caller alone: the
		// verdict and guard above are already fixed.
		d.Shadows = s.shadows(ctx, a, c)
	}
	return d
}

// decide is Check without the shadow rules: the priority loop.
func (s *Stack) decide(ctx context.Context, a noeta.ProposedAction, c *Context) Decision {
	switch {
	case s == nil:
		return stackDeny("no guard stack")
	case c == nil:
		return stackDeny("no guard context")
	case kindOf(a) == kindUnknown:
		return stackDeny(fmt.Sprintf("unsupported action %T", a))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// One wall-clock read, then monotonic offsets: time.Since is half the
	// price of time.Now, and the allow path pays it once per guard.
	start := time.Now()
	var prev time.Duration
	for i := range s.entries {
		e := &s.entries[i]
		if err := ctx.Err(); err != nil {
			return s.fail(e, fmt.Sprintf("guard %q not run: %v", e.name, err), nil)
		}
		var o outcome
		if e.inline {
			o = runGuard(ctx, e.g, a, c)
			now := time.Since(start)
			if took := now - prev; took > s.timeout {
				// The answer came too late to count, whatever it was.
				return s.fail(e, fmt.Sprintf("guard %q exceeded its deadline of %v (took %v)", e.name, s.timeout, took.Round(time.Microsecond)), nil)
			}
			prev = now
		} else {
			var d Decision
			var done bool
			if o, d, done = s.runIsolated(ctx, e, a, c); done {
				return d
			}
			prev = time.Since(start)
		}
		if o.panicked {
			return s.fail(e, fmt.Sprintf("guard %q panicked: %v", e.name, o.panicVal), o.stack)
		}
		if o.err != nil {
			return s.fail(e, fmt.Sprintf("guard %q failed: %v", e.name, o.err), nil)
		}
		switch o.r.Verdict {
		case noeta.VerdictAllow:
			continue
		case noeta.VerdictDeny:
			if o.r.Reason == "" {
				o.r.Reason = "denied"
			}
		case noeta.VerdictRequireApproval:
			if o.r.Reason == "" {
				o.r.Reason = "requires approval"
			}
		case noeta.VerdictUnset:
			return s.fail(e, fmt.Sprintf("guard %q returned no verdict", e.name), nil)
		default:
			return s.fail(e, fmt.Sprintf("guard %q returned an invalid verdict %v", e.name, o.r.Verdict), nil)
		}
		return Decision{VerdictResult: o.r, Guard: e.name}
	}
	return Decision{VerdictResult: noeta.Allow()}
}

// CheckFanOut admits the members of a fan-out batch one by one, as
// [noeta.ProposedSpawnSubtask] actions: member i is checked with the spawned-subtask
// counter at its current value plus i, so a budget admits exactly as many
// members as it has room for. The first member refused refuses the batch; a
// REQUIRE_APPROVAL refuses it too, with reason approval_unsupported_in_fanout,
// because one approval cannot stand for a batch that starts together. The
// batch size and call-id layout are the engine's to check, before this.
func (s *Stack) CheckFanOut(ctx context.Context, members []noeta.SpawnSubtask, c *Context) FanOutDecision {
	if len(members) == 0 {
		return FanOutDecision{Decision: stackDeny("fan-out has no members"), Member: -1}
	}
	if c == nil {
		return FanOutDecision{Decision: stackDeny("no guard context"), Member: -1}
	}
	// A shallow copy is enough: the Context's memory is never written, only
	// this counter differs.
	sim := *c
	for i, m := range members {
		sim.gov.SpawnedSubtasks = c.gov.SpawnedSubtasks + i
		d := s.Check(ctx, noeta.ProposedSpawnSubtask{Spawn: m}, &sim)
		switch {
		case d.IsAllow():
			continue
		case d.Verdict == noeta.VerdictRequireApproval:
			d.VerdictResult = noeta.Deny("approval_unsupported_in_fanout")
		}
		return FanOutDecision{Decision: d, Member: i}
	}
	return FanOutDecision{Decision: Decision{VerdictResult: noeta.Allow()}, Member: -1}
}

func stackDeny(reason string) Decision {
	return Decision{VerdictResult: noeta.Deny(reason), Guard: StackName}
}

// fail is the DENY for a guard that could not decide.
func (s *Stack) fail(e *stackEntry, reason string, stack []byte) Decision {
	if s.log != nil {
		attrs := []any{"guard", e.name, "reason", reason}
		if stack != nil {
			attrs = append(attrs, "stack", string(stack))
		}
		s.log.Warn("guards: guard failed; treating as deny", attrs...)
	}
	return Decision{VerdictResult: noeta.Deny(reason), Guard: e.name}
}

type outcome struct {
	r        noeta.VerdictResult
	err      error
	panicked bool
	panicVal any
	stack    []byte
}

// runGuard calls g.Check and turns a panic into an outcome.
func runGuard(ctx context.Context, g Guard, a noeta.ProposedAction, c *Context) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = outcome{panicked: true, panicVal: v, stack: debug.Stack()}
		}
	}()
	o.r, o.err = g.Check(ctx, a, c)
	return o
}

// runIsolated runs a guard from outside this package on its own goroutine under
// the per-check deadline. If the guard does not answer in time the stack denies
// and leaves the goroutine behind; its answer, if it ever comes, is dropped.
func (s *Stack) runIsolated(ctx context.Context, e *stackEntry, a noeta.ProposedAction, c *Context) (outcome, Decision, bool) {
	gctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ch := make(chan outcome, 1)
	// The guard may outlive this call (see above): give it a Context of its
	// own, so the caller can go on changing theirs (fan-out admission counts
	// members in it) without racing a guard that never returned. The fields
	// it shares are never written after NewContext.
	own := *c
	go func() { ch <- runGuard(gctx, e.g, a, &own) }()
	select {
	case o := <-ch:
		if ctx.Err() == nil {
			return o, Decision{}, false
		}
		// The caller gave up while the guard answered: fail closed.
	case <-gctx.Done():
		// An answer that arrived together with the per-check deadline
		// still counts, unless the caller itself gave up.
		select {
		case o := <-ch:
			if ctx.Err() == nil {
				return o, Decision{}, false
			}
		default:
		}
	}
	if err := ctx.Err(); err != nil {
		return outcome{}, s.fail(e, fmt.Sprintf("guard %q interrupted: %v", e.name, err), nil), true
	}
	if !errors.Is(gctx.Err(), context.DeadlineExceeded) {
		return outcome{}, s.fail(e, fmt.Sprintf("guard %q interrupted: %v", e.name, gctx.Err()), nil), true
	}
	return outcome{}, s.fail(e, fmt.Sprintf("guard %q exceeded its deadline of %v", e.name, s.timeout), nil), true
}
