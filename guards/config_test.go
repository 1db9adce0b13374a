package guards

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// designConfig is the example of DESIGN.md §7 with the rules and guards of §5.
const designConfig = `
agents:
  researcher:
    tools: [read_file, echo, shell]
    permission_mode: default            # default | acceptEdits | bypassPermissions
    budget: {max_iterations: 20, max_tool_calls: 50, max_cost_usd: 2.0, max_spawned_subtasks: 5, max_subtask_depth: 3}
    permissions:
      allowed_tools: [read_file, echo, shell]
      denied_tools: []
      max_risk_level: high              # low | medium | high
      allowed_subtask_agents: [helper]
      require_approval_tools: []
    repetition: {threshold: 3, action: require_approval}
  helper:
    tools: [echo]
rules:
  - match_tool: "shell"                 # glob; * matches any run of characters
    match_arg: {path: command, regex: "rm\\s+-rf"}   # or equals: / contains:
    action: deny                        # allow | deny | require_approval
    reason: "destructive shell command"
  - match_tool: "write_file"
    when: 'args.path.startsWith("/etc/")'   # CEL expression over tool, args, task; compiled at load
    action: require_approval
guards:
  - {name: change-freeze, priority: 150, rules: [{match_tool: "write_file", action: deny, reason: "freeze"}]}
hooks:
  post_tool_use: [{match_tool: "*", command: ["./notify.sh"]}]
  notification: [{on: approval, command: ["./page-oncall.sh"]}]
`

var designRisks = RiskMap(map[string]string{"read_file": "low", "echo": "low", "shell": "high", "write_file": "medium"})

func names(s *Stack) string {
	var n []string
	for _, g := range s.Guards() {
		n = append(n, g.Name())
	}
	return strings.Join(n, ",")
}

func TestParseDesignConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(designConfig))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Agents(), ","); got != "helper,researcher" {
		t.Errorf("Agents() = %s", got)
	}
	a, _ := cfg.Agent("researcher")
	if *a.Budget.MaxIterations != 20 || *a.Budget.MaxCostUSD != 2.0 || a.Permissions.MaxRiskLevel != RiskHigh ||
		a.Permissions.Mode != ModeDefault || a.Repetition.Threshold != 3 || a.Repetition.Action != noeta.VerdictRequireApproval ||
		a.Permissions.DeniedTools == nil || len(a.Permissions.DeniedTools) != 0 || a.Permissions.RequireApprovalTools == nil {
		t.Errorf("researcher decoded wrong: %+v", a)
	}
	user := Func("audit-hook", 300, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		return noeta.Allow(), nil
	})
	s, err := cfg.AgentStack("researcher", designRisks, []Guard{user})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); got != "budget,permission,repetition,rules,change-freeze,audit-hook" {
		t.Errorf("researcher stack = %s", got)
	}
	h, err := cfg.AgentStack("helper", designRisks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(h); got != "budget,permission,rules,change-freeze" {
		t.Errorf("helper stack = %s", got)
	}

	c := gctx(noeta.GovernanceState{Iterations: 1}, 0)
	for _, tt := range []struct {
		s       *Stack
		a       noeta.ProposedAction
		verdict noeta.Verdict
		guard   string
		reason  string
	}{
		{s, toolCall("read_file", `{"path":"README.md"}`), noeta.VerdictAllow, "", ""},
		// require_approval_tools: [] is explicit, so mode default adds nothing.
		{s, toolCall("shell", `{"command":"ls"}`), noeta.VerdictAllow, "", ""},
		{s, toolCall("shell", `{"command":"rm -rf /"}`), noeta.VerdictDeny, "rules", "destructive shell command"},
		{s, toolCall("write_file", `{"path":"x"}`), noeta.VerdictDeny, "permission", `tool "write_file" not in allowlist`},
		{s, spawn("helper"), noeta.VerdictAllow, "", ""},
		{s, spawn("researcher"), noeta.VerdictDeny, "permission", `agent "researcher" not in subtask allowlist`},
		// helper: tools is the allowlist; mode default asks for anything not low.
		{h, toolCall("echo", `{}`), noeta.VerdictAllow, "", ""},
		{h, toolCall("read_file", `{}`), noeta.VerdictDeny, "permission", `tool "read_file" not in allowlist`},
	} {
		d := tt.s.Check(t.Context(), tt.a, c)
		if d.Verdict != tt.verdict || d.Guard != tt.guard || d.Reason != tt.reason {
			t.Errorf("%#v: got %v %q by %q, want %v %q by %q", tt.a, d.Verdict, d.Reason, d.Guard, tt.verdict, tt.reason, tt.guard)
		}
	}
}

