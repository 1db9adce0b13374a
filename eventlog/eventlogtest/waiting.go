package eventlogtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// WaitingFactory returns a fresh, empty waiting index for one subtest and
// registers its cleanup with t.Cleanup.
type WaitingFactory func(t *testing.T) eventlog.WaitingIndex

// RunWaitingSuite runs the cases of [eventlog.WaitingIndex]: put, replace and
// delete, the order of a listing, the cuts and the size bound, bad keys, and
// watches (the initial set, the marker, changes in order, stop).
func RunWaitingSuite(t *testing.T, f WaitingFactory) {
	t.Helper()
	for _, c := range waitingCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, f(t))
		})
	}
}

var waitingCases = []struct {
	name string
	fn   func(t *testing.T, x eventlog.WaitingIndex)
}{
	{"PutListDelete", waitingPutListDelete},
	{"RoundTrip", waitingRoundTrip},
	{"ListTask", waitingListTask},
	{"Cuts", waitingCuts},
	{"BadInput", waitingBadInput},
	{"Watch", waitingWatch},
	{"WatchEmpty", waitingWatchEmpty},
	{"WatchStopsWithContext", waitingWatchCtx},
}

var waitingT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func waitingEntry(task, handle string, at time.Duration) eventlog.Waiting {
	return eventlog.Waiting{
		Task: task, Handle: handle, Kind: eventlog.WaitingApproval, Seq: 7, Agent: "ops",
		Action: "tool_call", Tool: "shell", Args: json.RawMessage(`{"cmd":"ls"}`),
		Guard: "approve-shell", Reason: "shell needs a person", RequestedAt: waitingT0.Add(at),
	}
}

func waitingKeys(ws []eventlog.Waiting) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Task+"."+w.Handle)
	}
	return out
}

func mustListWaiting(t *testing.T, x eventlog.WaitingIndex) []eventlog.Waiting {
	t.Helper()
	ws, err := x.ListWaiting(t.Context())
	if err != nil {
		t.Fatalf("ListWaiting: %v", err)
	}
	return ws
}

func mustPutWaiting(t *testing.T, x eventlog.WaitingIndex, w eventlog.Waiting) {
	t.Helper()
	if err := x.PutWaiting(t.Context(), w); err != nil {
		t.Fatalf("PutWaiting %s.%s: %v", w.Task, w.Handle, err)
	}
}

func waitingPutListDelete(t *testing.T, x eventlog.WaitingIndex) {
	if ws := mustListWaiting(t, x); len(ws) != 0 {
		t.Fatalf("a fresh index lists %v", waitingKeys(ws))
	}
	mustPutWaiting(t, x, waitingEntry("wt-b", "approval-1", 2*time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-a", "approval-2", 3*time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-c", "question-1", time.Second))
	// Same time: task, then handle, decide.
	mustPutWaiting(t, x, waitingEntry("wt-a", "approval-1", 3*time.Second))
	want := []string{"wt-c.question-1", "wt-b.approval-1", "wt-a.approval-1", "wt-a.approval-2"}
	if got := waitingKeys(mustListWaiting(t, x)); !reflect.DeepEqual(got, want) {
		t.Fatalf("listing: got %v, want %v (oldest request first)", got, want)
	}
	// A put replaces the entry of its key.
	again := waitingEntry("wt-b", "approval-1", 2*time.Second)
	again.Approvals = []string{"alice"}
	mustPutWaiting(t, x, again)
	ws := mustListWaiting(t, x)
	if len(ws) != 4 || !reflect.DeepEqual(ws[1].Approvals, []string{"alice"}) {
		t.Fatalf("after a second put of wt-b.approval-1: %+v", ws)
	}
	if err := x.DeleteWaiting(t.Context(), "wt-a", "approval-1"); err != nil {
		t.Fatalf("DeleteWaiting: %v", err)
	}
	// Deleting what is not there is no error (idempotent).
	for range 2 {
		if err := x.DeleteWaiting(t.Context(), "wt-a", "approval-1"); err != nil {
			t.Fatalf("DeleteWaiting again: %v", err)
		}
	}
	if err := x.DeleteWaiting(t.Context(), "wt-none", "approval-9"); err != nil {
		t.Fatalf("DeleteWaiting of an unknown entry: %v", err)
	}
	want = []string{"wt-c.question-1", "wt-b.approval-1", "wt-a.approval-2"}
	if got := waitingKeys(mustListWaiting(t, x)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after delete: got %v, want %v", got, want)
	}
	// A deleted key can be put again.
	mustPutWaiting(t, x, waitingEntry("wt-a", "approval-1", 0))
	if got := waitingKeys(mustListWaiting(t, x)); len(got) != 4 || got[0] != "wt-a.approval-1" {
		t.Fatalf("after a put of a deleted key: %v", got)
	}
}

