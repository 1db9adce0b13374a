package replay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ShadowSummary is what the shadow rules of a set of logs would have done:
// their GuardShadowed records, counted per rule and would-be verdict
// (docs/adr/0086-shadow-rules-are-judged-and-never-decide.md). Unlike Run
// it judges nothing: the shadow rules were judged live, on the real
// traffic, and the engine recorded their answers.
type ShadowSummary struct {
	// Tasks is the number of tasks read; Verdicts the GuardShadowed
	// records kept.
	Tasks    int `json:"tasks"`
	Verdicts int `json:"verdicts"`
	// Changed is how many would have changed the decision: the would-be
	// verdict differs from the real one recorded beside it.
	Changed int `json:"changed"`
	// Failed is how many shadow rules could not judge (an error, a panic).
	Failed int `json:"failed"`
	// Rules are grouped by guard, rule and would-be verdict, the group
	// that would have changed most decisions first.
	Rules []ShadowRule `json:"rules"`
}

// ShadowRule is the would-be verdicts of one shadow rule of one kind.
type ShadowRule struct {
	Guard   string `json:"guard"`
	Rule    string `json:"rule,omitempty"`
	Verdict string `json:"verdict"`
	// Count is how many times the rule would have given Verdict; Changed
	// how many of those differ from the real verdict; Failed how many were
	// failures (the deny the rule would have failed closed to).
	Count   int `json:"count"`
	Changed int `json:"changed"`
	Failed  int `json:"failed,omitempty"`
	// Decided counts the real verdicts the rule's answers were set beside.
	Decided map[string]int `json:"decided"`
	// Examples are the first few that would have changed the decision, or,
	// if none would have, the first few.
	Examples []ShadowExample `json:"examples"`
}

// ShadowExample is one would-be verdict with where it was given.
type ShadowExample struct {
	Task  string    `json:"task"`
	Agent string    `json:"agent"`
	Turn  int       `json:"turn"`
	Seq   uint64    `json:"seq"`
	Time  time.Time `json:"time"`
	// Point is tool_call, spawn_subtask or finish; Tool and CallID name a
	// call, Child the agent of a spawn's child.
	Point  string `json:"point"`
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Child  string `json:"child,omitempty"`
	Reason string `json:"reason"`
	Failed bool   `json:"failed,omitempty"`
	// Decided is the real verdict, and the guard that gave it.
	Decided Verdict `json:"decided"`
}

// ShadowReport summarises the GuardShadowed records of the tasks f keeps
// (f.Since and f.Agent apply to each record's time and task's agent, as in
// Run). It reads and never writes. A record that does not decode fails it:
// a summary that skipped records would undercount what a rule would do.
func ShadowReport(ctx context.Context, src Source, f Filter) (*ShadowSummary, error) {
	tasks, err := taskList(ctx, src, f)
	if err != nil {
		return nil, err
	}
	sum := &ShadowSummary{Rules: []ShadowRule{}}
	type key struct{ guard, rule, verdict string }
	groups := map[key]*ShadowRule{}
	// unchanged holds the first examples of each group that would not have
	// changed the decision, for groups that have no others.
	unchanged := map[key][]ShadowExample{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := prefetch(ctx, src, tasks)
	for _, task := range tasks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sum.Tasks++
		envs, err := next()
		if err != nil {
			return nil, fmt.Errorf("replay: shadow report: task %s: %w", task, err)
		}
		err = shadowTask(envs, func(agent string, ex ShadowExample, g *noeta.GuardShadowed) {
			if f.Agent != "" && agent != f.Agent || !f.Since.IsZero() && ex.Time.Before(f.Since) {
				return
			}
			sum.Verdicts++
			k := key{g.Guard, g.Rule, g.Verdict.String()}
			r, ok := groups[k]
			if !ok {
				r = &ShadowRule{Guard: k.guard, Rule: k.rule, Verdict: k.verdict, Decided: map[string]int{}}
				groups[k] = r
			}
			r.Count++
			r.Decided[g.Decided.String()]++
			if g.Failed {
				r.Failed++
				sum.Failed++
			}
			if !g.Changed() {
				if len(unchanged[k]) < MaxExamples {
					unchanged[k] = append(unchanged[k], ex)
				}
				return
			}
			r.Changed++
			sum.Changed++
			if len(r.Examples) < MaxExamples {
				r.Examples = append(r.Examples, ex)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("replay: shadow report: task %s: %w", task, err)
		}
	}
	for k, r := range groups {
		if len(r.Examples) == 0 {
			r.Examples = unchanged[k]
		}
		sum.Rules = append(sum.Rules, *r)
	}
	slices.SortFunc(sum.Rules, func(a, b ShadowRule) int {
		return cmp.Or(cmp.Compare(b.Changed, a.Changed), cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.Guard, b.Guard), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Verdict, b.Verdict))
	})
	return sum, nil
}

// shadowTask calls fn with each GuardShadowed of a task's log, envs, with
// the task's agent and the turn it was recorded in. Only the records it
// needs are decoded.
func shadowTask(envs []eventlog.Envelope, fn func(agent string, ex ShadowExample, g *noeta.GuardShadowed)) error {
	agent, turn := "", 0
	for _, env := range envs {
		switch env.Type {
		case noeta.TypeTaskCreated, noeta.TypeTurnStarted, noeta.TypeGuardShadowed:
		default:
			continue
		}
		p, _, err := env.Decode()
		if err != nil {
			return fmt.Errorf("seq %d: %w", env.Seq, err)
		}
		switch p := p.(type) {
		case *noeta.TaskCreated:
			agent = p.Agent
		case *noeta.TurnStarted:
			turn = p.Turn
		case *noeta.GuardShadowed:
			fn(agent, ShadowExample{
				Task: env.Task, Agent: agent, Turn: turn, Seq: env.Seq, Time: env.Time,
				Point: string(p.Action), Tool: p.Tool, CallID: p.CallID, Child: p.Agent,
				Reason: p.Reason, Failed: p.Failed,
				Decided: Verdict{Verdict: p.Decided, Guard: p.DecidedBy},
			}, p)
		}
	}
	return nil
}
