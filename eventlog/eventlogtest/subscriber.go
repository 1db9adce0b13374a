package eventlogtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

var subscriberCases = []suiteCase{
	{"DeliveredDurableBeforeReturn", testSubDurableBeforeReturn},
	{"SeesEveryAppend", testSubSeesEveryAppend},
	{"NothingWrittenNothingDelivered", testSubNothingWritten},
	{"RegistrationOrder", testSubRegistrationOrder},
	{"PanicRecovered", testSubPanicRecovered},
	{"ErrorCounted", testSubErrorCounted},
	{"ReemitSameTask", testSubReemitSameTask},
	{"WriteOtherTask", testSubWriteOtherTask},
	{"ConcurrentWriters", testSubConcurrentWriters},
	{"Cancel", testSubCancel},
	{"CancelConcurrent", testSubCancelConcurrent},
	{"CancelInsideHandler", testSubCancelInsideHandler},
	{"ContextNotCancelled", testSubContextNotCancelled},
	{"NoReplay", testSubNoReplay},
}

// recorder collects what a handler saw, for one case's tasks.
type recorder struct {
	mu       sync.Mutex
	envs     []eventlog.Envelope
	problems []string
}

func (r *recorder) add(env eventlog.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.envs = append(r.envs, env)
}

func (r *recorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *recorder) seen() []eventlog.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventlog.Envelope(nil), r.envs...)
}

func (r *recorder) report(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.problems {
		t.Error(p)
	}
}

func subscribe(t *testing.T, b Backend, h eventlog.Handler) *eventlog.Subscription {
	t.Helper()
	sub := b.Log.Subscribe(h)
	if sub == nil {
		t.Fatalf("Subscribe: got nil subscription")
	}
	t.Cleanup(sub.Cancel)
	return sub
}

// turnOf returns the turn of a TurnStarted record, or -1.
func turnOf(env eventlog.Envelope) int {
	if env.Type != noeta.TypeTurnStarted {
		return -1
	}
	p, ok, err := env.Decode()
	if !ok || err != nil {
		return -1
	}
	return p.(*noeta.TurnStarted).Turn
}

func testSubDurableBeforeReturn(t *testing.T, b Backend) {
	ctx := t.Context()
	task := noeta.NewTaskID()
	var r recorder
	var sawCreate, sawTurn, sawInbox atomic.Bool
	subscribe(t, b, func(hctx context.Context, env eventlog.Envelope) error {
		if env.Task != task {
			return nil
		}
		switch {
		case env.Key != "":
			inbox, err := b.Log.Inbox(hctx, task)
			if err != nil || len(inbox) != 1 || inbox[0].ID != env.ID {
				r.problem("inside the handler of the inbox record: Inbox gave %d records, error %v; want the record", len(inbox), err)
			}
			sawInbox.Store(true)
		case env.Type == noeta.TypeTaskCreated:
			envs, err := b.Log.Read(hctx, task, 0)
			if err != nil || len(envs) != 1 || envs[0].ID != env.ID {
				r.problem("inside the handler of TaskCreated: Read gave %d records, error %v; want the record", len(envs), err)
			}
			sawCreate.Store(true)
		case env.Type == noeta.TypeTurnStarted:
			envs, err := b.Log.Read(hctx, task, env.Seq-1)
			if err != nil || len(envs) == 0 || envs[0].ID != env.ID {
				r.problem("inside the handler of seq %d: Read gave %v, error %v; want the record", env.Seq, typesOf(envs), err)
			}
			sawTurn.Store(true)
		}
		return nil
	})
	// The handlers read the log: a backend that delivers under its writer
	// lock deadlocks here, so each write runs under within.
	genesis := genesisEnv(t, task)
	err := within(t, b, "Create whose handler reads the log", func() error {
		_, err := b.Log.Create(ctx, genesis)
		return err
	})
	wantNoErr(t, "Create", err)
	if !sawCreate.Load() {
		t.Errorf("handler had not seen TaskCreated when Create returned")
	}
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	l := leaseTask(t, b, task)
	turn := turnEnv(t, task, 1)
	err = within(t, b, "Emit whose handler reads the log", func() error {
		_, err := b.Log.Emit(ctx, l, turn, eventlog.EmitOptions{})
		return err
	})
	wantNoErr(t, "Emit", err)
	if !sawTurn.Load() {
		t.Errorf("handler had not seen TurnStarted when Emit returned")
	}
	inbox := inboxEnv(t, task, "c1")
	err = within(t, b, "SystemEmit whose handler reads the inbox", func() error {
		_, err := b.Log.SystemEmit(ctx, task, "k", inbox)
		return err
	})
	wantNoErr(t, "SystemEmit", err)
	if !sawInbox.Load() {
		t.Errorf("handler had not seen the inbox record when SystemEmit returned")
	}
	r.report(t)
}

