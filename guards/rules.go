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
	"github.com/noeta-go/noeta/internal/glob"
)

// MatchStringCap is the longest argument string, in characters, that
// match_arg's contains and regex and match_shell examine. They do not look at
// part of a longer string: a rule that cannot read all of what it judges must
// not let it through, so a deny or require_approval rule decides as if it had
// matched, saying why, and an allow rule does not match
// (docs/adr/0015-a-rule-that-cannot-read-does-not-allow.md).
const MatchStringCap = 64 * 1024

// Rule is one user PreToolUse rule. It matches a tool call when MatchTool
// matches the tool's name and, of MatchArg, MatchShell and When, every one
// that is set matches; the first rule that matches decides with its Action. A
// test that cannot judge the call (MatchStringCap, MatchShell) makes a deny or
// require_approval rule match and an allow rule not match.
type Rule struct {
	// MatchTool is a glob on the whole tool name: '*' matches any run of
	// characters, '?' one, [a-z] and [!a-z] a class (Python fnmatchcase).
	MatchTool string
	// MatchArg, if set, tests one argument.
	MatchArg *MatchArg
	// MatchShell, if set, tests the commands of a shell script held by one
	// argument.
	MatchShell *MatchShell
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
	// Shadow makes the rule a shadow rule: it is judged on every tool call,
	// on its own, and what it would have decided is reported beside the
	// stack's decision ([Decision.Shadows]), but it never decides
	// (docs/adr/0086-shadow-rules-are-judged-and-never-decide.md).
	Shadow bool
}

// MatchOp is how [MatchArg] compares.
type MatchOp string

// The match_arg operators.
const (
	// MatchEquals: the argument equals Value as JSON values (numbers by value,
	// 1 == 1.0; objects regardless of key order; true is not 1).
	MatchEquals MatchOp = "equals"
	// MatchContains: the argument is a string containing Value, a string.
	MatchContains MatchOp = "contains"
	// MatchRegex: the argument is a string in which Value, an RE2 pattern,
	// finds a match (unanchored).
	MatchRegex MatchOp = "regex"
)

// MatchArg tests one argument of a tool call. A missing argument, or a path
// that runs through something that is not an object, does not match; nor does
// a value that is not a string for contains and regex.
//
// equals compares the whole value, whatever its size. contains and regex
// examine strings of up to MatchStringCap characters; on a longer string they
// cannot answer, and the rule decides as if it matched when its action is deny
// or require_approval, and does not match when it is allow.
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
	rules    []compiledRule // the rules that decide, in order
	// shadows are the shadow rules: each a list judged first-match on its
	// own, whose answer never counts. A shadow rule is a list of one; a
	// shadow rule set is one list of all its rules.
	shadows [][]compiledRule
}

var _ inlineGuard = (*Rules)(nil)

// NewRules compiles the process-wide rules: a guard named "rules" at priority 100.
func NewRules(rules []Rule) (*Rules, error) {
	return newRules(NameRules, PriorityRules, rules, "rules")
}

// NewRuleSet compiles a named user rule set. Its priority must be at least
// MinUserPriority, and its name must not be one of the built-ins'.
func NewRuleSet(name string, priority int, rules []Rule) (*Rules, error) {
	return newRuleSet(name, priority, rules, false)
}

// NewShadowRuleSet compiles a named user rule set in shadow: the set is
// judged on every tool call as it would be if it decided, and its answer is
// reported in [Decision.Shadows], never counted.
func NewShadowRuleSet(name string, priority int, rules []Rule) (*Rules, error) {
	return newRuleSet(name, priority, rules, true)
}

