package tasklist_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tasklist"
	"github.com/noeta-go/noeta/tools"
)

const governance = `
agents:
  ops: {tools: [echo, shell], permission_mode: default}
  scribe: {tools: [echo]}
`

// tasks runs one task of each end on memlog and returns the host and the
// ids by the status word each should get.
func tasks(t *testing.T) (*host.Host, map[string]string) {
	t.Helper()
	ctx := t.Context()
	cfg, err := config.Parse("noeta.yaml", []byte(governance))
	if err != nil {
		t.Fatal(err)
	}
	b, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(ctx, b, host.Options{Governance: cfg.Governance, Tools: reg, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	run := func(file string) string {
		t.Helper()
		tf, err := policy.ParseTaskFile("task.yaml", []byte(file))
		if err != nil {
			t.Fatal(err)
		}
		sub, err := host.TaskFromFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		id, err := h.Submit(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	ids := map[string]string{}
	ids[tasklist.Completed] = run("agent: scribe\ngoal: say hello to the Quarterly report\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n  - finish: {answer: done}\n")
	ids[tasklist.Failed] = run("agent: scribe\ngoal: run out of script\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n")
	ids[tasklist.Waiting] = run("agent: ops\ngoal: list the files\nscript:\n  - tool_calls: [{tool: shell, args: {command: ls}}]\n  - finish: {answer: listed}\n")
	ids[tasklist.Cancelled] = run("agent: ops\ngoal: list the files, then stop\nscript:\n  - tool_calls: [{tool: shell, args: {command: ls}}]\n  - finish: {answer: listed}\n")
	if _, err := h.Cancel(ctx, ids[tasklist.Cancelled], "not today", false); err != nil {
		t.Fatal(err)
	}
	return h, ids
}

func TestList(t *testing.T) {
	t.Parallel()
	h, ids := tasks(t)
	ctx := t.Context()
	byTask := func(p tasklist.Page) map[string]tasklist.Row {
		m := map[string]tasklist.Row{}
		for _, r := range p.Rows {
			m[r.Task] = r
		}
		return m
	}
	all, err := tasklist.List(ctx, h, tasklist.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if all.Total != 4 || len(all.Rows) != 4 || all.More {
		t.Fatalf("all: %d rows of %d, more %v", len(all.Rows), all.Total, all.More)
	}
	rows := byTask(all)
	for word, id := range ids {
		r := rows[id]
		if r.Status != word {
			t.Errorf("%s: status %q, want %q (%+v)", id, r.Status, word, r)
		}
		if r.Agent == "" || r.Goal == "" || r.Last.IsZero() || r.LastSeq == 0 {
			t.Errorf("%s: row lacks agent, goal or last record: %+v", id, r)
		}
	}
	if r := rows[ids[tasklist.Completed]]; r.Outcome != "TaskCompleted" {
		t.Errorf("completed outcome %q", r.Outcome)
	}
	if r := rows[ids[tasklist.Cancelled]]; r.Outcome != "TaskCancelled" || r.Reason != "not today" {
		t.Errorf("cancelled row %+v", r)
	}
	if r := rows[ids[tasklist.Waiting]]; len(r.Waiting) != 1 {
		t.Errorf("waiting row names no handle: %+v", r)
	}
	// Newest first.
	if !slices.IsSortedFunc(all.Rows, func(a, b tasklist.Row) int { return b.Last.Compare(a.Last) }) {
		t.Errorf("not newest first: %+v", all.Rows)
	}

	tests := []struct {
		name string
		f    tasklist.Filter
		want []string // status words of the rows
		more bool
	}{
		{name: "status", f: tasklist.Filter{Status: []string{tasklist.Completed, tasklist.Cancelled}}, want: []string{tasklist.Completed, tasklist.Cancelled}},
		{name: "agent", f: tasklist.Filter{Agent: "ops"}, want: []string{tasklist.Waiting, tasklist.Cancelled}},
		{name: "text in goal, any case", f: tasklist.Filter{Text: "QUARTERLY"}, want: []string{tasklist.Completed}},
		{name: "text in agent", f: tasklist.Filter{Text: "scrib"}, want: []string{tasklist.Completed, tasklist.Failed}},
		{name: "text in id", f: tasklist.Filter{Text: ids[tasklist.Failed][20:]}, want: []string{tasklist.Failed}},
		{name: "nothing matches", f: tasklist.Filter{Agent: "nobody"}},
		{name: "since the future", f: tasklist.Filter{Since: time.Now().Add(time.Hour)}},
		{name: "since long ago", f: tasklist.Filter{Since: time.Now().Add(-time.Hour), Agent: "scribe"}, want: []string{tasklist.Completed, tasklist.Failed}},
		{name: "limit", f: tasklist.Filter{Limit: 1, Agent: "ops"}, want: []string{tasklist.Cancelled}, more: true},
		{name: "offset", f: tasklist.Filter{Limit: 1, Offset: 1, Agent: "ops"}, want: []string{tasklist.Waiting}},
		{name: "a bounded scan stops with a cursor", f: tasklist.Filter{MaxScan: 2, Status: []string{tasklist.Completed}}, more: true},
		{name: "from the last", f: tasklist.Filter{From: 3}, want: []string{tasklist.Completed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tasklist.List(ctx, h, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range p.Rows {
				got = append(got, r.Status)
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) || p.More != tt.more {
				t.Errorf("rows %v more %v, want %v more %v", got, p.More, want, tt.more)
			}
		})
	}
}

// TestCursorWalk: read one task a listing at a time, each starting where the
// last said to; every task comes once, in order.
func TestCursorWalk(t *testing.T) {
	t.Parallel()
	h, ids := tasks(t)
	var seen []string
	f := tasklist.Filter{MaxScan: 1}
	for range 10 {
		p, err := tasklist.List(t.Context(), h, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			seen = append(seen, r.Task)
		}
		if !p.More {
			break
		}
		f.From = p.Next
	}
	if len(seen) != len(ids) {
		t.Fatalf("walked %d tasks, want %d: %v", len(seen), len(ids), seen)
	}
	for _, id := range ids {
		if !slices.Contains(seen, id) {
			t.Errorf("%s not walked", id)
		}
	}
}

func TestFilterCheck(t *testing.T) {
	t.Parallel()
	bad := []tasklist.Filter{
		{Status: []string{"terminal"}},
		{Status: []string{"Completed"}},
		{Limit: -1},
		{Limit: tasklist.MaxLimit + 1},
		{Offset: -1},
		{Text: string(make([]byte, 257))},
	}
	for _, f := range bad {
		if err := f.Check(); !errors.Is(err, tasklist.ErrBadFilter) {
			t.Errorf("%+v: err %v, want ErrBadFilter", f, err)
		}
		if _, err := tasklist.List(t.Context(), nil, f); !errors.Is(err, tasklist.ErrBadFilter) {
			t.Errorf("List %+v: err %v, want ErrBadFilter before reading", f, err)
		}
	}
}

// broken folds one task into an error: the listing shows it as unreadable
// and goes on.
type broken struct {
	tasklist.Source
	bad string
}

func (b broken) Fold(ctx context.Context, task string) (*engine.State, string, error) {
	if task == b.bad {
		return nil, "", errors.New("the log has a hole at seq 3")
	}
	return b.Source.Fold(ctx, task)
}

func TestUnreadableListed(t *testing.T) {
	t.Parallel()
	h, ids := tasks(t)
	src := broken{Source: h, bad: ids[tasklist.Failed]}
	p, err := tasklist.List(t.Context(), src, tasklist.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, r := range p.Rows {
		if r.Task == ids[tasklist.Failed] {
			seen = r.Status == tasklist.Unreadable && r.Reason == "the log has a hole at seq 3"
		}
	}
	if !seen || len(p.Rows) != 4 {
		t.Errorf("rows %+v: want 4 with the broken one unreadable", p.Rows)
	}
	// Filtered out of a status filter that does not name it.
	p, err = tasklist.List(t.Context(), src, tasklist.Filter{Status: []string{tasklist.Failed}})
	if err != nil || len(p.Rows) != 0 {
		t.Errorf("failed filter: %+v, %v", p.Rows, err)
	}
}

var _ tasklist.Source = (*host.Host)(nil)

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		errText string
	}{
		{"", time.Time{}, ""},
		{"24h", now.Add(-24 * time.Hour), ""},
		{"90m", now.Add(-90 * time.Minute), ""},
		{"7d", now.Add(-7 * 24 * time.Hour), ""},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{"yesterday", time.Time{}, `since "yesterday": want a duration back from now`},
		{"-1h", time.Time{}, "want a duration above zero"},
		{"0d", time.Time{}, "want a duration above zero"},
		{"1000000d", time.Time{}, "want a duration back from now"},
	}
	for _, tt := range tests {
		got, err := tasklist.ParseSince(tt.in, now)
		if tt.errText != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("%q: err %v, want %q", tt.in, err, tt.errText)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("%q: %v %v, want %v", tt.in, got, err, tt.want)
		}
	}
}
