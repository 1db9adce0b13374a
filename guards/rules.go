package guards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
)

// MatchStringCap is how many characters of an argument string match_arg's
// contains and regex look at, as in the reference: a match further on is not
// seen.
const MatchStringCap = 64 * 1024

// Rule is one user PreToolUse rule. It matches a tool call when MatchTool
// matches the tool's name and, if set, MatchArg and When both match; the first
// rule that matches decides with its Action.
type Rule struct {
	// MatchTool is a glob on the whole tool name: '*' matches any run of
	// characters, '?' one, [a-z] and [!a-z] a class (Python fnmatchcase).
	MatchTool string
	// MatchArg, if set, tests one argument.
	MatchArg *MatchArg
	// When, if set, is a CEL expression that must be true. It sees tool
	// (string), args (map, JSON numbers are doubles) and task (map: id,
	// iterations, tool_calls, cost_usd, spawned_subtasks, input_tokens,
	// output_tokens, subtask_depth, active_skills, metadata). It is compiled
	// when the rules are built and runs under a cost limit ([CELCostLimit]); an
	// evaluation error — a missing key, the limit — is a DENY. Guard optional
	// arguments with has(args.x).
	When string
	// Action is what a match decides: ALLOW ends the scan with an allow,
	// DENY and REQUIRE_APPROVAL refuse.
	Action noeta.Verdict
	// Reason is the verdict's reason; empty means `hook rule on "<MatchTool>"`.
	Reason string
}

// MatchOp is how [MatchArg] compares.
type MatchOp string

// The match_arg operators.
const (
	// MatchEquals: the argument equals Value as JSON values (numbers by value,
	// 1 == 1.0; objects regardless of key order; true is not 1).
	MatchEquals MatchOp = "equals"
	// MatchContains: the argument is a string containing Value, a string,
	// within its first MatchStringCap characters.
	MatchContains MatchOp = "contains"
	// MatchRegex: the argument is a string in whose first MatchStringCap
	// characters Value, an RE2 pattern, finds a match (unanchored).
	MatchRegex MatchOp = "regex"
)

// MatchArg tests one argument of a tool call. A missing argument, or a path
// that runs through something that is not an object, does not match.
type MatchArg struct {
	// Path is a dotted path of object keys into the arguments: "command",
	// "options.mode". There is no array indexing.
	Path  string
	Op    MatchOp
	Value any
}

// CELCostLimit bounds one evaluation of a rule's when expression, in CEL cost
// units: Kubernetes' per-call limit for admission rules, roughly 0.1 s of work.
// An expression that exceeds it errors, so its rule denies. An expression whose
// static worst case is within the limit for inputs of up to 64 Ki characters
// runs untracked on such inputs (docs/adr/0009-bounding-guard-checks.md).
const CELCostLimit = 1_000_000

// Rules is a guard over an ordered list of rules: for a tool call, the first
// rule that matches decides, and if none does the call is allowed. Spawning and
// finishing are always allowed. A rule that errors — arguments that are not
// valid JSON, a failing when expression — denies the call, naming the rule.
//
// The process-wide rules of the config are one Rules at priority 100; each named
// rule set of the config is another, at its own priority.
type Rules struct {
	name     string
	priority int
	rules    []compiledRule
}

var _ inlineGuard = (*Rules)(nil)

// NewRules compiles the process-wide rules: a guard named "rules" at priority 100.
func NewRules(rules []Rule) (*Rules, error) {
	return newRules(NameRules, PriorityRules, rules, "rules")
}

// NewRuleSet compiles a named user rule set. Its priority must be at least
// MinUserPriority, and its name must not be one of the built-ins'.
func NewRuleSet(name string, priority int, rules []Rule) (*Rules, error) {
	var errs configErrors
	checkUserGuard(name, priority, "name", "priority", &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: rule set: %w", err)
	}
	return newRules(name, priority, rules, "rules")
}