func TestAgentStackComposition(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
agents:
  tools-only: {tools: [echo, shell], permission_mode: bypassPermissions}
  both:
    tools: [echo, shell]
    permission_mode: bypassPermissions
    permissions: {allowed_tools: [shell, read_file]}
  neither: {permission_mode: bypassPermissions}
  empty-allowlist: {permission_mode: bypassPermissions, permissions: {allowed_tools: []}}
  null-allowlist: {permission_mode: bypassPermissions, permissions: {allowed_tools: }}
  asks: {tools: [echo, shell, write_file]}
  edits: {tools: [echo, shell, write_file], permission_mode: acceptEdits}
  rep-off: {repetition: {threshold: 0}}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := gctx(noeta.GovernanceState{}, 0)
	tests := []struct {
		agent, tool string
		verdict     noeta.Verdict
	}{
		{"tools-only", "echo", noeta.VerdictAllow},
		{"tools-only", "read_file", noeta.VerdictDeny},
		{"both", "shell", noeta.VerdictAllow},
		{"both", "echo", noeta.VerdictDeny},      // not allowed
		{"both", "read_file", noeta.VerdictDeny}, // allowed, but not the agent's
		{"neither", "anything", noeta.VerdictAllow},
		{"empty-allowlist", "echo", noeta.VerdictDeny},
		{"null-allowlist", "echo", noeta.VerdictAllow},
		{"asks", "echo", noeta.VerdictAllow},
		{"asks", "shell", noeta.VerdictRequireApproval},
		{"asks", "write_file", noeta.VerdictRequireApproval},
		{"edits", "write_file", noeta.VerdictAllow},
		{"edits", "shell", noeta.VerdictRequireApproval},
	}
	for _, tt := range tests {
		s, err := cfg.AgentStack(tt.agent, designRisks, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := s.Check(t.Context(), toolCall(tt.tool, `{}`), c); d.Verdict != tt.verdict {
			t.Errorf("%s calling %s: got %v %q, want %v", tt.agent, tt.tool, d.Verdict, d.Reason, tt.verdict)
		}
	}
	s, _ := cfg.AgentStack("rep-off", designRisks, nil)
	if got := names(s); got != "budget,permission" {
		t.Errorf("no repetition and no rules: stack = %s", got)
	}
}

func TestAgentStackErrors(t *testing.T) {
	cfg, err := ParseConfig([]byte(designConfig))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		return noeta.Allow(), nil
	}
	tests := []struct {
		name  string
		agent string
		risks RiskLookup
		user  []Guard
		want  string
	}{
		{"unknown agent", "nobody", designRisks, nil, `unknown agent "nobody"`},
		{"user guard below 100", "researcher", designRisks, []Guard{Func("sneaky", 5, ok)}, `user guard "sneaky" has priority 5; user guards must have priority >= 100`},
		{"user guard at 99", "researcher", designRisks, []Guard{Func("sneaky", 99, ok)}, "priority 99"},
		{"nil user guard", "researcher", designRisks, []Guard{nil}, "user guard 0 is nil"},
		{"user guard named like a rule set", "researcher", designRisks, []Guard{Func("change-freeze", 100, ok)}, `two guards are named "change-freeze"`},
		{"user guard named like a built-in", "researcher", designRisks, []Guard{Func("budget", 100, ok)}, `two guards are named "budget"`},
		{"tool the registry does not know", "researcher", RiskMap(map[string]string{"echo": "low"}), nil, `agents.researcher.tools[0]: unknown tool "read_file"`},
		{"no risk lookup for mode default", "helper", nil, nil, `guards: agents.helper: a risk lookup is needed for max_risk_level or for permission mode "default"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cfg.AgentStack(tt.agent, tt.risks, tt.user)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// At 100 a user guard is accepted, and ties with the rules run after them.
	s, err := cfg.AgentStack("researcher", designRisks, []Guard{Func("mine", 100, ok)})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); got != "budget,permission,repetition,rules,mine,change-freeze" {
		t.Errorf("stack = %s", got)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each must appear
	}{
		{"unknown top-level key", "agent: {}\n", []string{"agent: unknown key (known: agents, rules, guards, hooks, observers) (line 1)"}},
		{"unknown agent key", "agents:\n  a:\n    tool: [x]\n", []string{"agents.a.tool: unknown key (known: tools, permission_mode, budget, permissions, repetition) (line 3)"}},
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
			_, err := ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got\n%v\nwant it to contain %q", err, w)
				}
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("%T is not a *ConfigError", err)
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

func TestParseConfigReportsEveryError(t *testing.T) {
	_, err := ParseConfig([]byte(`
agents:
  a:
    budget: {max_cost_usd: -1, max_iterations: -1}
    permission_mode: nope
rules:
  - {match_tool: x, action: deny, match_arg: {path: a, regex: "("}}
`))
	var lines []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *ConfigError
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

func TestParseConfigYAMLFeatures(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
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
	d, _ := cfg.Agent("derived")
	if strings.Join(d.Tools, ",") != "echo,shell" || *d.Budget.MaxToolCalls != 7 || d.Budget.MaxIterations != nil || d.Permissions.Mode != ModeBypassPermissions {
		t.Errorf("merge key: got %+v", d)
	}
	n, _ := cfg.Agent("nulls")
	if n.Budget != (BudgetLimits{}) || n.Permissions.AllowedTools != nil || n.Permissions.DeniedTools != nil || n.Repetition != (RepetitionPolicy{}) {
		t.Errorf("nulls: got %+v", n)
	}
	s, err := cfg.AgentStack("derived", designRisks, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := gctx(noeta.GovernanceState{}, 0)
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

func TestParseConfigEmpty(t *testing.T) {
	for _, doc := range []string{"", "\n", "# nothing\n", "~\n", "agents:\nrules:\nguards:\n"} {
		cfg, err := ParseConfig([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if len(cfg.Agents()) != 0 || cfg.rules != nil || len(cfg.sets) != 0 {
			t.Errorf("%q: not empty", doc)
		}
	}
}

func TestNewConfig(t *testing.T) {
	cfg, err := NewConfig(
		map[string]AgentConfig{"a": {Tools: []string{"echo"}, Budget: BudgetLimits{MaxToolCalls: new(2)}}},
		[]Rule{{MatchTool: "echo", MatchArg: &MatchArg{Path: "text", Op: MatchContains, Value: "secret"}, Action: noeta.VerdictDeny}},
		[]RuleSet{{Name: "freeze", Priority: 200, Rules: []Rule{{MatchTool: "*", Action: noeta.VerdictRequireApproval}}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.AgentStack("a", designRisks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); got != "budget,permission,rules,freeze" {
		t.Errorf("stack = %s", got)
	}
	d := s.Check(t.Context(), toolCall("echo", `{"text":"a secret"}`), gctx(noeta.GovernanceState{}, 0))
	if d.Verdict != noeta.VerdictDeny || d.Guard != "rules" {
		t.Errorf("got %v by %s", d.Verdict, d.Guard)
	}
	_, err = NewConfig(
		map[string]AgentConfig{"a": {Budget: BudgetLimits{MaxCostUSD: new(-1.0)}, Repetition: RepetitionPolicy{Threshold: 3, Window: 50}}},
		[]Rule{{MatchTool: "x"}},
		[]RuleSet{{Name: "early", Priority: 50, Rules: []Rule{{MatchTool: "*", Action: noeta.VerdictAllow}}}},
	)
	for _, want := range []string{"agents.a.budget.max_cost_usd: must be >= 0", "agents.a.repetition.window: must be <= 32", "rules[0].action: required", "guards[0].priority: must be >= 100"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to contain %q", err, want)
		}
	}
}
