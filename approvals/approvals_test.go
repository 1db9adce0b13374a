package approvals

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustCompile(t *testing.T, c Config) *Policy {
	t.Helper()
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRequireCombines: every matching rule applies; the quorum is the
// largest, the timeout the smallest with the agent's.
func TestRequireCombines(t *testing.T) {
	p := mustCompile(t, Config{
		Rules: []Rule{
			{Name: "shell", When: `tool == "shell"`, Quorum: 2, Timeout: time.Hour},
			{Name: "rm", When: `tool == "shell" && args.command.startsWith("rm ")`, Quorum: 3, Timeout: 2 * time.Hour},
			{Name: "other", When: `tool == "write_file"`, Quorum: 5},
		},
		AgentTimeouts: map[string]time.Duration{"a": 90 * time.Minute},
	})
	tests := []struct {
		name    string
		req     Request
		rules   []string
		quorum  int
		timeout time.Duration
	}{
		{"none", Request{Agent: "a", Tool: "read_file"}, nil, 1, 90 * time.Minute},
		{"one", Request{Agent: "a", Tool: "shell", Args: []byte(`{"command":"ls"}`)}, []string{"shell"}, 2, time.Hour},
		{"two", Request{Agent: "a", Tool: "shell", Args: []byte(`{"command":"rm x"}`)}, []string{"shell", "rm"}, 3, time.Hour},
		{"no agent timeout", Request{Agent: "b", Tool: "write_file"}, []string{"other"}, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Require(tt.req)
			if strings.Join(got.Rules, ",") != strings.Join(tt.rules, ",") || got.Quorum != tt.quorum || got.Timeout != tt.timeout || len(got.Problems) > 0 {
				t.Fatalf("Require = %+v; want rules %v quorum %d timeout %s", got, tt.rules, tt.quorum, tt.timeout)
			}
		})
	}
}

