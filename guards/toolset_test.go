package guards

import (
	"testing"

	"github.com/noeta-go/noeta"
)

// TestToolPatternsInLists: an entry with a glob character in an agent's
// tools:, allowed_tools, denied_tools or require_approval_tools is a
// pattern over tool names (MCP tools are named mcp__<server>__<tool>);
// the lists keep their meaning otherwise (each allowlist set must name a
// tool, a denial wins).
func TestToolPatternsInLists(t *testing.T) {
	risks := func(string) (string, bool) { return "low", true }
	agent := AgentConfig{
		Tools: []string{"echo", "mcp__files__*"},
		Permissions: PermissionPolicy{
			AllowedTools:         []string{"echo", "mcp__files__read*", "mcp__files__delete*"},
			DeniedTools:          []string{"mcp__*__delete*"},
			RequireApprovalTools: []string{"mcp__files__read_secret?"},
		},
	}
	c, err := NewConfig(map[string]AgentConfig{"a": agent}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.AgentStack("a", risks, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tool    string
		verdict noeta.Verdict
	}{
		{"echo", noeta.VerdictAllow},
		{"mcp__files__read_file", noeta.VerdictAllow},
		{"mcp__files__read_secrets", noeta.VerdictRequireApproval},
		{"mcp__files__write_file", noeta.VerdictDeny},  // on tools:, not on allowed_tools
		{"mcp__files__delete_file", noeta.VerdictDeny}, // allowed, but denied wins
		{"mcp__issues__read_issue", noeta.VerdictDeny}, // not on tools:
		{"mcp__files", noeta.VerdictDeny},              // the prefix alone is no tool of it
		{"shell", noeta.VerdictDeny},
	} {
		d := s.Check(t.Context(), noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "c", Tool: tt.tool, Args: []byte(`{}`)}}, gctx(noeta.GovernanceState{}, 0))
		if d.Verdict != tt.verdict {
			t.Errorf("%s: %s (%s: %s), want %s", tt.tool, d.Verdict, d.Guard, d.Reason, tt.verdict)
		}
		if may := agent.MayCall(tt.tool); may != (tt.tool == "echo" || tt.tool == "mcp__files__read_file" || tt.tool == "mcp__files__read_secrets") {
			t.Errorf("MayCall(%s) = %v", tt.tool, may)
		}
	}
}
