package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/approvals"
)

const approvalsConfig = `
agents:
  researcher: {tools: [shell], approval_timeout: 1h}
approvals:
  self_approval: deny
  rules:
    - name: sre-approves-shell
      when: 'tool == "shell"'
      approvers: 'approver in ["sre", "alice"]'
      quorum: 2
      timeout: 30m
      self_approval: allow
`

func TestParseApprovals(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(approvalsConfig))
	if err != nil {
		t.Fatal(err)
	}
	req := approvals.Request{Agent: "researcher", Tool: "shell", Submitter: "cli:bob"}
	got := f.Approvals.Require(req)
	if got.Quorum != 2 || got.Timeout != 30*time.Minute || len(got.Rules) != 1 || got.Rules[0] != "sre-approves-shell" {
		t.Fatalf("Require(shell) = %+v", got)
	}
	other := f.Approvals.Require(approvals.Request{Agent: "researcher", Tool: "read_file"})
	if other.Quorum != 1 || other.Timeout != time.Hour || len(other.Rules) != 0 {
		t.Fatalf("Require(read_file) = %+v; want quorum 1, the agent's 1h, no rules", other)
	}
	if err := f.Approvals.Check(req, got.Rules, "mallory", "nats"); !errors.Is(err, approvals.ErrNotAllowed) {
		t.Fatalf("Check(mallory) = %v; want ErrNotAllowed", err)
	}
	if err := f.Approvals.Check(req, got.Rules, "sre", "nats"); err != nil {
		t.Fatalf("Check(sre) = %v", err)
	}
	// The rule's self_approval: allow overrides the section's deny.
	if f.Approvals.SelfApprovalDenied(got.Rules) {
		t.Fatal("the rule's self_approval: allow was not taken")
	}
	if !f.Approvals.SelfApprovalDenied(nil) {
		t.Fatal("the section's self_approval: deny was not taken for a request no rule matched")
	}
}

// TestParseApprovalsErrors: every mistake names its path and line.
func TestParseApprovalsErrors(t *testing.T) {
	rule := func(fields string) string {
		return "approvals:\n  rules:\n    - {name: r1, " + fields + "}\n"
	}
	tests := []struct {
		name, yaml, path, msg string
	}{
		{"CEL syntax", rule(`when: 'tool =='`), "approvals.rules[0].when", "Syntax error"},
		{"non-bool when", rule(`when: 'tool'`), "approvals.rules[0].when", "must be a bool expression"},
		{"non-bool approvers", rule(`approvers: 'approver + "x"'`), "approvals.rules[0].approvers", "must be a bool expression"},
		{"unknown variable", rule(`approvers: 'user == "x"'`), "approvals.rules[0].approvers", "undeclared reference to 'user'"},
		{"approver in when", rule(`when: 'approver == "x"'`), "approvals.rules[0].when", "undeclared reference to 'approver'"},
		{"quorum 0", rule(`quorum: 0`), "approvals.rules[0].quorum", "must be 1 to 16"},
		{"quorum 17", rule(`quorum: 17`), "approvals.rules[0].quorum", "must be 1 to 16"},
		{"bad duration", rule(`timeout: soon`), "approvals.rules[0].timeout", "not a duration"},
		{"negative duration", rule(`timeout: -5m`), "approvals.rules[0].timeout", "must be > 0"},
		{"duration as number", rule(`timeout: 30`), "approvals.rules[0].timeout", "must be a string"},
		{"bad self_approval", rule(`self_approval: maybe`), "approvals.rules[0].self_approval", "allow or deny"},
		{"section self_approval", "approvals: {self_approval: never}\n", "approvals.self_approval", "allow or deny"},
		{"no name", "approvals:\n  rules:\n    - {when: 'true'}\n", "approvals.rules[0].name", "required"},
		{"bad name", "approvals:\n  rules:\n    - {name: 'a b'}\n", "approvals.rules[0].name", "letters, digits"},
		{"duplicate name", "approvals:\n  rules:\n    - {name: a}\n    - {name: a}\n", "approvals.rules[1].name", "unique"},
		{"unknown key", rule(`quorom: 2`), "approvals.rules[0].quorom", "unknown key"},
		{"agent timeout", "agents:\n  a: {approval_timeout: 0s}\n", "agents.a.approval_timeout", "must be > 0"},
		{"agent door", "agents:\n  a: {approval: slack}\n", "agents.a.approval", `must be inbox, elicitation or client_prompt (or a list of them), not "slack"`},
		{"agent door in a list", "agents:\n  a: {approval: [client_prompt, claude]}\n", "agents.a.approval", `not "claude"`},
		{"agent door not a string", "agents:\n  a: {approval: {door: inbox}}\n", "agents.a.approval", "must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v; want a config *Error", err)
			}
			if ce.Path != tt.path || !strings.Contains(ce.Msg, tt.msg) || ce.Line == 0 || ce.File != "noeta.yaml" {
				t.Fatalf("error = %q (path %q, line %d); want path %q, a line, and %q in the message", ce, ce.Path, ce.Line, tt.path, tt.msg)
			}
		})
	}
}
