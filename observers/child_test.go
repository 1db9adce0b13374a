package observers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/schemas"
)

// ---- harness ----

const (
	testTTL    = time.Minute
	testWorker = "w"
	testActor  = "observers-test"
)

// logSink keeps what the observer logged, for the cases that check it, and
// passes it on to the test log.
type logSink struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	s.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (s *logSink) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.buf.String(), sub)
}

type harness struct {
	t    *testing.T
	s    *memlog.Store
	logs *logSink

	mu    sync.Mutex
	roots map[string]string // task -> root task, for CorrelationID
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	s, err := memlog.New(memlog.Options{LeaseTTL: testTTL})
	if err != nil {
		t.Fatalf("memlog.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &harness{t: t, s: s, logs: &logSink{t: t}, roots: map[string]string{}}
}

// observer returns a fresh ChildLifecycle over the harness's store, not
// subscribed.
func (h *harness) observer() *ChildLifecycle {
	h.t.Helper()
	return h.observerOn(h.s)
}

// observerOn is observer reading and writing the logs through log.
func (h *harness) observerOn(log ChildLog) *ChildLifecycle {
	h.t.Helper()
	c, err := NewChildLifecycle(ChildLifecycleConfig{
		Log:    log,
		Index:  h.s,
		Waker:  h.s,
		Logger: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		h.t.Fatalf("NewChildLifecycle: %v", err)
	}
	return c
}

// subscribe attaches a fresh observer in-process; the case fails at its end
// if any delivery failed or panicked.
func (h *harness) subscribe() *ChildLifecycle {
	h.t.Helper()
	c := h.observer()
	sub := h.s.Subscribe(c.Handle)
	h.t.Cleanup(func() {
		sub.Cancel()
		if st := sub.Stats(); st.Failed != 0 || st.Panicked != 0 {
			h.t.Errorf("subscription stats %+v: want no failed or panicked deliveries", st)
		}
	})
	return c
}

func (h *harness) rootOf(task string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.roots[task]
}

func mustEnvelope(t *testing.T, task string, origin eventlog.Origin, p noeta.Payload) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, origin, testActor, p)
	if err != nil {
		t.Fatalf("NewEnvelope(%s): %v", p.EventType(), err)
	}
	return env
}

// create writes the TaskCreated of a new task; parent "" makes a root.
func (h *harness) create(id, parent, group string) string {
	h.t.Helper()
	root, depth := id, 0
	if parent != "" {
		root, depth = h.rootOf(parent), 1
	}
	h.mu.Lock()
	h.roots[id] = root
	h.mu.Unlock()
	env := mustEnvelope(h.t, id, eventlog.OriginEngine, noeta.TaskCreated{
		TaskID: id, Agent: "agent", Goal: "goal", ParentTaskID: parent, RootTaskID: root, SubtaskDepth: depth, GroupID: group,
	})
	env.CorrelationID = root
	if _, err := h.s.Create(h.t.Context(), env); err != nil {
		h.t.Fatalf("Create(%s): %v", id, err)
	}
	return id
}

// rootTask creates a root task and leases it.
func (h *harness) rootTask() (string, eventlog.Lease) {
	h.t.Helper()
	id := h.create(noeta.NewTaskID(), "", "")
	return id, h.lease(id)
}

func (h *harness) lease(task string) eventlog.Lease {
	h.t.Helper()
	l, err := h.leaseErr(h.t.Context(), task)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// leaseErr enqueues task (forcing it back to ready if it ended) and leases it.
func (h *harness) leaseErr(ctx context.Context, task string) (eventlog.Lease, error) {
	if err := h.s.Enqueue(ctx, task, eventlog.EnqueueOptions{}); err != nil {
		return eventlog.Lease{}, fmt.Errorf("Enqueue(%s): %w", task, err)
	}
	l, err := h.s.Lease(ctx, eventlog.LeaseRequest{Worker: testWorker, Task: task, TTL: testTTL})
	if err != nil {
		return eventlog.Lease{}, fmt.Errorf("Lease(%s): %w", task, err)
	}
	return l, nil
}

func (h *harness) emitErr(ctx context.Context, l eventlog.Lease, p noeta.Payload) (eventlog.Envelope, error) {
	env, err := eventlog.NewEnvelope(l.Task, eventlog.OriginEngine, testActor, p)
	if err != nil {
		return env, err
	}
	env.CorrelationID = h.rootOf(l.Task)
	got, err := h.s.Emit(ctx, l, env, eventlog.EmitOptions{})
	if err != nil {
		return got, fmt.Errorf("Emit(%s on %s): %w", p.EventType(), l.Task, err)
	}
	return got, nil
}

func (h *harness) emit(l eventlog.Lease, p noeta.Payload) eventlog.Envelope {
	h.t.Helper()
	env, err := h.emitErr(h.t.Context(), l, p)
	if err != nil {
		h.t.Fatal(err)
	}
	return env
}

// spawn records n children of the leased parent in its log, as one fan-out
// group when grouped, and only then creates them (in reverse order, so that
// spawn order and creation order differ). It returns the ids in spawn order.
func (h *harness) spawn(pl eventlog.Lease, n int, grouped bool) (ids []string, group string) {
	h.t.Helper()
	for range n {
		ids = append(ids, noeta.NewTaskID())
	}
	if grouped {
		group = noeta.DeriveGroupID(ids)
	}
	for _, id := range ids {
		h.emit(pl, noeta.SubtaskSpawned{SubtaskID: id, Agent: "agent", Goal: "goal", GroupID: group})
	}
	for _, id := range slices.Backward(ids) {
		h.create(id, pl.Task, group)
		if err := h.s.Enqueue(h.t.Context(), id, eventlog.EnqueueOptions{Parent: pl.Task}); err != nil {
			h.t.Fatalf("Enqueue(%s): %v", id, err)
		}
	}
	return ids, group
}

// endErr leases task, writes its terminal record p and releases it terminal.
func (h *harness) endErr(ctx context.Context, task string, p noeta.Payload) (eventlog.Envelope, error) {
	l, err := h.leaseErr(ctx, task)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	env, err := h.emitErr(ctx, l, p)
	if err != nil {
		return env, err
	}
	if err := h.s.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: p.EventType()}); err != nil {
		return env, fmt.Errorf("Release(%s): %w", task, err)
	}
	return env, nil
}

