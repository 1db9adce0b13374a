package guards

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// panickyShadow is a guard whose shadow judgement panics outside any one
// rule.
type panickyShadow struct{}

func (panickyShadow) Name() string  { return "panicky" }
func (panickyShadow) Priority() int { return 200 }
func (panickyShadow) Check(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
	return noeta.Allow(), nil
}
func (panickyShadow) Shadowed() bool { return true }
func (panickyShadow) shadowCheck(noeta.ProposedAction, *Context) []ShadowVerdict {
	panic("boom")
}

func shadowOf(r Rule) Rule { r.Shadow = true; return r }

func mustShadowSet(t *testing.T, name string, rules ...Rule) *Rules {
	t.Helper()
	r, err := NewShadowRuleSet(name, 150, rules)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// panickingRules is rules whose first shadow rule panics when judged: its
// when program is missing, as no compile would leave it.
func panickingRules(t *testing.T, rules ...Rule) *Rules {
	t.Helper()
	r := mustRules(t, rules...)
	if len(r.shadows) == 0 {
		t.Fatal("no shadow rule")
	}
	r.shadows[0][0].when = &celProgram{src: "broken"}
	return r
}

// shadowString is how a test writes a Decision's shadows:
// guard/rule/verdict, with ! for a failure, space separated.
func shadowString(svs []ShadowVerdict) string {
	var b []string
	for _, sv := range svs {
		s := sv.Guard + "/" + sv.Rule + "/" + sv.Verdict.String()
		if sv.Failed {
			s += "!"
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

// TestShadowNeverDecides is the contract: whatever the shadow rules say,
// fail or panic, the decision is the one the other rules and guards make.
func TestShadowNeverDecides(t *testing.T) {
	deny := Rule{MatchTool: "shell", Action: noeta.VerdictDeny, Reason: "no shell"}
	ask := Rule{MatchTool: "shell", Action: noeta.VerdictRequireApproval, Reason: "ask"}
	allowAll := Rule{MatchTool: "*", Action: noeta.VerdictAllow}
	badWhen := Rule{MatchTool: "shell", When: "args.missing == 1", Action: noeta.VerdictAllow}
	tests := []struct {
		name    string
		guards  func(t *testing.T) []Guard
		action  noeta.ProposedAction
		verdict noeta.Verdict
		guard   string
		shadows string
	}{
		{"shadow deny beside a real allow: allow",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(deny), allowAll)} },
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "rules/rules[0]/deny"},
		{"real deny beside a shadow allow: deny",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(allowAll), deny)} },
			toolCall("shell", `{}`), noeta.VerdictDeny, NameRules, "rules/rules[0]/allow"},
		{"shadow require_approval beside nothing: allow",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(ask))} },
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "rules/rules[0]/require_approval"},
		{"a shadow rule that does not match says nothing",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(deny))} },
			toolCall("echo", `{}`), noeta.VerdictAllow, "", ""},
		{"a shadow rule is judged on its own, after a real rule that matched first",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, deny, shadowOf(ask))} },
			toolCall("shell", `{}`), noeta.VerdictDeny, NameRules, "rules/rules[1]/require_approval"},
		{"shadow rules are judged when an earlier guard refused",
			func(t *testing.T) []Guard {
				return []Guard{Func("early", 10, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
					return noeta.Deny("early no"), nil
				}), mustRules(t, shadowOf(deny))}
			},
			toolCall("shell", `{}`), noeta.VerdictDeny, "early", "rules/rules[0]/deny"},
		{"a shadow rule that errors beside a real allow: allow, recorded failed",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(badWhen))} },
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "rules/rules[0]/deny!"},
		{"a shadow rule that panics beside a real allow: allow, recorded failed",
			func(t *testing.T) []Guard { return []Guard{panickingRules(t, shadowOf(allowAll), shadowOf(deny))} },
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "rules/rules[0]/deny! rules/rules[1]/deny"},
		{"a shadow rule that panics beside a real deny: deny",
			func(t *testing.T) []Guard { return []Guard{panickingRules(t, shadowOf(allowAll), deny)} },
			toolCall("shell", `{}`), noeta.VerdictDeny, NameRules, "rules/rules[0]/deny!"},
		{"a guard whose shadow judgement panics: the decision stands",
			func(t *testing.T) []Guard { return []Guard{panickyShadow{}, mustRules(t, deny)} },
			toolCall("shell", `{}`), noeta.VerdictDeny, NameRules, "panicky//deny!"},
		{"a guard whose shadow judgement panics beside an allow: allow",
			func(t *testing.T) []Guard { return []Guard{panickyShadow{}} },
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "panicky//deny!"},
		{"a shadow set answers as its first matching rule",
			func(t *testing.T) []Guard {
				return []Guard{mustShadowSet(t, "trial", Rule{MatchTool: "echo", Action: noeta.VerdictAllow}, ask, deny)}
			},
			toolCall("shell", `{}`), noeta.VerdictAllow, "", "trial/rules[1]/require_approval"},
		{"a shadow set beside a real deny rule",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, deny), mustShadowSet(t, "trial", allowAll)} },
			toolCall("shell", `{}`), noeta.VerdictDeny, NameRules, "trial/rules[0]/allow"},
		{"a shadow deny rule that cannot read its argument would deny",
			func(t *testing.T) []Guard {
				return []Guard{mustRules(t, shadowOf(Rule{MatchTool: "shell", MatchArg: &MatchArg{Path: "c", Op: MatchContains, Value: "rm"}, Action: noeta.VerdictDeny, Reason: "rm"}))}
			},
			toolCall("shell", `{"c":"`+strings.Repeat("a", MatchStringCap+1)+`"}`), noeta.VerdictAllow, "", "rules/rules[0]/deny"},
		{"arguments that are not JSON: the real rule denies, the shadow rule fails",
			func(t *testing.T) []Guard {
				return []Guard{mustRules(t, denyIf(MatchEquals, "a", 1), shadowOf(denyIf(MatchEquals, "a", 2)))}
			},
			toolCall("shell", `{"a":`), noeta.VerdictDeny, NameRules, "rules/rules[1]/deny!"},
		{"spawns are not judged by rules",
			func(t *testing.T) []Guard {
				return []Guard{mustRules(t, shadowOf(Rule{MatchTool: "*", Action: noeta.VerdictDeny}))}
			},
			spawn("helper"), noeta.VerdictAllow, "", ""},
		{"finishes are not judged by rules",
			func(t *testing.T) []Guard {
				return []Guard{mustRules(t, shadowOf(Rule{MatchTool: "*", Action: noeta.VerdictDeny}))}
			},
			finish(), noeta.VerdictAllow, "", ""},
		{"an unknown action is refused by the stack and not judged in shadow",
			func(t *testing.T) []Guard { return []Guard{mustRules(t, shadowOf(deny))} },
			nil, noeta.VerdictDeny, StackName, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStack(t, tt.guards(t))
			d := s.Check(t.Context(), tt.action, gctx(noeta.GovernanceState{}, 0))
			if d.Verdict != tt.verdict || d.Guard != tt.guard {
				t.Errorf("decision %v by %q (%s), want %v by %q", d.Verdict, d.Guard, d.Reason, tt.verdict, tt.guard)
			}
			if got := shadowString(d.Shadows); got != tt.shadows {
				t.Errorf("shadows %q, want %q", got, tt.shadows)
			}
			for _, sv := range d.Shadows {
				if !sv.IsAllow() && sv.Reason == "" {
					t.Errorf("shadow %s/%s %v has no reason", sv.Guard, sv.Rule, sv.Verdict)
				}
			}
		})
	}
}

