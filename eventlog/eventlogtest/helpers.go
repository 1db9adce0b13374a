package eventlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

const (
	// suiteActor is the Actor of every record the suite writes.
	suiteActor = "eventlogtest"
	// rawType is a type outside the catalogue, for records whose payload the
	// suite shapes by hand (unknown types are stored and read back).
	rawType = "SuiteRecord"

	workerA = "worker-a"
	workerB = "worker-b"
)

// ---- time ----

// leaseTTL is the TTL every lease of the suite asks for.
func leaseTTL(t *testing.T, b Backend) time.Duration {
	t.Helper()
	if b.LeaseTTL <= 0 {
		t.Fatalf("Backend.LeaseTTL is %v; the factory must set the TTL the suite asks for", b.LeaseTTL)
	}
	return b.LeaseTTL
}

// timerDelay is how far in the future the timer cases set their deadline.
func timerDelay(b Backend) time.Duration {
	if b.Advance != nil {
		return 10 * time.Second
	}
	return max(b.LeaseTTL, time.Second)
}

// waitLimit bounds how long the suite waits for something that should
// happen (a poll on a wall-clock backend, a call that might deadlock).
func waitLimit(b Backend) time.Duration {
	if b.Advance != nil {
		return 10 * time.Second
	}
	return 10*time.Second + 4*b.LeaseTTL + 2*timerDelay(b)
}

// advance moves the backend's clock by d: Backend.Advance when it has one,
// else a sleep (the outcome is then polled for with eventually).
func advance(t *testing.T, b Backend, d time.Duration) {
	t.Helper()
	if b.Advance != nil {
		b.Advance(d)
		return
	}
	time.Sleep(d)
}

// eventually waits for cond to return nil. With a manual clock the outcome
// must hold at once (Advance returns after the backend acted); on a wall clock
// it is polled for up to waitLimit.
func eventually(t *testing.T, b Backend, what string, cond func() error) {
	t.Helper()
	err := cond()
	if err == nil {
		return
	}
	if b.Advance != nil {
		t.Fatalf("%s: %v (Backend.Advance must return after the backend acted on everything due)", what, err)
	}
	limit := waitLimit(b)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("%s: still %v after %v", what, err, limit)
}

// expire lets l run out (advance by the TTL) and waits until the dispatcher no
// longer holds it as the task's lease.
func expire(t *testing.T, b Backend, l eventlog.Lease) {
	t.Helper()
	advance(t, b, leaseTTL(t, b))
	eventually(t, b, "expiry of lease "+l.ID, func() error {
		st, err := b.Dispatcher.Inspect(t.Context(), l.Task)
		if err != nil {
			return err
		}
		if st.Status == eventlog.DispatchLeased && st.LeaseID == l.ID {
			return fmt.Errorf("task %s is still leased by %s (expires %v)", l.Task, l.ID, st.Expires)
		}
		return nil
	})
}

// grantedAt is the backend's clock at the grant of l.
func grantedAt(t *testing.T, b Backend, l eventlog.Lease) time.Time {
	t.Helper()
	return l.Expires.Add(-leaseTTL(t, b))
}

// ---- records ----

func mustEnvelope(t *testing.T, task string, p noeta.Payload) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, suiteActor, p)
	if err != nil {
		t.Fatalf("NewEnvelope(%s): got error %v, want nil", p.EventType(), err)
	}
	return env
}

func genesisEnv(t *testing.T, task string) eventlog.Envelope {
	t.Helper()
	return mustEnvelope(t, task, noeta.TaskCreated{TaskID: task, Agent: "suite", Goal: "contract", RootTaskID: task})
}

func turnEnv(t *testing.T, task string, n int) eventlog.Envelope {
	t.Helper()
	return mustEnvelope(t, task, noeta.TurnStarted{Turn: n})
}

