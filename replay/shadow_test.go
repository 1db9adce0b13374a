package replay_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/replay"
)

// shadowDoc rolls three rules out in shadow beside a real one: a deny of
// secrets and a deny that agrees with the real rule, and a rule set that
// would allow the greetings the real rule denies and deny quiet words.
const shadowDoc = agentsDoc + `
rules:
  - {match_tool: echo, match_arg: {path: text, regex: secret}, action: deny, reason: "no secrets", shadow: true}
  - {match_tool: echo, match_arg: {path: text, regex: hello}, action: deny, reason: "no greetings"}
  - {match_tool: echo, match_arg: {path: text, regex: hello}, action: deny, reason: "same", shadow: true}
guards:
  - name: trial
    priority: 150
    shadow: true
    rules:
      - {match_tool: echo, match_arg: {path: text, regex: hello}, action: allow}
      - {match_tool: echo, match_arg: {path: text, regex: quiet}, action: deny, reason: "too quiet"}
`

// TestShadowEndToEnd runs tasks under shadow rules on memlog through the
// host: the shadow rules decide nothing (the secret is echoed, the
// greeting denied as the real rule says), their verdicts are in the log,
// and ShadowReport counts them per rule, with how many would have changed
// the decision. Neither it nor a replay of the log writes anything.
func TestShadowEndToEnd(t *testing.T) {
	t.Parallel()
	b := record(t, shadowDoc, 2)
	tasks, err := b.Store.Tasks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("%d tasks", len(tasks))
	}
	for _, ti := range tasks {
		envs, err := b.Store.Read(t.Context(), ti.Task, 0)
		if err != nil {
			t.Fatal(err)
		}
		shadowed, ranSecret, deniedHello := 0, false, false
		for _, env := range envs {
			switch env.Type {
			case noeta.TypeGuardShadowed:
				shadowed++
			case noeta.TypeToolCallFinished:
				ranSecret = ranSecret || strings.Contains(string(env.Payload), `"text":"a secret"`)
			case noeta.TypeToolCallDenied:
				deniedHello = deniedHello || strings.Contains(string(env.Payload), `"reason":"no greetings"`)
			}
		}
		if shadowed != 4 || !ranSecret || !deniedHello {
			t.Errorf("task %s: %d GuardShadowed, secret ran %v, greeting denied %v", ti.Task, shadowed, ranSecret, deniedHello)
		}
	}

	sum, err := replay.ShadowReport(t.Context(), b.Store, replay.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(sum, "", "  ")
	if sum.Tasks != 2 || sum.Verdicts != 8 || sum.Changed != 6 || sum.Failed != 0 {
		t.Fatalf("summary %s", out)
	}
	want := []replay.ShadowRule{
		{Guard: "rules", Rule: "rules[0]", Verdict: "deny", Count: 2, Changed: 2, Decided: map[string]int{"allow": 2}},
		{Guard: "trial", Rule: "guards[0].rules[0]", Verdict: "allow", Count: 2, Changed: 2, Decided: map[string]int{"deny": 2}},
		{Guard: "trial", Rule: "guards[0].rules[1]", Verdict: "deny", Count: 2, Changed: 2, Decided: map[string]int{"allow": 2}},
		{Guard: "rules", Rule: "rules[2]", Verdict: "deny", Count: 2, Changed: 0, Decided: map[string]int{"deny": 2}},
	}
	if len(sum.Rules) != len(want) {
		t.Fatalf("rules %s", out)
	}
	for i, w := range want {
		g := sum.Rules[i]
		if g.Guard != w.Guard || g.Rule != w.Rule || g.Verdict != w.Verdict || g.Count != w.Count || g.Changed != w.Changed ||
			len(g.Decided) != len(w.Decided) || g.Decided[strings.Join(keys(w.Decided), "")] != w.Count {
			t.Errorf("rule %d: %+v, want %+v", i, g, w)
		}
		if len(g.Examples) != 2 {
			t.Errorf("rule %d: %d examples", i, len(g.Examples))
			continue
		}
		ex := g.Examples[0]
		if ex.Agent != "a" || ex.Seq == 0 || ex.Turn == 0 || ex.Point != "tool_call" || ex.Tool != "echo" || ex.CallID == "" ||
			ex.Reason == "" || ex.Decided.Verdict.String() != keys(w.Decided)[0] {
			t.Errorf("rule %d: example %+v", i, ex)
		}
	}
	if ex := sum.Rules[1].Examples[0]; ex.Decided.Guard != "rules" {
		t.Errorf("the real deny's guard: %+v", ex.Decided)
	}

	// The filters.
	for _, tc := range []struct {
		name string
		f    replay.Filter
		want int
	}{
		{"another agent", replay.Filter{Agent: "other"}, 0},
		{"the agent", replay.Filter{Agent: "a"}, 8},
		{"one task", replay.Filter{Task: tasks[0].Task}, 4},
		{"since later", replay.Filter{Since: time.Now().Add(time.Hour)}, 0},
	} {
		s, err := replay.ShadowReport(t.Context(), b.Store, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if s.Verdicts != tc.want {
			t.Errorf("%s: %d verdicts, want %d", tc.name, s.Verdicts, tc.want)
		}
	}

	// A replay of the log under the same config: shadow rules change
	// nothing there either.
	rep, err := replay.Run(t.Context(), b.Store, b.Store, judge(t, shadowDoc), replay.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed != 0 || len(rep.NotReplayed) != 0 || rep.Actions != 2*5 {
		o, _ := json.MarshalIndent(rep, "", "  ")
		t.Errorf("replay under the recorded config: %s", o)
	}
	after, err := b.Store.Tasks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range tasks {
		if tasks[i].LastSeq != after[i].LastSeq {
			t.Errorf("task %s: %d records before the report, %d after", tasks[i].Task, tasks[i].LastSeq, after[i].LastSeq)
		}
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
