// Package tasklist lists a deployment's tasks the way the people who run it
// ask for them: each with its agent, goal, a status word (completed,
// failed, cancelled, waiting, suspended, running, pending) and outcome,
// newest first, filtered by status, agent, age and text, a page at a time.
// The CLI's tasks verb and the inbox's task list read the same rows.
package tasklist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// The status words of a row. The first three end a task; waiting is a task
// suspended on a person (an approval, a question, a park), suspended one
// waiting on anything else (a timer, its subtasks, an event).
const (
	Completed = "completed"
	Failed    = "failed"
	Cancelled = "cancelled"
	Waiting   = "waiting"
	Suspended = "suspended"
	Running   = "running"
	Pending   = "pending"
	// Unreadable is a task whose log could not be folded; its Reason says
	// why. It is listed, not hidden, and matches no status filter but its own.
	Unreadable = "unreadable"
)

// Statuses are the words a filter may name, in the order they are shown.
var Statuses = []string{Completed, Failed, Cancelled, Waiting, Suspended, Running, Pending, Unreadable}

// Source is what a listing reads: a host (host.Host) or anything that lists
// tasks, folds one and reads its records.
type Source interface {
	Tasks(ctx context.Context) ([]eventlog.TaskSummary, error)
	Fold(ctx context.Context, task string) (*engine.State, string, error)
	Events(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error)
}

// Row is one task of a listing.
type Row struct {
	Task   string `json:"task"`
	Agent  string `json:"agent"`
	Goal   string `json:"goal"`
	Status string `json:"status"`
	// Reason is why the task is where it is: a failure's error, a
	// cancellation's reason, what a suspended task waits for.
	Reason  string    `json:"reason,omitempty"`
	LastSeq uint64    `json:"last_seq"`
	Last    time.Time `json:"last_time,omitzero"`
	// Outcome is the terminal record's type of an ended task.
	Outcome string `json:"outcome,omitempty"`
	// Answer is a completed task's answer (JSON), cut to AnswerRunes.
	Answer string `json:"answer,omitempty"`
	// Waiting are the handles of the approvals and the question it waits on.
	Waiting []string `json:"waiting,omitempty"`
	Parent  string   `json:"parent,omitempty"`
}

// GoalRunes bounds a row's goal: a list shows the start of it.
const GoalRunes = 300

// AnswerRunes bounds a row's answer.
const AnswerRunes = 300

// MaxLimit bounds a page.
const MaxLimit = 10000

// Filter says which tasks a listing shows. Zero values filter nothing.
type Filter struct {
	// Status: any of these words (Statuses).
	Status []string
	// Agent: tasks of this agent only.
	Agent string
	// Since: tasks whose last record is at or after this time.
	Since time.Time
	// Text: a case-insensitive substring of the id, agent or goal.
	Text string
	// Offset skips that many matching tasks; Limit (0: all, at most
	// MaxLimit) bounds how many are returned.
	Offset, Limit int
	// From is where in the deployment's list (newest first) the listing
	// starts reading: a page's Next. MaxScan (0: no bound) bounds how many
	// tasks one listing folds, so a filter that matches little cannot
	// make one request fold a whole deployment.
	From, MaxScan int
}

// ParseSince reads a since filter: empty (none), a duration back from now
// (24h, 90m, 7d: whole days too), or an RFC 3339 time. Its errors start
// with "since", for a caller to put its flag's dashes or its query
// parameter's name in front.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		if days, derr := strconv.Atoi(n); derr == nil && days <= 100000 {
			d, err = time.Duration(days)*24*time.Hour, nil
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q: want a duration back from now (24h, 90m, 7d) or an RFC 3339 time", s)
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("since %q: want a duration above zero", s)
	}
	return now.Add(-d), nil
}

// ErrBadFilter is a filter that names what cannot be.
var ErrBadFilter = errors.New("tasklist: bad filter")

// Check refuses a status word that is not one of Statuses and a limit or
// offset out of range, naming the words there are.
func (f Filter) Check() error {
	for _, s := range f.Status {
		if !slices.Contains(Statuses, s) {
			return fmt.Errorf("%w: status %q: want one of %s", ErrBadFilter, s, strings.Join(Statuses, ", "))
		}
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d: want 0 (all) to %d", ErrBadFilter, f.Limit, MaxLimit)
	}
	if f.Offset < 0 || f.From < 0 || f.MaxScan < 0 {
		return fmt.Errorf("%w: offset %d, from %d, max scan %d: want 0 or more", ErrBadFilter, f.Offset, f.From, f.MaxScan)
	}
	if len(f.Text) > 256 {
		return fmt.Errorf("%w: text of %d bytes: at most 256", ErrBadFilter, len(f.Text))
	}
	return nil
}

// Page is a listing's result.
type Page struct {
	Rows []Row
	// More says that the listing stopped before the end: another task
	// matched after the page, or MaxScan tasks were read. Next is where
	// the next page starts reading (Filter.From), when More.
	More bool
	Next int
	// Total is how many tasks the deployment has, matching or not.
	Total int
}