func (h *harness) end(task string, p noeta.Payload) eventlog.Envelope {
	h.t.Helper()
	env, err := h.endErr(h.t.Context(), task, p)
	if err != nil {
		h.t.Fatal(err)
	}
	return env
}

func (h *harness) suspend(l eventlog.Lease, w noeta.Wake) {
	h.t.Helper()
	if err := h.s.Release(h.t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &w, Reason: "waiting_subtask"}); err != nil {
		h.t.Fatalf("Release(%s, suspended): %v", l.Task, err)
	}
}

func (h *harness) inbox(task string) []eventlog.Envelope {
	h.t.Helper()
	envs, err := h.s.Inbox(h.t.Context(), task)
	if err != nil {
		h.t.Fatalf("Inbox(%s): %v", task, err)
	}
	return envs
}

func (h *harness) inspect(task string) eventlog.DispatchState {
	h.t.Helper()
	st, err := h.s.Inspect(h.t.Context(), task)
	if err != nil {
		h.t.Fatalf("Inspect(%s): %v", task, err)
	}
	return st
}

// wantMatched checks that task is ready with exactly w as its matched wake.
func (h *harness) wantMatched(task string, w noeta.Wake, what string) {
	h.t.Helper()
	st := h.inspect(task)
	if st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !st.MatchedWake.Equal(w) {
		h.t.Fatalf("%s: parent is %s with matched wake %s, want ready with %s", what, st.Status, wakeString(st.MatchedWake), wakeString(&w))
	}
}

// wantWaiting checks that task is still suspended with nothing matched and
// nothing buffered: no wake reached the dispatcher.
func (h *harness) wantWaiting(task, what string) {
	h.t.Helper()
	st := h.inspect(task)
	if st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil || st.PendingWakes != 0 {
		h.t.Fatalf("%s: parent is %s (matched %s, %d buffered), want suspended with no wake", what, st.Status, wakeString(st.MatchedWake), st.PendingWakes)
	}
}

func wakeString(w *noeta.Wake) string {
	if w == nil {
		return "<none>"
	}
	b, err := noeta.Canonical(*w)
	if err != nil {
		return fmt.Sprintf("%+v", *w)
	}
	return string(b)
}

func canonical(t *testing.T, p noeta.Payload) string {
	t.Helper()
	b, err := noeta.Canonical(p)
	if err != nil {
		t.Fatalf("Canonical(%T): %v", p, err)
	}
	return string(b)
}