func newRuleSet(name string, priority int, rules []Rule, shadow bool) (*Rules, error) {
	var errs configErrors
	checkUserGuard(name, priority, "name", "priority", &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: rule set: %w", err)
	}
	r := buildRules(name, priority, rules, shadow, "rules", &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	return r, nil
}

func newRules(name string, priority int, rules []Rule, path string) (*Rules, error) {
	var errs configErrors
	r := buildRules(name, priority, rules, false, path, &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	return r, nil
}

// buildRules compiles rules into a Rules guard, setting the shadow rules
// apart from those that decide. With shadowSet, the whole list is one
// shadow list and nothing decides.
func buildRules(name string, priority int, rules []Rule, shadowSet bool, path string, errs *configErrors) *Rules {
	cr := compileRules(rules, path, errs)
	r := &Rules{name: name, priority: priority}
	if shadowSet {
		if len(cr) > 0 {
			r.shadows = [][]compiledRule{cr}
		}
		return r
	}
	for _, c := range cr {
		if c.shadow {
			r.shadows = append(r.shadows, []compiledRule{c})
			continue
		}
		r.rules = append(r.rules, c)
	}
	return r
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

// Len is the number of rules that decide; shadow rules are not counted.
func (r *Rules) Len() int { return len(r.rules) }

// Refuses reports whether the rules deny every call of tool whatever its
// arguments: the first rule that names it (shadow rules aside) is a deny
// with no condition (no match_arg, match_shell or when). A client offered
// the tools an agent may call need not be shown it.
func (r *Rules) Refuses(tool string) bool {
	for i := range r.rules {
		cr := &r.rules[i]
		if !cr.glob.Match(tool) {
			continue
		}
		return !cr.hasArg && cr.shell == nil && cr.when == nil && cr.verdict.Verdict == noeta.VerdictDeny
	}
	return false
}

// Check evaluates the rules against a.
func (r *Rules) Check(_ context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	call, ok := toolCallOf(a)
	if !ok {
		if kindOf(a) == kindUnknown {
			return noeta.VerdictResult{}, errUnsupportedAction(a)
		}
		return noeta.Allow(), nil
	}
	if len(r.rules) == 0 {
		return noeta.Allow(), nil
	}
	ev := ruleEval{call: call, c: c}
	defer ev.release()
	v, _, _ := judge(r.rules, &ev)
	return v, nil
}

// judge runs a list of rules against a call: the first rule that matches
// decides. It returns the verdict, the rule that gave it (nil when none
// matched, and the call is allowed), and whether that rule failed (an
// error, which denies: fail-closed).
func judge(rules []compiledRule, ev *ruleEval) (noeta.VerdictResult, *compiledRule, bool) {
	for i := range rules {
		cr := &rules[i]
		if !cr.glob.Match(ev.call.Tool) {
			continue
		}
		res, why, err := cr.eval(ev)
		if err != nil {
			return noeta.Deny(fmt.Sprintf("%s on %q failed: %v; fail-closed", cr.path, cr.matchTool, err)), cr, true
		}
		switch res {
		case matched:
			return cr.verdict, cr, false
		case unjudged:
			// What the rule could not read may be exactly what it is
			// there to catch; only a refusing rule may act on it.
			if cr.allow {
				continue
			}
			return noeta.VerdictResult{
				Verdict: cr.verdict.Verdict,
				Reason:  fmt.Sprintf("%s (%s on %q: %s: treated as matching)", cr.verdict.Reason, cr.path, cr.matchTool, why),
			}, cr, false
		}
	}
	return noeta.Allow(), nil, false
}

// ruleOutcome is what one rule, or one of its tests, makes of a call.
type ruleOutcome uint8

const (
	notMatched ruleOutcome = iota
	matched
	// unjudged: the test could not examine all it had to (a string over
	// MatchStringCap, a shell command that does not parse or is built at run
	// time); a refusing rule treats it as matched, an allow rule as not.
	unjudged
)

// both combines the outcomes of two tests that must both hold.
func both(a ruleOutcome, aWhy string, b ruleOutcome, bWhy string) (ruleOutcome, string) {
	switch {
	case a == notMatched || b == notMatched:
		return notMatched, ""
	case a == unjudged:
		return unjudged, aWhy
	case b == unjudged:
		return unjudged, bWhy
	}
	return matched, ""
}

// compiledRule is a Rule ready to run: glob compiled, path split and encoded,
// regex and CEL compiled, verdict and reason built.
type compiledRule struct {
	path      string // rules[3], guards[0].rules[1]: where the rule was written
	matchTool string
	glob      glob.Pattern
	verdict   noeta.VerdictResult

	allow  bool // the action is ALLOW: a rule that cannot judge does not match
	shadow bool // judged, reported, never counted

	hasArg   bool
	argPath  string   // the path as written, for reasons
	segments [][]byte // the path's keys as they appear in canonical JSON
	op       MatchOp
	equals   []byte // canonical JSON
	contains []byte
	re       *regexp.Regexp
	reLits   [][]byte // one of these is in every match; nil: no prefilter

	shell *shellMatcher

	when *celProgram
}

func compileRules(rules []Rule, path string, errs *configErrors) []compiledRule {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		p := index(path, i)
		cr := compiledRule{path: p, matchTool: r.MatchTool, shadow: r.Shadow}
		ok := true
		fail := func(field, format string, args ...any) {
			errs.addf(join(p, field), format, args...)
			ok = false
		}
		if r.MatchTool == "" {
			fail("match_tool", "required")
		}
		cr.glob = glob.Compile(r.MatchTool)
		switch r.Action {
		case noeta.VerdictAllow, noeta.VerdictDeny, noeta.VerdictRequireApproval:
			reason := r.Reason
			if reason == "" {
				reason = fmt.Sprintf("hook rule on %q", r.MatchTool)
			}
			if r.Action == noeta.VerdictAllow {
				cr.verdict = noeta.Allow()
				cr.allow = true
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
			cr.argPath = m.Path
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
		if r.MatchShell != nil {
			sm, sok := compileShell(r.MatchShell, r.Action, join(p, "match_shell"), errs)
			ok = ok && sok
			cr.shell = sm
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
	// scripts holds the shell scripts analysed so far, by the argument
	// path that held them, so that rules over one script parse it once.
	scripts map[string]*shellScript
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

// eval reports whether the rule matches the call, its tool pattern having
// matched already, and if it cannot tell, why.
func (cr *compiledRule) eval(ev *ruleEval) (ruleOutcome, string, error) {
	res, why := matched, ""
	if cr.hasArg || cr.shell != nil {
		args, err := ev.args()
		if err != nil {
			return notMatched, "", err
		}
		if cr.hasArg {
			r, w := cr.matchArg(args)
			if res, why = both(res, why, r, w); res == notMatched {
				return notMatched, "", nil
			}
		}
		if cr.shell != nil {
			r, w := cr.shell.match(ev, args)
			if res, why = both(res, why, r, w); res == notMatched {
				return notMatched, "", nil
			}
		}
	}
	if cr.when != nil {
		args, err := ev.args()
		if err != nil {
			return notMatched, "", err
		}
		if ev.vars == nil {
			ev.vars = newCELVars(ev.call.Tool, args, ev.c)
		}
		// CEL reads whole values: its answer is never partial, and its
		// errors (the cost limit on a huge input among them) deny.
		ok, err := cr.when.eval(ev.vars)
		if err != nil {
			return notMatched, "", err
		}
		if !ok {
			return notMatched, "", nil
		}
	}
	return res, why, nil
}

func (cr *compiledRule) matchArg(args []byte) (ruleOutcome, string) {
	v, ok := lookupPath(args, cr.segments)
	if !ok {
		return notMatched, ""
	}
	if cr.op == MatchEquals {
		// Byte equality of canonical forms reads the whole value.
		if bytes.Equal(v, cr.equals) {
			return matched, ""
		}
		return notMatched, ""
	}
	s, n, ok := stringValue(v)
	switch {
	case !ok:
		return notMatched, ""
	case n > MatchStringCap:
		return unjudged, overCap(cr.argPath, n)
	case cr.op == MatchContains:
		if bytes.Contains(s, cr.contains) {
			return matched, ""
		}
	case mayMatch(cr.reLits, s) && cr.re.Match(s):
		return matched, ""
	}
	return notMatched, ""
}

// overCap is why a rule could not examine a string of n characters.
func overCap(path string, n int) string {
	return fmt.Sprintf("argument %s is %d characters, over the %d-character cap a rule can examine", path, n, MatchStringCap)
}

// stringValue decodes a canonical JSON string value and counts its
// characters; it returns false for any other value. A string of more than
// MatchStringCap characters comes back with its count and no text: nothing
// may examine part of it.
func stringValue(v []byte) (s []byte, chars int, ok bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, 0, false
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		// Canonical strings escape everything but printable ASCII, so
		// without escapes a character is a byte.
		if len(raw) > MatchStringCap {
			return nil, len(raw), true
		}
		return raw, len(raw), true
	}
	var str string
	if err := json.Unmarshal(v, &str); err != nil {
		return nil, 0, false
	}
	n := utf8.RuneCountInString(str)
	if n > MatchStringCap {
		return nil, n, true
	}
	return []byte(str), n, true
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
