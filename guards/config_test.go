package guards

import (
	"context"
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
	cfg, err := parseConfig([]byte(designConfig))
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
	cfg, err := parseConfig([]byte(`
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
	cfg, err := parseConfig([]byte(designConfig))
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

func TestConfigFromEmptyYAML(t *testing.T) {
	for _, doc := range []string{"", "\n", "# nothing\n", "~\n", "agents:\nrules:\nguards:\n"} {
		cfg, err := parseConfig([]byte(doc))
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