// handoffOf returns the inbox record of child in parent's inbox, checking its
// envelope and its schema.
func (h *harness) handoffOf(parent, child string) eventlog.Envelope {
	h.t.Helper()
	key := InboxKeyPrefix + child
	for _, e := range h.inbox(parent) {
		if e.Key != key {
			continue
		}
		if e.Type != noeta.TypeSubtaskCompleted || e.Origin != eventlog.OriginObserver || e.Actor != DefaultChildLifecycleActor || e.Seq != 0 {
			h.t.Errorf("handoff of %s: type %s, origin %s, actor %q, seq %d; want %s, %s, %q, 0",
				child, e.Type, e.Origin, e.Actor, e.Seq, noeta.TypeSubtaskCompleted, eventlog.OriginObserver, DefaultChildLifecycleActor)
		}
		if err := schemas.Validate(e.Type, e.Payload); err != nil {
			h.t.Errorf("handoff of %s does not satisfy its schema: %v", child, err)
		}
		return e
	}
	h.t.Fatalf("inbox of %s has no record under %s", parent, key)
	return eventlog.Envelope{}
}

func decodeCompleted(t *testing.T, e eventlog.Envelope) noeta.SubtaskCompleted {
	t.Helper()
	var sc noeta.SubtaskCompleted
	if err := json.Unmarshal(e.Payload, &sc); err != nil {
		t.Fatalf("decode %s: %v", e.Payload, err)
	}
	return sc
}

// ---- cases ----

func TestNewChildLifecycleConfig(t *testing.T) {
	s, err := memlog.New(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name string
		cfg  ChildLifecycleConfig
		ok   bool
	}{
		{"complete", ChildLifecycleConfig{Log: s, Index: s, Waker: s}, true},
		{"no index is fine for Handle", ChildLifecycleConfig{Log: s, Waker: s}, true},
		{"no log", ChildLifecycleConfig{Waker: s}, false},
		{"no waker", ChildLifecycleConfig{Log: s}, false},
		{"actor too long", ChildLifecycleConfig{Log: s, Waker: s, Actor: strings.Repeat("a", eventlog.MaxActorLen+1)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChildLifecycle(tc.cfg)
			if tc.ok {
				if err != nil || c == nil {
					t.Fatalf("got (%v, %v), want an observer", c, err)
				}
				if c.actor != DefaultChildLifecycleActor {
					t.Errorf("actor %q, want the default %q", c.actor, DefaultChildLifecycleActor)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got error %v, want %v", err, ErrInvalidConfig)
			}
		})
	}

	c, err := NewChildLifecycle(ChildLifecycleConfig{Log: s, Waker: s})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recover(t.Context()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Recover without an index: got error %v, want %v", err, ErrInvalidConfig)
	}
}

func TestSingleChildHandsOffAndWakes(t *testing.T) {
	h := newHarness(t)
	h.subscribe()
	parent, pl := h.rootTask()
	ids, _ := h.spawn(pl, 1, false)
	child := ids[0]
	h.suspend(pl, noeta.SubtaskCompletedWake(child))

	term := h.end(child, noeta.TaskCompleted{Answer: json.RawMessage(`{"sum":42}`)})

	inbox := h.inbox(parent)
	if len(inbox) != 1 {
		t.Fatalf("parent inbox has %d records, want 1", len(inbox))
	}
	got := h.handoffOf(parent, child)
	if got.CausationID != term.ID {
		t.Errorf("CausationID %q, want the terminal record's id %q", got.CausationID, term.ID)
	}
	if got.CorrelationID != parent {
		t.Errorf("CorrelationID %q, want the root %q", got.CorrelationID, parent)
	}
	want := canonical(t, noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`{"sum":42}`)})
	if string(got.Payload) != want {
		t.Errorf("payload %s, want %s", got.Payload, want)
	}

	wake := noeta.SubtaskCompletedWake(child)
	h.wantMatched(parent, wake, "after the child ended")
	l := h.lease(parent)
	if l.Wake == nil || !l.Wake.Equal(wake) {
		t.Errorf("the parent's lease carries wake %s, want %s", wakeString(l.Wake), wakeString(&wake))
	}
	if st := h.inspect(parent); st.PendingWakes != 0 {
		t.Errorf("parent has %d buffered wakes, want 0 (one wake per child)", st.PendingWakes)
	}
}

// flakyChildLog fails its first fails reads and writes, as a store between
// leader elections does.
type flakyChildLog struct {
	ChildLog
	fails atomic.Int64
	hang  atomic.Bool
}

var errUnavailable = errors.New("JetStream system temporarily unavailable (code 10008)")

func (l *flakyChildLog) Read(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error) {
	if l.hang.Load() {
		<-ctx.Done() // a request nobody answers
		return nil, ctx.Err()
	}
	if l.fails.Add(-1) >= 0 {
		return nil, errUnavailable
	}
	return l.ChildLog.Read(ctx, task, after)
}

func (l *flakyChildLog) SystemEmit(ctx context.Context, task, key string, env eventlog.Envelope) (eventlog.Envelope, error) {
	if l.fails.Add(-1) >= 0 {
		return eventlog.Envelope{}, errUnavailable
	}
	return l.ChildLog.SystemEmit(ctx, task, key, env)
}

