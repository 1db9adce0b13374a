package guards

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta"
)

// DefaultRepetitionWindow is the window of a [RepetitionPolicy] that sets none:
// the reference's documented default.
const DefaultRepetitionWindow = 8

// RepetitionPolicy catches a task calling the same tool with the same
// arguments over and over.
type RepetitionPolicy struct {
	// Threshold is how many identical calls in a row trip the guard, the
	// proposed one included; 0 or less turns the guard off.
	Threshold int
	// Action is VerdictDeny or VerdictRequireApproval; unset means
	// VerdictRequireApproval.
	Action noeta.Verdict
	// Window is how many of the most recent executed calls the guard looks
	// back over, at most [noeta.RecentToolCallsWindow]; 0 means
	// DefaultRepetitionWindow. A run can therefore be at most Window+1 calls
	// long, and Threshold must not exceed that.
	Window int
}

func (p RepetitionPolicy) validate(path string, errs *configErrors) {
	switch p.Action {
	case noeta.VerdictUnset, noeta.VerdictDeny, noeta.VerdictRequireApproval:
	default:
		errs.addf(join(path, "action"), "must be deny or require_approval, not %v", p.Action)
	}
	switch w := p.window(); {
	case p.Window < 0:
		errs.add(join(path, "window"), "must be >= 0")
	case w > noeta.RecentToolCallsWindow:
		errs.addf(join(path, "window"), "must be <= %d: the engine remembers only the last %d calls", noeta.RecentToolCallsWindow, noeta.RecentToolCallsWindow)
	case p.Threshold > noeta.RecentToolCallsWindow+1:
		errs.addf(join(path, "threshold"), "must be <= %d: a run is at most the %d calls the engine remembers and the proposed one", noeta.RecentToolCallsWindow+1, noeta.RecentToolCallsWindow)
	case p.Threshold > w+1:
		errs.addf(join(path, "threshold"), "%d can never be reached looking back over %d calls; set window to at least %d", p.Threshold, w, p.Threshold-1)
	}
}

func (p RepetitionPolicy) window() int {
	if p.Window == 0 {
		return DefaultRepetitionWindow
	}
	return p.Window
}

// Repetition asks for approval of (or denies) a tool call that would make a run
// of Threshold identical calls: same tool, same canonical arguments, with no
// other call between them among the executed calls in the window. Denied and
// pending calls never ran, so they do not count. Spawning and finishing are
// always allowed.
type Repetition struct {
	threshold int
	window    int
	deny      bool
}

var _ inlineGuard = (*Repetition)(nil)

// NewRepetition returns a Repetition guard for p.
func NewRepetition(p RepetitionPolicy) (*Repetition, error) {
	var errs configErrors
	p.validate("", &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: repetition: %w", err)
	}
	return &Repetition{threshold: p.Threshold, window: p.window(), deny: p.Action == noeta.VerdictDeny}, nil
}

// Name is "repetition".
func (*Repetition) Name() string { return NameRepetition }

// Priority is 30.
func (*Repetition) Priority() int { return PriorityRepetition }

func (*Repetition) inline() {}

// Check counts the run the call in a would extend. Arguments that are not valid
// JSON are an error, which the stack turns into a DENY.
func (r *Repetition) Check(_ context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	call, ok := toolCallOf(a)
	if !ok {
		if kindOf(a) == kindUnknown {
			return noeta.VerdictResult{}, errUnsupportedAction(a)
		}
		return noeta.Allow(), nil
	}
	if r.threshold <= 0 {
		return noeta.Allow(), nil
	}
	args, err := canonicalArgs(call.Args)
	if err != nil {
		return noeta.VerdictResult{}, err
	}
	if len(args) > noeta.ArgsInlineLimit {
		// Keyed as the fold keys a call whose args were spilled (KeyOf).
		args = []byte(SpilledArgsKey(noeta.RefFor(args, "").Hash))
	}
	recent := c.gov.RecentToolCalls
	run := 0
	for i := len(recent) - 1; i >= 0 && len(recent)-i <= r.window; i-- {
		// string(args) in a comparison does not allocate.
		if recent[i].Tool != call.Tool || recent[i].Args != string(args) {
			break
		}
		run++
	}
	if n := run + 1; n >= r.threshold {
		reason := fmt.Sprintf("tool %q called with identical arguments %d times in a row (repetition threshold %d); suspected loop", call.Tool, n, r.threshold)
		if r.deny {
			return noeta.Deny(reason), nil
		}
		return noeta.RequireApproval(reason), nil
	}
	return noeta.Allow(), nil
}

// KeyOf returns the identity key of a call: its tool and the canonical form
// of its arguments, with no arguments taken as {}; arguments longer than
// [noeta.ArgsInlineLimit] are keyed by their hash ([SpilledArgsKey]), the
// hash of the args_ref they are recorded under. The fold that fills
// [noeta.GovernanceState.RecentToolCalls] must key calls this way for the
// Repetition guard to recognise them.
func KeyOf(call noeta.ToolCall) (noeta.ToolCallKey, error) {
	args, err := canonicalArgs(call.Args)
	if err != nil {
		return noeta.ToolCallKey{}, err
	}
	if len(args) > noeta.ArgsInlineLimit {
		return noeta.ToolCallKey{Tool: call.Tool, Args: SpilledArgsKey(noeta.RefFor(args, "").Hash)}, nil
	}
	return noeta.ToolCallKey{Tool: call.Tool, Args: string(args)}, nil
}

// SpilledArgsKey is the Args of the identity key of a call whose canonical
// arguments have the given sha256 (hex): "sha256:<hex>".
func SpilledArgsKey(hash string) string { return "sha256:" + hash }

var emptyArgs = []byte("{}")

// canonicalArgs returns the canonical form of a call's arguments, without
// allocating when they are canonical already (as arguments read back from the
// log are).
func canonicalArgs(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return emptyArgs, nil
	}
	b, err := noeta.CanonicalizeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("tool arguments are not valid JSON: %w", err)
	}
	return b, nil
}