func newRules(name string, priority int, rules []Rule, path string) (*Rules, error) {
	var errs configErrors
	cr := compileRules(rules, path, &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	return &Rules{name: name, priority: priority, rules: cr}, nil
}

// checkUserGuard refuses a user guard that would run before the built-ins or
// take a built-in's name.
func checkUserGuard(name string, priority int, namePath, priorityPath string, errs *configErrors) {
	switch name {
	case "":
		errs.add(namePath, "required")
	case NameBudget, NamePermission, NameRepetition, NameRules, StackName:
		errs.addf(namePath, "%q is the name of a built-in guard", name)
	}
	if priority < MinUserPriority {
		errs.addf(priorityPath, "must be >= %d: a user guard runs after the built-ins, so that it can only tighten (got %d)", MinUserPriority, priority)
	}
}

// Name is "rules" for the process-wide rules, or the rule set's name.
func (r *Rules) Name() string { return r.name }

// Priority is 100 for the process-wide rules, or the rule set's priority.
func (r *Rules) Priority() int { return r.priority }

func (*Rules) inline() {}

// Len is the number of rules.
func (r *Rules) Len() int { return len(r.rules) }

// Check evaluates the rules against a.
func (r *Rules) Check(_ context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	call, ok := toolCallOf(a)
	if !ok {
		if kindOf(a) == kindUnknown {
			return noeta.VerdictResult{}, errUnsupportedAction(a)
		}
		return noeta.Allow(), nil
	}
	ev := ruleEval{call: call, c: c}
	defer ev.release()
	for i := range r.rules {
		cr := &r.rules[i]
		if !cr.glob.match(call.Tool) {
			continue
		}
		matched, err := cr.eval(&ev)
		if err != nil {
			return noeta.Deny(fmt.Sprintf("%s on %q failed: %v; fail-closed", cr.path, cr.matchTool, err)), nil
		}
		if matched {
			return cr.verdict, nil
		}
	}
	return noeta.Allow(), nil
}

// compiledRule is a Rule ready to run: glob compiled, path split and encoded,
// regex and CEL compiled, verdict and reason built.
type compiledRule struct {
	path      string // rules[3], guards[0].rules[1]: where the rule was written
	matchTool string
	glob      glob
	verdict   noeta.VerdictResult

	hasArg   bool
	segments [][]byte // the path's keys as they appear in canonical JSON
	op       MatchOp
	equals   []byte // canonical JSON
	contains []byte
	re       *regexp.Regexp
	reLits   [][]byte // one of these is in every match; nil: no prefilter

	when *celProgram
}

func compileRules(rules []Rule, path string, errs *configErrors) []compiledRule {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		p := index(path, i)
		cr := compiledRule{path: p, matchTool: r.MatchTool}
		ok := true
		fail := func(field, format string, args ...any) {
			errs.addf(join(p, field), format, args...)
			ok = false
		}
		if r.MatchTool == "" {
			fail("match_tool", "required")
		}
		cr.glob = compileGlob(r.MatchTool)
		switch r.Action {
		case noeta.VerdictAllow, noeta.VerdictDeny, noeta.VerdictRequireApproval:
			reason := r.Reason
			if reason == "" {
				reason = fmt.Sprintf("hook rule on %q", r.MatchTool)
			}
			if r.Action == noeta.VerdictAllow {
				cr.verdict = noeta.Allow()
			} else {
				cr.verdict = noeta.VerdictResult{Verdict: r.Action, Reason: reason}
			}
		case noeta.VerdictUnset:
			fail("action", "required: allow, deny or require_approval")
		default:
			fail("action", "must be allow, deny or require_approval, not %v", r.Action)
		}
		if m := r.MatchArg; m != nil {
			cr.hasArg = true
			ap := join(p, "match_arg")
			if segs, err := compilePath(m.Path); err != nil {
				errs.addf(join(ap, "path"), "%v", err)
				ok = false
			} else {
				cr.segments = segs
			}
			cr.op = m.Op
			opPath := join(ap, string(m.Op))
			switch m.Op {
			case MatchEquals:
				b, err := noeta.Canonical(m.Value)
				if err != nil {
					errs.addf(opPath, "not a JSON value: %v", err)
					ok = false
				}
				cr.equals = b
			case MatchContains:
				s, isStr := m.Value.(string)
				if !isStr {
					errs.addf(opPath, "must be a string, not %T", m.Value)
					ok = false
				}
				cr.contains = []byte(s)
			case MatchRegex:
				s, isStr := m.Value.(string)
				if !isStr {
					errs.addf(opPath, "must be a string, not %T", m.Value)
					ok = false
					break
				}
				re, err := regexp.Compile(s)
				if err != nil {
					errs.addf(opPath, "%v", err)
					ok = false
				}
				cr.re = re
				cr.reLits = requiredLiterals(s)
			default:
				errs.addf(ap, "needs one of equals, contains or regex (got op %q)", m.Op)
				ok = false
			}
		}
		if r.When != "" {
			prg, err := compileCEL(r.When)
			if err != nil {
				fail("when", "%v", err)
			}
			cr.when = prg
		}
		if ok {
			out = append(out, cr)
		}
	}
	return out
}