// rawEnv is an envelope with a hand-made payload (not validated here).
func rawEnv(task, typ, payload string) eventlog.Envelope {
	return eventlog.Envelope{Task: task, Type: typ, Origin: eventlog.OriginEngine, Actor: suiteActor, Payload: json.RawMessage(payload)}
}

// sizedPayload is a canonical JSON object of exactly n bytes (n >= 10).
func sizedPayload(n int) string {
	return `{"pad":"` + strings.Repeat("a", n-10) + `"}`
}

// createTask creates a fresh task and returns its genesis record.
func createTask(t *testing.T, b Backend) eventlog.Envelope {
	t.Helper()
	id := noeta.NewTaskID()
	env, err := b.Log.Create(t.Context(), genesisEnv(t, id))
	if err != nil {
		t.Fatalf("Create(%s): got error %v, want nil", id, err)
	}
	return env
}

// newTask creates a fresh task and returns its id.
func newTask(t *testing.T, b Backend) string {
	t.Helper()
	return createTask(t, b).Task
}

func mustEmit(t *testing.T, b Backend, l eventlog.Lease, env eventlog.Envelope) eventlog.Envelope {
	t.Helper()
	return mustEmitOpts(t, b, l, env, eventlog.EmitOptions{})
}

func mustEmitOpts(t *testing.T, b Backend, l eventlog.Lease, env eventlog.Envelope, opts eventlog.EmitOptions) eventlog.Envelope {
	t.Helper()
	got, err := b.Log.Emit(t.Context(), l, env, opts)
	if err != nil {
		t.Fatalf("Emit(%s on %s, lease gen %d, %+v): got error %v, want nil", env.Type, l.Task, l.Generation, opts, err)
	}
	return got
}

func emitTurn(t *testing.T, b Backend, l eventlog.Lease, n int) eventlog.Envelope {
	t.Helper()
	return mustEmit(t, b, l, turnEnv(t, l.Task, n))
}

func readAll(t *testing.T, b Backend, task string) []eventlog.Envelope {
	t.Helper()
	envs, err := b.Log.Read(t.Context(), task, 0)
	if err != nil {
		t.Fatalf("Read(%s, 0): got error %v, want nil", task, err)
	}
	return envs
}

func readInbox(t *testing.T, b Backend, task string) []eventlog.Envelope {
	t.Helper()
	envs, err := b.Log.Inbox(t.Context(), task)
	if err != nil {
		t.Fatalf("Inbox(%s): got error %v, want nil", task, err)
	}
	return envs
}

// wantLogLen checks that the log of task holds n records, densely numbered.
func wantLogLen(t *testing.T, b Backend, task string, n int, what string) []eventlog.Envelope {
	t.Helper()
	envs := readAll(t, b, task)
	if len(envs) != n {
		t.Fatalf("%s: log of %s has %d records %v, want %d", what, task, len(envs), typesOf(envs), n)
	}
	if err := checkDense(envs); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return envs
}

func typesOf(envs []eventlog.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = fmt.Sprintf("%d:%s@%d", e.Seq, e.Type, e.LeaseGen)
	}
	return out
}