// awaitedChild makes a root task that spawned one child and suspended
// waiting on it.
func (h *harness) awaitedChild() (parent string, ids []string) {
	h.t.Helper()
	parent, pl := h.rootTask()
	ids, _ = h.spawn(pl, 1, false)
	h.suspend(pl, noeta.SubtaskCompletedWake(ids[0]))
	return parent, ids
}

// TestHandoffTriedAgain: a handoff that fails (the store unavailable for
// a moment) is tried again in the same delivery, and the parent is woken
// without waiting for a recovery pass; one that fails on every try is
// reported as before. The subscription's stats say which.
func TestHandoffTriedAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		fails int64
		ok    bool
	}{
		{"recovers", 3, true},
		{"outlasts the tries", 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			fl := &flakyChildLog{ChildLog: h.s}
			obs := h.observerOn(fl)
			obs.retryPauses = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}
			sub := h.s.Subscribe(obs.Handle)
			defer sub.Cancel()
			parent, ids := h.awaitedChild()
			fl.fails.Store(c.fails)
			h.end(ids[0], noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)})
			if !h.logs.contains("child handoff failed; trying again") {
				t.Error("no retry logged")
			}
			st := sub.Stats()
			if !c.ok {
				if st.Failed == 0 {
					t.Errorf("a handoff that failed on every try was not reported: %+v", st)
				}
				return
			}
			if st.Failed != 0 {
				t.Errorf("the delivery failed though a retry succeeded: %+v", st)
			}
			if n := len(h.inbox(parent)); n != 1 {
				t.Fatalf("parent inbox has %d records, want 1", n)
			}
			h.wantMatched(parent, noeta.SubtaskCompletedWake(ids[0]), "after a retried handoff")
		})
	}
}

// TestHandoffTriesBounded: the tries of one delivery end within the
// observer's budget even when the store never answers: a subscriber's ctx
// is not cancelled with the writer's, and the writer waits for the
// delivery before it releases its lease.
func TestHandoffTriesBounded(t *testing.T) {
	h := newHarness(t)
	fl := &flakyChildLog{ChildLog: h.s}
	obs := h.observerOn(fl)
	obs.retryPauses = []time.Duration{time.Millisecond, time.Millisecond}
	obs.retryBudget = 200 * time.Millisecond
	sub := h.s.Subscribe(obs.Handle)
	defer sub.Cancel()
	_, ids := h.awaitedChild()
	fl.hang.Store(true)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		h.end(ids[0], noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)})
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the child's end waited on a handoff whose store never answers")
	}
	if st := sub.Stats(); st.Failed != 1 {
		t.Errorf("subscription stats %+v, want the one delivery failed", st)
	}
}

func TestCorrelationIsTheRoot(t *testing.T) {
	h := newHarness(t)
	h.subscribe()
	root, rl := h.rootTask()
	mids, _ := h.spawn(rl, 1, false)
	mid := mids[0]
	ml := h.lease(mid)
	leaves, _ := h.spawn(ml, 1, false)
	h.suspend(ml, noeta.SubtaskCompletedWake(leaves[0]))

	h.end(leaves[0], noeta.TaskCompleted{Answer: json.RawMessage(`"leaf"`)})

	if got := h.handoffOf(mid, leaves[0]).CorrelationID; got != root {
		t.Errorf("grandchild's handoff CorrelationID %q, want the root %q", got, root)
	}
	h.wantMatched(mid, noeta.SubtaskCompletedWake(leaves[0]), "middle task after its child ended")
	if n := len(h.inbox(root)); n != 0 {
		t.Errorf("root inbox has %d records, want 0: a grandchild reports to its own parent", n)
	}
}