// TaskWaitingLister lists one task's entries without reading the others':
// the engine reconciles a task's entries on every segment, which must not
// cost with the fleet. Both backends have it.
type TaskWaitingLister interface {
	ListTaskWaiting(ctx context.Context, task string) ([]eventlog.Waiting, error)
}

func waitingListTask(t *testing.T, x eventlog.WaitingIndex) {
	l, ok := x.(TaskWaitingLister)
	if !ok {
		t.Fatalf("%T has no ListTaskWaiting: the engine would list the whole index on every segment", x)
	}
	mustPutWaiting(t, x, waitingEntry("wt-l", "approval-2", 2*time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-l", "approval-1", time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-l2", "approval-1", 0))
	mustPutWaiting(t, x, waitingEntry("wt-", "approval-1", 0))
	if err := x.DeleteWaiting(t.Context(), "wt-l", "approval-2"); err != nil {
		t.Fatal(err)
	}
	mustPutWaiting(t, x, waitingEntry("wt-l", "question-3", 3*time.Second))
	ws, err := l.ListTaskWaiting(t.Context(), "wt-l")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := waitingKeys(ws), []string{"wt-l.approval-1", "wt-l.question-3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListTaskWaiting(wt-l): %v, want %v (not wt-l2's, not a deleted one)", got, want)
	}
	if ws, err := l.ListTaskWaiting(t.Context(), "wt-none"); err != nil || len(ws) != 0 {
		t.Fatalf("ListTaskWaiting of a task without entries: %v, %v", ws, err)
	}
}