func testSubSeesEveryAppend(t *testing.T, b Backend) {
	task := noeta.NewTaskID()
	var r recorder
	subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			r.add(env)
		}
		return nil
	})
	_, err := b.Log.Create(t.Context(), genesisEnv(t, task))
	wantNoErr(t, "Create", err)
	l := enqueueLease(t, b, task)
	emitTurn(t, b, l, 1)
	emitTurn(t, b, l, 2)
	_, err = b.Log.SystemEmit(t.Context(), task, "k", inboxEnv(t, task, "c1"))
	wantNoErr(t, "SystemEmit", err)

	want := append(readAll(t, b, task), readInbox(t, b, task)...)
	got := r.seen()
	if len(got) != len(want) {
		t.Fatalf("delivered: got %v, want %v", typesOf(got), typesOf(want))
	}
	for i := range want {
		if d := diffEnvelope(got[i], want[i]); d != "" {
			t.Errorf("delivery %d (%s): %s", i, want[i].Type, d)
		}
	}
}

func testSubNothingWritten(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	var r recorder
	subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			r.add(env)
		}
		return nil
	})
	mustEmitOpts(t, b, l, turnEnv(t, task, 1), keyed("k"))
	_, err := b.Log.SystemEmit(ctx, task, "x", inboxEnv(t, task, "c1"))
	wantNoErr(t, "SystemEmit", err)
	if n := len(r.seen()); n != 3 {
		t.Fatalf("deliveries after 3 appends: got %d, want 3", n)
	}

	bad := turnEnv(t, task, 2)
	bad.Origin = "robot"
	_, _ = b.Log.Emit(ctx, l, turnEnv(t, task, 2), eventlog.EmitOptions{ExpectLastSeq: 1})
	_, _ = b.Log.Emit(ctx, l, rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1)), eventlog.EmitOptions{})
	_, _ = b.Log.Emit(ctx, l, bad, eventlog.EmitOptions{})
	_, _ = b.Log.Emit(ctx, l, turnEnv(t, task, 1), keyed("k")) // idempotent hit
	_, _ = b.Log.Emit(ctx, fakeLease(task), turnEnv(t, task, 2), eventlog.EmitOptions{})
	_, _ = b.Log.SystemEmit(ctx, task, "x", inboxEnv(t, task, "c2"))
	_, _ = b.Log.SystemEmit(ctx, task, "y", rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1)))
	_, _ = b.Log.Create(ctx, genesisEnv(t, task))
	if got := r.seen(); len(got) != 3 {
		t.Errorf("deliveries after writes that wrote nothing: got %v, want the 3 earlier ones", typesOf(got))
	}
}

