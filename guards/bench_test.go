package guards

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// benchTools is a 20-tool agent with a spread of risk levels.
var benchTools = map[string]string{
	"read_file": "low", "list_dir": "low", "grep": "low", "glob": "low", "web_search": "low",
	"http_get": "low", "memory_read": "low", "echo": "low", "calc": "low", "git_status": "low",
	"git_diff": "low", "memory_write": "medium", "write_file": "medium", "edit_file": "medium",
	"git_commit": "medium", "http_post": "high", "shell": "high", "send_email": "high",
	"db_query": "high", "deploy": "high",
}

// benchConfig is the full default stack of the benchmarks: a 20-tool
// allowlist, a risk ceiling, repetition over the 32 recent calls, and 10 rules
// of which 2 use a regex and 2 a CEL expression — all four of those apply to
// read_file, so the allowed call pays for them.
const benchConfig = `
agents:
  bench:
    tools: [read_file, list_dir, grep, glob, web_search, http_get, memory_read, echo, calc, git_status,
            git_diff, memory_write, write_file, edit_file, git_commit, http_post, shell, send_email, db_query, deploy]
    permission_mode: default
    budget: {max_iterations: 100, max_tool_calls: 500, max_cost_usd: 20.0, max_spawned_subtasks: 10, max_subtask_depth: 3}
    permissions:
      denied_tools: [deploy]
      max_risk_level: high
      allowed_subtask_agents: [bench]
    repetition: {threshold: 3, action: require_approval, window: 32}
rules:
  - {match_tool: "*_file", match_arg: {path: path, regex: "^/etc/|\\.ssh/"}, action: deny, reason: "system or key file"}
  - {match_tool: "*", match_arg: {path: path, regex: "(^|/)\\.\\.(/|$)"}, action: deny, reason: "path traversal"}
  - {match_tool: "*", when: 'has(args.path) && args.path.startsWith("/proc/")', action: deny}
  - {match_tool: "read_*", when: 'task.cost_usd > 15.0 && tool != "echo"', action: require_approval}
  - {match_tool: "shell", match_arg: {path: command, contains: "sudo"}, action: deny}
  - {match_tool: "write_file", match_arg: {path: mode, equals: "0777"}, action: deny}
  - {match_tool: "http_*", match_arg: {path: url, contains: "169.254.169.254"}, action: deny}
  - {match_tool: "db_query", match_arg: {path: sql, contains: "DROP"}, action: require_approval}
  - {match_tool: "git_commit", action: require_approval}
  - {match_tool: "send_email", action: require_approval}
`

func benchSetup(b *testing.B, withRules bool) (*Stack, *Context) {
	b.Helper()
	cfg, err := parseConfig([]byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	if !withRules {
		cfg.rules = nil
	}
	s, err := cfg.AgentStack("bench", RiskMap(benchTools), nil)
	if err != nil {
		b.Fatal(err)
	}
	var g noeta.GovernanceState
	g.Iterations, g.ToolCalls, g.CostUSD = 12, 40, 1.25
	for i := range noeta.RecentToolCallsWindow - 1 {
		g.NoteToolCall(noeta.ToolCallKey{Tool: "grep", Args: fmt.Sprintf(`{"pattern":"p%d"}`, i)})
	}
	// The last call is the one proposed, so repetition walks a run of 2.
	g.NoteToolCall(noeta.ToolCallKey{Tool: "read_file", Args: allowedArgs})
	return s, NewContext(ContextParams{TaskID: "01JBENCH", Governance: g})
}

const allowedArgs = `{"limit":200,"path":"docs/README.md"}`

var (
	allowedCall = noeta.ProposedAction(noeta.ProposedToolCall{Call: noeta.ToolCall{
		CallID: "c1", Tool: "read_file", Args: json.RawMessage(allowedArgs)}})
	// Denied by Permission (20): not on the allowlist.
	deniedByPermission = noeta.ProposedAction(noeta.ProposedToolCall{Call: noeta.ToolCall{
		CallID: "c2", Tool: "format_disk", Args: json.RawMessage(`{"device":"/dev/sda"}`)}})
	// Denied by the rules (100): the first regex rule matches.
	deniedByRule = noeta.ProposedAction(noeta.ProposedToolCall{Call: noeta.ToolCall{
		CallID: "c3", Tool: "read_file", Args: json.RawMessage(`{"path":"/etc/shadow"}`)}})
)

func benchCheck(b *testing.B, s *Stack, c *Context, a noeta.ProposedAction, want noeta.Verdict) {
	b.Helper()
	ctx := context.Background()
	if d := s.Check(ctx, a, c); d.Verdict != want {
		b.Fatalf("got %v (%s: %s), want %v", d.Verdict, d.Guard, d.Reason, want)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Check(ctx, a, c)
	}
}

func BenchmarkStack(b *testing.B) {
	full, c := benchSetup(b, true)
	noRules, _ := benchSetup(b, false)
	b.Run("allowed", func(b *testing.B) { benchCheck(b, full, c, allowedCall, noeta.VerdictAllow) })
	b.Run("allowed-no-rules", func(b *testing.B) { benchCheck(b, noRules, c, allowedCall, noeta.VerdictAllow) })
	b.Run("denied-by-permission", func(b *testing.B) { benchCheck(b, full, c, deniedByPermission, noeta.VerdictDeny) })
	b.Run("denied-by-rule", func(b *testing.B) { benchCheck(b, full, c, deniedByRule, noeta.VerdictDeny) })
	b.Run("allowed-plus-go-guard", func(b *testing.B) {
		cfg, err := parseConfig([]byte(benchConfig))
		if err != nil {
			b.Fatal(err)
		}
		user := Func("user", 200, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
			return noeta.Allow(), nil
		})
		s, err := cfg.AgentStack("bench", RiskMap(benchTools), []Guard{user})
		if err != nil {
			b.Fatal(err)
		}
		benchCheck(b, s, c, allowedCall, noeta.VerdictAllow)
	})
}

// BenchmarkRulesLayer is the rules guard of the full stack alone, on the
// allowed call: two regex and two CEL rules evaluated, six skipped by their
// tool pattern.
func BenchmarkRulesLayer(b *testing.B) {
	cfg, err := parseConfig([]byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	_, c := benchSetup(b, true)
	s, err := NewStack([]Guard{cfg.rules})
	if err != nil {
		b.Fatal(err)
	}
	benchCheck(b, s, c, allowedCall, noeta.VerdictAllow)
}

// BenchmarkMatchShell is one match_shell rule (rm with recursive and force)
// on shell commands of increasing size: parsing as POSIX sh and as bash is
// most of it.
func BenchmarkMatchShell(b *testing.B) {
	r, err := NewRules([]Rule{{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}, FlagsAll: [][]string{{"recursive"}, {"force"}}}, Action: noeta.VerdictDeny}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewStack([]Guard{r})
	if err != nil {
		b.Fatal(err)
	}
	c := NewContext(ContextParams{TaskID: "01JBENCH"})
	for _, bc := range []struct{ name, cmd string }{
		{"short", "ls -la"},
		{"pipeline", `git log --oneline | grep -v "fixup" | head -n 20 > /dev/null && echo done`},
		{"script-1KiB", strings.Repeat(`if [ -f "$f" ]; then sudo rm -r -- "$f"; fi; `, 24)},
	} {
		args, _ := json.Marshal(map[string]string{"command": bc.cmd})
		a := noeta.ProposedAction(noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "c", Tool: "shell", Args: args}})
		b.Run(bc.name, func(b *testing.B) { benchCheck(b, s, c, a, noeta.VerdictAllow) })
	}
}
