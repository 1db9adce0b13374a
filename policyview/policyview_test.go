package policyview_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/policyview"
	"github.com/noeta-go/noeta/replay"
)

const mcpDoc = `
agents:
  a:
    tools: [echo, "mcp__files__*"]
mcp_servers:
  files:
    command: ["true"]
    tools:
      drop: {risk: high}
      fmt: {risk: low}
`

// TestJudgeRisks: the built-in tools' levels, an MCP tool's level from the
// config, and an MCP tool whose level only its server knows: not judged.
func TestJudgeRisks(t *testing.T) {
	t.Parallel()
	cfg, err := govfile.Parse("noeta.yaml", []byte(mcpDoc))
	if err != nil {
		t.Fatal(err)
	}
	j, err := policyview.Judge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string) *replay.CaseCall { return &replay.CaseCall{Tool: tool} }
	cases := []struct {
		c       replay.Case
		got     string
		errPart string
	}{
		{c: replay.Case{Name: "echo", Agent: "a", ToolCall: call("echo"), Expect: "allow"}, got: "allow"},
		{c: replay.Case{Name: "high", Agent: "a", ToolCall: call("mcp__files__drop"), Expect: "require_approval"}, got: "require_approval"},
		{c: replay.Case{Name: "low", Agent: "a", ToolCall: call("mcp__files__fmt"), Expect: "allow"}, got: "allow"},
		{c: replay.Case{Name: "server's", Agent: "a", ToolCall: call("mcp__files__read"), Expect: "allow"},
			errPart: "the risk level of tool mcp__files__read comes from its MCP server"},
		{c: replay.Case{Name: "unknown", Agent: "a", ToolCall: call("ghost"), Expect: "deny"}, got: "deny"},
	}
	for _, c := range cases {
		res := replay.Test(t.Context(), j, []replay.Case{c.c})[0]
		if c.errPart != "" {
			if !strings.Contains(res.Err, c.errPart) || res.Pass {
				t.Errorf("%s: %+v, want an error with %q", c.c.Name, res, c.errPart)
			}
			continue
		}
		if res.Err != "" || res.Got.Verdict.String() != c.got {
			t.Errorf("%s: %+v, want %s", c.c.Name, res, c.got)
		}
	}
}

// TestLoadTest: the files of a policy test, and what is wrong with bad
// ones, named.
func TestLoadTest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("noeta.yaml", "agents:\n  a:\n    tools: [echo]\n")
	bad := write("bad.yaml", "agents:\n  a:\n    tools: [echo]\n    budget: {max_iterations: x}\n")
	cases := write("cases.yaml", "cases:\n  - {name: c, agent: a, tool_call: {tool: echo}, expect: allow}\n")
	ghost := write("ghost.yaml", "cases:\n  - {name: c, agent: nobody, tool_call: {tool: echo}, expect: allow}\n")
	big := write("big.yaml", "cases:\n#"+strings.Repeat("x", replay.MaxCasesBytes)+"\n")
	for _, c := range []struct {
		name, cfg, cases, err string
	}{
		{"good", good, cases, ""},
		{"a bad config", bad, cases, "bad.yaml:4: agents.a.budget.max_iterations"},
		{"no config", filepath.Join(dir, "none.yaml"), cases, "none.yaml"},
		{"an unknown agent", good, ghost, `ghost.yaml: cases[0] (c): agent "nobody" is not an agent of`},
		{"no cases file", good, filepath.Join(dir, "none.yaml"), "cases file:"},
		{"a cases file too large", good, big, "cases file:"},
		{"a directory", good, dir, "cases file:"},
	} {
		_, got, err := policyview.LoadTest(t.Context(), c.cfg, c.cases)
		if c.err == "" {
			if err != nil || len(got) != 1 {
				t.Errorf("%s: %v %v", c.name, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
}