func testSubRegistrationOrder(t *testing.T, b Backend) {
	task := noeta.NewTaskID()
	var mu sync.Mutex
	order := map[string][]int{}
	for i := range 4 {
		subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
			if env.Task == task {
				mu.Lock()
				order[env.ID] = append(order[env.ID], i)
				mu.Unlock()
			}
			return nil
		})
	}
	_, err := b.Log.Create(t.Context(), genesisEnv(t, task))
	wantNoErr(t, "Create", err)
	l := enqueueLease(t, b, task)
	emitTurn(t, b, l, 1)
	envs := readAll(t, b, task)
	mu.Lock()
	defer mu.Unlock()
	for _, e := range envs {
		if got := fmt.Sprint(order[e.ID]); got != "[0 1 2 3]" {
			t.Errorf("handlers of seq %d (%s) ran in order %s, want [0 1 2 3]", e.Seq, e.Type, got)
		}
	}
}

func testSubPanicRecovered(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	var after recorder
	bad := subscribe(t, b, func(context.Context, eventlog.Envelope) error { panic("handler bug") })
	subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			after.add(env)
		}
		return nil
	})
	got, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 1), eventlog.EmitOptions{})
	if err != nil {
		t.Fatalf("Emit with a panicking handler: got error %v, want nil", err)
	}
	if got.Seq != 3 {
		t.Errorf("Emit with a panicking handler: got seq %d, want 3", got.Seq)
	}
	if st := bad.Stats(); st.Panicked != 2 || st.Delivered != 2 {
		t.Errorf("Stats of the panicking handler: got %+v, want Delivered 2, Panicked 2", st)
	}
	if n := len(after.seen()); n != 2 {
		t.Errorf("later handler deliveries: got %d, want 2 (LeaseGranted and the record)", n)
	}
	emitTurn(t, b, l, 2)
	wantLogLen(t, b, task, 4, "after the panics")
}

func testSubErrorCounted(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	var after recorder
	bad := subscribe(t, b, func(context.Context, eventlog.Envelope) error { return errors.New("handler failed") })
	good := subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			after.add(env)
		}
		return nil
	})
	if _, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 1), eventlog.EmitOptions{}); err != nil {
		t.Fatalf("Emit with a failing handler: got error %v, want nil", err)
	}
	if _, err := b.Log.SystemEmit(t.Context(), task, "k", inboxEnv(t, task, "c")); err != nil {
		t.Fatalf("SystemEmit with a failing handler: got error %v, want nil", err)
	}
	if st := bad.Stats(); st.Failed != 3 || st.Delivered != 3 || st.Panicked != 0 {
		t.Errorf("Stats of the failing handler: got %+v, want Delivered 3, Failed 3, Panicked 0", st)
	}
	if st := good.Stats(); st.Failed != 0 || st.Delivered != 3 {
		t.Errorf("Stats of the good handler: got %+v, want Delivered 3, Failed 0", st)
	}
	if n := len(after.seen()); n != 3 {
		t.Errorf("later handler deliveries: got %d, want 3", n)
	}
}

func testSubReemitSameTask(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	var r recorder
	var inner atomic.Uint64
	subscribe(t, b, func(ctx context.Context, env eventlog.Envelope) error {
		if env.Task != task || turnOf(env) != 1 {
			return nil
		}
		next, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: 2})
		if err == nil {
			next, err = b.Log.Emit(ctx, l, next, eventlog.EmitOptions{})
		}
		if err != nil {
			r.problem("Emit from inside the handler: got error %v, want nil", err)
			return err
		}
		inner.Store(next.Seq)
		return nil
	})
	first := turnEnv(t, task, 1)
	err := within(t, b, "Emit whose handler emits on the same task", func() error {
		_, err := b.Log.Emit(t.Context(), l, first, eventlog.EmitOptions{})
		return err
	})
	wantNoErr(t, "outer Emit", err)
	r.report(t)
	if got := inner.Load(); got != 4 {
		t.Errorf("inner emit: got seq %d, want 4", got)
	}
	envs := wantLogLen(t, b, task, 4, "after the re-entrant emit")
	if turnOf(envs[2]) != 1 || turnOf(envs[3]) != 2 {
		t.Errorf("log: got %v, want turn 1 at 3 and turn 2 at 4", typesOf(envs))
	}
}

