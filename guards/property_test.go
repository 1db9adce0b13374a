package guards

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/noeta-go/noeta"
)

// TestRulesNeverLoosen is the property that makes user rules safe to hand
// out: for any built-in configuration, task state and action, adding the
// process-wide rules, named rule sets and Go user guards — whatever they say,
// allow rules included, erroring ones included — never changes a built-in
// DENY or REQUIRE_APPROVAL. The decision with them is exactly the decision
// without them.
func TestRulesNeverLoosen(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	tools := []string{"read_file", "write_file", "shell", "echo", "ghost"}
	risks := RiskMap(map[string]string{"read_file": "low", "write_file": "medium", "shell": "high", "echo": "low", "ghost": "unknown-level"})
	argsPool := []string{`{}`, `{"path":"/etc/passwd"}`, `{"command":"rm -rf /"}`, `{"n":3}`, `{"path":"a"}`, `not json`}
	agents := []string{"main", "helper"}
	patterns := []string{"*", "shell", "*_file", "?cho", "[rs]*", "read_*", "nothing"}
	whens := []string{"", "true", "false", `tool == "shell"`, `args.path.startsWith("/")`, `has(args.n) && args.n > 2.0`, `task.iterations > 3`}
	verdicts := []noeta.Verdict{noeta.VerdictAllow, noeta.VerdictAllow, noeta.VerdictDeny, noeta.VerdictRequireApproval}

	maybeInt := func(max int) *int {
		if rng.IntN(3) != 0 {
			return nil
		}
		return new(rng.IntN(max))
	}
	// subset returns nil (no list) half the time, else each element with
	// probability p percent.
	subset := func(pool []string, p int) []string {
		if rng.IntN(2) == 0 {
			return nil
		}
		s := []string{}
		for _, x := range pool {
			if rng.IntN(100) < p {
				s = append(s, x)
			}
		}
		return s
	}
	randomRules := func() []Rule {
		rules := make([]Rule, rng.IntN(6))
		for i := range rules {
			r := Rule{MatchTool: patterns[rng.IntN(len(patterns))], Action: verdicts[rng.IntN(len(verdicts))], When: whens[rng.IntN(len(whens))]}
			switch rng.IntN(5) {
			case 1:
				r.MatchArg = &MatchArg{Path: "path", Op: MatchEquals, Value: "/etc/passwd"}
			case 2:
				r.MatchArg = &MatchArg{Path: "command", Op: MatchContains, Value: "rm"}
			case 3:
				r.MatchArg = &MatchArg{Path: "path", Op: MatchRegex, Value: `^/`}
			case 4:
				r.MatchShell = &MatchShell{Path: "command", Programs: []string{"rm", "ls"}}
			}
			rules[i] = r
		}
		return rules
	}

	loosened, decisions := 0, map[string]int{}
	for iter := range 3000 {
		modes := []PermissionMode{"", ModeDefault, ModeAcceptEdits, ModeBypassPermissions}
		ceilings := []RiskLevel{"", RiskLow, RiskMedium, RiskHigh}
		agent := AgentConfig{
			Tools: subset(tools, 85),
			Budget: BudgetLimits{
				MaxIterations: maybeInt(6), MaxToolCalls: maybeInt(6), MaxSpawnedSubtasks: maybeInt(4), MaxSubtaskDepth: maybeInt(3),
			},
			Permissions: PermissionPolicy{
				AllowedTools: subset(tools, 85), DeniedTools: subset(tools, 15), MaxRiskLevel: ceilings[rng.IntN(len(ceilings))],
				AllowedSubtaskAgents: subset(agents, 70), RequireApprovalTools: subset(tools, 20), Mode: modes[rng.IntN(len(modes))],
			},
			Repetition: RepetitionPolicy{Threshold: rng.IntN(4), Action: []noeta.Verdict{noeta.VerdictUnset, noeta.VerdictDeny}[rng.IntN(2)]},
		}
		if rng.IntN(2) == 0 {
			agent.Budget.MaxCostUSD = new(float64(rng.IntN(4)))
		}
		var sets []RuleSet
		for i := range rng.IntN(3) {
			if rs := randomRules(); len(rs) > 0 {
				sets = append(sets, RuleSet{Name: fmt.Sprintf("set%d", i), Priority: 100 + rng.IntN(100), Rules: rs})
			}
		}
		agentsCfg := map[string]AgentConfig{"main": agent, "helper": {}}
		base, err := NewConfig(agentsCfg, nil, nil)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		withRules, err := NewConfig(agentsCfg, randomRules(), sets)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		user := []Guard{Func("always-allow", 100+rng.IntN(50), func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
			return noeta.Allow(), nil
		})}
		sBase, err := base.AgentStack("main", risks, nil)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		sRules, err := withRules.AgentStack("main", risks, user)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}

		var g noeta.GovernanceState
		g.Iterations, g.ToolCalls, g.SpawnedSubtasks, g.CostUSD = rng.IntN(6), rng.IntN(6), rng.IntN(4), float64(rng.IntN(4))
		for range rng.IntN(6) {
			k, _ := KeyOf(noeta.ToolCall{Tool: tools[rng.IntN(2)], Args: []byte(argsPool[rng.IntN(2)])})
			g.NoteToolCall(k)
		}
		c := gctx(g, rng.IntN(4))
		var a noeta.ProposedAction
		switch rng.IntN(5) {
		case 0:
			a = spawn(agents[rng.IntN(len(agents))])
		case 1:
			a = finish()
		default:
			a = toolCall(tools[rng.IntN(len(tools))], argsPool[rng.IntN(len(argsPool))])
		}

		want := sBase.Check(t.Context(), a, c)
		got := sRules.Check(t.Context(), a, c)
		decisions[want.Verdict.String()+"/"+got.Verdict.String()]++
		if !want.IsAllow() && (got.VerdictResult != want.VerdictResult || got.Guard != want.Guard) {
			loosened++
			t.Errorf("iteration %d: built-ins decided %v %q by %s; with rules: %v %q by %s (action %#v)",
				iter, want.Verdict, want.Reason, want.Guard, got.Verdict, got.Reason, got.Guard, a)
		}
	}
	// The generator must reach every interesting pair, or the property is
	// checked on too little.
	for _, pair := range []string{"deny/deny", "require_approval/require_approval", "allow/allow", "allow/deny", "allow/require_approval"} {
		if decisions[pair] == 0 {
			t.Errorf("no case with built-ins/with-rules decisions %s: %v", pair, decisions)
		}
	}
	t.Logf("decisions (built-ins/with rules): %v", decisions)
}