func countType(envs []eventlog.Envelope, typ string) int {
	n := 0
	for _, e := range envs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// checkDense reports a log whose seqs are not 1, 2, 3 … in order.
func checkDense(envs []eventlog.Envelope) error {
	for i, e := range envs {
		if e.Seq != uint64(i+1) {
			return fmt.Errorf("record %d of the log has seq %d, want %d (log %v)", i, e.Seq, i+1, typesOf(envs))
		}
	}
	return nil
}

func decodeLeaseGranted(t *testing.T, env eventlog.Envelope) noeta.LeaseGranted {
	t.Helper()
	if env.Type != noeta.TypeLeaseGranted {
		t.Fatalf("record %d: got type %s, want %s", env.Seq, env.Type, noeta.TypeLeaseGranted)
	}
	var lg noeta.LeaseGranted
	if err := json.Unmarshal(env.Payload, &lg); err != nil {
		t.Fatalf("decode LeaseGranted %s: %v", env.Payload, err)
	}
	return lg
}

// diffEnvelope lists the fields in which got differs from want.
func diffEnvelope(got, want eventlog.Envelope) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Task != want.Task {
		add("Task", got.Task, want.Task)
	}
	if got.Seq != want.Seq {
		add("Seq", got.Seq, want.Seq)
	}
	if got.Key != want.Key {
		add("Key", got.Key, want.Key)
	}
	if got.Type != want.Type {
		add("Type", got.Type, want.Type)
	}
	if !got.Time.Equal(want.Time) {
		add("Time", got.Time, want.Time)
	}
	if got.Actor != want.Actor {
		add("Actor", got.Actor, want.Actor)
	}
	if got.Origin != want.Origin {
		add("Origin", got.Origin, want.Origin)
	}
	if got.TraceParent != want.TraceParent {
		add("TraceParent", got.TraceParent, want.TraceParent)
	}
	if got.CausationID != want.CausationID {
		add("CausationID", got.CausationID, want.CausationID)
	}
	if got.CorrelationID != want.CorrelationID {
		add("CorrelationID", got.CorrelationID, want.CorrelationID)
	}
	if got.LeaseGen != want.LeaseGen {
		add("LeaseGen", got.LeaseGen, want.LeaseGen)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		add("Payload", string(got.Payload), string(want.Payload))
	}
	return strings.Join(d, "; ")
}

func wantSameEnvelope(t *testing.T, what string, got, want eventlog.Envelope) {
	t.Helper()
	if d := diffEnvelope(got, want); d != "" {
		t.Errorf("%s: %s", what, d)
	}
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// isULID reports whether s is a canonical ULID string.
func isULID(s string) bool {
	if len(s) != 26 || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(crockford, rune(s[i])) {
			return false
		}
	}
	return true
}

// ---- errors ----

// wantErrIs fails the case unless errors.Is(err, target).
func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// checkErrIs reports, without stopping the case, unless errors.Is(err, target).
func checkErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

func wantNoErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: got error %v, want nil", what, err)
	}
}

// ---- dispatcher ----

func enqueue(t *testing.T, b Backend, task string, opts eventlog.EnqueueOptions) {
	t.Helper()
	if err := b.Dispatcher.Enqueue(t.Context(), task, opts); err != nil {
		t.Fatalf("Enqueue(%s, %+v): got error %v, want nil", task, opts, err)
	}
}

// leaseTask takes a targeted lease on task for workerA.
func leaseTask(t *testing.T, b Backend, task string) eventlog.Lease {
	t.Helper()
	return leaseTaskAs(t, b, task, workerA)
}

func leaseTaskAs(t *testing.T, b Backend, task, worker string) eventlog.Lease {
	t.Helper()
	l, err := b.Dispatcher.Lease(t.Context(), eventlog.LeaseRequest{Worker: worker, Task: task, TTL: leaseTTL(t, b)})
	if err != nil {
		t.Fatalf("Lease(task %s): got error %v, want nil", task, err)
	}
	if l.Task != task {
		t.Fatalf("Lease(task %s): got task %s, want %s", task, l.Task, task)
	}
	return l
}

// leaseQueue takes an untargeted lease from queue.
func leaseQueue(t *testing.T, b Backend, queue string) eventlog.Lease {
	t.Helper()
	l, err := b.Dispatcher.Lease(t.Context(), eventlog.LeaseRequest{Worker: workerA, Queue: queue, TTL: leaseTTL(t, b)})
	if err != nil {
		t.Fatalf("Lease(queue %s): got error %v, want nil", queue, err)
	}
	return l
}

// leaseParked leases the next task of queue and parks it at once (suspended
// on nothing), for a case that looks at the order of a queue: a lease held
// while the rest is leased can expire on a loaded machine (the suite's
// leases last a second or two), and its task then comes back ahead of the
// queue.
func leaseParked(t *testing.T, b Backend, queue string) eventlog.Lease {
	t.Helper()
	l := leaseQueue(t, b, queue)
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended})
	return l
}

