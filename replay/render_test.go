package replay_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/replay"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		since, agent, task string
		want               replay.Filter
		err                string
	}{
		{want: replay.Filter{}},
		{since: "24h", want: replay.Filter{Since: now.Add(-24 * time.Hour)}},
		{since: "90m", agent: "a", want: replay.Filter{Since: now.Add(-90 * time.Minute), Agent: "a"}},
		{since: "7d", want: replay.Filter{Since: now.Add(-7 * 24 * time.Hour)}},
		{since: "2026-12-01T00:00:00Z", task: "T1", want: replay.Filter{Since: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Task: "T1"}},
		{since: "3x", err: `--since "3x": want a duration`},
		{since: "-1h", err: `--since "-1h": want a duration above zero`},
		{since: "0d", err: "above zero"},
		{since: "d", err: "want a duration"},
		{task: "a.b", err: "--task:"},
	}
	for _, c := range cases {
		got, err := replay.ParseFilter(c.since, c.agent, c.task, now)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %q: error %v, want %q", c.since, c.task, err, c.err)
			}
			continue
		}
		if err != nil || !got.Since.Equal(c.want.Since) || got.Agent != c.want.Agent || got.Task != c.want.Task {
			t.Errorf("%q %q %q: %+v %v, want %+v", c.since, c.agent, c.task, got, err, c.want)
		}
	}
}

var at = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func outcome(task string, seq uint64, rec, now replay.Verdict) replay.Outcome {
	return replay.Outcome{Action: replay.Action{Task: task, Agent: "a", Turn: 1, Seq: seq, Time: at, Point: "tool_call", Tool: "echo", CallID: "call-1-0"},
		Recorded: rec, Replayed: now}
}

var (
	allow = replay.Verdict{Verdict: noeta.VerdictAllow}
	deny  = replay.Verdict{Verdict: noeta.VerdictDeny, Guard: "rules", Reason: "no secrets"}
)

func TestWriteReport(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		rep  replay.Report
		want []string // lines, in order, of the text
	}{
		{name: "nothing", rep: replay.Report{Tasks: 1, Actions: 1, Changes: []replay.Group{}},
			want: []string{"1 action of 1 task replayed under new.yaml: nothing would change, 0 not replayed"}},
		{name: "a spawn",
			rep: replay.Report{Tasks: 1, Actions: 2, Changed: 1, Changes: []replay.Group{{From: "allow", To: "deny", Point: "spawn_subtask", Guard: "budget", Count: 1,
				Examples: []replay.Outcome{{Action: replay.Action{Task: "T1", Agent: "a", Turn: 2, Seq: 9, Time: at, Point: "spawn_subtask", Child: "h,h"},
					Recorded: allow, Replayed: replay.Verdict{Verdict: noeta.VerdictDeny, Guard: "budget", Reason: "max_spawned_subtasks"}}}}}},
			want: []string{
				"2 actions of 1 task replayed under new.yaml: 1 would change, 0 not replayed",
				"",
				"FROM   TO    POINT          TOOL  GUARD   COUNT",
				"allow  deny  spawn_subtask  -     budget  1",
				"",
				"allow → deny, spawn_subtask, budget (1):",
				"  task T1 seq 9 turn 2 of h,h: was allow, now deny by budget: max_spawned_subtasks",
			}},
		{name: "a change and one not replayed",
			rep: replay.Report{Tasks: 2, Actions: 5, Changed: 1, Changes: []replay.Group{{From: "allow", To: "deny", Point: "tool_call", Tool: "echo", Guard: "rules", Count: 1,
				Examples: []replay.Outcome{outcome("T1", 7, allow, deny)}}},
				NotReplayed: map[string]int{"not_replayable": 2}, NotReplayedFirst: map[string]string{"not_replayable": "task T2 seq 5 (tool_call x): not replayable: guard g"}},
			want: []string{
				"5 actions of 2 tasks replayed under new.yaml: 1 would change, 2 not replayed",
				"",
				"FROM   TO    POINT      TOOL  GUARD  COUNT",
				"allow  deny  tool_call  echo  rules  1",
				"",
				"allow → deny, tool_call echo, rules (1):",
				"  task T1 seq 7 turn 1 call-1-0: was allow, now deny by rules: no secrets",
				"",
				"not replayed (never guessed):",
				"  WHY             COUNT  FIRST",
				"  not_replayable  2      task T2 seq 5 (tool_call x): not replayable: guard g",
			}},
	}
	for _, c := range cases {
		var b bytes.Buffer
		if err := replay.WriteReport(&b, "new.yaml", replay.Filter{}, &c.rep, false); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimRight(b.String(), "\n"); got != strings.Join(c.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, strings.Join(c.want, "\n"))
		}
		b.Reset()
		if err := replay.WriteReport(&b, "new.yaml", replay.Filter{Agent: "a"}, &c.rep, true); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil || doc["kind"] != "policy_replay" || doc["config"] != "new.yaml" ||
			doc["filter"].(map[string]any)["agent"] != "a" || doc["changed"] != float64(c.rep.Changed) {
			t.Errorf("%s: JSON %v\n%s", c.name, err, b.String())
		}
		checkSnakeKeys(t, doc)
	}
}

