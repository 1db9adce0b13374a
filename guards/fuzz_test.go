package guards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"github.com/noeta-go/noeta"
)

// FuzzRules loads rules from arbitrary YAML and evaluates them on arbitrary
// tool names and argument bytes. Loading either fails with an error or yields
// rules; evaluation never panics; a rule that errors always denies, naming
// itself; otherwise the first matching rule decides. Along the way it checks
// the pieces against independent implementations: path lookup against
// encoding/json, and the regex prefilter against the regex itself (the glob
// is checked against Python's fnmatch by internal/glob's FuzzMatch). The
// documents are decoded by package config (see main_test.go).
func FuzzRules(f *testing.F) {
	for _, seed := range []struct{ yaml, tool, args string }{
		{designConfig, "shell", `{"command":"rm  -rf /"}`},
		{designConfig, "write_file", `{"path":"/etc/hosts"}`},
		{designConfig, "write_file", `{}`},
		{benchConfig, "read_file", `{"limit":200,"path":"docs/README.md"}`},
		{benchConfig, "read_file", `{"path":"../../etc/shadow"}`},
		{"rules:\n  - {match_tool: \"*\", when: 'args.n + 1 > 2', action: deny}\n", "t", `{"n":1}`},
		{"rules:\n  - {match_tool: \"[a-c]?*\", match_arg: {path: a.b, equals: {x: [1, 2.0, null]}}, action: require_approval}\n", "bx", `{"a":{"b":{"x":[1,2,null]}}}`},
		{"rules:\n  - {match_tool: \"*\", match_arg: {path: s, contains: \"é\"}, action: deny}\n", "t", `{"s":"caf\u00e9"}`},
		{"rules:\n  - {match_tool: \"*\", match_arg: {path: s, regex: \"(?i)x+y\"}, action: deny}\n  - {match_tool: \"*\", action: allow}\n", "t", `{"s":"XXY"}`},
		{"rules:\n  - {match_tool: \"*\", when: 'args.exists(k, k.size() > 3)', action: deny}\n", "t", `{"long":1,"a":[{"b":"}"}]}`},
		{"rules:\n  - {match_tool: x, when: 'task.metadata.size() == 0 && size(task.active_skills) == 0', action: deny}\n", "x", ``},
		{"guards:\n  - {name: g, priority: 150, rules: [{match_tool: \"*\", when: 'args.x', action: deny}]}\n", "t", `{"x":"not a bool"}`},
		{"rules: [{match_tool: '*', match_arg: {path: a, equals: &e [1, *e]}, action: deny}]", "t", `{}`},
		{"rules:\n  - {match_tool: shell, match_shell: {path: command, program: rm, flags_all: [recursive, force]}, action: deny}\n", "shell", `{"command":"sudo -u root sh -c 'r\"m\" -r -f x' | xargs"}`},
		{"rules:\n  - {match_tool: shell, match_shell: {path: command, program: [ls, cat]}, action: allow}\n  - {match_tool: shell, action: require_approval}\n", "shell", `{"command":"ls $(cat x) > /dev/null"}`},
		{"rules:\n  - {match_tool: shell, match_shell: {path: c, program: git, flags_any: [[-f, --force]]}, action: deny}\n", "shell", `{"c":"git push --for $X; eval \"$Y\""}`},
	} {
		f.Add(seed.yaml, seed.tool, []byte(seed.args))
	}
	c := NewContext(ContextParams{TaskID: "t", Governance: noeta.GovernanceState{Iterations: 2, CostUSD: 0.5}, Metadata: map[string]string{"k": "v"}})
	f.Fuzz(func(t *testing.T, doc, tool string, args []byte) {
		cfg, err := parseConfig([]byte(doc))
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("an empty error")
			}
			return
		}
		sets := append([]*Rules{}, cfg.sets...)
		if cfg.rules != nil {
			sets = append(sets, cfg.rules)
		}
		a := noeta.ProposedToolCall{Call: noeta.ToolCall{Tool: tool, Args: json.RawMessage(args)}}
		for _, r := range sets {
			got, err := r.Check(t.Context(), a, c)
			if err != nil {
				t.Fatalf("Rules.Check returned an error: %v", err)
			}
			want := expectRules(t, r, tool, args, c)
			if got != want {
				t.Fatalf("rules %s on %q %q: got %v %q, want %v %q", r.Name(), tool, args, got.Verdict, got.Reason, want.Verdict, want.Reason)
			}
		}
	})
}

