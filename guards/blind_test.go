package guards

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// TestRulesCannotBeBlinded: a rule must not let through what it could not
// read. Reproduction on the old code: the rule
//
//	{match_tool: shell, match_arg: {path: command, regex: "rm\\s+-rf"}, action: deny}
//
// looked at only the first 64 Ki characters of the argument, so the command
// of 70,000 spaces followed by "; rm -rf X" was allowed, and so were the same
// with contains, in a nested argument, or escaped. Now a deny or
// require_approval rule over a value it cannot read whole decides as if it
// matched and says why; an allow rule does not match (the scan goes on), and
// equals, which compares whole values, still answers exactly.
func TestRulesCannotBeBlinded(t *testing.T) {
	pad := strings.Repeat(" ", 70_000)
	blinded := pad + "; rm -rf X"
	args := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cmd := args(map[string]any{"command": blinded})
	rule := func(op MatchOp, path string, v any, action noeta.Verdict) Rule {
		return Rule{MatchTool: "shell", MatchArg: &MatchArg{Path: path, Op: op, Value: v}, Action: action, Reason: "destructive"}
	}
	over := func(path string, n int) string {
		return fmt.Sprintf(`destructive (rules[0] on "shell": argument %s is %d characters, over the 65536-character cap a rule can examine: treated as matching)`, path, n)
	}
	tests := []struct {
		name    string
		rules   []Rule
		args    string
		verdict noeta.Verdict
		reason  string
	}{
		{"regex", []Rule{rule(MatchRegex, "command", `rm\s+-rf`, noeta.VerdictDeny)}, cmd,
			noeta.VerdictDeny, over("command", 70_010)},
		{"regex that would not have matched either", []Rule{rule(MatchRegex, "command", `shutdown`, noeta.VerdictDeny)}, cmd,
			noeta.VerdictDeny, over("command", 70_010)},
		{"contains", []Rule{rule(MatchContains, "command", "rm -rf", noeta.VerdictDeny)}, cmd,
			noeta.VerdictDeny, over("command", 70_010)},
		{"require_approval", []Rule{rule(MatchContains, "command", "rm -rf", noeta.VerdictRequireApproval)}, cmd,
			noeta.VerdictRequireApproval, over("command", 70_010)},
		{"escaped characters count as one", []Rule{rule(MatchContains, "command", "rm -rf", noeta.VerdictDeny)},
			args(map[string]any{"command": strings.Repeat("é", 70_000) + "; rm -rf X"}),
			noeta.VerdictDeny, over("command", 70_010)},
		{"nested path", []Rule{rule(MatchRegex, "opts.script", `rm\s+-rf`, noeta.VerdictDeny)},
			args(map[string]any{"opts": map[string]any{"script": blinded, "n": 1}}),
			noeta.VerdictDeny, over("opts.script", 70_010)},
		{"match_shell", []Rule{{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}, FlagsAll: [][]string{{"recursive"}, {"force"}}}, Action: noeta.VerdictDeny, Reason: "destructive"}}, cmd,
			noeta.VerdictDeny, over("command", 70_010)},
		// A when that reads the whole value and says no still decides: the
		// rule would not match whatever the regex said.
		{"when says no", []Rule{{MatchTool: "shell", MatchArg: &MatchArg{Path: "command", Op: MatchRegex, Value: `rm`}, When: `args.command.size() < 10`, Action: noeta.VerdictDeny, Reason: "destructive"}}, cmd,
			noeta.VerdictAllow, ""},
		{"when says yes", []Rule{{MatchTool: "shell", MatchArg: &MatchArg{Path: "command", Op: MatchRegex, Value: `rm`}, When: `args.command.size() > 10`, Action: noeta.VerdictDeny, Reason: "destructive"}}, cmd,
			noeta.VerdictDeny, over("command", 70_010)},
		// An allow rule that cannot read the value does not allow it: the
		// rules after it decide.
		{"allow does not match", []Rule{
			rule(MatchRegex, "command", `^\s*ls\b`, noeta.VerdictAllow),
			{MatchTool: "shell", Action: noeta.VerdictRequireApproval, Reason: "ask"},
		}, args(map[string]any{"command": "ls" + pad}), noeta.VerdictRequireApproval, "ask"},
		{"allow match_shell does not match", []Rule{
			{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"ls"}}, Action: noeta.VerdictAllow},
			{MatchTool: "shell", Action: noeta.VerdictRequireApproval, Reason: "ask"},
		}, args(map[string]any{"command": "ls" + pad}), noeta.VerdictRequireApproval, "ask"},
		{"allow with nothing after it", []Rule{rule(MatchContains, "command", "ls", noeta.VerdictAllow)}, cmd,
			noeta.VerdictAllow, ""},
		// equals reads the whole value: no cap, exact answers.
		{"equals, equal", []Rule{rule(MatchEquals, "command", blinded, noeta.VerdictDeny)}, cmd,
			noeta.VerdictDeny, "destructive"},
		{"equals, different", []Rule{rule(MatchEquals, "command", pad+"; rm -rf Y", noeta.VerdictDeny)}, cmd,
			noeta.VerdictAllow, ""},
		// contains and regex look at strings only; a value of another kind
		// does not match, however large.
		{"non-string value", []Rule{rule(MatchContains, "command", "rm", noeta.VerdictDeny)},
			args(map[string]any{"command": []any{blinded}}), noeta.VerdictAllow, ""},
		{"number", []Rule{rule(MatchRegex, "n", `1`, noeta.VerdictDeny)},
			`{"n":1` + strings.Repeat("0", 70_000) + `}`, noeta.VerdictAllow, ""},
		// At the cap a rule still reads everything.
		{"at the cap", []Rule{rule(MatchContains, "command", "rm -rf", noeta.VerdictDeny)},
			args(map[string]any{"command": pad[:MatchStringCap-10] + "; rm -rf X"}), noeta.VerdictDeny, "destructive"},
		{"at the cap, no match", []Rule{rule(MatchContains, "command", "rm -rf", noeta.VerdictDeny)},
			args(map[string]any{"command": pad[:MatchStringCap-10] + "; ls -la X"}), noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRules(t, tt.rules...)
			wantVerdict(t, checkGuard(t, r, toolCall("shell", tt.args), gctx(noeta.GovernanceState{}, 0)), tt.verdict, tt.reason)
		})
	}
}

// TestRulesBlindedThroughConfig runs the reproduction of the issue through
// the config loader and the default stack: the call with 70,000 spaces before
// "; rm -rf X" is denied by the rules guard, naming the cap.
func TestRulesBlindedThroughConfig(t *testing.T) {
	cfg, err := parseConfig([]byte(`
agents:
  ops: {tools: [shell], permission_mode: bypassPermissions}
rules:
  - match_tool: "shell"
    match_arg: {path: command, regex: "rm\\s+-rf"}
    action: deny
    reason: "destructive shell command"
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.AgentStack("ops", RiskMap(map[string]string{"shell": "high"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"command": strings.Repeat(" ", 70_000) + "; rm -rf X"})
	d := s.Check(t.Context(), toolCall("shell", string(b)), gctx(noeta.GovernanceState{}, 0))
	if d.Verdict != noeta.VerdictDeny || d.Guard != NameRules || !strings.Contains(d.Reason, "argument command is 70010 characters, over the 65536-character cap") {
		t.Errorf("got %v by %s: %q", d.Verdict, d.Guard, d.Reason)
	}
}
