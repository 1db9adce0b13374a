package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/guards"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each must appear
	}{
		{"unknown top-level key", "agent: {}\n", []string{"agent: unknown key (known: agents, rules, guards, hooks, observers, models, mcp_servers, mcp_servers_file, approvals, http, sandbox, gateway) (line 1)"}},
		{"unknown agent key", "agents:\n  a:\n    tool: [x]\n", []string{"agents.a.tool: unknown key (known: tools, permission_mode, budget, permissions, repetition, rate_limits, model, system_prompt, max_context_chars, approval_timeout, approval, sandbox) (line 3)"}},
		{"unknown budget key", "agents:\n  a:\n    budget: {max_cost: 1}\n", []string{"agents.a.budget.max_cost: unknown key"}},
		{"unknown permissions key", "agents:\n  a:\n    permissions: {allow: [x]}\n", []string{"agents.a.permissions.allow: unknown key"}},
		{"unknown repetition key", "agents:\n  a:\n    repetition: {limit: 3}\n", []string{"agents.a.repetition.limit: unknown key"}},
		{"unknown rule key", "rules:\n  - {matchtool: x, action: deny}\n", []string{"rules[0].matchtool: unknown key", "rules[0].match_tool: required"}},
		{"unknown match_arg key", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, equal: 1}}\n", []string{"rules[0].match_arg.equal: unknown key"}},
		{"unknown guards key", "guards:\n  - {name: g, rules: [{match_tool: x, action: deny}], prio: 200}\n", []string{"guards[0].prio: unknown key"}},
		{"agents not a mapping", "agents: [a]\n", []string{"agents: must be a mapping, not a sequence (line 1)"}},
		{"rules not a list", "rules: {match_tool: x}\n", []string{"rules: must be a list, not a mapping"}},
		{"document not a mapping", "- a\n", []string{"must be a mapping, not a sequence"}},
		{"integer expected", "agents:\n  a:\n    budget: {max_iterations: ten}\n", []string{"agents.a.budget.max_iterations: must be an integer, not a string (line 3)"}},
		{"integer, not a fraction", "agents:\n  a:\n    budget: {max_tool_calls: 1.5}\n", []string{"agents.a.budget.max_tool_calls: must be an integer, not a number"}},
		{"number expected", "agents:\n  a:\n    budget: {max_cost_usd: \"2\"}\n", []string{"agents.a.budget.max_cost_usd: must be a number, not a string"}},
		{"negative cost", "agents:\n  researcher:\n    budget:\n      max_cost_usd: -1\n", []string{"agents.researcher.budget.max_cost_usd: must be >= 0 (line 4)"}},
		{"NaN cost", "agents:\n  a:\n    budget: {max_cost_usd: .nan}\n", []string{"agents.a.budget.max_cost_usd: must be >= 0"}},
		{"negative depth", "agents:\n  a:\n    budget: {max_subtask_depth: -1}\n", []string{"agents.a.budget.max_subtask_depth: must be >= 0"}},
		{"tools not a list", "agents:\n  a:\n    tools: shell\n", []string{"agents.a.tools: must be a list of strings, not a string"}},
		{"tool not a string", "agents:\n  a:\n    tools: [echo, 1]\n", []string{"agents.a.tools[1]: must be a string, not an integer"}},
		{"tool null", "agents:\n  a:\n    tools: [echo, ~]\n", []string{"agents.a.tools[1]: must be a string, not null"}},
		{"bad permission mode", "agents:\n  a:\n    permission_mode: yolo\n", []string{`agents.a.permission_mode: unsupported permission mode "yolo" (want default, acceptEdits or bypassPermissions) (line 3)`}},
		{"bad risk level", "agents:\n  a:\n    permissions: {max_risk_level: extreme}\n", []string{`agents.a.permissions.max_risk_level: unknown risk level "extreme"`}},
		{"empty risk level", "agents:\n  a:\n    permissions: {max_risk_level: \"\"}\n", []string{`agents.a.permissions.max_risk_level: must be low, medium or high, not empty`}},
		{"unknown subtask agent", "agents:\n  a:\n    permissions: {allowed_subtask_agents: [a, b]}\n", []string{`agents.a.permissions.allowed_subtask_agents[1]: unknown agent "b"`}},
		{"repetition allow", "agents:\n  a:\n    repetition: {threshold: 3, action: allow}\n", []string{`agents.a.repetition.action: must be deny or require_approval, not "allow"`}},
		{"repetition window 0", "agents:\n  a:\n    repetition: {threshold: 3, window: 0}\n", []string{"agents.a.repetition.window: must be >= 1"}},
		{"repetition window too big", "agents:\n  a:\n    repetition: {threshold: 3, window: 40}\n", []string{"agents.a.repetition.window: must be <= 32"}},
		{"repetition threshold out of reach", "agents:\n  a:\n    repetition: {threshold: 12}\n", []string{"agents.a.repetition.threshold: 12 can never be reached looking back over 8 calls; set window to at least 11"}},
		{"bad regex", "rules:\n  - {match_tool: a, action: deny}\n  - {match_tool: b, action: deny}\n  - {match_tool: shell, action: deny, match_arg: {path: command, regex: \"(?<=rm)\"}}\n", []string{"rules[2].match_arg.regex: error parsing regexp: invalid named capture: `(?<=rm)` (line 4)"}},
		{"two operators", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, equals: 1, regex: b}}\n", []string{"rules[0].match_arg: has both equals and regex; give exactly one of equals, contains or regex"}},
		{"no operator", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a}}\n", []string{"rules[0].match_arg: needs one of equals, contains or regex"}},
		{"contains not a string", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, contains: 5}}\n", []string{"rules[0].match_arg.contains: must be a string, not an integer"}},
		{"contains null", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, contains: }}\n", []string{"rules[0].match_arg.contains: must be a string, not null"}},
		{"equals NaN", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, equals: .nan}}\n", []string{`rules[0].match_arg.equals: not a JSON value: a number ".nan"`}},
		{"equals with a non-string key", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, equals: {1: b}}}\n", []string{"rules[0].match_arg.equals: keys must be strings"}},
		{"path with an empty key", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a., equals: 1}}\n", []string{`rules[0].match_arg.path: empty key in "a."`}},
		{"bad action", "rules:\n  - {match_tool: x, action: maybe}\n", []string{`rules[0].action: must be allow, deny or require_approval, not "maybe"`}},
		{"missing action", "rules:\n  - {match_tool: x}\n", []string{`rules[0].action: required`}},
		{"match_tool not a string", "rules:\n  - {match_tool: 5, action: deny}\n", []string{`rules[0].match_tool: must be a string, not an integer`}},
		{"bad CEL", "rules:\n  - {match_tool: x, action: deny, when: 'args.path.startsWith('}\n", []string{"rules[0].when: Syntax error"}},
		{"CEL of the wrong type", "rules:\n  - {match_tool: x, action: deny, when: 'task.iterations'}\n", []string{"rules[0].when: must be a bool expression, not int"}},
		{"user guard below 100", "guards:\n  - {name: early, priority: 99, rules: [{match_tool: x, action: allow}]}\n", []string{"guards[0].priority: must be >= 100"}},
		{"user guard negative", "guards:\n  - {name: early, priority: -5, rules: [{match_tool: x, action: allow}]}\n", []string{"guards[0].priority: must be >= 100"}},
		{"user guard without a name", "guards:\n  - {rules: [{match_tool: x, action: deny}]}\n", []string{"guards[0].name: required"}},
		{"user guard with a built-in name", "guards:\n  - {name: permission, rules: [{match_tool: x, action: deny}]}\n", []string{`guards[0].name: "permission" is the name of a built-in guard`}},
		{"two user guards with one name", "guards:\n  - {name: g, rules: [{match_tool: x, action: deny}]}\n  - {name: g, rules: [{match_tool: y, action: deny}]}\n", []string{`guards[1].name: "g" is already the name of another guard`}},
		{"user guard without rules", "guards:\n  - {name: g, rules: []}\n", []string{"guards[0].rules: required: a rule set needs at least one rule"}},
		{"rule error inside a user guard", "guards:\n  - {name: g, rules: [{match_tool: x, action: deny, when: 'nope'}]}\n", []string{"guards[0].rules[0].when: undeclared reference to 'nope'"}},
		{"duplicate key", "agents:\n  a: {}\n  a: {}\n", []string{"agents.a: duplicate key (line 3)"}},
		{"duplicate nested key", "agents:\n  a:\n    budget: {max_tool_calls: 1, max_tool_calls: 2}\n", []string{"agents.a.budget.max_tool_calls: duplicate key"}},
		{"YAML syntax", "agents:\n  a: [\n", []string{"yaml: line"}},
		{"odd agent name is quoted", "agents:\n  \"my agent\":\n    budget: {max_tool_calls: -1}\n", []string{`agents."my agent".budget.max_tool_calls: must be >= 0`}},
		{"alias bomb", aliasBomb(), []string{"too large or too deeply nested"}},
		{"alias cycle", "agents:\n  a: &a\n    budget: *a\n", []string{"agents.a.budget.budget: unknown key"}},
		{"alias cycle in a value", "rules:\n  - {match_tool: x, action: deny, match_arg: {path: a, equals: &e {k: *e}}}\n", []string{"too large or too deeply nested"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("noeta.yaml", []byte(tt.yaml))
			if err == nil || f != nil {
				t.Fatalf("no error, or a File with the error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got\n%v\nwant it to contain %q", err, w)
				}
			}
			// Every error, the decoder's and guards.NewConfig's alike, is
			// an *Error naming the file.
			list := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				list = j.Unwrap()
			}
			for _, e := range list {
				if ce, ok := e.(*Error); !ok || ce.File != "noeta.yaml" {
					t.Errorf("%T %v is not an *Error naming noeta.yaml", e, e)
				}
			}
		})
	}
}