// expectRules evaluates rule by rule, which is what Check must amount to, and
// checks each piece it can against an independent implementation.
func expectRules(t *testing.T, r *Rules, tool string, args []byte, c *Context) noeta.VerdictResult {
	t.Helper()
	canon, canonErr := canonicalArgs(args)
	var decoded map[string]any
	if canonErr == nil {
		_ = json.Unmarshal(canon, &decoded)
	}
	for i := range r.rules {
		cr := &r.rules[i]
		if !cr.glob.Match(tool) {
			continue
		}
		if (cr.hasArg || cr.when != nil) && canonErr != nil {
			return mustDenyNaming(t, cr, canonErr)
		}
		res, why := matched, ""
		if cr.hasArg {
			checkLookup(t, cr, canon, decoded)
			r, w := cr.matchArg(canon)
			if res, why = both(res, why, r, w); res == notMatched {
				continue
			}
		}
		if cr.shell != nil {
			r, w := cr.shell.match(&ruleEval{}, canon)
			if res, why = both(res, why, r, w); res == notMatched {
				continue
			}
		}
		if cr.when != nil {
			v := newCELVars(tool, canon, c)
			checkCELCost(t, cr.when, v)
			ok, err := cr.when.eval(v)
			v.release()
			if err != nil {
				return mustDenyNaming(t, cr, err)
			}
			if !ok {
				continue
			}
		}
		switch {
		case res == matched:
			return cr.verdict
		case !cr.allow:
			if why == "" {
				t.Fatalf("%s could not judge and gives no reason", cr.path)
			}
			return noeta.VerdictResult{Verdict: cr.verdict.Verdict, Reason: fmt.Sprintf("%s (%s on %q: %s: treated as matching)", cr.verdict.Reason, cr.path, cr.matchTool, why)}
		}
	}
	return noeta.Allow()
}

func mustDenyNaming(t *testing.T, cr *compiledRule, err error) noeta.VerdictResult {
	t.Helper()
	r := noeta.Deny(fmt.Sprintf("%s on %q failed: %v; fail-closed", cr.path, cr.matchTool, err))
	if !strings.HasPrefix(r.Reason, cr.path+" on ") {
		t.Fatalf("an erroring rule's reason does not name it: %q", r.Reason)
	}
	return r
}

// checkLookup compares the byte-level path lookup with encoding/json, and the
// regex prefilter with the regex.
func checkLookup(t *testing.T, cr *compiledRule, canon []byte, decoded map[string]any) {
	t.Helper()
	raw, found := lookupPath(canon, cr.segments)
	var v any = decoded
	ok := decoded != nil
	for _, seg := range cr.segments {
		m, isMap := v.(map[string]any)
		if !ok || !isMap {
			ok = false
			break
		}
		var key string
		if err := json.Unmarshal(append(append([]byte{'"'}, seg...), '"'), &key); err != nil {
			t.Fatalf("segment %q does not decode: %v", seg, err)
		}
		v, ok = m[key]
	}
	if found != ok {
		t.Fatalf("lookupPath(%s, %q) found=%v, encoding/json found=%v", canon, cr.segments, found, ok)
	}
	if found {
		want, err := noeta.Canonical(v)
		if err == nil && !bytes.Equal(raw, want) {
			t.Fatalf("lookupPath(%s, %q) = %s, encoding/json gives %s", canon, cr.segments, raw, want)
		}
		s, n, isStr := stringValue(raw)
		if str, ok := v.(string); ok != isStr || (ok && n != utf8.RuneCountInString(str)) {
			t.Fatalf("stringValue(%s) = %d characters, %v; encoding/json gives %q", raw, n, isStr, v)
		}
		if res, _ := cr.matchArg(canon); res == unjudged && (cr.op == MatchEquals || n <= MatchStringCap) {
			t.Fatalf("%s could not judge %s, a value it can read whole", cr.path, raw)
		}
		if cr.op == MatchRegex && n <= MatchStringCap {
			if isStr && cr.re.Match(s) && !mayMatch(cr.reLits, s) {
				t.Fatalf("regex %v matches %q but its prefilter %q says it cannot", cr.re, s, cr.reLits)
			}
		}
	}
}

// checkCELCost checks the premise of the untracked fast path: whenever it
// would be taken, the tracked program's actual cost is within the static
// estimate, and both programs agree.
func checkCELCost(t *testing.T, p *celProgram, v *celVars) {
	t.Helper()
	if p.fast == nil || !v.small() {
		return
	}
	tracked, det, errT := p.prg.Eval(v)
	fast, _, errF := p.fast.Eval(v)
	if (errT == nil) != (errF == nil) || (errT == nil && tracked.Equal(fast) != types.True) {
		t.Fatalf("when %q: tracked gives %v, %v; untracked %v, %v", p.src, tracked, errT, fast, errF)
	}
	if det != nil && det.ActualCost() != nil && *det.ActualCost() > p.maxCost {
		t.Fatalf("when %q cost %d, over its static estimate %d", p.src, *det.ActualCost(), p.maxCost)
	}
}
