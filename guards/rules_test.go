package guards

import (
	"regexp"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

func mustRules(t testing.TB, rules ...Rule) *Rules {
	t.Helper()
	r, err := NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func denyIf(op MatchOp, path string, v any) Rule {
	return Rule{MatchTool: "*", MatchArg: &MatchArg{Path: path, Op: op, Value: v}, Action: noeta.VerdictDeny, Reason: "matched"}
}

func TestRulesMatchArg(t *testing.T) {
	long := strings.Repeat("a", MatchStringCap)
	tests := []struct {
		name  string
		rule  Rule
		args  string
		match bool
	}{
		// equals: JSON equality.
		{"equals string", denyIf(MatchEquals, "mode", "0777"), `{"mode":"0777"}`, true},
		{"equals string differs", denyIf(MatchEquals, "mode", "0777"), `{"mode":"0755"}`, false},
		{"equals int vs float literal", denyIf(MatchEquals, "n", 1), `{"n":1.0}`, true},
		{"equals float vs int literal", denyIf(MatchEquals, "n", 2.0), `{"n":2}`, true},
		{"equals exponent", denyIf(MatchEquals, "n", 100), `{"n":1e2}`, true},
		{"equals true is not 1", denyIf(MatchEquals, "n", true), `{"n":1}`, false},
		{"equals bool", denyIf(MatchEquals, "force", true), `{"force":true}`, true},
		{"equals null", denyIf(MatchEquals, "x", nil), `{"x":null}`, true},
		{"equals null is not missing", denyIf(MatchEquals, "x", nil), `{}`, false},
		{"equals object, any key order", denyIf(MatchEquals, "o", map[string]any{"a": 1, "b": []any{"x", 2}}), `{"o":{"b":["x",2],"a":1}}`, true},
		{"equals array order matters", denyIf(MatchEquals, "l", []any{1, 2}), `{"l":[2,1]}`, false},
		{"equals non-ASCII", denyIf(MatchEquals, "s", "é"), `{"s":"\u00e9"}`, true},
		{"equals escaped form", denyIf(MatchEquals, "s", "é"), `{"s":"é"}`, true},
		// Paths.
		{"nested path", denyIf(MatchEquals, "opts.mode", "x"), `{"opts":{"mode":"x","z":1},"a":2}`, true},
		{"nested path missing", denyIf(MatchEquals, "opts.mode", "x"), `{"opts":{"other":"x"}}`, false},
		{"path through a non-object", denyIf(MatchEquals, "opts.mode", "x"), `{"opts":["mode"]}`, false},
		{"path through a string", denyIf(MatchEquals, "opts.mode", "x"), `{"opts":"mode"}`, false},
		{"no array indexing", denyIf(MatchEquals, "l.0", "x"), `{"l":["x"]}`, false},
		{"non-ASCII key", denyIf(MatchEquals, "clé", 1), `{"clé":1}`, true},
		{"key that needs escaping", denyIf(MatchEquals, `a"b`, 1), `{"a\"b":1}`, true},
		{"args not an object", denyIf(MatchEquals, "x", 1), `[1]`, false},
		{"no args", denyIf(MatchEquals, "x", 1), ``, false},
		{"later key after a nested value", denyIf(MatchEquals, "z", 1), `{"a":{"b":[1,{"c":"}"}]},"z":1}`, true},
		// contains.
		{"contains", denyIf(MatchContains, "command", "sudo"), `{"command":"sudo rm"}`, true},
		{"contains not", denyIf(MatchContains, "command", "sudo"), `{"command":"ls"}`, false},
		{"contains non-string value", denyIf(MatchContains, "command", "1"), `{"command":1}`, false},
		{"contains decodes escapes", denyIf(MatchContains, "c", "a\nb"), `{"c":"xa\nby"}`, true},
		{"contains non-ASCII", denyIf(MatchContains, "c", "ü"), `{"c":"Grüße"}`, true},
		{"contains within the cap", denyIf(MatchContains, "c", "ab"), `{"c":"` + long[:MatchStringCap-1] + `b"}`, true},
		// Past the cap a rule cannot read the value: a deny rule denies
		// (TestRulesCannotBeBlinded).
		{"contains beyond the cap", denyIf(MatchContains, "c", "b"), `{"c":"` + long + `b"}`, true},
		{"contains beyond the cap, escaped", denyIf(MatchContains, "c", "b"), `{"c":"é` + long + `b"}`, true},
		{"cap counts characters", denyIf(MatchContains, "c", "éb"), `{"c":"` + long[:MatchStringCap-2] + `éb"}`, true},
		// regex: RE2, unanchored.
		{"regex", denyIf(MatchRegex, "command", `rm\s+-rf`), `{"command":"sudo rm  -rf /"}`, true},
		{"regex no match", denyIf(MatchRegex, "command", `rm\s+-rf`), `{"command":"rm -r"}`, false},
		{"regex anchored by the user", denyIf(MatchRegex, "path", `^/etc/`), `{"path":"x/etc/"}`, false},
		{"regex non-string value", denyIf(MatchRegex, "n", `1`), `{"n":1}`, false},
		{"regex case-insensitive", denyIf(MatchRegex, "c", `(?i)DROP\s+TABLE`), `{"c":"drop table x"}`, true},
		{"regex alternation", denyIf(MatchRegex, "p", `^/etc/|\.ssh/`), `{"p":"/home/u/.ssh/id"}`, true},
		{"regex beyond the cap", denyIf(MatchRegex, "c", `b`), `{"c":"` + long + `b"}`, true},
		{"regex at the cap", denyIf(MatchRegex, "c", `b`), `{"c":"` + long + `"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRules(t, tt.rule)
			want := noeta.VerdictAllow
			if tt.match {
				want = noeta.VerdictDeny
			}
			wantVerdict(t, checkGuard(t, r, toolCall("tool", tt.args), gctx(noeta.GovernanceState{}, 0)), want, "")
		})
	}
}

func TestRulesWhen(t *testing.T) {
	g := noeta.GovernanceState{Iterations: 4, ToolCalls: 7, CostUSD: 1.5, SpawnedSubtasks: 2, InputTokens: 100, OutputTokens: 50}
	c := NewContext(ContextParams{TaskID: "task-9", Governance: g, SubtaskDepth: 1, ActiveSkills: []string{"pdf"}, Metadata: map[string]string{"team": "ops"}})
	tests := []struct {
		name    string
		when    string
		tool    string
		args    string
		verdict noeta.Verdict
		reason  string // prefix
	}{
		{"tool", `tool == "write_file"`, "write_file", `{}`, noeta.VerdictDeny, "when matched"},
		{"string method", `args.path.startsWith("/etc/")`, "write_file", `{"path":"/etc/passwd"}`, noeta.VerdictDeny, "when matched"},
		{"false", `args.path.startsWith("/etc/")`, "write_file", `{"path":"/tmp/x"}`, noeta.VerdictAllow, ""},
		{"has() guards a missing key", `has(args.path) && args.path.startsWith("/etc/")`, "write_file", `{}`, noeta.VerdictAllow, ""},
		{"in", `"path" in args`, "write_file", `{"path":1}`, noeta.VerdictDeny, "when matched"},
		{"nested", `args.opts.mode == "x"`, "t", `{"opts":{"mode":"x"}}`, noeta.VerdictDeny, "when matched"},
		{"numbers are doubles, compare with ints", `args.n == 3 && args.n > 2 && args.n < 3.5`, "t", `{"n":3}`, noeta.VerdictDeny, "when matched"},
		{"lists", `args.l.size() == 2 && "b" in args.l && args.l[0] == "a"`, "t", `{"l":["a","b"]}`, noeta.VerdictDeny, "when matched"},
		{"size and iteration", `args.size() == 2 && args.exists(k, k == "b")`, "t", `{"a":1,"b":2}`, noeta.VerdictDeny, "when matched"},
		{"null and bools", `args.x == null && args.y == true && !args.z`, "t", `{"x":null,"y":true,"z":false}`, noeta.VerdictDeny, "when matched"},
		{"escaped strings", `args.s == "é\n"`, "t", `{"s":"\u00e9\n"}`, noeta.VerdictDeny, "when matched"},
		{"equality of whole maps", `args.o == {"a": 1.0}`, "t", `{"o":{"a":1}}`, noeta.VerdictDeny, "when matched"},
		{"task counters", `task.iterations == 4 && task.tool_calls == 7 && task.cost_usd > 1.0 && task.spawned_subtasks == 2`, "t", `{}`, noeta.VerdictDeny, "when matched"},
		{"task fields", `task.id == "task-9" && task.subtask_depth == 1 && "pdf" in task.active_skills && task.metadata.team == "ops" && task.input_tokens + task.output_tokens == 150`, "t", `{}`, noeta.VerdictDeny, "when matched"},
		// A rule that errors denies.
		{"missing key errors", `args.path.startsWith("/etc/")`, "write_file", `{}`, noeta.VerdictDeny, `rules[0] on "*" failed: when: no such key: path; fail-closed`},
		{"type error errors", `args.n + 1 > 2`, "t", `{"n":3}`, noeta.VerdictDeny, `rules[0] on "*" failed: when: no such overload`},
		{"dyn result that is not a bool", `args.x`, "t", `{"x":"yes"}`, noeta.VerdictDeny, `rules[0] on "*" failed: when: result is string, not bool`},
		{"args not an object", `tool == "t" && args.x == 1`, "t", `[1]`, noeta.VerdictDeny, `rules[0] on "*" failed: when: args is not a JSON object`},
		{"args not JSON", `true`, "t", `{"x":`, noeta.VerdictDeny, `rules[0] on "*" failed: tool arguments are not valid JSON`},
		{"args with duplicate keys", `true`, "t", `{"x":1,"x":2}`, noeta.VerdictDeny, `rules[0] on "*" failed: tool arguments are not valid JSON`},
		{"cost limit", `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))`, "t", `{}`, noeta.VerdictDeny, `rules[0] on "*" failed: when: operation cancelled: actual cost limit exceeded`},
		// Not erroring: a rule whose tool pattern does not match never looks.
		{"a rule for another tool ignores bad args", `args.x`, "other", `{"x":`, noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pat := "*"
			if tt.name == "a rule for another tool ignores bad args" {
				pat = "t"
			}
			r := mustRules(t, Rule{MatchTool: pat, When: tt.when, Action: noeta.VerdictDeny, Reason: "when matched"})
			got := checkGuard(t, r, toolCall(tt.tool, tt.args), c)
			if got.Verdict != tt.verdict || !strings.HasPrefix(got.Reason, tt.reason) {
				t.Errorf("got %v %q, want %v %q…", got.Verdict, got.Reason, tt.verdict, tt.reason)
			}
		})
	}
}

func TestRulesOrder(t *testing.T) {
	r := mustRules(t,
		Rule{MatchTool: "shell", MatchArg: &MatchArg{Path: "command", Op: MatchRegex, Value: `^git status$`}, Action: noeta.VerdictAllow},
		Rule{MatchTool: "shell", MatchArg: &MatchArg{Path: "command", Op: MatchContains, Value: "rm"}, Action: noeta.VerdictDeny, Reason: "no rm"},
		Rule{MatchTool: "shell", Action: noeta.VerdictRequireApproval},
		Rule{MatchTool: "write_*", MatchArg: &MatchArg{Path: "path", Op: MatchRegex, Value: `^/etc/`}, When: `args.size() > 1`, Action: noeta.VerdictDeny, Reason: "both"},
		Rule{MatchTool: "*", MatchArg: &MatchArg{Path: "x", Op: MatchEquals, Value: 1}, Action: noeta.VerdictDeny},
	)
	c := gctx(noeta.GovernanceState{}, 0)
	tests := []struct {
		name    string
		a       noeta.ProposedAction
		verdict noeta.Verdict
		reason  string
	}{
		{"an allow rule ends the scan", toolCall("shell", `{"command":"git status","x":1}`), noeta.VerdictAllow, ""},
		{"the first match decides", toolCall("shell", `{"command":"rm -rf /","x":1}`), noeta.VerdictDeny, "no rm"},
		{"a tool-only rule", toolCall("shell", `{"command":"ls"}`), noeta.VerdictRequireApproval, `hook rule on "shell"`},
		{"match_arg and when must both match", toolCall("write_file", `{"path":"/etc/x","mode":"w"}`), noeta.VerdictDeny, "both"},
		{"match_arg without when", toolCall("write_file", `{"path":"/etc/x"}`), noeta.VerdictAllow, ""},
		{"when without match_arg", toolCall("write_file", `{"path":"/tmp/x","mode":"w"}`), noeta.VerdictAllow, ""},
		{"the default reason names the pattern", toolCall("echo", `{"x":1}`), noeta.VerdictDeny, `hook rule on "*"`},
		{"no rule matches", toolCall("echo", `{"x":2}`), noeta.VerdictAllow, ""},
		{"spawn is not a tool call", spawn("shell"), noeta.VerdictAllow, ""},
		{"finish is not a tool call", finish(), noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantVerdict(t, checkGuard(t, r, tt.a, c), tt.verdict, tt.reason)
		})
	}
}

func TestNewRulesErrors(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"no match_tool", Rule{Action: noeta.VerdictDeny}, "rules[0].match_tool: required"},
		{"no action", Rule{MatchTool: "x"}, "rules[0].action: required"},
		{"bad action", Rule{MatchTool: "x", Action: 7}, "rules[0].action: must be allow, deny or require_approval"},
		{"no path", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Op: MatchEquals, Value: 1}}, "rules[0].match_arg.path: required"},
		{"empty path key", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a..b", Op: MatchEquals, Value: 1}}, `rules[0].match_arg.path: empty key in "a..b"`},
		{"no op", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a"}}, "rules[0].match_arg: needs one of equals, contains or regex"},
		{"equals not JSON", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a", Op: MatchEquals, Value: make(chan int)}}, "rules[0].match_arg.equals: not a JSON value"},
		{"contains not a string", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a", Op: MatchContains, Value: 3}}, "rules[0].match_arg.contains: must be a string, not int"},
		{"regex not a string", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a", Op: MatchRegex, Value: nil}}, "rules[0].match_arg.regex: must be a string"},
		{"regex lookbehind (Python, not RE2)", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a", Op: MatchRegex, Value: `(?<!x)y`}}, "rules[0].match_arg.regex: error parsing regexp"},
		{"regex backreference", Rule{MatchTool: "x", Action: noeta.VerdictDeny, MatchArg: &MatchArg{Path: "a", Op: MatchRegex, Value: `(a)\1`}}, "rules[0].match_arg.regex: error parsing regexp: invalid escape sequence"},
		{"CEL syntax", Rule{MatchTool: "x", Action: noeta.VerdictDeny, When: `args.x ==`}, "rules[0].when: Syntax error"},
		{"CEL unknown variable", Rule{MatchTool: "x", Action: noeta.VerdictDeny, When: `argz.x`}, "rules[0].when: undeclared reference to 'argz'"},
		{"CEL unknown task field", Rule{MatchTool: "x", Action: noeta.VerdictDeny, When: `task.cost > 1.0`}, "rules[0].when: undefined field 'cost'"},
		{"CEL not a bool", Rule{MatchTool: "x", Action: noeta.VerdictDeny, When: `tool + "x"`}, "rules[0].when: must be a bool expression, not string"},
		{"CEL too long", Rule{MatchTool: "x", Action: noeta.VerdictDeny, When: strings.Repeat("true && ", 3000) + "true"}, "rules[0].when:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRules([]Rule{{MatchTool: "ok", Action: noeta.VerdictAllow}, tt.rule})
			want := strings.Replace(tt.want, "rules[0]", "rules[1]", 1)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

func TestNewRuleSet(t *testing.T) {
	rules := []Rule{{MatchTool: "write_file", Action: noeta.VerdictDeny, Reason: "freeze"}}
	rs, err := NewRuleSet("change-freeze", 150, rules)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Name() != "change-freeze" || rs.Priority() != 150 || rs.Len() != 1 {
		t.Errorf("got %s at %d with %d rules", rs.Name(), rs.Priority(), rs.Len())
	}
	for _, tt := range []struct {
		name     string
		priority int
		want     string
	}{
		{"x", 99, "priority: must be >= 100"},
		{"x", -1, "priority: must be >= 100"},
		{"", 100, "name: required"},
		{"budget", 100, `name: "budget" is the name of a built-in guard`},
		{"rules", 100, `name: "rules" is the name of a built-in guard`},
	} {
		if _, err := NewRuleSet(tt.name, tt.priority, rules); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewRuleSet(%q, %d): got %v, want %q", tt.name, tt.priority, err, tt.want)
		}
	}
}

func TestRequiredLiterals(t *testing.T) {
	tests := []struct {
		re   string
		want []string
	}{
		{`rm\s+-rf`, []string{"-rf"}},
		{`^/etc/|\.ssh/`, []string{".ssh/", "/etc/"}},
		{`(^|/)\.\.(/|$)`, []string{".."}},
		{`(?i)drop`, nil},
		{`a*`, nil},
		{`(abc)+x`, []string{"abc"}},
		{`x{2,}`, []string{"x"}},
		{`.`, nil},
		{`a|b*`, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, l := range requiredLiterals(tt.re) {
			got = append(got, string(l))
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("requiredLiterals(%q) = %q, want %q", tt.re, got, tt.want)
		}
		// Whatever it says must hold for a match.
		re := regexp.MustCompile(tt.re)
		for _, s := range []string{"rm -rf", "/etc/x", "a/../b", "DROP", "", "abcx", "xx", "b"} {
			if re.MatchString(s) && !mayMatch(requiredLiterals(tt.re), []byte(s)) {
				t.Errorf("%q matches %q but the prefilter says it cannot", tt.re, s)
			}
		}
	}
}

// TestCELFastPath pins which expressions may run without cost tracking: those
// whose worst case, for inputs up to celSizeBound, is within the limit.
func TestCELFastPath(t *testing.T) {
	tests := []struct {
		when string
		fast bool
	}{
		{`has(args.path) && args.path.startsWith("/proc/")`, true},
		{`task.cost_usd > 15.0 && tool != "echo"`, true},
		{`args.command.matches("rm\\s+-rf")`, true},
		{`args.l.exists(x, x == "a")`, true},
		{`args.l.all(a, args.l.all(b, a == b))`, false}, // quadratic in the input
		{`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))`, false},
	}
	for _, tt := range tests {
		p, err := compileCEL(tt.when)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.fast != nil; got != tt.fast {
			t.Errorf("%s: fast path %v (estimate %d), want %v", tt.when, got, p.maxCost, tt.fast)
		}
	}

	// Inputs over the bound take the tracked program.
	c := gctx(noeta.GovernanceState{}, 0)
	small := newCELVars("t", []byte(`{"a":1}`), c)
	defer small.release()
	bigArgs := []byte(`{"s":"` + strings.Repeat("x", celSizeBound) + `"}`)
	big := newCELVars("t", bigArgs, c)
	defer big.release()
	bigTask := newCELVars("t", []byte(`{}`), NewContext(ContextParams{Metadata: map[string]string{"k": strings.Repeat("v", celSizeBound+1)}}))
	defer bigTask.release()
	if !small.small() || big.small() || bigTask.small() {
		t.Errorf("small() = %v, %v, %v; want true, false, false", small.small(), big.small(), bigTask.small())
	}
}

func TestRulesRefuses(t *testing.T) {
	r := mustRules(t,
		Rule{MatchTool: "mcp__files__read*", Action: noeta.VerdictAllow},
		Rule{MatchTool: "mcp__files__*", Action: noeta.VerdictDeny, Reason: "no files"},
		denyIf(MatchEquals, "mode", "0777"),
		Rule{MatchTool: "shell", When: `tool == "shell"`, Action: noeta.VerdictDeny},
		Rule{MatchTool: "echo", Action: noeta.VerdictDeny, Shadow: true},
	)
	for tool, want := range map[string]bool{
		"mcp__files__write":    true,  // the unconditional deny is the first rule naming it
		"mcp__files__read_all": false, // an allow comes first
		"shell":                false, // the first rule naming it has a condition
		"echo":                 false, // a shadow rule never decides; the match_arg rule comes first
	} {
		if got := r.Refuses(tool); got != want {
			t.Errorf("Refuses(%q) = %v, want %v", tool, got, want)
		}
	}
}
