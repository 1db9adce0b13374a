package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// Source is what a replay reads: the logs and the task index.
type Source interface {
	eventlog.Reader
	eventlog.TaskIndex
}

// Filter narrows a replay (zero: every task).
type Filter struct {
	// Since keeps the tasks appended to since then, and of their actions
	// those judged since then.
	Since time.Time
	// Agent keeps the actions of one agent; Task one task.
	Agent, Task string
}

// MaxExamples bounds the examples a group of changes keeps.
const MaxExamples = 3

// Group is the changes of one kind: one recorded verdict to one new one,
// at one action point, of one tool, decided by one guard of the new stack
// (or, for a verdict that became allow, the guard that had decided it).
type Group struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Point string `json:"point"`
	Tool  string `json:"tool,omitempty"`
	Guard string `json:"guard,omitempty"`
	Count int    `json:"count"`
	// Examples are the first few, with the reasons.
	Examples []Outcome `json:"examples"`
}

// Report is what a replay found.
type Report struct {
	Tasks   int `json:"tasks"`
	Actions int `json:"actions"`
	Changed int `json:"changed"`
	// Changes are grouped, the largest group first.
	Changes []Group `json:"changes"`
	// NotReplayed counts the actions that could not be judged again, by
	// why; NotReplayedFirst is the first error of each kind, which names
	// an example (the guard, the tool, the task and turn).
	NotReplayed      map[string]int    `json:"not_replayed,omitempty"`
	NotReplayedFirst map[string]string `json:"not_replayed_first,omitempty"`
}

// Run replays the actions of the tasks f keeps.
func Run(ctx context.Context, src Source, content Content, j *Judge, f Filter) (*Report, error) {
	tasks, err := taskList(ctx, src, f)
	if err != nil {
		return nil, err
	}
	rep := &Report{Changes: []Group{}}
	type groupKey struct{ from, to, point, tool, guard string }
	groups := map[groupKey]*Group{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := prefetch(ctx, src, tasks)
	for _, task := range tasks {
		rep.Tasks++
		envs, err := next()
		if err != nil {
			return nil, fmt.Errorf("replay: task %s: %w", task, err)
		}
		err = j.records(ctx, content, task, envs, func(o Outcome) {
			if f.Agent != "" && o.Agent != f.Agent || !f.Since.IsZero() && o.Time.Before(f.Since) {
				return
			}
			rep.Actions++
			if o.Err != nil {
				if rep.NotReplayed == nil {
					rep.NotReplayed, rep.NotReplayedFirst = map[string]int{}, map[string]string{}
				}
				k := why(o.Err)
				if rep.NotReplayed[k]++; rep.NotReplayed[k] == 1 {
					rep.NotReplayedFirst[k] = notReplayedAt(o)
				}
				return
			}
			if !o.Changed() {
				return
			}
			rep.Changed++
			guard := o.Replayed.Guard
			if guard == "" {
				guard = o.Recorded.Guard
			}
			key := groupKey{o.Recorded.Verdict.String(), o.Replayed.Verdict.String(), o.Point, o.Tool, guard}
			g, ok := groups[key]
			if !ok {
				g = &Group{From: key.from, To: key.to, Point: key.point, Tool: key.tool, Guard: key.guard}
				groups[key] = g
			}
			g.Count++
			if len(g.Examples) < MaxExamples {
				g.Examples = append(g.Examples, o)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("replay: task %s: %w", task, err)
		}
	}
	for _, g := range groups {
		rep.Changes = append(rep.Changes, *g)
	}
	slices.SortFunc(rep.Changes, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To),
			cmp.Compare(a.Point, b.Point), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Guard, b.Guard))
	})
	return rep, nil
}

// taskList is the tasks f keeps, oldest first.
func taskList(ctx context.Context, src Source, f Filter) ([]string, error) {
	if f.Task != "" {
		return []string{f.Task}, nil
	}
	all, err := src.Tasks(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := len(all) - 1; i >= 0; i-- {
		if f.Since.IsZero() || !all[i].LastTime.Before(f.Since) {
			out = append(out, all[i].Task)
		}
	}
	return out, nil
}

// why is the kind of a replay error, for counting.
func why(err error) string {
	switch {
	case errors.Is(err, ErrNotReplayable):
		return "not_replayable"
	case errors.Is(err, eventlog.ErrNotFound):
		return "content_missing"
	}
	return "stack_not_built"
}

// notReplayedAt is an outcome's error with where it was.
func notReplayedAt(o Outcome) string {
	what := o.Point
	switch {
	case o.Tool != "":
		what += " " + o.Tool
	case o.Child != "":
		what += " of " + o.Child
	}
	return fmt.Sprintf("task %s seq %d (%s): %v", o.Task, o.Seq, what, o.Err)
}

// readAhead is how many logs a replay reads ahead of the one it judges:
// reading (the server's loads, the records' decoding and validation) is
// most of a replay's time on JetStream, and it overlaps with judging.
const readAhead = 8

// prefetch reads the logs of tasks, up to readAhead at once ahead of the
// caller; next returns them in order. Cancelling ctx stops it.
func prefetch(ctx context.Context, log eventlog.Reader, tasks []string) (next func() ([]eventlog.Envelope, error)) {
	type read struct {
		envs []eventlog.Envelope
		err  error
	}
	results := make(chan chan read, readAhead)
	go func() {
		defer close(results)
		for _, task := range tasks {
			ch := make(chan read, 1)
			select {
			case results <- ch:
			case <-ctx.Done():
				return
			}
			go func() {
				envs, err := log.Read(ctx, task, 0)
				ch <- read{envs, err}
			}()
		}
	}()
	return func() ([]eventlog.Envelope, error) {
		ch, ok := <-results
		if !ok {
			return nil, ctx.Err()
		}
		r := <-ch
		return r.envs, r.err
	}
}