// TestShadowReasons: a failure says what failed, and a shadow allow says
// which rule allowed.
func TestShadowReasons(t *testing.T) {
	s := mustStack(t, []Guard{panickingRules(t,
		shadowOf(Rule{MatchTool: "*", Action: noeta.VerdictAllow}),
		shadowOf(Rule{MatchTool: "sh*", Action: noeta.VerdictAllow}),
	)})
	d := s.Check(t.Context(), toolCall("shell", `{}`), gctx(noeta.GovernanceState{}, 0))
	if len(d.Shadows) != 2 {
		t.Fatalf("shadows %+v", d.Shadows)
	}
	if r := d.Shadows[0].Reason; !strings.Contains(r, "panicked") || !strings.Contains(r, "rules[0]") {
		t.Errorf("panic reason %q", r)
	}
	if r := d.Shadows[1].Reason; r != `hook rule on "sh*" allows` {
		t.Errorf("allow reason %q", r)
	}
}

// TestShadowRulesAreNotCounted: Len counts the rules that decide, and a
// shadow set alone is a guard that allows everything.
func TestShadowRulesAreNotCounted(t *testing.T) {
	r := mustRules(t, Rule{MatchTool: "a", Action: noeta.VerdictDeny}, shadowOf(Rule{MatchTool: "b", Action: noeta.VerdictDeny}))
	if r.Len() != 1 || !r.Shadowed() {
		t.Errorf("Len %d Shadowed %v", r.Len(), r.Shadowed())
	}
	set := mustShadowSet(t, "trial", Rule{MatchTool: "*", Action: noeta.VerdictDeny})
	if set.Len() != 0 || !set.Shadowed() {
		t.Errorf("shadow set: Len %d Shadowed %v", set.Len(), set.Shadowed())
	}
	if v := checkGuard(t, set, toolCall("x", `{}`), gctx(noeta.GovernanceState{}, 0)); !v.IsAllow() {
		t.Errorf("a shadow set decided %v", v.Verdict)
	}
	if _, err := NewShadowRuleSet("rules", 150, nil); err == nil {
		t.Error("a shadow set named like a built-in was accepted")
	}
}