func wantNoReady(t *testing.T, b Backend, req eventlog.LeaseRequest, what string) {
	t.Helper()
	if req.Worker == "" {
		req.Worker = workerA
	}
	if req.TTL == 0 {
		req.TTL = leaseTTL(t, b)
	}
	l, err := b.Dispatcher.Lease(t.Context(), req)
	if !errors.Is(err, eventlog.ErrNoReadyTask) {
		t.Fatalf("%s: Lease(%+v): got (task %q, error %v), want %v", what, req, l.Task, err, eventlog.ErrNoReadyTask)
	}
}

// enqueueLease enqueues task on the default queue and leases it (targeted).
func enqueueLease(t *testing.T, b Backend, task string) eventlog.Lease {
	t.Helper()
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	return leaseTask(t, b, task)
}

// newLeased creates a task, enqueues and leases it.
func newLeased(t *testing.T, b Backend) (string, eventlog.Lease) {
	t.Helper()
	task := newTask(t, b)
	return task, enqueueLease(t, b, task)
}

func inspect(t *testing.T, b Backend, task string) eventlog.DispatchState {
	t.Helper()
	st, err := b.Dispatcher.Inspect(t.Context(), task)
	if err != nil {
		t.Fatalf("Inspect(%s): got error %v, want nil", task, err)
	}
	return st
}

func wantStatus(t *testing.T, b Backend, task string, want eventlog.DispatchStatus, what string) eventlog.DispatchState {
	t.Helper()
	st := inspect(t, b, task)
	if st.Status != want {
		t.Fatalf("%s: Inspect(%s).Status: got %s (reason %q), want %s", what, task, st.Status, st.Reason, want)
	}
	return st
}

// statusIs is a condition for eventually.
func statusIs(t *testing.T, b Backend, task string, want eventlog.DispatchStatus) func() error {
	return func() error {
		st, err := b.Dispatcher.Inspect(t.Context(), task)
		if err != nil {
			return err
		}
		if st.Status != want {
			return fmt.Errorf("task %s is %s (reason %q), want %s", task, st.Status, st.Reason, want)
		}
		return nil
	}
}

func valid(t *testing.T, b Backend, l eventlog.Lease) bool {
	t.Helper()
	ok, err := b.Dispatcher.Valid(t.Context(), l)
	if err != nil {
		t.Fatalf("Valid(lease %s of %s): got error %v, want nil", l.ID, l.Task, err)
	}
	return ok
}

func wantValid(t *testing.T, b Backend, l eventlog.Lease, want bool, what string) {
	t.Helper()
	if got := valid(t, b, l); got != want {
		t.Fatalf("%s: Valid(lease gen %d of %s): got %v, want %v", what, l.Generation, l.Task, got, want)
	}
}

func release(t *testing.T, b Backend, l eventlog.Lease, rel eventlog.Release) {
	t.Helper()
	if err := b.Dispatcher.Release(t.Context(), l, rel); err != nil {
		t.Fatalf("Release(lease gen %d of %s, %s): got error %v, want nil", l.Generation, l.Task, rel.Next, err)
	}
}

// suspendOn releases l suspended on cond.
func suspendOn(t *testing.T, b Backend, l eventlog.Lease, cond noeta.Wake) {
	t.Helper()
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting"})
}

func yield(t *testing.T, b Backend, l eventlog.Lease) {
	t.Helper()
	if err := b.Dispatcher.Yield(t.Context(), l); err != nil {
		t.Fatalf("Yield(lease gen %d of %s): got error %v, want nil", l.Generation, l.Task, err)
	}
}

func wake(t *testing.T, b Backend, task string, ev noeta.Wake, wantMatched bool) {
	t.Helper()
	matched, err := b.Dispatcher.Wake(t.Context(), task, ev)
	if err != nil {
		t.Fatalf("Wake(%s, %s): got error %v, want nil", task, wakeString(&ev), err)
	}
	if matched != wantMatched {
		t.Fatalf("Wake(%s, %s): got matched %v, want %v", task, wakeString(&ev), matched, wantMatched)
	}
}