// compilePath splits a dotted path and encodes each key as it appears, between
// the quotes, in canonical JSON, so that a lookup compares bytes.
func compilePath(path string) ([][]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("required")
	}
	parts := strings.Split(path, ".")
	segs := make([][]byte, len(parts))
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("empty key in %q", path)
		}
		if !utf8.ValidString(p) {
			return nil, fmt.Errorf("invalid UTF-8 in %q", path)
		}
		b, err := noeta.Canonical(p)
		if err != nil {
			return nil, err
		}
		segs[i] = b[1 : len(b)-1]
	}
	return segs, nil
}

// ruleEval is the state of one Rules check, shared by its rules so that the
// arguments are canonicalised, and decoded for CEL, at most once.
type ruleEval struct {
	call     noeta.ToolCall
	c        *Context
	canon    []byte
	canonErr error
	canoned  bool
	vars     *celVars
}

func (ev *ruleEval) release() {
	if ev.vars != nil {
		ev.vars.release()
	}
}

func (ev *ruleEval) args() ([]byte, error) {
	if !ev.canoned {
		ev.canon, ev.canonErr = canonicalArgs(ev.call.Args)
		ev.canoned = true
	}
	return ev.canon, ev.canonErr
}

// eval reports whether the rule matches the call; its tool pattern has matched
// already.
func (cr *compiledRule) eval(ev *ruleEval) (bool, error) {
	if cr.hasArg {
		args, err := ev.args()
		if err != nil {
			return false, err
		}
		if !cr.matchArg(args) {
			return false, nil
		}
	}
	if cr.when != nil {
		args, err := ev.args()
		if err != nil {
			return false, err
		}
		if ev.vars == nil {
			ev.vars = newCELVars(ev.call.Tool, args, ev.c)
		}
		return cr.when.eval(ev.vars)
	}
	return true, nil
}

func (cr *compiledRule) matchArg(args []byte) bool {
	v, ok := lookupPath(args, cr.segments)
	if !ok {
		return false
	}
	if cr.op == MatchEquals {
		return bytes.Equal(v, cr.equals)
	}
	s, ok := stringValue(v)
	if !ok {
		return false
	}
	if cr.op == MatchContains {
		return bytes.Contains(s, cr.contains)
	}
	return mayMatch(cr.reLits, s) && cr.re.Match(s)
}

// stringValue returns the first MatchStringCap characters of a canonical JSON
// string value, and false for any other value.
func stringValue(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		// Canonical strings escape everything but printable ASCII, so
		// without escapes a character is a byte.
		return raw[:min(len(raw), MatchStringCap)], true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, false
	}
	b := []byte(s)
	if len(b) > MatchStringCap {
		n := 0
		for i := range s {
			if n == MatchStringCap {
				b = b[:i]
				break
			}
			n++
		}
	}
	return b, true
}

// lookupPath follows object keys through canonical JSON and returns the bytes
// of the value found. It relies on the input being canonical (no whitespace,
// valid), which canonicalArgs guarantees, and stays in bounds regardless.
func lookupPath(doc []byte, segs [][]byte) ([]byte, bool) {
	for _, seg := range segs {
		if len(doc) < 2 || doc[0] != '{' {
			return nil, false
		}
		found := false
		for i := 1; i < len(doc) && doc[i] == '"'; {
			kEnd := skipString(doc, i)
			if kEnd >= len(doc) || doc[kEnd] != ':' {
				return nil, false
			}
			key := doc[i+1 : kEnd-1]
			vEnd := skipValue(doc, kEnd+1)
			if bytes.Equal(key, seg) {
				doc, found = doc[kEnd+1:vEnd], true
				break
			}
			i = vEnd
			if i < len(doc) && doc[i] == ',' {
				i++
			}
		}
		if !found {
			return nil, false
		}
	}
	return doc, true
}

// skipString returns the offset after the string that starts at doc[i].
func skipString(doc []byte, i int) int {
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(doc)
}

// skipValue returns the offset after the value that starts at doc[i].
func skipValue(doc []byte, i int) int {
	if i >= len(doc) {
		return len(doc)
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); j++ {
			switch doc[j] {
			case '"':
				j = skipString(doc, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(doc)
	}
	for j := i; j < len(doc); j++ {
		switch doc[j] {
		case ',', '}', ']':
			return j
		}
	}
	return len(doc)
}