func TestOutcomes(t *testing.T) {
	spilled := noeta.RefFor([]byte(strings.Repeat("x", 5000)), "application/json")
	for _, tc := range []struct {
		name string
		term noeta.Payload
		want func(child string) noeta.SubtaskCompleted
	}{
		{
			name: "completed inline",
			term: noeta.TaskCompleted{Answer: json.RawMessage(`["a","b"]`)},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`["a","b"]`)}
			},
		},
		{
			name: "completed without an answer",
			term: noeta.TaskCompleted{},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusCompleted}
			},
		},
		{
			name: "completed spilled",
			term: noeta.TaskCompleted{AnswerRef: &spilled},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusCompleted, ResultRef: &spilled}
			},
		},
		{
			name: "failed",
			term: noeta.TaskFailed{Error: "budget exceeded: max_iterations", Guard: "budget"},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusFailed, Error: "budget exceeded: max_iterations"}
			},
		},
		{
			name: "cancelled with a reason",
			term: noeta.TaskCancelled{Reason: "parent cancelled"},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusCancelled, Error: "cancelled: parent cancelled"}
			},
		},
		{
			name: "cancelled without a reason",
			term: noeta.TaskCancelled{},
			want: func(c string) noeta.SubtaskCompleted {
				return noeta.SubtaskCompleted{SubtaskID: c, Status: noeta.SubtaskStatusCancelled, Error: "cancelled"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.subscribe()
			parent, pl := h.rootTask()
			ids, _ := h.spawn(pl, 1, false)
			h.suspend(pl, noeta.SubtaskCompletedWake(ids[0]))

			h.end(ids[0], tc.term)

			got := h.handoffOf(parent, ids[0])
			if want := canonical(t, tc.want(ids[0])); string(got.Payload) != want {
				t.Errorf("payload %s, want %s", got.Payload, want)
			}
			h.wantMatched(parent, noeta.SubtaskCompletedWake(ids[0]), "after the child ended")
		})
	}
}

// A child's error that filled its own record still reaches the parent, cut to
// the cap instead of refused by it.
func TestLongErrorIsShortenedToFit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		unit   string
		term   func(msg string) noeta.Payload
		prefix string // what the handoff puts before the message
	}{
		{"failed ascii", "e", func(m string) noeta.Payload { return noeta.TaskFailed{Error: m} }, ""},
		{"failed multibyte", "é", func(m string) noeta.Payload { return noeta.TaskFailed{Error: m} }, ""},
		{"failed escaped", "\"", func(m string) noeta.Payload { return noeta.TaskFailed{Error: m} }, ""},
		{"cancelled", "r", func(m string) noeta.Payload { return noeta.TaskCancelled{Reason: m} }, "cancelled: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.subscribe()
			parent, pl := h.rootTask()
			ids, group := h.spawn(pl, 1, true)
			h.suspend(pl, noeta.GroupCompletedWake(group, ids))

			// The longest message the child's own record can hold.
			msg := ""
			for {
				next := msg + tc.unit
				b, _ := noeta.Canonical(tc.term(next))
				if len(b) > noeta.PayloadMaxBytes {
					break
				}
				msg = next
			}
			h.end(ids[0], tc.term(msg))

			got := h.handoffOf(parent, ids[0])
			if len(got.Payload) > noeta.PayloadMaxBytes {
				t.Fatalf("handoff payload is %d bytes, over the cap", len(got.Payload))
			}
			sc := decodeCompleted(t, got)
			full := tc.prefix + msg
			kept, cut := strings.CutSuffix(sc.Error, "…")
			if !cut || !utf8.ValidString(sc.Error) || !strings.HasPrefix(full, kept) || len(kept) < len(full)-256 {
				t.Errorf("error is %d bytes of a %d-byte message, ending %q; want most of the message, valid UTF-8, marked as cut",
					len(sc.Error), len(full), sc.Error[max(len(sc.Error)-12, 0):])
			}
			h.wantMatched(parent, noeta.GroupCompletedWake(group, ids), "after the only member ended")
		})
	}
}

func TestGroupWakesOnlyWhenEveryMemberArrived(t *testing.T) {
	h := newHarness(t)
	h.subscribe()
	parent, pl := h.rootTask()
	members, group := h.spawn(pl, 3, true)
	h.suspend(pl, noeta.GroupCompletedWake(group, members))

	h.end(members[0], noeta.TaskCompleted{Answer: json.RawMessage(`0`)})
	h.wantWaiting(parent, "after the first member")

	// Records that a count of group records would take for arrivals: a
	// non-member of the group, and a second record about a member that has
	// already arrived.
	for key, sc := range map[string]noeta.SubtaskCompleted{
		"stray":             {SubtaskID: noeta.NewTaskID(), Status: noeta.SubtaskStatusCompleted, GroupID: group},
		"dup-" + members[0]: {SubtaskID: members[0], Status: noeta.SubtaskStatusCompleted, GroupID: group},
	} {
		if _, err := h.s.SystemEmit(t.Context(), parent, key, mustEnvelope(t, parent, eventlog.OriginObserver, sc)); err != nil {
			t.Fatalf("SystemEmit(%s): %v", key, err)
		}
	}
	// A second terminal record of a member runs the barrier check again and
	// must not count the member twice either.
	h.end(members[0], noeta.TaskFailed{Error: "late"})
	h.wantWaiting(parent, "after a second terminal of the first member, a stray and a duplicate")
	if sc := decodeCompleted(t, h.handoffOf(parent, members[0])); sc.Status != noeta.SubtaskStatusCompleted {
		t.Errorf("first member's handoff status %s, want the first terminal's %s", sc.Status, noeta.SubtaskStatusCompleted)
	}

	h.end(members[2], noeta.TaskCompleted{Answer: json.RawMessage(`2`)})
	h.wantWaiting(parent, "after two of three members")

	h.end(members[1], noeta.TaskCancelled{Reason: "enough"})
	h.wantMatched(parent, noeta.GroupCompletedWake(group, members), "after the third member")

	for i, m := range members {
		if sc := decodeCompleted(t, h.handoffOf(parent, m)); sc.GroupID != group {
			t.Errorf("member %d handoff group %q, want %q", i, sc.GroupID, group)
		}
	}
	if st := h.inspect(parent); st.PendingWakes != 0 {
		t.Errorf("parent has %d buffered wakes, want 0: one group wake only", st.PendingWakes)
	}
}