func TestWriteShadow(t *testing.T) {
	t.Parallel()
	sum := replay.ShadowSummary{Tasks: 2, Verdicts: 3, Changed: 2, Failed: 1, Rules: []replay.ShadowRule{
		{Guard: "rules", Rule: "rules[0]", Verdict: "deny", Count: 2, Changed: 2, Failed: 1, Decided: map[string]int{"allow": 2},
			Examples: []replay.ShadowExample{{Task: "T1", Agent: "a", Turn: 1, Seq: 6, Time: at, Point: "tool_call", Tool: "echo", CallID: "call-1-0",
				Reason: "no secrets", Failed: true, Decided: allow}}},
		{Guard: "trial", Rule: "guards[0].rules[0]", Verdict: "allow", Count: 1, Decided: map[string]int{"allow": 1}},
	}}
	var b bytes.Buffer
	if err := replay.WriteShadow(&b, replay.Filter{}, &sum, false); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"2 tasks, 3 shadow verdicts, 2 would have changed, 1 failed",
		"",
		"GUARD  RULE                WOULD  COUNT  CHANGED  FAILED  DECIDED",
		"rules  rules[0]            deny   2      2        1       allow 2",
		"trial  guards[0].rules[0]  allow  1      0        0       allow 1",
		"",
		"rules rules[0] would deny:",
		"  task T1 seq 6 turn 1 tool_call echo call-1-0: no secrets (failed); decided allow",
		"",
		"trial guards[0].rules[0] would allow:",
	}, "\n")
	if got := strings.TrimRight(b.String(), "\n"); got != want {
		t.Errorf("\n%s\nwant\n%s", got, want)
	}
	b.Reset()
	if err := replay.WriteShadow(&b, replay.Filter{}, &replay.ShadowSummary{Rules: []replay.ShadowRule{}}, false); err != nil || b.String() != "0 tasks, 0 shadow verdicts, 0 would have changed, 0 failed\n" {
		t.Errorf("empty: %v %q", err, b.String())
	}
	b.Reset()
	if err := replay.WriteShadow(&b, replay.Filter{}, &sum, true); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil || doc["kind"] != "policy_shadow_report" || doc["verdicts"] != 3.0 {
		t.Errorf("JSON %v\n%s", err, b.String())
	}
	checkSnakeKeys(t, doc)
}

func TestWriteCases(t *testing.T) {
	t.Parallel()
	res := []replay.CaseResult{
		{Case: replay.Case{Name: "ok", Agent: "a", Expect: "allow"}, Name: "ok", Got: allow, Pass: true},
		{Case: replay.Case{Name: "secret", Agent: "a", Expect: "deny", Guard: "rules"}, Name: "secret", Got: allow},
		{Case: replay.Case{Name: "ghost", Agent: "b", Expect: "allow"}, Name: "ghost", Err: "stack: boom"},
	}
	var b bytes.Buffer
	if err := replay.WriteCases(&b, "noeta.yaml", "cases.yaml", res, false); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"FAILED  AGENT  EXPECTED       GOT",
		"secret  a      deny by rules  allow",
		"ghost   b      allow          not judged: stack: boom",
		"",
		"3 cases of cases.yaml under noeta.yaml: 1 passed, 2 failed",
	}, "\n")
	if got := strings.TrimRight(b.String(), "\n"); got != want {
		t.Errorf("\n%s\nwant\n%s", got, want)
	}
	b.Reset()
	if err := replay.WriteCases(&b, "noeta.yaml", "cases.yaml", res[:1], false); err != nil || b.String() != "1 case of cases.yaml under noeta.yaml: 1 passed, 0 failed\n" {
		t.Errorf("all pass: %v %q", err, b.String())
	}
	b.Reset()
	if err := replay.WriteCases(&b, "noeta.yaml", "cases.yaml", res, true); err != nil {
		t.Fatal(err)
	}
	var doc replay.CasesDoc
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil || doc.Total != 3 || doc.Failed != 2 || doc.Results[1].ExpectGuard != "rules" || doc.Results[2].Error == "" {
		t.Errorf("JSON %v\n%s", err, b.String())
	}
	var m map[string]any
	_ = json.Unmarshal(b.Bytes(), &m)
	checkSnakeKeys(t, m)
}

// checkSnakeKeys fails on a key of v that is not lower_snake_case.
func checkSnakeKeys(t *testing.T, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k != strings.ToLower(k) || strings.ContainsAny(k, " -") {
				t.Errorf("key %q is not lower_snake_case", k)
			}
			checkSnakeKeys(t, e)
		}
	case []any:
		for _, e := range v {
			checkSnakeKeys(t, e)
		}
	}
}