func waitingRoundTrip(t *testing.T, x eventlog.WaitingIndex) {
	w := eventlog.Waiting{
		Task: "wt-rt", Handle: "approval-spawn-3-abcdefghjk", Kind: eventlog.WaitingApproval, Seq: 42,
		Agent: "ops", Goal: "tidy the disk", SubmittedBy: "cli:alice",
		Action: "spawn_subtask", Child: "cleaner", Guard: "approve-spawn", Reason: "spawns need a person",
		Rules: []string{"sre-only"}, MayAnswer: "members of sre", Quorum: 2, Approvals: []string{"bob"},
		RequestedAt: waitingT0, ExpiresAt: waitingT0.Add(time.Hour),
	}
	q := eventlog.Waiting{Task: "wt-rt", Handle: "question-4", Kind: eventlog.WaitingQuestion, Seq: 50, Agent: "ops",
		Question: "which disk?", RequestedAt: waitingT0.Add(time.Minute)}
	mustPutWaiting(t, x, w)
	mustPutWaiting(t, x, q)
	ws := mustListWaiting(t, x)
	if len(ws) != 2 {
		t.Fatalf("listing: %v", waitingKeys(ws))
	}
	for i, want := range []eventlog.Waiting{w, q} {
		got := ws[i]
		if !got.RequestedAt.Equal(want.RequestedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
			t.Fatalf("entry %d times: got %v/%v, want %v/%v", i, got.RequestedAt, got.ExpiresAt, want.RequestedAt, want.ExpiresAt)
		}
		got.RequestedAt, got.ExpiresAt, want.RequestedAt, want.ExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("entry %d read back:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

func waitingCuts(t *testing.T, x eventlog.WaitingIndex) {
	big := eventlog.Waiting{
		Task: "wt-cut", Handle: "approval-1", Kind: eventlog.WaitingApproval, Agent: "ops",
		Goal: strings.Repeat("g", 5000), Action: "tool_call", Tool: "write_file",
		RequestedAt: waitingT0,
	}
	// Control bytes: escaped, each takes six bytes of JSON.
	content, _ := json.Marshal(strings.Repeat("\x01", 12<<10))
	big.Args = json.RawMessage(`{"path":"a","content":` + string(content) + `}`)
	mustPutWaiting(t, x, big)
	ws := mustListWaiting(t, x)
	if len(ws) != 1 {
		t.Fatalf("listing: %v", waitingKeys(ws))
	}
	got := ws[0]
	if !got.ArgsCut || !json.Valid(got.Args) || len(got.Args) >= len(big.Args) {
		t.Fatalf("args: cut %v, valid %v, %d bytes of %d", got.ArgsCut, json.Valid(got.Args), len(got.Args), len(big.Args))
	}
	if len(got.Goal) >= len(big.Goal) || !strings.HasPrefix(got.Goal, "ggg") {
		t.Fatalf("goal not cut: %d bytes", len(got.Goal))
	}
	// What no cut can bring under the bound is refused, and not stored.
	huge := waitingEntry("wt-cut", "approval-2", 0)
	for i := range 2000 {
		huge.Rules = append(huge.Rules, fmt.Sprintf("rule-number-%d", i))
	}
	if err := x.PutWaiting(t.Context(), huge); !errors.Is(err, eventlog.ErrWaitingTooLarge) {
		t.Fatalf("PutWaiting of a %d-rule entry: got %v, want %v", len(huge.Rules), err, eventlog.ErrWaitingTooLarge)
	}
	if ws := mustListWaiting(t, x); len(ws) != 1 {
		t.Fatalf("a refused entry was stored: %v", waitingKeys(ws))
	}
}

func waitingBadInput(t *testing.T, x eventlog.WaitingIndex) {
	for _, c := range []struct {
		name string
		edit func(*eventlog.Waiting)
	}{
		{"empty task", func(w *eventlog.Waiting) { w.Task = "" }},
		{"task with a dot", func(w *eventlog.Waiting) { w.Task = "a.b" }},
		{"task with a wildcard", func(w *eventlog.Waiting) { w.Task = "a*" }},
		{"empty handle", func(w *eventlog.Waiting) { w.Handle = "" }},
		{"handle with a dot", func(w *eventlog.Waiting) { w.Handle = "h.x" }},
		{"handle with a space", func(w *eventlog.Waiting) { w.Handle = "h x" }},
		{"unknown kind", func(w *eventlog.Waiting) { w.Kind = "payment" }},
		{"args not JSON", func(w *eventlog.Waiting) { w.Args = json.RawMessage(`{"a":`) }},
	} {
		w := waitingEntry("wt-bad", "approval-1", 0)
		c.edit(&w)
		if err := x.PutWaiting(t.Context(), w); err == nil {
			t.Errorf("PutWaiting with %s: no error", c.name)
		}
	}
	for _, k := range [][2]string{{"", "h"}, {"t", ""}, {"a.b", "h"}, {"t", "h.x"}, {"t", ">"}} {
		if err := x.DeleteWaiting(t.Context(), k[0], k[1]); err == nil {
			t.Errorf("DeleteWaiting(%q, %q): no error", k[0], k[1])
		}
	}
	if ws := mustListWaiting(t, x); len(ws) != 0 {
		t.Fatalf("bad input stored %v", waitingKeys(ws))
	}
}

// waitingRecorder collects a watch's changes and lets a test wait for a
// count of them.
type waitingRecorder struct {
	mu      sync.Mutex
	changes []eventlog.WaitingChange
	grew    chan struct{}
}

func newWaitingRecorder() *waitingRecorder { return &waitingRecorder{grew: make(chan struct{}, 1)} }

func (r *waitingRecorder) fn(c eventlog.WaitingChange) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
	select {
	case r.grew <- struct{}{}:
	default:
	}
}

func (r *waitingRecorder) waitFor(t *testing.T, n int) []eventlog.WaitingChange {
	t.Helper()
	limit := time.NewTimer(20 * time.Second)
	defer limit.Stop()
	for {
		r.mu.Lock()
		got := append([]eventlog.WaitingChange(nil), r.changes...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.grew:
		case <-limit.C:
			t.Fatalf("the watch delivered %d changes, want %d: %+v", len(got), n, got)
		}
	}
}

func changeString(c eventlog.WaitingChange) string {
	switch {
	case c.Entry.Task == "" && !c.Deleted:
		return "marker"
	case c.Deleted:
		return "-" + c.Entry.Task + "." + c.Entry.Handle
	}
	return "+" + c.Entry.Task + "." + c.Entry.Handle
}

func changeStrings(cs []eventlog.WaitingChange) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, changeString(c))
	}
	return out
}

