package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// mapIndex is a waiting index in memory: what the engine writes to it is
// what the tests read. (The real ones are eventlog/memlog's and the
// JetStream KV bucket, tested against eventlogtest's cases.)
type mapIndex struct {
	mu sync.Mutex
	m  map[string]eventlog.Waiting
}

func newMapIndex() *mapIndex { return &mapIndex{m: map[string]eventlog.Waiting{}} }

func (x *mapIndex) PutWaiting(_ context.Context, w eventlog.Waiting) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.m[w.Task+"."+w.Handle] = w
	return nil
}

func (x *mapIndex) DeleteWaiting(_ context.Context, task, handle string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.m, task+"."+handle)
	return nil
}

func (x *mapIndex) ListWaiting(context.Context) ([]eventlog.Waiting, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]eventlog.Waiting, 0, len(x.m))
	for _, w := range x.m {
		out = append(out, w)
	}
	return out, nil
}

func (x *mapIndex) WatchWaiting(context.Context, func(eventlog.WaitingChange)) (func(), error) {
	return func() {}, nil
}

func (x *mapIndex) of(task string) []eventlog.Waiting {
	all, _ := x.ListWaiting(context.Background())
	var out []eventlog.Waiting
	for _, w := range all {
		if w.Task == task {
			out = append(out, w)
		}
	}
	return out
}

