// Package taskview reads a deployment back for a person: a task's records
// (engine events), its folded state and dispatcher row (engine inspect),
// what waits for a person (engine approvals), and a store's doctor report.
// Each line it writes is escaped whole (internal/termsafe): what a record
// holds came from a model, a tool or a person, and must not act on the
// terminal that shows it.
package taskview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// DispatchState is the dispatcher's row of task; known is false while the
// dispatcher does not know it.
func DispatchState(ctx context.Context, h *hostconfig.Host, task string) (eventlog.DispatchState, bool, error) {
	ds, err := h.Dispatch(ctx, task)
	if errors.Is(err, eventlog.ErrNotFound) {
		return ds, false, nil
	}
	return ds, err == nil, err
}

// followPoll is how often events --follow looks for new records.
const followPoll = 200 * time.Millisecond

// Events writes the records of task: its log in order, then the records of
// its inbox; with follow, the new ones until the task ends or ctx does.
// asJSON writes each as its CloudEvents JSON object, one a line; else a
// line each of the timeline's events listing. A task with no log is an
// error that says whether it is unknown or its log was lost.
func Events(ctx context.Context, st *hostconfig.Host, task string, follow, asJSON bool, w io.Writer) error {
	envs, err := st.Events(ctx, task, 0)
	if err != nil {
		if errors.Is(err, eventlog.ErrNotFound) {
			return NoTask(ctx, st, task)
		}
		return DamagedHint(err)
	}
	if len(envs) == 0 {
		return NoTask(ctx, st, task)
	}
	start := envs[0].Time
	print := func(env eventlog.Envelope) error {
		if asJSON {
			b, err := jetstream.CloudEvent(env)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(w, timeline.EventLine(env, env.Time.Sub(start).Seconds()))
		return err
	}
	seen := map[string]bool{}
	last := uint64(0)
	ended := false
	emit := func(batch []eventlog.Envelope) error {
		for _, env := range batch {
			if env.Seq > 0 {
				last = env.Seq
				ended = ended || noeta.IsTerminalType(env.Type)
			} else {
				if seen[env.Key] {
					continue
				}
				seen[env.Key] = true
			}
			if err := print(env); err != nil {
				return err
			}
		}
		return nil
	}
	if err := emit(envs); err != nil {
		return err
	}
	for {
		inbox, err := st.Inbox(ctx, task)
		if err != nil {
			return err
		}
		if err := emit(inbox); err != nil {
			return err
		}
		if !follow || ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
		more, err := st.Events(ctx, task, last)
		if err != nil {
			return err
		}
		if err := emit(more); err != nil {
			return err
		}
	}
}

// StateJSON is a task's folded state and the dispatcher's row of it (known:
// the dispatcher has one) as engine inspect --json prints them: one
// indented JSON object, {"state": …, "dispatcher": …}.
func StateJSON(s *engine.State, ds eventlog.DispatchState, known bool) ([]byte, error) {
	out := struct {
		State      *engine.State           `json:"state"`
		Dispatcher *eventlog.DispatchState `json:"dispatcher,omitempty"`
	}{State: s}
	if known {
		out.Dispatcher = &ds
	}
	return json.Marshal(out)
}

// WriteState writes a task's folded state and the dispatcher's row of it
// (known: the dispatcher has one), a line each, each escaped whole.
func WriteState(w io.Writer, s *engine.State, ds eventlog.DispatchState, known bool) {
	// Each line is built whole and escaped whole (termsafe.Line): a reason,
	// an approver or a goal with a newline or an escape sequence in it
	// stays in its line and shows what it holds.
	line := func(format string, args ...any) {
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf(format, args...)))
	}
	line("task      %s", s.Task)
	line("agent     %s", s.Agent)
	if s.Parent != "" {
		line("parent    %s (root %s, depth %d)", s.Parent, s.Root, s.Depth)
	}
	line("goal      %s", timeline.Goal(s.Goal, s.GoalRef))
	status := "status    " + string(s.Status)
	if s.Reason != "" {
		status += ": " + s.Reason
	}
	if s.Guard != "" {
		status += " (guard " + s.Guard + ")"
	}
	line("%s", status)
	if s.WakeOn != nil {
		line("waits on  %s", timeline.Wake(s.WakeOn))
	}
	if s.Answer != nil || s.AnswerRef != nil {
		a := timeline.Cut(string(s.Answer), 200)
		if s.AnswerRef != nil {
			a = timeline.Ref(*s.AnswerRef)
		}
		line("answer    %s", a)
	}
	line("log       %d records, lease generation %d, turn %d", s.LastSeq, s.LeaseGen, s.Turn.N)
	if d := s.Turn.Decision; d != nil {
		// The turn's decision as recorded, with the model's words whole
		// (escaped onto the line): why the task is doing what it does.
		line("decided   %s", decidedString(d))
		if said := saidString(d); said != "" {
			line("said      %s", said)
		}
	}
	if known {
		d := "dispatch  " + string(ds.Status)
		if ds.Worker != "" {
			d += " (worker " + ds.Worker + ")"
		}
		line("%s", d)
	}
	g := s.Governance
	line("governance")
	line("  iterations %d, tool calls %d, subtasks %d, cost $%g, tokens in %d out %d",
		g.Iterations, g.ToolCalls, g.SpawnedSubtasks, g.CostUSD, g.InputTokens, g.OutputTokens)
	if t := g.Tree(); t.CostUSD != g.CostUSD || t.ToolCalls != g.ToolCalls || g.Allotment != nil {
		// What the budgets compare (ADR 0054): the subtasks' spend and
		// reservations with the task's own, and the share it was given.
		fmt.Fprintf(w, "  tree: cost $%g, tool calls %d (ended subtasks $%g and %d, %d running)%s\n",
			t.CostUSD, t.ToolCalls, g.SubtaskCostUSD, g.SubtaskToolCalls, len(g.Reserved), timeline.Allotment(g.Allotment))
	}
	for _, d := range g.Denials {
		who := d.Guard
		if who == "" {
			who = "-"
		}
		line("  refused  %-22s guard %-12s %s %s: %s", d.Type, who, d.Tool+d.Agent, d.CallID, d.Reason)
	}
	for _, a := range g.Approvals {
		line("  approval %-22s %s by %s %s", a.Handle, a.Decision, a.Approver, a.Reason)
	}
	handles := make([]string, 0, len(g.PendingApprovals))
	for h := range g.PendingApprovals {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	for _, h := range handles {
		pa := g.PendingApprovals[h]
		line("  PENDING  %-22s %s (guard %s: %s)", h, timeline.ApprovalWhat(pa), pa.Guard, pa.Reason)
		if pa.Quorum > 1 || len(pa.Rules) > 0 || !pa.ExpiresAt.IsZero() || pa.Refused > 0 {
			line("           rules %v, approved by %v (%d of %d), %d refused answers, expires %s",
				pa.Rules, pa.Approvers, len(pa.Approvers), max(pa.Quorum, 1), pa.Refused, expiresString(pa.ExpiresAt))
		}
	}
	for _, r := range g.SubtaskResults {
		line("  subtask  %s %s", r.SubtaskID, r.Status)
	}
}