func testSubWriteOtherTask(t *testing.T, b Backend) {
	parent, lp := newLeased(t, b)
	child, lc := newLeased(t, b)
	var r recorder
	subscribe(t, b, func(ctx context.Context, env eventlog.Envelope) error {
		if env.Task != child || env.Type != noeta.TypeTaskCompleted {
			return nil
		}
		res, err := eventlog.NewEnvelope(parent, eventlog.OriginObserver, "child_observer", noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted})
		if err == nil {
			_, err = b.Log.SystemEmit(ctx, parent, "subtask-"+child, res)
		}
		if err != nil {
			r.problem("SystemEmit into the parent from inside the handler: got error %v, want nil", err)
		}
		note, err := eventlog.NewEnvelope(parent, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: 1})
		if err == nil {
			_, err = b.Log.Emit(ctx, lp, note, eventlog.EmitOptions{})
		}
		if err != nil {
			r.problem("Emit on the parent from inside the handler: got error %v, want nil", err)
		}
		return nil
	})
	done := mustEnvelope(t, child, noeta.TaskCompleted{Answer: []byte(`"42"`)})
	err := within(t, b, "Emit whose handler writes another task", func() error {
		_, err := b.Log.Emit(t.Context(), lc, done, eventlog.EmitOptions{})
		return err
	})
	wantNoErr(t, "child's TaskCompleted", err)
	r.report(t)
	if inbox := readInbox(t, b, parent); len(inbox) != 1 || inbox[0].Key != "subtask-"+child {
		t.Errorf("parent inbox when the child's Emit returned: got %v, want the subtask result", typesOf(inbox))
	}
	wantLogLen(t, b, parent, 3, "parent log when the child's Emit returned")
}

func testSubConcurrentWriters(t *testing.T, b Backend) {
	const writers, turns = 8, 5
	tasks := make([]string, writers)
	leases := make([]eventlog.Lease, writers)
	index := map[string]int{}
	for i := range writers {
		tasks[i], leases[i] = newLeased(t, b)
		index[tasks[i]] = i
	}
	var counts [writers]atomic.Int64
	var entered atomic.Int32
	allIn := make(chan struct{})
	var concurrent atomic.Bool
	concurrent.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		i, ok := index[env.Task]
		if !ok {
			return nil
		}
		counts[i].Add(1)
		if turnOf(env) != 1 {
			return nil
		}
		// Every writer's first record waits here for all the others: it
		// only passes if handlers of different writers run at once.
		if entered.Add(1) == writers {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-time.After(time.Until(deadline)):
			concurrent.Store(false)
		}
		return nil
	})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for n := 1; n <= turns; n++ {
				env, err := eventlog.NewEnvelope(tasks[i], eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: n})
				if err == nil {
					_, err = b.Log.Emit(t.Context(), leases[i], env, eventlog.EmitOptions{})
				}
				if err != nil {
					t.Errorf("writer %d turn %d: got error %v, want nil", i, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if !concurrent.Load() {
		t.Errorf("handlers of %d writers did not all run at once (only %d entered): handlers must run outside the backend's locks", writers, entered.Load())
	}
	total := int64(0)
	for i := range writers {
		total += counts[i].Load()
		if got := counts[i].Load(); got != turns+1 {
			t.Errorf("deliveries for writer %d: got %d, want %d", i, got, turns+1)
		}
		wantLogLen(t, b, tasks[i], turns+2, fmt.Sprintf("log of writer %d", i))
	}
	t.Logf("%d deliveries from %d concurrent writers", total, writers)
}

func testSubCancel(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	var r recorder
	sub := subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == task {
			r.add(env)
		}
		return nil
	})
	emitTurn(t, b, l, 1)
	if sub.Stopped() {
		t.Errorf("Stopped before Cancel: got true, want false")
	}
	sub.Cancel()
	if !sub.Stopped() {
		t.Errorf("Stopped after Cancel: got false, want true")
	}
	emitTurn(t, b, l, 2)
	_, err := b.Log.SystemEmit(t.Context(), task, "k", inboxEnv(t, task, "c"))
	wantNoErr(t, "SystemEmit", err)
	sub.Cancel()
	if got := r.seen(); len(got) != 2 {
		t.Errorf("deliveries: got %v, want the 2 before Cancel", typesOf(got))
	}
	if st := sub.Stats(); st.Delivered != 2 {
		t.Errorf("Stats after Cancel: got %+v, want Delivered 2", st)
	}
}