// TestWaitingIndex: the engine puts an entry for an open approval once it
// is committed and before the task is released (with who may answer and
// the approvals so far), updates it when an approval is counted, deletes it
// on resolution; a question gets a question entry; a segment puts a lost
// entry back; a task cancelled while it waits leaves none.
func TestWaitingIndex(t *testing.T) {
	idx := newMapIndex()
	now := time.Now().UTC().Truncate(time.Second) // the broker fires deadlines by its own clock
	doc := expiryConfig
	h := newHarness(t, memBackend(t, 2*time.Second), doc, withGuards(gate("tool_call")), withApprovals(t, doc),
		func(c *engine.Config) { c.Waiting, c.Now = idx, func() time.Time { return now } })
	h.start(1)
	ctx := context.Background()
	id := h.submit(nowApproval)
	st := waitOpen(t, h, id, nil)
	handle := st.WakeOn.Handle
	got := idx.of(id)
	if len(got) != 1 {
		t.Fatalf("index entries of the task: %+v; want one", got)
	}
	w := got[0]
	if w.Handle != handle || w.Kind != eventlog.WaitingApproval || w.Agent != "boss" || w.Goal != "ask now" || w.Tool != "echo" ||
		string(w.Args) != `{"text":"ran"}` || w.Guard != "gate" || w.Quorum != 2 || !slices.Equal(w.Rules, []string{"echo-expires"}) ||
		w.MayAnswer != "anyone authenticated" || w.Seq != pendingOf(st).Seq || w.Seq == 0 || w.RequestedAt.IsZero() || !w.ExpiresAt.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("entry %+v", w)
	}

	// The entry lost: the next segment puts it again.
	_ = idx.DeleteWaiting(ctx, id, handle)
	if err := h.eng.Approve(ctx, id, handle, noeta.ApprovalApprove, "alice", "one", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, h, id, func(s *engine.State) bool { return len(pendingOf(s).Approvers) == 1 })
	got = idx.of(id)
	if len(got) != 1 || got[0].Handle != handle || !slices.Equal(got[0].Approvals, []string{"alice"}) {
		t.Fatalf("after a counted approval: %+v; want the one entry, with alice's approval", got)
	}
	if _, err := h.eng.Cancel(ctx, id, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	h.waitReleased(id, eventlog.DispatchTerminal)
	if got := idx.of(id); len(got) != 0 {
		t.Fatalf("after the cancel: %+v; want none", got)
	}

	// A question, answered.
	q := h.submit(`
agent: boss
goal: ask a person
script:
  - yield_for_human: {question: "which branch?"}
  - finish: {answer: done}
`)
	st = h.waitFor(q, "the question", func(s *engine.State) bool { return s.Status == noeta.StatusSuspended })
	h.waitReleased(q, eventlog.DispatchSuspended)
	got = idx.of(q)
	if len(got) != 1 || got[0].Kind != eventlog.WaitingQuestion || got[0].Question != "which branch?" || got[0].Handle != st.WakeOn.Handle || got[0].Seq == 0 {
		t.Fatalf("question entry: %+v", got)
	}
	if err := h.eng.Approve(ctx, q, st.WakeOn.Handle, noeta.ApprovalApprove, "alice", "main", noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(q, noeta.StatusTerminal)
	h.waitReleased(q, eventlog.DispatchTerminal)
	if got := idx.of(q); len(got) != 0 {
		t.Fatalf("after the answer: %+v; want none", got)
	}
}

// TestWaitingEntryCuts: a long goal is cut to a few hundred runes, and
// arguments over 2 KiB are kept as a cut string with ArgsCut.
func TestWaitingEntryCuts(t *testing.T) {
	idx := newMapIndex()
	h := newHarness(t, memBackend(t, 2*time.Second), pathsConfig, withGuards(gate("tool_call")), func(c *engine.Config) { c.Waiting = idx })
	h.start(1)
	long := strings.Repeat("é", 5000)
	id := h.submit("agent: boss\ngoal: " + strings.Repeat("g", 1000) + "\nscript:\n  - tool_calls: [{tool: echo, args: {text: \"" + long + "\"}}]\n")
	waitOpen(t, h, id, nil)
	got := idx.of(id)
	if len(got) != 1 {
		t.Fatalf("entries %+v", got)
	}
	w := got[0]
	if n := len([]rune(w.Goal)); n > 301 || !strings.HasPrefix(w.Goal, "ggg") {
		t.Fatalf("goal of %d runes", n)
	}
	if !w.ArgsCut || len(w.Args) > 2048 || w.Args[0] != '"' {
		t.Fatalf("args %d bytes, cut %v; want a cut string: %.200s", len(w.Args), w.ArgsCut, w.Args)
	}
}

// TestWaitingIndexAfterCrash: a worker that dies between a resolution and
// its index delete leaves a stale entry; the task's next segment (its lease
// reclaimed) lists the index and deletes it, as it puts back one a worker
// died before putting.
func TestWaitingIndexAfterCrash(t *testing.T) {
	for _, point := range []string{noeta.TypeApprovalResolved, noeta.TypeTaskSuspended} {
		t.Run(point, func(t *testing.T) {
			idx := newMapIndex()
			var cfg engine.Config
			h := newHarness(t, memBackend(t, 300*time.Millisecond), pathsConfig, withGuards(gate("tool_call")),
				func(c *engine.Config) { c.Waiting = idx; cfg = *c })
			cl := &crashLog{Log: cfg.Log, typ: point}
			cfg.Log = cl
			crashing, err := engine.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cl.cancel.Store(&cancel)
			id := h.submit(nowApproval)
			if point == noeta.TypeTaskSuspended {
				// Dies right after the suspend, before the index put.
				cl.armed.Store(true)
				runOne(t, h, crashing, ctx)
				if got := idx.of(id); len(got) != 0 {
					t.Fatalf("entries %+v before any put", got)
				}
				runOne(t, h, h.eng, context.Background())
				if got := idx.of(id); len(got) != 1 {
					t.Fatalf("after the next segment: %+v; want the request's entry", got)
				}
				return
			}
			runOne(t, h, h.eng, context.Background())
			handle := waitOpen(t, h, id, nil).WakeOn.Handle
			answer(t, h, id, handle, "alice", noeta.AuthNATS, noeta.ApprovalApprove, "ok")
			cl.armed.Store(true)
			runOne(t, h, crashing, ctx)
			if cl.crashes.Load() != 1 {
				t.Fatal("no crash")
			}
			if got := idx.of(id); len(got) != 1 {
				t.Fatalf("after the crash: %+v; want the stale entry still there", got)
			}
			runOne(t, h, h.eng, context.Background())
			h.waitStatus(id, noeta.StatusTerminal)
			if got := idx.of(id); len(got) != 0 {
				t.Fatalf("after the next segment: %+v; want none", got)
			}
		})
	}
}