func waitingWatch(t *testing.T, x eventlog.WaitingIndex) {
	mustPutWaiting(t, x, waitingEntry("wt-w", "approval-2", 2*time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-w", "approval-1", time.Second))
	mustPutWaiting(t, x, waitingEntry("wt-w", "approval-0", 0))
	if err := x.DeleteWaiting(t.Context(), "wt-w", "approval-0"); err != nil {
		t.Fatal(err)
	}
	r := newWaitingRecorder()
	stop, err := x.WatchWaiting(t.Context(), r.fn)
	if err != nil {
		t.Fatalf("WatchWaiting: %v", err)
	}
	defer stop()
	got := changeStrings(r.waitFor(t, 3))
	// The initial set's order is not the contract; its content and the
	// marker after it are.
	if got[2] != "marker" || !(got[0] == "+wt-w.approval-1" && got[1] == "+wt-w.approval-2" || got[0] == "+wt-w.approval-2" && got[1] == "+wt-w.approval-1") {
		t.Fatalf("initial: %v, want the two entries (not the deleted one), then the marker", got)
	}
	mustPutWaiting(t, x, waitingEntry("wt-w", "approval-3", 3*time.Second))
	if err := x.DeleteWaiting(t.Context(), "wt-w", "approval-1"); err != nil {
		t.Fatal(err)
	}
	upd := waitingEntry("wt-w", "approval-2", 2*time.Second)
	upd.Approvals = []string{"carol"}
	mustPutWaiting(t, x, upd)
	cs := r.waitFor(t, 6)
	want := []string{"+wt-w.approval-3", "-wt-w.approval-1", "+wt-w.approval-2"}
	if got := changeStrings(cs[3:]); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes: got %v, want %v", got, want)
	}
	if e := cs[5].Entry; !reflect.DeepEqual(e.Approvals, []string{"carol"}) || e.Tool != "shell" || e.Agent != "ops" {
		t.Fatalf("a put change carries the whole entry: %+v", e)
	}
	// After stop returns, fn is never called again: a second watch sees a
	// later put, the stopped one does not.
	stop()
	r.mu.Lock()
	n := len(r.changes)
	r.mu.Unlock()
	r2 := newWaitingRecorder()
	stop2, err := x.WatchWaiting(t.Context(), r2.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	mustPutWaiting(t, x, waitingEntry("wt-w", "approval-4", 4*time.Second))
	cs2 := r2.waitFor(t, 4)
	if last := changeString(cs2[len(cs2)-1]); last != "+wt-w.approval-4" {
		t.Fatalf("second watch: %v", changeStrings(cs2))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changes) != n {
		t.Fatalf("a stopped watch was called: %v", changeStrings(r.changes[n:]))
	}
}

func waitingWatchEmpty(t *testing.T, x eventlog.WaitingIndex) {
	r := newWaitingRecorder()
	stop, err := x.WatchWaiting(t.Context(), r.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if got := changeStrings(r.waitFor(t, 1)); got[0] != "marker" {
		t.Fatalf("an empty index's watch: %v, want the marker first", got)
	}
	mustPutWaiting(t, x, waitingEntry("wt-e", "question-1", 0))
	if got := changeStrings(r.waitFor(t, 2)); got[1] != "+wt-e.question-1" {
		t.Fatalf("changes: %v", got)
	}
}

func waitingWatchCtx(t *testing.T, x eventlog.WaitingIndex) {
	ctx, cancel := context.WithCancel(t.Context())
	r := newWaitingRecorder()
	stop, err := x.WatchWaiting(ctx, r.fn)
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, 1)
	cancel()
	// stop returns once the watch's goroutine is gone, ctx ended or not;
	// a second call is harmless.
	stop()
	stop()
	// A watch on an ended ctx may refuse to start; if it starts, its
	// stop returns.
	if stop, err := x.WatchWaiting(ctx, r.fn); err == nil {
		stop()
	}
}