func TestGroupMembersEndingConcurrently(t *testing.T) {
	const rounds, size = 20, 8
	h := newHarness(t)
	h.subscribe()
	for round := range rounds {
		parent, pl := h.rootTask()
		members, group := h.spawn(pl, size, true)
		h.suspend(pl, noeta.GroupCompletedWake(group, members))

		start := make(chan struct{})
		errs := make(chan error, size)
		var wg sync.WaitGroup
		for i, m := range members {
			wg.Go(func() {
				<-start
				_, err := h.endErr(t.Context(), m, noeta.TaskCompleted{Answer: json.RawMessage(fmt.Sprint(i))})
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}

		if n := len(h.inbox(parent)); n != size {
			t.Fatalf("round %d: parent inbox has %d records, want %d", round, n, size)
		}
		h.wantMatched(parent, noeta.GroupCompletedWake(group, members), fmt.Sprintf("round %d", round))
	}
}

func TestWakeBeforeTheParentSuspends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grouped bool
		n       int
	}{
		{"single", false, 1},
		{"group", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.subscribe()
			parent, pl := h.rootTask()
			ids, group := h.spawn(pl, tc.n, tc.grouped)
			cond := noeta.SubtaskCompletedWake(ids[0])
			if tc.grouped {
				cond = noeta.GroupCompletedWake(group, ids)
			}

			for _, id := range ids {
				h.end(id, noeta.TaskCompleted{Answer: json.RawMessage(`true`)})
			}
			st := h.inspect(parent)
			if st.Status != eventlog.DispatchLeased || st.PendingWakes != 1 || st.MatchedWake != nil {
				t.Fatalf("before the suspend: parent %s, %d buffered, matched %s; want leased with one buffered wake",
					st.Status, st.PendingWakes, wakeString(st.MatchedWake))
			}

			h.suspend(pl, cond)
			h.wantMatched(parent, cond, "at the suspend")
		})
	}
}

func TestRecover(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()

	// Before any observer: a single child ends, and two of three members.
	p1, l1 := h.rootTask()
	kids, _ := h.spawn(l1, 1, false)
	h.suspend(l1, noeta.SubtaskCompletedWake(kids[0]))
	h.end(kids[0], noeta.TaskCompleted{Answer: json.RawMessage(`"one"`)})

	p2, l2 := h.rootTask()
	members, group := h.spawn(l2, 3, true)
	h.suspend(l2, noeta.GroupCompletedWake(group, members))
	h.end(members[0], noeta.TaskCompleted{})
	h.end(members[1], noeta.TaskCompleted{})

	// A root that ended and a child still running are left alone.
	r, rl := h.rootTask()
	h.spawn(rl, 1, false)
	h.emit(rl, noeta.TaskCompleted{})

	for _, p := range []string{p1, p2, r} {
		if n := len(h.inbox(p)); n != 0 {
			t.Fatalf("inbox of %s has %d records before any observer, want 0", p, n)
		}
	}

	obs := h.subscribe()
	n, err := obs.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	// p1: one handoff and its wake; p2: two handoffs, no wake yet.
	if n != 4 {
		t.Errorf("Recover delivered %d, want 4", n)
	}
	h.handoffOf(p1, kids[0])
	h.wantMatched(p1, noeta.SubtaskCompletedWake(kids[0]), "single child after Recover")
	h.handoffOf(p2, members[0])
	h.handoffOf(p2, members[1])
	h.wantWaiting(p2, "group with two of three after Recover")
	if got := len(h.inbox(r)); got != 0 {
		t.Errorf("root's inbox has %d records, want 0", got)
	}

	if n, err := obs.Recover(ctx); err != nil || n != 0 {
		t.Errorf("second Recover: got (%d, %v), want (0, nil)", n, err)
	}
	if got1, got2 := len(h.inbox(p1)), len(h.inbox(p2)); got1 != 1 || got2 != 2 {
		t.Errorf("after the second Recover inboxes hold %d and %d records, want 1 and 2", got1, got2)
	}

	// The last member ends with the observer attached: one group wake.
	h.end(members[2], noeta.TaskCompleted{})
	h.wantMatched(p2, noeta.GroupCompletedWake(group, members), "after the last member")
	if st := h.inspect(p2); st.PendingWakes != 0 {
		t.Errorf("group parent has %d buffered wakes, want 0", st.PendingWakes)
	}

	// Another process knows nothing of the wakes sent: it writes nothing
	// again but re-sends both wakes, since neither parent has recorded its
	// results yet (the dispatcher buffers the repeats).
	n, err = h.observer().Recover(ctx)
	if err != nil || n != 2 {
		t.Errorf("Recover in a fresh observer: got (%d, %v), want (2, nil)", n, err)
	}
	if got1, got2 := len(h.inbox(p1)), len(h.inbox(p2)); got1 != 1 || got2 != 3 {
		t.Errorf("after a fresh Recover inboxes hold %d and %d records, want 1 and 3", got1, got2)
	}

	// Once each parent has recorded what it consumed, nothing is re-sent.
	pl1 := h.lease(p1)
	h.emit(pl1, noeta.SubtaskResultRecorded{SubtaskID: kids[0], Status: noeta.SubtaskStatusCompleted})
	pl2 := h.lease(p2)
	for _, m := range members {
		h.emit(pl2, noeta.SubtaskResultRecorded{SubtaskID: m, Status: noeta.SubtaskStatusCompleted, GroupID: group})
	}
	if n, err := h.observer().Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover after the parents recorded the results: got (%d, %v), want (0, nil)", n, err)
	}
}

