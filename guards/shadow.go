package guards

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/noeta-go/noeta"
)

// ShadowVerdict is what a shadow rule, or a shadow rule set, would have
// decided about an action: reported beside the stack's decision, never
// counted (docs/adr/0086-shadow-rules-are-judged-and-never-decide.md).
type ShadowVerdict struct {
	// Guard is the guard the shadow rule belongs to: "rules" or the rule
	// set's name.
	Guard string
	// Rule is where the rule that answered is written in the config:
	// rules[2], guards[0].rules[1]. It is empty when the guard's shadow
	// rules as a whole could not be judged (a panic outside any one rule).
	Rule string
	// VerdictResult is the verdict the rule would have given, with its
	// reason. A rule that failed would have denied (fail-closed), so its
	// verdict here is DENY.
	noeta.VerdictResult
	// Failed says the rule could not be judged: it returned an error or
	// panicked. Its failure changed nothing but this report.
	Failed bool
}

// shadowJudge is a guard with shadow rules: after the stack has decided,
// it is asked what they would have said. Only this package implements it,
// so that what is judged in shadow is bounded like the inline guards are.
type shadowJudge interface {
	Shadowed() bool
	shadowCheck(a noeta.ProposedAction, c *Context) []ShadowVerdict
}

var _ shadowJudge = (*Rules)(nil)

// Shadowed reports whether the guard has shadow rules.
func (r *Rules) Shadowed() bool { return len(r.shadows) > 0 }

// shadowCheck judges each shadow list of r against a tool call, each on its
// own, as if it were the only list: a list whose rules do not match says
// nothing, and is not reported. Spawns and finishes are not judged by rules.
// A list that panics is reported as a failure of its first rule, and the
// other lists are judged still.
func (r *Rules) shadowCheck(a noeta.ProposedAction, c *Context) []ShadowVerdict {
	if len(r.shadows) == 0 {
		return nil
	}
	call, ok := toolCallOf(a)
	if !ok {
		return nil
	}
	ev := ruleEval{call: call, c: c}
	defer ev.release()
	var out []ShadowVerdict
	for _, list := range r.shadows {
		if sv, ok := r.judgeShadow(list, &ev); ok {
			out = append(out, sv)
		}
	}
	return out
}

// judgeShadow judges one shadow list, turning a panic into a failure.
func (r *Rules) judgeShadow(list []compiledRule, ev *ruleEval) (sv ShadowVerdict, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			// A panic may leave the shared evaluation state half-built:
			// the next list starts afresh, and what it held is dropped,
			// not handed back to a pool for another check to reuse.
			*ev = ruleEval{call: ev.call, c: ev.c}
			sv = ShadowVerdict{
				Guard: r.name, Rule: list[0].path, Failed: true,
				VerdictResult: noeta.Deny(fmt.Sprintf("shadow %s on %q panicked: %v; it would have failed closed", list[0].path, list[0].matchTool, v)),
			}
			ok = true
		}
	}()
	v, cr, failed := judge(list, ev)
	if cr == nil {
		return ShadowVerdict{}, false
	}
	if v.IsAllow() && v.Reason == "" {
		v.Reason = fmt.Sprintf("hook rule on %q allows", cr.matchTool)
	}
	return ShadowVerdict{Guard: r.name, Rule: cr.path, VerdictResult: v, Failed: failed}, true
}

// shadows asks every guard with shadow rules what they would have said
// about a. It runs after the decision, whatever it was, so that a shadow
// rule is judged on every action, including those an earlier guard refused.
// Nothing it does can change the decision: a guard whose shadow judgement
// panics is reported as failed.
func (s *Stack) shadows(ctx context.Context, a noeta.ProposedAction, c *Context) []ShadowVerdict {
	var out []ShadowVerdict
	for i := range s.entries {
		e := &s.entries[i]
		if e.shadow == nil {
			continue
		}
		if ctx.Err() != nil {
			// The caller is going away; what is not judged is not
			// reported, and the decision stands as it is.
			return out
		}
		out = append(out, s.runShadow(e, a, c)...)
	}
	return out
}

func (s *Stack) runShadow(e *stackEntry, a noeta.ProposedAction, c *Context) (out []ShadowVerdict) {
	defer func() {
		if v := recover(); v != nil {
			reason := fmt.Sprintf("shadow rules of guard %q panicked: %v", e.name, v)
			if s.log != nil {
				s.log.Warn("guards: shadow rules failed; the decision is not affected", slog.String("guard", e.name), slog.String("reason", reason))
			}
			out = []ShadowVerdict{{Guard: e.name, VerdictResult: noeta.Deny(reason), Failed: true}}
		}
	}()
	return e.shadow.shadowCheck(a, c)
}