// TestShadowCancelled: a caller gone before the shadow rules are judged
// gets the decision and no shadow verdicts.
func TestShadowCancelled(t *testing.T) {
	s := mustStack(t, []Guard{mustRules(t, shadowOf(Rule{MatchTool: "*", Action: noeta.VerdictDeny}))})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d := s.Check(ctx, toolCall("x", `{}`), gctx(noeta.GovernanceState{}, 0))
	if d.Verdict != noeta.VerdictDeny || len(d.Shadows) != 0 {
		t.Errorf("got %v %q with shadows %v", d.Verdict, d.Reason, d.Shadows)
	}
}

// TestShadowNeverChangesTheDecision is the property that makes shadow mode
// safe to roll out: for any rules and rule sets, adding shadow rules
// anywhere in them, and shadow rule sets at any priority, never changes a
// decision — its verdict or the guard that gave it — whatever the shadow
// rules say, erroring ones included.
func TestShadowNeverChangesTheDecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 86))
	tools := []string{"read_file", "write_file", "shell", "echo"}
	argsPool := []string{`{}`, `{"path":"/etc/passwd"}`, `{"command":"rm -rf /"}`, `{"n":3}`, `not json`}
	patterns := []string{"*", "shell", "*_file", "?cho", "nothing"}
	whens := []string{"", "true", `tool == "shell"`, `args.path.startsWith("/")`, `args.missing == 1`}
	verdicts := []noeta.Verdict{noeta.VerdictAllow, noeta.VerdictDeny, noeta.VerdictRequireApproval}
	rule := func() Rule {
		r := Rule{MatchTool: patterns[rng.IntN(len(patterns))], Action: verdicts[rng.IntN(len(verdicts))], When: whens[rng.IntN(len(whens))]}
		switch rng.IntN(4) {
		case 1:
			r.MatchArg = &MatchArg{Path: "command", Op: MatchContains, Value: "rm"}
		case 2:
			r.MatchShell = &MatchShell{Path: "command", Programs: []string{"rm"}}
		}
		return r
	}
	rules := func(n int) []Rule {
		out := make([]Rule, n)
		for i := range out {
			out[i] = rule()
		}
		return out
	}
	// withShadows inserts shadow rules at random places.
	withShadows := func(rs []Rule) []Rule {
		out := slices.Clone(rs)
		for range rng.IntN(4) {
			out = slices.Insert(out, rng.IntN(len(out)+1), shadowOf(rule()))
		}
		return out
	}
	agents := map[string]AgentConfig{"main": {Permissions: PermissionPolicy{Mode: ModeBypassPermissions}}}
	reported := 0
	for iter := range 1500 {
		realRules := rules(rng.IntN(5))
		var sets, shadowSets []RuleSet
		for i := range rng.IntN(3) {
			sets = append(sets, RuleSet{Name: fmt.Sprintf("set%d", i), Priority: 100 + rng.IntN(100), Rules: rules(1 + rng.IntN(4))})
		}
		shadowSets = make([]RuleSet, len(sets))
		for i, s := range sets {
			s.Rules = withShadows(s.Rules)
			shadowSets[i] = s
		}
		for i := range rng.IntN(3) {
			shadowSets = append(shadowSets, RuleSet{Name: fmt.Sprintf("trial%d", i), Priority: 100 + rng.IntN(100), Rules: rules(1 + rng.IntN(4)), Shadow: true})
		}
		base, err := NewConfig(agents, realRules, sets)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		shadowed, err := NewConfig(agents, withShadows(realRules), shadowSets)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		sBase, err := base.AgentStack("main", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sShadow, err := shadowed.AgentStack("main", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var a noeta.ProposedAction
		switch rng.IntN(6) {
		case 0:
			a = spawn("main")
		case 1:
			a = finish()
		default:
			a = toolCall(tools[rng.IntN(len(tools))], argsPool[rng.IntN(len(argsPool))])
		}
		c := gctx(noeta.GovernanceState{Iterations: rng.IntN(6)}, 0)
		want := sBase.Check(t.Context(), a, c)
		got := sShadow.Check(t.Context(), a, c)
		if got.Verdict != want.Verdict || got.Guard != want.Guard {
			t.Errorf("iteration %d: without shadows %v by %q (%s); with: %v by %q (%s); shadows %s",
				iter, want.Verdict, want.Guard, want.Reason, got.Verdict, got.Guard, got.Reason, shadowString(got.Shadows))
		}
		if len(want.Shadows) != 0 {
			t.Errorf("iteration %d: shadows from a stack without shadow rules: %v", iter, want.Shadows)
		}
		reported += len(got.Shadows)
	}
	// The property must not hold for want of shadow verdicts.
	if reported < 500 {
		t.Errorf("only %d shadow verdicts in 1500 actions", reported)
	}
}
