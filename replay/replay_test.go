package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/replay"
	"github.com/noeta-go/noeta/tools"
)

const agentsDoc = `
agents:
  a:
    tools: [echo]
`

const denySecret = `
rules:
  - match_tool: echo
    match_arg: {path: text, regex: "secret"}
    action: deny
    reason: "no secrets"
`

const askLoud = `
rules:
  - match_tool: echo
    match_arg: {path: text, regex: "LOUD"}
    action: require_approval
    reason: "shouting"
`

// The recorded tasks: four echo calls and a finish each.
const script = `agent: a
goal: g
script:
  - tool_calls: [{tool: echo, args: {text: hello}}, {tool: echo, args: {text: "a secret"}}]
  - tool_calls: [{tool: echo, args: {text: LOUD}}, {tool: echo, args: {text: quiet}}]
  - finish: {answer: done}
`

func parse(t testing.TB, doc string) *config.File {
	t.Helper()
	cfg, err := config.Parse("noeta.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func registry(t testing.TB) *tools.Registry {
	t.Helper()
	all, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(all[0]) // echo
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// record runs n tasks of script under doc on a memlog backend and returns
// it.
func record(t testing.TB, doc string, n int) *memlog.Backend {
	t.Helper()
	return recordN(t, doc, script, n)
}

// recordScript runs one task of taskFile under doc on a memlog backend.
func recordScript(t testing.TB, doc, taskFile string) *memlog.Backend {
	t.Helper()
	return recordN(t, doc, taskFile, 1)
}

func recordN(t testing.TB, doc, taskFile string, n int) *memlog.Backend {
	t.Helper()
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	cfg := parse(t, doc)
	h, err := host.Open(t.Context(), b, host.Options{Governance: cfg.Governance, Tools: registry(t), Workers: 2, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(taskFile))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		id, err := h.Submit(t.Context(), sub)
		if err != nil {
			t.Fatal(err)
		}
		for {
			rest, err := h.Wait(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if rest.Status != host.RestWaiting {
				break
			}
			// A person approves what the recorded config asked about.
			if err := h.Approve(t.Context(), id, rest.Waiting[0].Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "sre", Auth: noeta.AuthToken}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b
}

func judge(t testing.TB, doc string) *replay.Judge {
	t.Helper()
	reg := registry(t)
	return replay.NewJudge(parse(t, doc).Governance, replay.JudgeOptions{Risks: reg.RiskString, Edits: reg.Edits})
}

// TestReplay: the recorded verdicts set beside those of another config,
// grouped by change, for every kind of change; the same config changes
// nothing; a replay writes nothing.
func TestReplay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, recorded, replayed string
		want                     []replay.Group // counts and keys; examples not compared
		actions                  int
	}{
		{name: "the same config", recorded: agentsDoc, replayed: agentsDoc, actions: 2 * 5},
		{name: "a new deny rule", recorded: agentsDoc, replayed: agentsDoc + denySecret, actions: 2 * 5,
			want: []replay.Group{{From: "allow", To: "deny", Point: "tool_call", Tool: "echo", Guard: "rules", Count: 2}}},
		{name: "a deny rule dropped", recorded: agentsDoc + denySecret, replayed: agentsDoc, actions: 2 * 5,
			want: []replay.Group{{From: "deny", To: "allow", Point: "tool_call", Tool: "echo", Guard: "rules", Count: 2}}},
		{name: "a new approval rule", recorded: agentsDoc, replayed: agentsDoc + askLoud, actions: 2 * 5,
			want: []replay.Group{{From: "allow", To: "require_approval", Point: "tool_call", Tool: "echo", Guard: "rules", Count: 2}}},
		// The approved call's start is the approval's outcome, not a
		// verdict of its own: judged once, at the request.
		// The call after the one asked about was skipped, never judged.
		{name: "an approval rule dropped", recorded: agentsDoc + askLoud, replayed: agentsDoc, actions: 2 * 4,
			want: []replay.Group{{From: "require_approval", To: "allow", Point: "tool_call", Tool: "echo", Guard: "rules", Count: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := record(t, tc.recorded, 2)
			before, err := b.Store.Tasks(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			rep, err := replay.Run(t.Context(), b.Store, b.Store, judge(t, tc.replayed), replay.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Tasks != 2 || rep.Actions != tc.actions || len(rep.NotReplayed) != 0 {
				out, _ := json.MarshalIndent(rep, "", "  ")
				t.Fatalf("report %s, want 2 tasks, %d actions, all replayed", out, tc.actions)
			}
			if len(rep.Changes) != len(tc.want) {
				out, _ := json.MarshalIndent(rep.Changes, "", "  ")
				t.Fatalf("changes %s, want %+v", out, tc.want)
			}
			for i, w := range tc.want {
				g := rep.Changes[i]
				if g.From != w.From || g.To != w.To || g.Point != w.Point || g.Tool != w.Tool || g.Guard != w.Guard || g.Count != w.Count {
					t.Errorf("change %d: %+v, want %+v", i, g, w)
				}
				if len(g.Examples) == 0 || g.Examples[0].Seq == 0 || g.Examples[0].Agent != "a" {
					t.Errorf("change %d: examples %+v", i, g.Examples)
				}
			}
			after, err := b.Store.Tasks(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for i := range before {
				if before[i].LastSeq != after[i].LastSeq {
					t.Errorf("task %s: %d records before the replay, %d after", before[i].Task, before[i].LastSeq, after[i].LastSeq)
				}
			}
		})
	}
}

// TestNotReplayable: a Go guard that does not say it is replayable makes
// its agent's actions reported as not replayed, never guessed.
func TestNotReplayable(t *testing.T) {
	t.Parallel()
	b := record(t, agentsDoc, 1)
	reg := registry(t)
	j := replay.NewJudge(parse(t, agentsDoc).Governance, replay.JudgeOptions{Risks: reg.RiskString, Edits: reg.Edits,
		Guards: []guards.Guard{guards.Func("external", guards.MinUserPriority, func(_ context.Context, _ noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
			return noeta.Allow(), nil
		})}})
	rep, err := replay.Run(t.Context(), b.Store, b.Store, j, replay.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Actions != 5 || rep.NotReplayed["not_replayable"] != 5 || rep.Changed != 0 {
		t.Fatalf("%+v", rep)
	}
}

// TestSpawnsAndOutsideRisks: a recorded spawn is judged as the engine
// judged it, a fan-out once as a batch; an action whose verdict needs a
// risk level from outside the log and the config (JudgeOptions.Outside) is
// not replayed, while the actions that do not need it are.
func TestSpawnsAndOutsideRisks(t *testing.T) {
	t.Parallel()
	const doc = `
agents:
  a:
    tools: [echo]
    permissions: {allowed_subtask_agents: [h]}
  h:
    tools: [echo]
`
	const spawning = `agent: a
goal: g
script:
  - tool_calls: [{tool: echo, args: {text: hello}}]
  - spawn: [{agent: h, goal: "g1", script: [{finish: {answer: "1"}}]}, {agent: h, goal: "g2", script: [{finish: {answer: "2"}}]}]
  - spawn: [{agent: h, goal: "g3", script: [{finish: {answer: "3"}}]}]
  - finish: {answer: done}
`
	b := recordScript(t, doc, spawning)
	// a: a call, a fan-out of two, a spawn, a finish; each child a finish.
	for _, c := range []struct {
		name, doc string
		changed   int
		want      []replay.Group
	}{
		{name: "the same config", doc: doc},
		{name: "no spawns allowed", doc: strings.Replace(doc, "allowed_subtask_agents: [h]", "allowed_subtask_agents: []", 1), changed: 2,
			want: []replay.Group{{From: "allow", To: "deny", Point: "spawn_subtask", Guard: "permission", Count: 2}}},
		{name: "one spawn allowed", doc: strings.Replace(doc, "permissions:", "budget: {max_spawned_subtasks: 1}\n    permissions:", 1), changed: 2,
			want: []replay.Group{{From: "allow", To: "deny", Point: "spawn_subtask", Guard: "budget", Count: 2}}},
	} {
		rep, err := replay.Run(t.Context(), b.Store, b.Store, judge(t, c.doc), replay.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.MarshalIndent(rep, "", "  ")
		if rep.Tasks != 4 || rep.Actions != 7 || rep.Changed != c.changed || len(rep.NotReplayed) != 0 || len(rep.Changes) != len(c.want) {
			t.Fatalf("%s: %s", c.name, out)
		}
		for i, w := range c.want {
			g := rep.Changes[i]
			if g.From != w.From || g.To != w.To || g.Point != w.Point || g.Guard != w.Guard || g.Count != w.Count {
				t.Errorf("%s: change %d: %+v, want %+v", c.name, i, g, w)
			}
		}
		if c.changed > 0 && rep.Changes[0].Examples[0].Child != "h,h" {
			t.Errorf("%s: the fan-out's example %+v", c.name, rep.Changes[0].Examples[0])
		}
	}

	reg := registry(t)
	j := replay.NewJudge(parse(t, doc).Governance, replay.JudgeOptions{Risks: reg.RiskString, Edits: reg.Edits,
		Outside: func(tool string) bool { return tool == "echo" }})
	rep, err := replay.Run(t.Context(), b.Store, b.Store, j, replay.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Actions != 7 || rep.Changed != 0 || rep.NotReplayed["not_replayable"] != 1 || len(rep.NotReplayed) != 1 ||
		!strings.Contains(rep.NotReplayedFirst["not_replayable"], "the risk level of tool echo comes from its MCP server") {
		t.Fatalf("%+v", rep)
	}
}

// TestCancelled: a replay or a shadow report whose context ends stops
// with its error, the logs read ahead of it stopped too.
func TestCancelled(t *testing.T) {
	t.Parallel()
	b := record(t, agentsDoc, 20)
	ctx, cancel := context.WithCancel(t.Context())
	j := judge(t, agentsDoc)
	if rep, err := replay.Run(ctx, b.Store, b.Store, j, replay.Filter{}); err != nil || rep.Tasks != 20 {
		t.Fatalf("%+v %v", rep, err)
	}
	cancel()
	if _, err := replay.Run(ctx, b.Store, b.Store, j, replay.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("replay: %v, want context.Canceled", err)
	}
	if _, err := replay.ShadowReport(ctx, b.Store, replay.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("shadow report: %v, want context.Canceled", err)
	}
}