// DamagedHint points a damaged store's error at engine doctor.
func DamagedHint(err error) error {
	if eventlog.IsDamage(err) || errors.Is(err, jetstream.ErrStreamLoss) {
		return fmt.Errorf("%w\nthe store is damaged: 'engine doctor' lists everything it lost", err)
	}
	return err
}

// TailCheck compares the dispatcher's row with the folded log: a row that
// says the task suspended or ended while the log does not is a log that lost
// its last records, which nothing in the log itself shows.
func TailCheck(ctx context.Context, st *hostconfig.Host, state *engine.State, ds eventlog.DispatchState, known bool) error {
	if !known || state.LastSeq == 0 {
		return nil
	}
	envs, err := st.Events(ctx, state.Task, state.LastSeq-1)
	if err != nil || len(envs) == 0 {
		return nil
	}
	again, ok, err := DispatchState(ctx, st, state.Task)
	if err != nil || !ok || again.Status != ds.Status || again.Generation != ds.Generation {
		return nil // the task moved while it was read
	}
	if f, bad := jshost.RowAgainstLog(state.Task, ds, state, envs[len(envs)-1]); bad {
		return DamagedHint(fmt.Errorf("%w: task %s: seq %s: %s", eventlog.ErrGap, f.Task, f.Seqs, f.Detail))
	}
	return nil
}

// NoTask reports a task with no log: unknown, or — when the dispatcher has a
// row for it — a log the store lost.
func NoTask(ctx context.Context, st *hostconfig.Host, task string) error {
	if ds, known, err := DispatchState(ctx, st, task); err == nil && known {
		return DamagedHint(fmt.Errorf("%w: task %s: seq 1-: the dispatcher has the task (%s, lease generation %d) and the stream has no record of it: its whole log is lost",
			eventlog.ErrGap, task, ds.Status, ds.Generation))
	}
	return fmt.Errorf("no task %s in this deployment", task)
}

func expiresString(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