// aliasBomb is the billion-laughs document: small, but an expansion of 9^9
// nodes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("rules:\n  - match_tool: x\n    action: deny\n    match_arg:\n      path: a\n      equals:\n        l0: &l0 [a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i <= 8; i++ {
		b.WriteString("        l" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [")
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*l" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestParseReportsEveryError(t *testing.T) {
	_, err := Parse("", []byte(`
agents:
  a:
    budget: {max_cost_usd: -1, max_iterations: -1}
    permission_mode: nope
rules:
  - {match_tool: x, action: deny, match_arg: {path: a, regex: "("}}
`))
	var lines []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		if errors.As(e, &ce) {
			lines = append(lines, ce.Line)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("got %d errors, want 4:\n%v", len(lines), err)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i] < lines[i-1] {
			t.Errorf("errors are not in file order: lines %v", lines)
		}
	}
}

func TestParseYAMLFeatures(t *testing.T) {
	f, err := Parse("", []byte(`
agents:
  base: &base
    tools: [echo, shell]
    budget: {max_tool_calls: 5, max_iterations: 9}
  derived:
    <<: *base
    budget: {max_tool_calls: 7}
    permission_mode: bypassPermissions
  nulls:
    budget:
    permissions:
      allowed_tools:
      denied_tools: ~
    repetition:
rules:
  - match_tool: x
    match_arg: {path: a, equals: {when: 2024-01-02, list: [1, 2.5, true, null, "s"], big: 18446744073709551615}}
    action: deny
hooks: {post_tool_use: [{match_tool: "*", command: [./notify.sh]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.Governance
	d, _ := cfg.Agent("derived")
	if strings.Join(d.Tools, ",") != "echo,shell" || *d.Budget.MaxToolCalls != 7 || d.Budget.MaxIterations != nil || d.Permissions.Mode != guards.ModeBypassPermissions {
		t.Errorf("merge key: got %+v", d)
	}
	n, _ := cfg.Agent("nulls")
	if n.Budget != (guards.BudgetLimits{}) || n.Permissions.AllowedTools != nil || n.Permissions.DeniedTools != nil || n.Repetition != (guards.RepetitionPolicy{}) {
		t.Errorf("nulls: got %+v", n)
	}
	s, err := cfg.AgentStack("derived", designRisks, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := guards.NewContext(guards.ContextParams{TaskID: "t"})
	d2 := s.Check(t.Context(), toolCall("x", `{"a":{"big":18446744073709551615,"list":[1,2.5,true,null,"s"],"when":"2024-01-02"}}`), c)
	if d2.Verdict != noeta.VerdictDeny {
		t.Errorf("equals over a YAML timestamp, a big integer and a list: got %v %q", d2.Verdict, d2.Reason)
	}
	// The copy Agent returns is the caller's.
	d.Tools[0] = "changed"
	*d.Budget.MaxToolCalls = 100
	if again, _ := cfg.Agent("derived"); again.Tools[0] != "echo" || *again.Budget.MaxToolCalls != 7 {
		t.Errorf("Agent returned the config's own memory")
	}
}