// eventCond is a fresh external_event condition. The generic wake cases
// (matching, buffering, consuming) use it: a human_response is never
// buffered, and its own cases say so.
func eventCond() noeta.Wake { return noeta.ExternalWake("ev-" + noeta.NewID()) }

// occurred is an external_event matching cond, with text in its data to
// tell it apart.
func occurred(cond noeta.Wake, text string) noeta.Wake {
	ev := cond.Clone()
	data, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	ev.Data = data
	return ev
}

// humanCond is a fresh human_response condition (an approval handle).
func humanCond() noeta.Wake { return noeta.HumanResponseWake("approval-" + noeta.NewID()) }

// answer is a human_response event matching cond: decision by approver.
func answer(cond noeta.Wake, decision, approver string) noeta.Wake {
	ev := cond.Clone()
	ev.Decision, ev.Approver, ev.Text = decision, approver, decision+" by "+approver
	return ev
}

func wakeString(w *noeta.Wake) string {
	if w == nil {
		return "<nil>"
	}
	b, err := noeta.Canonical(*w)
	if err != nil {
		return fmt.Sprintf("%+v", *w)
	}
	return string(b)
}

// wakeIs reports whether got is want. A human answer's ReceivedAt is the
// receiving dispatcher's to stamp (testAnswerReceivedAtStamped checks it),
// so a want without one matches got whatever its stamp.
func wakeIs(got *noeta.Wake, want noeta.Wake) bool {
	if got == nil {
		return false
	}
	g := *got
	if want.ReceivedAt.IsZero() {
		g.ReceivedAt = time.Time{}
	}
	return g.Equal(want)
}

func wantWake(t *testing.T, what string, got *noeta.Wake, want noeta.Wake) {
	t.Helper()
	if !wakeIs(got, want) {
		t.Fatalf("%s: got wake %s, want %s", what, wakeString(got), wakeString(&want))
	}
}

func wantNoWake(t *testing.T, what string, got *noeta.Wake) {
	t.Helper()
	if got != nil {
		t.Fatalf("%s: got wake %s, want none", what, wakeString(got))
	}
}

// leasedWithWake builds a task that is leased with a matched wake: created,
// leased, suspended on a human_response, woken, leased again. The returned
// lease carries ev.
func leasedWithWake(t *testing.T, b Backend, opts eventlog.EnqueueOptions) (string, eventlog.Lease, noeta.Wake) {
	t.Helper()
	task := newTask(t, b)
	enqueue(t, b, task, opts)
	l := leaseTask(t, b, task)
	cond := eventCond()
	suspendOn(t, b, l, cond)
	ev := occurred(cond, "yes")
	wake(t, b, task, ev, true)
	l = leaseTask(t, b, task)
	wantWake(t, "lease after the wake", l.Wake, ev)
	return task, l, ev
}

// uniqueQueue is a queue no other case uses, so untargeted leases only see
// this case's tasks even on a shared server.
func uniqueQueue() string { return "q-" + noeta.NewID() }

// fakeLease is a lease the dispatcher never granted.
func fakeLease(task string) eventlog.Lease {
	return eventlog.Lease{ID: noeta.NewID(), Task: task, Generation: 99, Worker: "impostor", Expires: time.Now().Add(time.Hour)}
}

// ---- concurrency ----

// within runs f on a goroutine and fails the case if it does not return in
// time (a deadlock); it returns f's error.
func within(t *testing.T, b Backend, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(waitLimit(b)):
		t.Fatalf("%s: did not return within %v (deadlock?)", what, waitLimit(b))
		return nil
	}
}

// cancelledCtx is a context that is already cancelled.
func cancelledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func containsString(list []string, s string) bool { return slices.Contains(list, s) }