func TestWakeSkippedOrDropped(t *testing.T) {
	t.Run("parent already ended", func(t *testing.T) {
		h := newHarness(t)
		h.subscribe()
		parent, pl := h.rootTask()
		ids, _ := h.spawn(pl, 1, false)
		h.emit(pl, noeta.TaskCancelled{Reason: "user"})
		if err := h.s.Release(t.Context(), pl, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "cancelled"}); err != nil {
			t.Fatal(err)
		}

		h.end(ids[0], noeta.TaskCancelled{Reason: "parent cancelled"})

		h.handoffOf(parent, ids[0])
		if st := h.inspect(parent); st.PendingWakes != 0 || st.MatchedWake != nil {
			t.Errorf("ended parent got a wake (%d buffered, matched %s), want none", st.PendingWakes, wakeString(st.MatchedWake))
		}
	})

	t.Run("parent already recorded the result", func(t *testing.T) {
		h := newHarness(t)
		h.subscribe()
		parent, pl := h.rootTask()
		ids, group := h.spawn(pl, 2, true)
		for _, id := range ids {
			h.emit(pl, noeta.SubtaskResultRecorded{SubtaskID: id, Status: noeta.SubtaskStatusCompleted, GroupID: group})
		}
		h.suspend(pl, noeta.HumanResponseWake("h-1"))

		for _, id := range ids {
			h.end(id, noeta.TaskCompleted{})
		}

		if n := len(h.inbox(parent)); n != 2 {
			t.Errorf("parent inbox has %d records, want 2", n)
		}
		h.wantWaiting(parent, "results already recorded")
	})

	t.Run("parent unknown to the dispatcher", func(t *testing.T) {
		h := newHarness(t)
		h.subscribe()
		parent := h.create(noeta.NewTaskID(), "", "")
		child := h.create(noeta.NewTaskID(), parent, "")

		h.end(child, noeta.TaskCompleted{})

		h.handoffOf(parent, child)
		if _, err := h.s.Inspect(t.Context(), parent); !errors.Is(err, eventlog.ErrNotFound) {
			t.Errorf("Inspect(parent): got %v, want %v", err, eventlog.ErrNotFound)
		}
		if !h.logs.contains("unknown to the dispatcher") {
			t.Error("the dropped wake was not logged")
		}
	})

	t.Run("parent does not exist", func(t *testing.T) {
		h := newHarness(t)
		h.subscribe()
		ghost := noeta.NewTaskID()
		h.mu.Lock()
		h.roots[ghost] = ghost
		h.mu.Unlock()
		child := h.create(noeta.NewTaskID(), ghost, "")

		h.end(child, noeta.TaskCompleted{})

		if !h.logs.contains("parent task does not exist") {
			t.Error("the dropped handoff was not logged")
		}
	})
}

