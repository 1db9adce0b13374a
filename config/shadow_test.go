package config

import (
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/guards"
)

// TestShadowKeys: shadow: on a rule and on a rule set is read as a boolean
// and nothing else. A shadow rule decides nothing, so a value misread as
// true would let through what the rule denies: every value that is not a
// YAML boolean is refused with its path and line.
func TestShadowKeys(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"rule shadow a string", "rules:\n  - {match_tool: x, action: deny, shadow: \"true\"}\n", []string{"rules[0].shadow: must be true or false, not a string (line 2)"}},
		{"rule shadow yes", "rules:\n  - {match_tool: x, action: deny, shadow: yes}\n", []string{"rules[0].shadow: must be true or false, not a string"}},
		{"rule shadow 1", "rules:\n  - {match_tool: x, action: deny, shadow: 1}\n", []string{"rules[0].shadow: must be true or false, not an integer"}},
		{"rule shadow a list", "rules:\n  - {match_tool: x, action: deny, shadow: [true]}\n", []string{"rules[0].shadow: must be true or false, not a sequence"}},
		{"set shadow a string", "guards:\n  - {name: g, shadow: \"false\", rules: [{match_tool: x, action: deny}]}\n", []string{"guards[0].shadow: must be true or false, not a string (line 2)"}},
		{"set rule shadow on", "guards:\n  - name: g\n    rules:\n      - {match_tool: x, action: deny, shadow: on}\n", []string{"guards[0].rules[0].shadow: must be true or false, not a string (line 4)"}},
		{"budget cannot be shadowed", "agents:\n  a:\n    budget: {max_tool_calls: 1, shadow: true}\n", []string{"agents.a.budget.shadow: unknown key"}},
		{"permissions cannot be shadowed", "agents:\n  a:\n    permissions: {denied_tools: [x], shadow: true}\n", []string{"agents.a.permissions.shadow: unknown key"}},
		{"repetition cannot be shadowed", "agents:\n  a:\n    repetition: {threshold: 3, shadow: true}\n", []string{"agents.a.repetition.shadow: unknown key"}},
		{"a shadow set still needs its rules checked", "guards:\n  - {name: g, shadow: true, rules: [{match_tool: x, action: maybe}]}\n", []string{`guards[0].rules[0].action: must be allow, deny or require_approval, not "maybe"`}},
		{"a shadow rule still needs an action", "rules:\n  - {match_tool: x, shadow: true}\n", []string{"rules[0].action: required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("parsed")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestShadowRulesNeverDecide: rules and rule sets marked shadow: true are
// judged and reported beside the decision, which the others make alone;
// shadow: false, or no shadow key, is a rule like any.
func TestShadowRulesNeverDecide(t *testing.T) {
	const yaml = `
agents:
  a: {tools: [shell, echo], permission_mode: bypassPermissions}
rules:
  - {match_tool: shell, action: deny, reason: "new shell ban", shadow: true}
  - {match_tool: echo, action: deny, reason: "echo is banned", shadow: false}
guards:
  - name: trial
    priority: 150
    shadow: true
    rules:
      - {match_tool: echo, action: allow}
      - {match_tool: "*", action: require_approval, reason: "trial approval"}
`
	f, err := Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.Governance.AgentStack("a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := guards.NewContext(guards.ContextParams{TaskID: "t"})
	tests := []struct {
		tool    string
		verdict noeta.Verdict
		guard   string
		shadows []string // guard/rule/verdict
	}{
		{"shell", noeta.VerdictAllow, "", []string{"rules/rules[0]/deny", "trial/guards[0].rules[1]/require_approval"}},
		{"echo", noeta.VerdictDeny, "rules", []string{"trial/guards[0].rules[0]/allow"}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			d := s.Check(t.Context(), toolCall(tt.tool, `{}`), c)
			if d.Verdict != tt.verdict || d.Guard != tt.guard {
				t.Errorf("decision %v by %q (%s), want %v by %q", d.Verdict, d.Guard, d.Reason, tt.verdict, tt.guard)
			}
			var got []string
			for _, sv := range d.Shadows {
				got = append(got, sv.Guard+"/"+sv.Rule+"/"+sv.Verdict.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.shadows, " ") {
				t.Errorf("shadows %v, want %v", got, tt.shadows)
			}
		})
	}
}