// TestFailClosed: a when that cannot be evaluated applies its rule; an
// approvers that cannot be evaluated refuses, saying so; a rule that is
// gone refuses; an expensive expression is stopped by the cost limit.
func TestFailClosed(t *testing.T) {
	p := mustCompile(t, Config{Rules: []Rule{
		{Name: "path", When: `args.path.startsWith("/etc")`, Approvers: `args.owner == approver`},
		{Name: "costly", When: `false`, Approvers: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, approver != "x"))))))`},
	}})
	req := Request{Tool: "write_file", Args: []byte(`{"content":"x"}`)}
	got := p.Require(req)
	if len(got.Rules) != 1 || got.Rules[0] != "path" || len(got.Problems) != 1 {
		t.Fatalf("Require with a when that errors = %+v; want rule path applied and the problem reported", got)
	}
	err := p.Check(req, got.Rules, "alice", "nats")
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "failed to evaluate") {
		t.Fatalf("Check with approvers that errors = %v; want a refusal naming the evaluation failure", err)
	}
	if err := p.Check(req, []string{"gone"}, "alice", "nats"); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "no longer in the config") {
		t.Fatalf("Check under a rule no longer there = %v", err)
	}
	if err := p.Check(req, []string{"costly"}, "alice", "nats"); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("Check over the cost limit = %v; want a refusal naming the cost limit", err)
	}
}

func TestSelfApproval(t *testing.T) {
	p := mustCompile(t, Config{SelfApproval: SelfDeny, Rules: []Rule{{Name: "r", When: `tool == "x"`}}})
	req := Request{Tool: "y", Submitter: "cli:bob"}
	if err := p.Check(req, nil, "cli:bob", "local"); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "submitted") {
		t.Fatalf("self-approval = %v; want refused", err)
	}
	if err := p.Check(req, nil, "cli:alice", "local"); err != nil {
		t.Fatalf("another approver = %v", err)
	}
	var none *Policy
	if err := none.Check(req, nil, "cli:bob", "local"); err != nil {
		t.Fatalf("no policy = %v; want allowed", err)
	}
	if got := p.MayAnswer(nil); got != "anyone authenticated; not the submitter" {
		t.Fatalf("MayAnswer = %q", got)
	}
}

// TestSelfApprovalAcrossDoors: the submitter of a task cannot approve it by
// answering through another door. Before, cli:bob submitted, and bob (a NATS
// approver or an HTTP token of that name) was taken for someone else; and a
// task recording no submitter let anyone answer under self_approval: deny.
func TestSelfApprovalAcrossDoors(t *testing.T) {
	p := mustCompile(t, Config{SelfApproval: SelfDeny})
	for _, tc := range []struct {
		submitter, approver string
		allowed             bool
	}{
		{"cli:bob", "bob", false},
		{"cli:bob", "Bob", false},
		{"bob", "cli:bob", false},
		{"cli:bob", "alice", true},
		{"", "alice", false},
	} {
		err := p.Check(Request{Tool: "shell", Submitter: tc.submitter}, nil, tc.approver, "nats")
		if got := err == nil; got != tc.allowed || (err != nil && !errors.Is(err, ErrNotAllowed)) {
			t.Errorf("submitter %q, approver %q: %v; want allowed=%v", tc.submitter, tc.approver, err, tc.allowed)
		}
	}
}

// TestSelfVariable: a rule's approvers can say "not the submitter" with
// !self, compared as self_approval compares. A rule written as
// approver != submitter compared two strings: cli:bob's task was approved
// by Bob through a token (or by bob over NATS), whose names differ.
func TestSelfVariable(t *testing.T) {
	p := mustCompile(t, Config{Rules: []Rule{{Name: "not-mine", Approvers: `!self`}}})
	for _, tc := range []struct {
		submitter, approver string
		allowed             bool
	}{
		{"cli:bob", "Bob", false},
		{"cli:bob", "bob", false},
		{"bob", "cli:bob", false},
		{"cli:bob", "alice", true},
		{"", "alice", true}, // no submitter recorded: nobody is the submitter
	} {
		err := p.Check(Request{Tool: "shell", Submitter: tc.submitter}, []string{"not-mine"}, tc.approver, "token")
		if got := err == nil; got != tc.allowed || (err != nil && !errors.Is(err, ErrNotAllowed)) {
			t.Errorf("submitter %q, approver %q: %v; want allowed=%v", tc.submitter, tc.approver, err, tc.allowed)
		}
	}
}

// TestLocalApprover: the local user is cli:$USER, else cli: and the
// process's user; never a bare name that is anyone's.
func TestLocalApprover(t *testing.T) {
	tests := []struct {
		user string
		want func(string) bool
	}{
		{"alice", func(s string) bool { return s == "cli:alice" }},
		{"", func(s string) bool { return strings.HasPrefix(s, CLIPrefix) && len(s) > len(CLIPrefix) }},
	}
	for _, tt := range tests {
		t.Setenv("USER", tt.user)
		got := LocalApprover()
		if !tt.want(got) {
			t.Errorf("USER=%q: LocalApprover() = %q", tt.user, got)
		}
		if _, err := Approver(got); err != nil {
			t.Errorf("USER=%q: %q is no approver name: %v", tt.user, got, err)
		}
	}
}

// TestDoors: an agent's approval: names one door or several; a gateway
// opens only those named, and a value that is no door refuses the config
// with its path.
func TestDoors(t *testing.T) {
	p, err := Compile(Config{AgentDoors: map[string][]string{
		"both": {DoorElicitation, DoorClientPrompt}, "cc": {DoorClientPrompt}, "mcp": {DoorElicitation}, "plain": {DoorInbox},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agent           string
		elicits, prompt bool
	}{
		{"both", true, true}, {"cc", false, true}, {"mcp", true, false}, {"plain", false, false}, {"unnamed", false, false},
	} {
		if got := p.Elicits(tc.agent); got != tc.elicits {
			t.Errorf("Elicits(%s) = %v", tc.agent, got)
		}
		if got := p.PromptsClient(tc.agent); got != tc.prompt {
			t.Errorf("PromptsClient(%s) = %v", tc.agent, got)
		}
	}
	var nilPolicy *Policy
	if nilPolicy.PromptsClient("cc") {
		t.Error("a nil policy opens the door")
	}
	_, err = Compile(Config{AgentDoors: map[string][]string{"a": {DoorClientPrompt, "claude_code"}}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Path != "agents.a.approval" || !strings.Contains(ce.Msg, `"claude_code"`) {
		t.Fatalf("a bad door: %v", err)
	}
}