func TestIgnoredRecords(t *testing.T) {
	h := newHarness(t)
	obs := h.subscribe()
	ctx := t.Context()

	parent, pl := h.rootTask()
	ids, _ := h.spawn(pl, 1, false)
	child := ids[0]
	h.suspend(pl, noeta.SubtaskCompletedWake(child))

	// A root ending has nobody to tell.
	root, rl := h.rootTask()
	h.emit(rl, noeta.TaskCompleted{Answer: json.RawMessage(`1`)})

	// A child's records before its end are not a handoff.
	cl := h.lease(child)
	h.emit(cl, noeta.TurnStarted{Turn: 1})
	h.emit(cl, noeta.TaskStatePatched{Patch: json.RawMessage(`{"a":1}`)})

	direct := []struct {
		name string
		env  eventlog.Envelope
	}{
		{"inbox record of a terminal type", eventlog.Envelope{Task: child, Key: "x", Type: noeta.TypeTaskCompleted, Payload: json.RawMessage(`{}`)}},
		{"malformed terminal record", eventlog.Envelope{Task: child, Seq: 9, Type: noeta.TypeTaskFailed, Payload: json.RawMessage(`{"error":5}`)}},
		{"terminal record of an unknown task", eventlog.Envelope{Task: noeta.NewTaskID(), Seq: 3, Type: noeta.TypeTaskCompleted, Payload: json.RawMessage(`{}`)}},
		{"unknown type", eventlog.Envelope{Task: child, Seq: 9, Type: "SomethingNewer", Payload: json.RawMessage(`{}`)}},
	}
	for _, d := range direct {
		if err := obs.Handle(ctx, d.env); err != nil {
			t.Errorf("Handle(%s): got error %v, want nil", d.name, err)
		}
	}
	if !h.logs.contains("malformed") {
		t.Error("the malformed terminal record was not logged")
	}

	for _, task := range []string{parent, root, child} {
		if n := len(h.inbox(task)); n != 0 {
			t.Errorf("inbox of %s has %d records, want 0", task, n)
		}
	}
	h.wantWaiting(parent, "no terminal record of the child")
	if n, err := obs.Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover: got (%d, %v), want (0, nil)", n, err)
	}
}

func TestLRUIsBounded(t *testing.T) {
	c := newLRU[int](3)
	for i, k := range []string{"a", "b", "c", "d"} {
		if !c.add(k, i) {
			t.Fatalf("add(%s) of a new key: got false", k)
		}
	}
	if c.len() != 3 {
		t.Fatalf("len %d, want 3", c.len())
	}
	if _, ok := c.take("a"); ok {
		t.Error("the oldest entry survived past the bound")
	}
	if c.add("d", 9) {
		t.Error("add of a present key: got true")
	}
	if v, ok := c.take("d"); !ok || v != 3 {
		t.Errorf("take(d): got (%d, %v), want (3, true)", v, ok)
	}
	c.put("e", 5)
	c.put("e", 6)
	if v, ok := c.take("e"); !ok || v != 6 {
		t.Errorf("take(e): got (%d, %v), want (6, true)", v, ok)
	}
	if c.len() != 2 {
		t.Errorf("len %d, want 2", c.len())
	}
}

// TestRecoverTasks: RecoverTasks hands off only the tasks it is given, and
// wakes their parent, as the reconciler asks for a parent left waiting.
func TestRecoverTasks(t *testing.T) {
	h := newHarness(t)
	p1, l1 := h.rootTask()
	kids, _ := h.spawn(l1, 1, false)
	h.suspend(l1, noeta.SubtaskCompletedWake(kids[0]))
	h.end(kids[0], noeta.TaskCompleted{Answer: json.RawMessage(`"one"`)})
	p2, l2 := h.rootTask()
	other, _ := h.spawn(l2, 1, false)
	h.suspend(l2, noeta.SubtaskCompletedWake(other[0]))
	h.end(other[0], noeta.TaskCompleted{})

	obs := h.subscribe()
	n, err := obs.RecoverTasks(t.Context(), kids)
	if err != nil || n != 2 {
		t.Fatalf("RecoverTasks: %d, %v; want the handoff and its wake", n, err)
	}
	h.handoffOf(p1, kids[0])
	h.wantMatched(p1, noeta.SubtaskCompletedWake(kids[0]), "the parent named")
	if got := len(h.inbox(p2)); got != 0 {
		t.Errorf("a parent not named got %d inbox records", got)
	}
	// Again: the handoff exists; nothing more is delivered but the wake.
	if _, err := obs.RecoverTasks(t.Context(), kids); err != nil {
		t.Fatal(err)
	}
	if got := len(h.inbox(p1)); got != 1 {
		t.Errorf("inbox of the parent: %d records after a second recovery, want 1", got)
	}
}