// List reads the tasks of src, most recently active first, and returns the
// page of those that match f. A task whose log cannot be folded is listed
// as Unreadable with the error as its Reason: one damaged log does not hide
// the others. Only the tasks the filter needs are folded: those before
// Since's cut-off are not, and the listing stops once the page is full and
// one more match is known, or once it has folded MaxScan tasks.
func List(ctx context.Context, src Source, f Filter) (Page, error) {
	if err := f.Check(); err != nil {
		return Page{}, err
	}
	sums, err := src.Tasks(ctx)
	if err != nil {
		return Page{}, err
	}
	p := Page{Total: len(sums)}
	skip := f.Offset
	text := strings.ToLower(f.Text)
	scanned := 0
	for i := f.From; i < len(sums); i++ {
		s := sums[i]
		if !f.Since.IsZero() && s.LastTime.Before(f.Since) {
			break // newest first: every later one is older
		}
		if err := ctx.Err(); err != nil {
			return Page{}, err
		}
		if f.MaxScan > 0 && scanned == f.MaxScan {
			p.More, p.Next = true, i
			break
		}
		scanned++
		row := Describe(ctx, src, s)
		if !f.matches(row, text) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if f.Limit > 0 && len(p.Rows) == f.Limit {
			p.More, p.Next = true, i
			break
		}
		p.Rows = append(p.Rows, row)
	}
	return p, nil
}

func (f Filter) matches(r Row, text string) bool {
	if len(f.Status) > 0 && !slices.Contains(f.Status, r.Status) {
		return false
	}
	if f.Agent != "" && r.Agent != f.Agent {
		return false
	}
	if text != "" && !strings.Contains(strings.ToLower(r.Task), text) &&
		!strings.Contains(strings.ToLower(r.Agent), text) && !strings.Contains(strings.ToLower(r.Goal), text) {
		return false
	}
	return true
}

// Describe folds the task of s into its row; a fold that fails gives an
// Unreadable row naming the error.
func Describe(ctx context.Context, src Source, s eventlog.TaskSummary) Row {
	row, _, err := Fold(ctx, src, s.Task)
	if err != nil {
		return Row{Task: s.Task, LastSeq: s.LastSeq, Last: s.LastTime, Status: Unreadable, Reason: err.Error()}
	}
	row.Last = s.LastTime
	return row
}

// Fold folds task and says what its row shows, with the state it folded.
func Fold(ctx context.Context, src Source, task string) (Row, *engine.State, error) {
	st, _, err := src.Fold(ctx, task)
	if err != nil {
		return Row{}, nil, err
	}
	row := Row{Task: task, Agent: st.Agent, Goal: cut(st.Goal, GoalRunes), Reason: st.Reason, LastSeq: st.LastSeq, Parent: st.Parent}
	if st.GoalRef != nil {
		row.Goal = fmt.Sprintf("(%d bytes in the content store, sha256 %s)", st.GoalRef.Size, st.GoalRef.Hash)
	}
	for h := range st.Governance.PendingApprovals {
		row.Waiting = append(row.Waiting, h)
	}
	if st.WakeOn != nil && st.WakeOn.Kind == noeta.WakeHumanResponse && !slices.Contains(row.Waiting, st.WakeOn.Handle) {
		row.Waiting = append(row.Waiting, st.WakeOn.Handle)
	}
	slices.Sort(row.Waiting)
	row.Status = statusWord(st)
	if len(st.Answer) > 0 {
		row.Answer = cut(string(st.Answer), AnswerRunes)
	}
	if st.Status == noeta.StatusTerminal && st.LastSeq > 0 {
		envs, err := src.Events(ctx, task, st.LastSeq-1)
		if err != nil {
			return Row{}, nil, err
		}
		if len(envs) > 0 {
			last := envs[len(envs)-1]
			row.Outcome = last.Type
			row.Status = outcomeWord(last.Type, row.Status)
			// The end's own words: a failure's error, a cancellation's
			// reason (the fold keeps the reason of the suspend before).
			if p, _, err := last.Decode(); err == nil {
				switch p := p.(type) {
				case *noeta.TaskFailed:
					row.Reason = p.Error
				case *noeta.TaskCancelled:
					row.Reason = p.Reason
				}
			}
		}
		row.Waiting = nil // an ended task waits on nothing
	}
	return row, st, nil
}

// statusWord is the word of a task that has not ended (or whose end
// record is still to be read).
func statusWord(st *engine.State) string {
	switch st.Status {
	case noeta.StatusSuspended:
		if st.WakeOn != nil && st.WakeOn.Kind == noeta.WakeHumanResponse {
			return Waiting
		}
		return Suspended
	case noeta.StatusRunning:
		return Running
	case noeta.StatusPending:
		return Pending
	case noeta.StatusTerminal:
		return Failed // until the terminal record says which end
	}
	return string(st.Status)
}

// outcomeWord is the word of an ended task's terminal record.
func outcomeWord(typ, otherwise string) string {
	switch typ {
	case noeta.TypeTaskCompleted:
		return Completed
	case noeta.TypeTaskFailed:
		return Failed
	case noeta.TypeTaskCancelled:
		return Cancelled
	}
	return otherwise
}

// cut shortens s to n runes, marking the cut with an ellipsis.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