func testSubCancelConcurrent(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	subs := make([]*eventlog.Subscription, 8)
	for i := range subs {
		subs[i] = subscribe(t, b, func(context.Context, eventlog.Envelope) error { return nil })
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; n <= 20; n++ {
			env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: n})
			if err == nil {
				_, err = b.Log.Emit(t.Context(), l, env, eventlog.EmitOptions{})
			}
			if err != nil {
				t.Errorf("Emit %d during cancels: got error %v, want nil", n, err)
				return
			}
		}
	})
	for _, s := range subs {
		for range 4 {
			wg.Go(s.Cancel)
		}
	}
	wg.Wait()
	for i, s := range subs {
		if !s.Stopped() {
			t.Errorf("subscription %d: Stopped got false, want true", i)
		}
		before := s.Stats().Delivered
		emitTurn(t, b, l, 100+i)
		if after := s.Stats().Delivered; after != before {
			t.Errorf("subscription %d: delivered %d after Cancel, want 0", i, after-before)
		}
	}
}

func testSubCancelInsideHandler(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	var self atomic.Pointer[eventlog.Subscription]
	var calls atomic.Int32
	sub := subscribe(t, b, func(context.Context, eventlog.Envelope) error {
		calls.Add(1)
		if s := self.Load(); s != nil {
			s.Cancel()
		}
		return nil
	})
	self.Store(sub)
	first := turnEnv(t, task, 1)
	err := within(t, b, "Emit whose handler cancels its subscription", func() error {
		_, err := b.Log.Emit(t.Context(), l, first, eventlog.EmitOptions{})
		return err
	})
	wantNoErr(t, "Emit", err)
	emitTurn(t, b, l, 2)
	if got := calls.Load(); got != 1 {
		t.Errorf("handler calls: got %d, want 1 (it cancelled itself in the first)", got)
	}
	if !sub.Stopped() {
		t.Errorf("Stopped: got false, want true")
	}
}

func testSubContextNotCancelled(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var r recorder
	var ran atomic.Bool
	subscribe(t, b, func(hctx context.Context, env eventlog.Envelope) error {
		if env.Task != task || env.Type != noeta.TypeTurnStarted {
			return nil
		}
		ran.Store(true)
		cancel() // the writer gives up right after the record is durable
		if err := hctx.Err(); err != nil {
			r.problem("handler ctx after the writer's ctx was cancelled: got Err %v, want nil", err)
		}
		return nil
	})
	_, _ = b.Log.Emit(ctx, l, turnEnv(t, task, 1), eventlog.EmitOptions{})
	if !ran.Load() {
		t.Fatalf("handler did not run")
	}
	r.report(t)
	wantLogLen(t, b, task, 3, "after the emit")
}

func testSubNoReplay(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	var r recorder
	sub := subscribe(t, b, func(_ context.Context, env eventlog.Envelope) error {
		r.add(env)
		return nil
	})
	if got := r.seen(); len(got) != 0 {
		t.Errorf("deliveries on Subscribe: got %v, want none (no replay)", typesOf(got))
	}
	emitTurn(t, b, l, 2)
	if got := r.seen(); len(got) != 1 || got[0].Seq != 4 {
		t.Errorf("deliveries: got %v, want only seq 4", typesOf(got))
	}
	if st := sub.Stats(); st.Delivered != 1 {
		t.Errorf("Stats: got %+v, want Delivered 1", st)
	}
}
