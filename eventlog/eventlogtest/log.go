package eventlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

var logCases = []suiteCase{
	// genesis and Create
	{"GenesisStamped", testGenesisStamped},
	{"CreateTwice", testCreateTwice},
	{"CreateRace", testCreateRace},
	{"CreateWrongType", testCreateWrongType},
	{"CreateBadTaskID", testCreateBadTaskID},
	{"CreateBadActor", testCreateBadActor},
	{"CreateBadOrigin", testCreateBadOrigin},
	{"CreateNonObjectPayload", testCreateNonObjectPayload},
	// Read
	{"ReadUnknown", testReadUnknown},
	{"ReadAfterSeq", testReadAfterSeq},
	{"EmitReturnsStored", testEmitReturnsStored},
	{"PayloadStoredCanonical", testPayloadStoredCanonical},
	{"RecordsAreImmutable", testRecordsAreImmutable},
	// leases and the fence
	{"FirstEmitWritesLeaseGranted", testFirstEmitWritesLeaseGranted},
	{"LeaseGrantedJoinsTheTree", testLeaseGrantedJoinsTheTree},
	{"SecondEmitNoLeaseGranted", testSecondEmitNoLeaseGranted},
	{"LeaseGenStamped", testLeaseGenStamped},
	{"NewLeaseNewLeaseGranted", testNewLeaseNewLeaseGranted},
	{"EmitUnknownTask", testEmitUnknownTask},
	{"EmitZeroLease", testEmitZeroLease},
	{"EmitEndedLease", testEmitEndedLease},
	{"EmitExpiredLease", testEmitExpiredLease},
	{"EmitLeaseOfOtherTask", testEmitLeaseOfOtherTask},
	{"EmitInvalidArgumentFirst", testEmitInvalidArgumentFirst},
	{"Takeover", testTakeover},
	{"TakeoverConcurrent", testTakeoverConcurrent},
	// ExpectLastSeq
	{"ExpectLastSeq", testExpectLastSeq},
	{"ExpectLastSeqRace", testExpectLastSeqRace},
	{"ExpectLastSeqRaceFirstEmit", testExpectLastSeqRaceFirstEmit},
	{"ConcurrentEmitsDense", testConcurrentEmitsDense},
	// idempotency
	{"IdempotentRepeat", testIdempotentRepeat},
	{"IdempotentBeatsCap", testIdempotentBeatsCap},
	{"IdempotentBeatsStaleSequence", testIdempotentBeatsStaleSequence},
	{"IdempotentBeatsEndedLease", testIdempotentBeatsEndedLease},
	{"IdempotentSurvivesTakeover", testIdempotentSurvivesTakeover},
	{"IdempotentScopeLease", testIdempotentScopeLease},
	{"IdempotentScopeTask", testIdempotentScopeTask},
	{"IdempotentRace", testIdempotentRace},
	// cap and precedence
	{"CapExact", testCapExact},
	{"CapCanonicalBytes", testCapCanonicalBytes},
	{"PrecedenceCapOverStale", testPrecedenceCapOverStale},
	{"PrecedenceCapOverLease", testPrecedenceCapOverLease},
	{"PrecedenceStaleOverLease", testPrecedenceStaleOverLease},
	{"UnknownTypeRoundTrip", testUnknownTypeRoundTrip},
	// snapshots and the index
	{"LatestSnapshotNone", testLatestSnapshotNone},
	{"LatestSnapshotHighest", testLatestSnapshotHighest},
	{"TaskIndexOrder", testTaskIndexOrder},
	{"TaskIndexOnlyCreated", testTaskIndexOnlyCreated},
	// inbox
	{"InboxSystemEmit", testInboxSystemEmit},
	{"InboxRepeatKey", testInboxRepeatKey},
	{"InboxRace", testInboxRace},
	{"InboxRequiresActorOrigin", testInboxRequiresActorOrigin},
	{"InboxBadKey", testInboxBadKey},
	{"InboxUnknownTask", testInboxUnknownTask},
	{"InboxCap", testInboxCap},
	{"InboxOrder", testInboxOrder},
	// cancellation and Close
	{"CancelledReader", testCancelledReader},
	{"CancelledWriter", testCancelledWriter},
	{"CancelledTaskIndex", testCancelledTaskIndex},
	{"ClosedReader", testClosedReader},
	{"ClosedWriter", testClosedWriter},
	{"ClosedTaskIndex", testClosedTaskIndex},
	{"CloseIdempotent", testCloseIdempotent},
}

// ---- genesis and Create ----

func testGenesisStamped(t *testing.T, b Backend) {
	ctx := t.Context()
	task := noeta.NewTaskID()
	in := genesisEnv(t, task)
	in.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in.CausationID = "req-1"
	before := time.Now()
	got, err := b.Log.Create(ctx, in)
	wantNoErr(t, "Create", err)
	after := time.Now()

	if got.Seq != 1 {
		t.Errorf("Seq: got %d, want 1", got.Seq)
	}
	if !isULID(got.ID) {
		t.Errorf("ID: got %q, want a ULID", got.ID)
	}
	if got.Task != task {
		t.Errorf("Task: got %q, want %q", got.Task, task)
	}
	if got.Type != noeta.TypeTaskCreated {
		t.Errorf("Type: got %q, want %q", got.Type, noeta.TypeTaskCreated)
	}
	if got.Time.IsZero() {
		t.Errorf("Time: got zero, want the append time")
	} else if b.Advance == nil && (got.Time.Before(before.Add(-time.Minute)) || got.Time.After(after.Add(time.Minute))) {
		t.Errorf("Time: got %v, want about %v", got.Time, after)
	}
	if got.Actor != suiteActor || got.Origin != eventlog.OriginEngine {
		t.Errorf("Actor, Origin: got %q, %q, want %q, %q", got.Actor, got.Origin, suiteActor, eventlog.OriginEngine)
	}
	if got.CorrelationID != task {
		t.Errorf("CorrelationID: got %q, want the task id %q", got.CorrelationID, task)
	}
	if got.TraceParent != in.TraceParent || got.CausationID != in.CausationID {
		t.Errorf("TraceParent, CausationID: got %q, %q, want %q, %q", got.TraceParent, got.CausationID, in.TraceParent, in.CausationID)
	}
	if got.LeaseGen != 0 || got.Key != "" {
		t.Errorf("LeaseGen, Key: got %d, %q, want 0, \"\"", got.LeaseGen, got.Key)
	}
	if !bytes.Equal(got.Payload, in.Payload) {
		t.Errorf("Payload: got %s, want %s", got.Payload, in.Payload)
	}
	envs := wantLogLen(t, b, task, 1, "after Create")
	wantSameEnvelope(t, "Read after Create", envs[0], got)

	// A correlation id given by the caller is kept.
	child := noeta.NewTaskID()
	in = genesisEnv(t, child)
	in.CorrelationID = task
	got, err = b.Log.Create(ctx, in)
	wantNoErr(t, "Create with CorrelationID", err)
	if got.CorrelationID != task {
		t.Errorf("CorrelationID given: got %q, want %q", got.CorrelationID, task)
	}
	if got.ID == envs[0].ID {
		t.Errorf("two records share the ID %s", got.ID)
	}
}

func testCreateTwice(t *testing.T, b Backend) {
	first := createTask(t, b)
	again := genesisEnv(t, first.Task)
	again.Payload = json.RawMessage(`{"agent":"other","goal":"other","root_task_id":"` + first.Task + `","subtask_depth":0,"task_id":"` + first.Task + `"}`)
	_, err := b.Log.Create(t.Context(), again)
	wantErrIs(t, "second Create", err, eventlog.ErrTaskExists)
	envs := wantLogLen(t, b, first.Task, 1, "after the second Create")
	wantSameEnvelope(t, "genesis after the second Create", envs[0], first)
}

func testCreateRace(t *testing.T, b Backend) {
	const n = 16
	task := noeta.NewTaskID()
	env := genesisEnv(t, task)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = b.Log.Create(t.Context(), env) })
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, eventlog.ErrTaskExists):
			t.Errorf("Create #%d: got error %v, want nil or %v", i, err, eventlog.ErrTaskExists)
		}
	}
	if ok != 1 {
		t.Errorf("concurrent Creates that succeeded: got %d, want 1", ok)
	}
	wantLogLen(t, b, task, 1, "after concurrent Creates")
}

// wantCreateInvalid checks that Create(env) is ErrInvalidArgument and created
// nothing.
func wantCreateInvalid(t *testing.T, b Backend, what string, env eventlog.Envelope) {
	t.Helper()
	_, err := b.Log.Create(t.Context(), env)
	checkErrIs(t, "Create with "+what, err, eventlog.ErrInvalidArgument)
	if noeta.ValidateTaskID(env.Task) == nil {
		if _, err := b.Log.Read(t.Context(), env.Task, 0); !errors.Is(err, eventlog.ErrNotFound) {
			t.Errorf("Read after the refused Create with %s: got error %v, want %v", what, err, eventlog.ErrNotFound)
		}
	}
}

func testCreateWrongType(t *testing.T, b Backend) {
	task := noeta.NewTaskID()
	wantCreateInvalid(t, b, "type TurnStarted", turnEnv(t, task, 1))
	wantCreateInvalid(t, b, "type FutureThing", rawEnv(task, "FutureThing", `{"task_id":"`+task+`"}`))
	env := genesisEnv(t, task)
	env.Type = ""
	wantCreateInvalid(t, b, "an empty type", env)
}

func testCreateBadTaskID(t *testing.T, b Backend) {
	for _, id := range []string{"", "a.b", "a b", "a*", "a>", "ünï", strings.Repeat("x", noeta.MaxTaskIDLen+1)} {
		env := genesisEnv(t, id)
		env.Task = id
		wantCreateInvalid(t, b, fmt.Sprintf("task id %q", id), env)
	}
}

func testCreateBadActor(t *testing.T, b Backend) {
	env := genesisEnv(t, noeta.NewTaskID())
	env.Actor = ""
	wantCreateInvalid(t, b, "an empty actor", env)
	env = genesisEnv(t, noeta.NewTaskID())
	env.Actor = strings.Repeat("a", eventlog.MaxActorLen+1)
	wantCreateInvalid(t, b, "an actor over MaxActorLen", env)
}

func testCreateBadOrigin(t *testing.T, b Backend) {
	for _, o := range []eventlog.Origin{"", "robot", "Engine"} {
		env := genesisEnv(t, noeta.NewTaskID())
		env.Origin = o
		wantCreateInvalid(t, b, fmt.Sprintf("origin %q", o), env)
	}
}

func testCreateNonObjectPayload(t *testing.T, b Backend) {
	for _, p := range []string{"", `[1,2]`, `"goal"`, `1`, `null`, `true`, `{`, `{"a":1}{"b":2}`, `{"a":1,"a":2}`} {
		env := genesisEnv(t, noeta.NewTaskID())
		env.Payload = json.RawMessage(p)
		wantCreateInvalid(t, b, fmt.Sprintf("payload %q", p), env)
	}
}

// ---- Read ----

func testReadUnknown(t *testing.T, b Backend) {
	ctx := t.Context()
	unknown := noeta.NewTaskID()
	envs, err := b.Log.Read(ctx, unknown, 0)
	checkErrIs(t, "Read of an unknown task", err, eventlog.ErrNotFound)
	if len(envs) != 0 {
		t.Errorf("Read of an unknown task: got %d records, want 0", len(envs))
	}
	_, err = b.Log.LatestSnapshot(ctx, unknown)
	checkErrIs(t, "LatestSnapshot of an unknown task", err, eventlog.ErrNotFound)
	_, err = b.Log.Inbox(ctx, unknown)
	checkErrIs(t, "Inbox of an unknown task", err, eventlog.ErrNotFound)
	_, err = b.Log.Read(ctx, unknown, 0)
	checkErrIs(t, "second Read of an unknown task", err, eventlog.ErrNotFound)
}

func testReadAfterSeq(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	for i := 1; i <= 4; i++ {
		emitTurn(t, b, l, i)
	}
	all := wantLogLen(t, b, task, 6, "after 4 emits")
	for _, tc := range []struct {
		after uint64
		want  []uint64
	}{
		{0, []uint64{1, 2, 3, 4, 5, 6}},
		{1, []uint64{2, 3, 4, 5, 6}},
		{2, []uint64{3, 4, 5, 6}},
		{5, []uint64{6}},
		{6, nil},
		{100, nil},
	} {
		envs, err := b.Log.Read(ctx, task, tc.after)
		if err != nil {
			t.Errorf("Read(afterSeq %d): got error %v, want nil", tc.after, err)
			continue
		}
		var got []uint64
		for _, e := range envs {
			got = append(got, e.Seq)
			if d := diffEnvelope(e, all[e.Seq-1]); d != "" {
				t.Errorf("Read(afterSeq %d) seq %d: %s", tc.after, e.Seq, d)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Read(afterSeq %d): got seqs %v, want %v", tc.after, got, tc.want)
		}
	}
}

func testEmitReturnsStored(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	in := turnEnv(t, task, 7)
	in.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	in.CausationID = "cause-1"
	in.Origin = eventlog.OriginLLM
	in.Actor = "llm-1"
	got := mustEmit(t, b, l, in)
	envs := wantLogLen(t, b, task, 3, "after one emit")
	wantSameEnvelope(t, "Read vs the envelope Emit returned", envs[2], got)
	if !isULID(got.ID) {
		t.Errorf("ID: got %q, want a ULID", got.ID)
	}
	if got.Time.IsZero() {
		t.Errorf("Time: got zero, want the append time")
	}
	if got.Task != task || got.Type != noeta.TypeTurnStarted || got.Origin != eventlog.OriginLLM || got.Actor != "llm-1" {
		t.Errorf("Task, Type, Origin, Actor: got %q, %q, %q, %q, want %q, %q, %q, %q", got.Task, got.Type, got.Origin, got.Actor, task, noeta.TypeTurnStarted, eventlog.OriginLLM, "llm-1")
	}
	if got.TraceParent != in.TraceParent || got.CausationID != in.CausationID || got.CorrelationID != task {
		t.Errorf("TraceParent, CausationID, CorrelationID: got %q, %q, %q, want %q, %q, %q", got.TraceParent, got.CausationID, got.CorrelationID, in.TraceParent, in.CausationID, task)
	}
	if got.Key != "" {
		t.Errorf("Key of a log record: got %q, want \"\"", got.Key)
	}
	seen := map[string]bool{}
	for _, e := range envs {
		if seen[e.ID] {
			t.Errorf("ID %s appears twice in the log", e.ID)
		}
		seen[e.ID] = true
		if e.Time.IsZero() {
			t.Errorf("seq %d: Time is zero", e.Seq)
		}
	}
	for i := 1; i < len(envs); i++ {
		if envs[i].Time.Before(envs[i-1].Time) {
			t.Errorf("seq %d: Time %v is before the Time %v of seq %d", envs[i].Seq, envs[i].Time, envs[i-1].Time, envs[i-1].Seq)
		}
	}
}

func testPayloadStoredCanonical(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	got := mustEmit(t, b, l, rawEnv(task, rawType, `{"b":1, "a":2}`))
	if want := `{"a":2,"b":1}`; string(got.Payload) != want {
		t.Errorf("Emit payload: got %s, want %s", got.Payload, want)
	}
	in := "{ \"b\" : [1, 2.50, 1e2],\n \"a\" : {\"d\":1,\"c\":\"h\u00e9llo <&>\"} }"
	want, err := noeta.CanonicalizeJSON([]byte(in))
	wantNoErr(t, "CanonicalizeJSON", err)
	got2 := mustEmit(t, b, l, rawEnv(task, rawType, in))
	if !bytes.Equal(got2.Payload, want) {
		t.Errorf("Emit payload: got %s, want %s", got2.Payload, want)
	}
	envs := wantLogLen(t, b, task, 4, "after two emits")
	if string(envs[2].Payload) != `{"a":2,"b":1}` || !bytes.Equal(envs[3].Payload, want) {
		t.Errorf("Read payloads: got %s and %s, want %s and %s", envs[2].Payload, envs[3].Payload, `{"a":2,"b":1}`, want)
	}

	// Create stores its payload canonical too.
	child := noeta.NewTaskID()
	genesis := rawEnv(child, noeta.TypeTaskCreated, `{ "task_id" : "`+child+`", "root_task_id":"`+child+`", "goal":"g", "agent":"a", "subtask_depth":0 }`)
	created, err := b.Log.Create(t.Context(), genesis)
	wantNoErr(t, "Create with a non-canonical payload", err)
	wantCanon, _ := noeta.CanonicalizeJSON(genesis.Payload)
	if !bytes.Equal(created.Payload, wantCanon) {
		t.Errorf("Create payload: got %s, want %s", created.Payload, wantCanon)
	}
}

func testRecordsAreImmutable(t *testing.T, b Backend) {
	const want = `{"v":"original"}`
	task, l := newLeased(t, b)
	in := rawEnv(task, rawType, want)
	returned := mustEmit(t, b, l, in)
	copy(in.Payload, `{"v":"CLOBBER1"}`) // the caller reuses its buffer
	if got := readAll(t, b, task)[2].Payload; string(got) != want {
		t.Errorf("stored payload after the caller reused the buffer it passed to Emit: got %s, want %s", got, want)
	}
	copy(returned.Payload, `{"v":"CLOBBER2"}`) // the caller scribbles on what Emit returned
	if got := readAll(t, b, task)[2].Payload; string(got) != want {
		t.Errorf("stored payload after the caller changed the envelope Emit returned: got %s, want %s", got, want)
	}
	copy(readAll(t, b, task)[2].Payload, `{"v":"CLOBBER3"}`) // a reader scribbles on what it got
	if got := readAll(t, b, task)[2].Payload; string(got) != want {
		t.Errorf("stored payload after a reader changed what Read returned: got %s, want %s", got, want)
	}

	inbox := rawEnv(task, rawType, want)
	if _, err := b.Log.SystemEmit(t.Context(), task, "k", inbox); err != nil {
		t.Fatalf("SystemEmit: got error %v, want nil", err)
	}
	copy(inbox.Payload, `{"v":"CLOBBER4"}`)
	copy(readInbox(t, b, task)[0].Payload, `{"v":"CLOBBER5"}`)
	if got := readInbox(t, b, task)[0].Payload; string(got) != want {
		t.Errorf("stored inbox payload after callers changed their copies: got %s, want %s", got, want)
	}
}

// ---- leases and the fence ----

func testFirstEmitWritesLeaseGranted(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	got := emitTurn(t, b, l, 1)
	if got.Seq != 3 {
		t.Errorf("first emit under a lease: got seq %d, want 3 (LeaseGranted is 2)", got.Seq)
	}
	envs := wantLogLen(t, b, task, 3, "after the first emit")
	if envs[1].Type != noeta.TypeLeaseGranted {
		t.Fatalf("seq 2: got type %s, want %s", envs[1].Type, noeta.TypeLeaseGranted)
	}
	lg := decodeLeaseGranted(t, envs[1])
	if lg.LeaseID != l.ID || lg.Generation != l.Generation || lg.Worker != l.Worker {
		t.Errorf("LeaseGranted: got %+v, want {LeaseID:%s Generation:%d Worker:%s}", lg, l.ID, l.Generation, l.Worker)
	}
	if envs[1].LeaseGen != l.Generation {
		t.Errorf("LeaseGranted LeaseGen: got %d, want %d", envs[1].LeaseGen, l.Generation)
	}
	if !isULID(envs[1].ID) || envs[1].ID == got.ID || envs[1].Time.IsZero() || envs[1].Task != task {
		t.Errorf("LeaseGranted stamps: got ID %q Task %q Time %v, want a fresh ULID, %s and a time", envs[1].ID, envs[1].Task, envs[1].Time, task)
	}
	if err := envs[1].Origin.Validate(); err != nil || envs[1].Actor == "" {
		t.Errorf("LeaseGranted Origin, Actor: got %q, %q, want a valid origin and an actor", envs[1].Origin, envs[1].Actor)
	}
	if envs[2].Type != noeta.TypeTurnStarted {
		t.Errorf("seq 3: got type %s, want %s", envs[2].Type, noeta.TypeTurnStarted)
	}
}

// testLeaseGrantedJoinsTheTree: the LeaseGranted an Emit writes carries the
// correlation id of the record it precedes, so a consumer following a task
// tree by correlation id sees a child's fence records too.
func testLeaseGrantedJoinsTheTree(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	env := turnEnv(t, task, 1)
	env.CorrelationID = "ROOT-" + task
	mustEmit(t, b, l, env)
	envs := wantLogLen(t, b, task, 3, "after the first emit")
	if envs[1].CorrelationID != env.CorrelationID || envs[2].CorrelationID != env.CorrelationID {
		t.Errorf("correlation ids: LeaseGranted %q, the record %q; want both %q", envs[1].CorrelationID, envs[2].CorrelationID, env.CorrelationID)
	}
}

func testSecondEmitNoLeaseGranted(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	second := emitTurn(t, b, l, 2)
	if second.Seq != 4 {
		t.Errorf("second emit of the lease: got seq %d, want 4", second.Seq)
	}
	envs := wantLogLen(t, b, task, 4, "after two emits")
	if n := countType(envs, noeta.TypeLeaseGranted); n != 1 {
		t.Errorf("LeaseGranted records: got %d, want 1 (log %v)", n, typesOf(envs))
	}
}

func testLeaseGenStamped(t *testing.T, b Backend) {
	task, l1 := newLeased(t, b)
	emitTurn(t, b, l1, 1)
	emitTurn(t, b, l1, 2)
	yield(t, b, l1)
	l2 := leaseTask(t, b, task)
	emitTurn(t, b, l2, 3)
	envs := wantLogLen(t, b, task, 6, "after two leases")
	want := []uint64{0, l1.Generation, l1.Generation, l1.Generation, l2.Generation, l2.Generation}
	for i, e := range envs {
		if e.LeaseGen != want[i] {
			t.Errorf("seq %d (%s): got LeaseGen %d, want %d", e.Seq, e.Type, e.LeaseGen, want[i])
		}
	}
}

func testNewLeaseNewLeaseGranted(t *testing.T, b Backend) {
	task, l1 := newLeased(t, b)
	emitTurn(t, b, l1, 1)
	cond := eventCond()
	suspendOn(t, b, l1, cond)
	wake(t, b, task, occurred(cond, "go on"), true)
	l2 := leaseTask(t, b, task)
	if l2.Generation <= l1.Generation {
		t.Fatalf("generation of the next lease: got %d, want more than %d", l2.Generation, l1.Generation)
	}
	got := emitTurn(t, b, l2, 2)
	if got.Seq != 5 || got.LeaseGen != l2.Generation {
		t.Errorf("first emit of the new lease: got seq %d gen %d, want seq 5 gen %d", got.Seq, got.LeaseGen, l2.Generation)
	}
	envs := wantLogLen(t, b, task, 5, "after the second lease's first emit")
	lg := decodeLeaseGranted(t, envs[3])
	if lg.LeaseID != l2.ID || lg.Generation != l2.Generation || lg.Worker != l2.Worker {
		t.Errorf("second LeaseGranted: got %+v, want {LeaseID:%s Generation:%d Worker:%s}", lg, l2.ID, l2.Generation, l2.Worker)
	}
}

func testEmitUnknownTask(t *testing.T, b Backend) {
	unknown := noeta.NewTaskID()
	_, err := b.Log.Emit(t.Context(), fakeLease(unknown), turnEnv(t, unknown, 1), eventlog.EmitOptions{})
	checkErrIs(t, "Emit to a task never created", err, eventlog.ErrNotFound)
	_, err = b.Log.Emit(t.Context(), fakeLease(unknown), turnEnv(t, unknown, 1), eventlog.EmitOptions{ExpectLastSeq: 7, IdempotencyKey: "k"})
	checkErrIs(t, "Emit to a task never created, with options", err, eventlog.ErrNotFound)
	_, err = b.Log.Read(t.Context(), unknown, 0)
	checkErrIs(t, "Read after the refused Emit", err, eventlog.ErrNotFound)
}

func testEmitZeroLease(t *testing.T, b Backend) {
	ctx := t.Context()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	_, err := b.Log.Emit(ctx, eventlog.Lease{}, turnEnv(t, task, 1), eventlog.EmitOptions{})
	checkErrIs(t, "Emit with the zero Lease", err, eventlog.ErrInvalidLease)
	_, err = b.Log.Emit(ctx, eventlog.Lease{Task: task}, turnEnv(t, task, 1), eventlog.EmitOptions{})
	checkErrIs(t, "Emit with a Lease of no id", err, eventlog.ErrInvalidLease)
	_, err = b.Log.Emit(ctx, fakeLease(task), turnEnv(t, task, 1), eventlog.EmitOptions{})
	checkErrIs(t, "Emit with a lease never granted", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task, 1, "after the refused emits")
}

func testEmitEndedLease(t *testing.T, b Backend) {
	ends := []struct {
		name string
		end  func(l eventlog.Lease) error
	}{
		{"released suspended", func(l eventlog.Lease) error {
			c := eventCond()
			return b.Dispatcher.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &c})
		}},
		{"released terminal", func(l eventlog.Lease) error {
			return b.Dispatcher.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "done"})
		}},
		{"yielded", func(l eventlog.Lease) error { return b.Dispatcher.Yield(t.Context(), l) }},
		{"failed", func(l eventlog.Lease) error {
			return b.Dispatcher.Fail(t.Context(), l, eventlog.Failure{Retryable: false, Reason: "boom"})
		}},
	}
	for _, e := range ends {
		task, l := newLeased(t, b)
		emitTurn(t, b, l, 1)
		wantNoErr(t, e.name, e.end(l))
		_, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 2), eventlog.EmitOptions{})
		checkErrIs(t, "Emit under a lease "+e.name, err, eventlog.ErrInvalidLease)
		wantLogLen(t, b, task, 3, "after the refused emit under a lease "+e.name)

		// A lease that ended before its first emit writes no LeaseGranted.
		task2, l2 := newLeased(t, b)
		wantNoErr(t, e.name, e.end(l2))
		_, err = b.Log.Emit(t.Context(), l2, turnEnv(t, task2, 1), eventlog.EmitOptions{})
		checkErrIs(t, "first Emit under a lease "+e.name, err, eventlog.ErrInvalidLease)
		wantLogLen(t, b, task2, 1, "after the refused first emit under a lease "+e.name)
	}
}

func testEmitExpiredLease(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	task2, l2 := newLeased(t, b)
	expire(t, b, l)
	expire(t, b, l2)
	_, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 2), eventlog.EmitOptions{})
	checkErrIs(t, "Emit under an expired lease", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task, 3, "after the refused emit")
	_, err = b.Log.Emit(t.Context(), l2, turnEnv(t, task2, 1), eventlog.EmitOptions{})
	checkErrIs(t, "first Emit under an expired lease", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task2, 1, "after the refused first emit (no LeaseGranted)")
}

func testEmitLeaseOfOtherTask(t *testing.T, b Backend) {
	a, la := newLeased(t, b)
	other := newTask(t, b)
	_, err := b.Log.Emit(t.Context(), la, turnEnv(t, other, 1), eventlog.EmitOptions{})
	if err == nil {
		t.Errorf("Emit of a record for task B under the lease of task A: got nil error, want an error")
	}
	wantLogLen(t, b, a, 1, "task A after the refused emit")
	wantLogLen(t, b, other, 1, "task B after the refused emit")
}

func testEmitInvalidArgumentFirst(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	bad := map[string]func(e *eventlog.Envelope){
		"an empty actor":     func(e *eventlog.Envelope) { e.Actor = "" },
		"an empty origin":    func(e *eventlog.Envelope) { e.Origin = "" },
		"origin robot":       func(e *eventlog.Envelope) { e.Origin = "robot" },
		"an empty type":      func(e *eventlog.Envelope) { e.Type = "" },
		"type a.b":           func(e *eventlog.Envelope) { e.Type = "a.b" },
		"an array payload":   func(e *eventlog.Envelope) { e.Payload = json.RawMessage(`[1]`) },
		"an invalid payload": func(e *eventlog.Envelope) { e.Payload = json.RawMessage(`{"turn":`) },
		"an empty payload":   func(e *eventlog.Envelope) { e.Payload = nil },
		"a duplicate key":    func(e *eventlog.Envelope) { e.Payload = json.RawMessage(`{"turn":1,"turn":2}`) },
		"an oversized bad type": func(e *eventlog.Envelope) {
			e.Type = "a.b"
			e.Payload = json.RawMessage(sizedPayload(noeta.PayloadMaxBytes + 1))
		},
	}
	for what, mutate := range bad {
		env := turnEnv(t, task, 1)
		mutate(&env)
		_, err := b.Log.Emit(ctx, l, env, eventlog.EmitOptions{})
		checkErrIs(t, "Emit with "+what, err, eventlog.ErrInvalidArgument)
		_, err = b.Log.Emit(ctx, l, env, eventlog.EmitOptions{ExpectLastSeq: 99})
		checkErrIs(t, "Emit with "+what+" and a stale ExpectLastSeq", err, eventlog.ErrInvalidArgument)
	}
	wantLogLen(t, b, task, 1, "after the refused emits (no LeaseGranted)")

	// Malformed input is reported before the lease.
	yield(t, b, l)
	env := turnEnv(t, task, 1)
	env.Origin = "robot"
	_, err := b.Log.Emit(ctx, l, env, eventlog.EmitOptions{})
	checkErrIs(t, "Emit with a bad origin under an ended lease", err, eventlog.ErrInvalidArgument)
}

func testTakeover(t *testing.T, b Backend) {
	ctx := t.Context()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	la := leaseTaskAs(t, b, task, workerA)
	emitTurn(t, b, la, 1)
	expire(t, b, la)
	if _, err := b.Dispatcher.RequeueStale(ctx); err != nil {
		t.Fatalf("RequeueStale: got error %v, want nil", err)
	}
	lb := leaseTaskAs(t, b, task, workerB)
	if lb.Generation <= la.Generation {
		t.Fatalf("generation of B: got %d, want more than A's %d", lb.Generation, la.Generation)
	}
	emitTurn(t, b, lb, 2)
	before := wantLogLen(t, b, task, 5, "after B's first emit")

	_, err := b.Log.Emit(ctx, la, turnEnv(t, task, 3), eventlog.EmitOptions{})
	checkErrIs(t, "A's emit after the takeover", err, eventlog.ErrInvalidLease)
	_, err = b.Log.Emit(ctx, la, turnEnv(t, task, 3), eventlog.EmitOptions{ExpectLastSeq: 5})
	checkErrIs(t, "A's emit after the takeover, with the right ExpectLastSeq", err, eventlog.ErrInvalidLease)
	_, err = b.Dispatcher.Heartbeat(ctx, la)
	checkErrIs(t, "A's heartbeat after the takeover", err, eventlog.ErrInvalidLease)
	err = b.Dispatcher.Release(ctx, la, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "zombie"})
	checkErrIs(t, "A's release after the takeover", err, eventlog.ErrInvalidLease)
	wantValid(t, b, lb, true, "B after A's attempts")

	after := emitTurn(t, b, lb, 4)
	if after.Seq != 6 {
		t.Errorf("B's next emit: got seq %d, want 6", after.Seq)
	}
	envs := wantLogLen(t, b, task, 6, "after the takeover")
	for i, e := range before {
		wantSameEnvelope(t, fmt.Sprintf("seq %d", i+1), envs[i], e)
	}
	for _, e := range envs[3:] {
		if e.LeaseGen != lb.Generation {
			t.Errorf("seq %d (%s) after B's LeaseGranted: got LeaseGen %d, want %d", e.Seq, e.Type, e.LeaseGen, lb.Generation)
		}
	}
}

func testTakeoverConcurrent(t *testing.T, b Backend) {
	rounds := 50
	if b.Advance == nil {
		rounds = 4
	}
	violations := 0
	aWrites, aRefused := 0, 0
	for round := range rounds {
		v, w, r := takeoverRound(t, b, round)
		violations += v
		aWrites += w
		aRefused += r
	}
	t.Logf("concurrent takeover: %d rounds, %d records of A landed before the fence, %d refused after, %d violations", rounds, aWrites, aRefused, violations)
	if violations > 0 {
		t.Errorf("concurrent takeover: got %d violations of the fence over %d rounds, want 0", violations, rounds)
	}
}

// takeoverRound runs one race: A emits in a loop while its lease expires and B
// takes the task over. It returns the violations it saw, A's records that
// landed and A's refused attempts.
func takeoverRound(t *testing.T, b Backend, round int) (violations, aWrites, aRefused int) {
	t.Helper()
	ctx := t.Context()
	task := newTask(t, b)
	enqueue(t, b, task, eventlog.EnqueueOptions{})
	la := leaseTaskAs(t, b, task, workerA)

	type result struct {
		landed []eventlog.Envelope
		errs   []error
	}
	stop := make(chan struct{})
	stopA := sync.OnceFunc(func() { close(stop) })
	defer stopA()
	pace := time.Duration(0)
	if b.Advance == nil {
		pace = 5 * time.Millisecond // a wall-clock round lasts a TTL; keep A's log modest
	}
	first := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: i})
			if err != nil {
				r.errs = append(r.errs, err)
				return
			}
			got, err := b.Log.Emit(ctx, la, env, eventlog.EmitOptions{})
			if err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.landed = append(r.landed, got)
			}
			if len(r.landed) == 1 && err == nil {
				close(first)
			}
			if len(r.errs) > 10000 || len(r.landed) > 10000 {
				return
			}
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	select {
	case <-first:
	case r := <-done:
		t.Fatalf("round %d: A never emitted: %v", round, r.errs)
	case <-time.After(waitLimit(b)):
		t.Fatalf("round %d: A's first emit did not land within %v", round, waitLimit(b))
	}

	expire(t, b, la)
	lb := leaseTaskAs(t, b, task, workerB)
	bEnv := emitTurn(t, b, lb, 1_000_000)
	stopA()
	r := <-done

	envs := readAll(t, b, task)
	if err := checkDense(envs); err != nil {
		t.Logf("round %d: %v", round, err)
		violations++
	}
	fence := uint64(0)
	for _, e := range envs {
		if e.Type == noeta.TypeLeaseGranted && e.LeaseGen == lb.Generation {
			fence = e.Seq
		}
	}
	if fence == 0 || fence >= bEnv.Seq {
		t.Logf("round %d: B's LeaseGranted at seq %d, B's record at %d", round, fence, bEnv.Seq)
		violations++
	}
	var prev uint64
	for _, e := range envs {
		if e.LeaseGen < prev {
			t.Logf("round %d: seq %d has LeaseGen %d after LeaseGen %d", round, e.Seq, e.LeaseGen, prev)
			violations++
		}
		prev = e.LeaseGen
		if fence != 0 && e.Seq > fence && e.LeaseGen != lb.Generation {
			t.Logf("round %d: seq %d (%s) of generation %d landed after B's LeaseGranted (generation %d) at seq %d", round, e.Seq, e.Type, e.LeaseGen, lb.Generation, fence)
			violations++
		}
	}
	for _, e := range r.landed {
		if fence != 0 && e.Seq >= fence {
			t.Logf("round %d: A's emit returned seq %d at or after B's LeaseGranted at %d", round, e.Seq, fence)
			violations++
		}
	}
	for _, err := range r.errs {
		if !errors.Is(err, eventlog.ErrInvalidLease) {
			t.Logf("round %d: A's emit: got error %v, want %v", round, err, eventlog.ErrInvalidLease)
			violations++
		}
	}
	if n := countType(envs, noeta.TypeLeaseGranted); n != 2 {
		t.Logf("round %d: %d LeaseGranted records, want 2 (log %v)", round, n, typesOf(envs))
		violations++
	}
	return violations, len(r.landed), len(r.errs)
}

// ---- ExpectLastSeq ----

func testExpectLastSeq(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	for _, e := range []uint64{2, 3, 100} {
		_, err := b.Log.Emit(ctx, l, turnEnv(t, task, 1), eventlog.EmitOptions{ExpectLastSeq: e})
		checkErrIs(t, fmt.Sprintf("first Emit with ExpectLastSeq %d (last is 1)", e), err, eventlog.ErrStaleSequence)
	}
	wantLogLen(t, b, task, 1, "after stale first emits (no LeaseGranted)")

	got := mustEmitOpts(t, b, l, turnEnv(t, task, 1), eventlog.EmitOptions{ExpectLastSeq: 1})
	if got.Seq != 3 {
		t.Errorf("first Emit with ExpectLastSeq 1: got seq %d, want 3 (LeaseGranted at 2)", got.Seq)
	}
	for _, e := range []uint64{1, 2, 4, 100} {
		_, err := b.Log.Emit(ctx, l, turnEnv(t, task, 2), eventlog.EmitOptions{ExpectLastSeq: e})
		checkErrIs(t, fmt.Sprintf("Emit with ExpectLastSeq %d (last is 3)", e), err, eventlog.ErrStaleSequence)
	}
	wantLogLen(t, b, task, 3, "after stale emits")
	got = mustEmitOpts(t, b, l, turnEnv(t, task, 2), eventlog.EmitOptions{ExpectLastSeq: 3})
	if got.Seq != 4 {
		t.Errorf("Emit with ExpectLastSeq 3: got seq %d, want 4", got.Seq)
	}
	got = mustEmitOpts(t, b, l, turnEnv(t, task, 3), eventlog.EmitOptions{ExpectLastSeq: 0})
	if got.Seq != 5 {
		t.Errorf("Emit with ExpectLastSeq 0 (no check): got seq %d, want 5", got.Seq)
	}
	wantLogLen(t, b, task, 5, "at the end")
}

// raceExpect runs n emits with the same ExpectLastSeq and checks that exactly
// one lands at wantSeq.
func raceExpect(t *testing.T, b Backend, l eventlog.Lease, expect, wantSeq uint64) {
	t.Helper()
	const n = 16
	errs := make([]error, n)
	got := make([]eventlog.Envelope, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			env, err := eventlog.NewEnvelope(l.Task, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: i})
			if err != nil {
				errs[i] = err
				return
			}
			got[i], errs[i] = b.Log.Emit(t.Context(), l, env, eventlog.EmitOptions{ExpectLastSeq: expect})
		})
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
			if got[i].Seq != wantSeq {
				t.Errorf("winner #%d: got seq %d, want %d", i, got[i].Seq, wantSeq)
			}
		case !errors.Is(err, eventlog.ErrStaleSequence):
			t.Errorf("loser #%d: got error %v, want %v", i, err, eventlog.ErrStaleSequence)
		}
	}
	if wins != 1 {
		t.Errorf("emits with ExpectLastSeq %d that landed: got %d, want 1", expect, wins)
	}
	envs := wantLogLen(t, b, l.Task, int(wantSeq), "after the race")
	if n := countType(envs, noeta.TypeLeaseGranted); n != 1 {
		t.Errorf("LeaseGranted records: got %d, want 1 (log %v)", n, typesOf(envs))
	}
}

func testExpectLastSeqRace(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	emitTurn(t, b, l, 0)
	raceExpect(t, b, l, 3, 4)
}

func testExpectLastSeqRaceFirstEmit(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	raceExpect(t, b, l, 1, 3)
}

func testConcurrentEmitsDense(t *testing.T, b Backend) {
	const writers, each = 16, 4
	task, l := newLeased(t, b)
	var mu sync.Mutex
	seqs := map[uint64]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, suiteActor, noeta.TurnStarted{Turn: w*each + i})
				if err == nil {
					env, err = b.Log.Emit(t.Context(), l, env, eventlog.EmitOptions{})
				}
				mu.Lock()
				if err != nil {
					t.Errorf("writer %d emit %d: got error %v, want nil", w, i, err)
				} else if seqs[env.Seq] {
					t.Errorf("writer %d emit %d: seq %d returned twice", w, i, env.Seq)
				} else {
					seqs[env.Seq] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	n := 2 + writers*each
	envs := wantLogLen(t, b, task, n, "after concurrent emits")
	if envs[1].Type != noeta.TypeLeaseGranted || countType(envs, noeta.TypeLeaseGranted) != 1 {
		t.Errorf("LeaseGranted: got log %v, want exactly one, at seq 2", typesOf(envs))
	}
	for s := uint64(3); s <= uint64(n); s++ {
		if !seqs[s] {
			t.Errorf("seq %d was not returned to any writer", s)
		}
	}
}

// ---- idempotency ----

func keyed(key string) eventlog.EmitOptions { return eventlog.EmitOptions{IdempotencyKey: key} }

func testIdempotentRepeat(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	first := mustEmitOpts(t, b, l, rawEnv(task, rawType, `{"v":1}`), keyed("k1"))
	retry := mustEmitOpts(t, b, l, rawEnv(task, rawType, `{"v":2}`), keyed("k1"))
	wantSameEnvelope(t, "retry with the same key", retry, first)
	wantLogLen(t, b, task, 3, "after the retry")

	other := mustEmitOpts(t, b, l, rawEnv(task, rawType, `{"v":3}`), keyed("k2"))
	if other.Seq != 4 {
		t.Errorf("another key: got seq %d, want 4", other.Seq)
	}
	emitTurn(t, b, l, 1)
	late := mustEmitOpts(t, b, l, turnEnv(t, task, 9), keyed("k1"))
	wantSameEnvelope(t, "retry after more writes", late, first)
	wantLogLen(t, b, task, 5, "at the end")
}

func testIdempotentBeatsCap(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	first := mustEmitOpts(t, b, l, rawEnv(task, rawType, `{"v":1}`), keyed("k"))
	huge := rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+100))
	retry := mustEmitOpts(t, b, l, huge, keyed("k"))
	wantSameEnvelope(t, "oversized retry with the same key", retry, first)
	_, err := b.Log.Emit(t.Context(), l, huge, keyed("other"))
	checkErrIs(t, "oversized emit with a new key", err, eventlog.ErrPayloadTooLarge)
	wantLogLen(t, b, task, 3, "at the end")
}

func testIdempotentBeatsStaleSequence(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	first := mustEmitOpts(t, b, l, turnEnv(t, task, 1), keyed("k"))
	emitTurn(t, b, l, 2)
	for _, e := range []uint64{1, 3, 99} {
		retry := mustEmitOpts(t, b, l, turnEnv(t, task, 1), eventlog.EmitOptions{IdempotencyKey: "k", ExpectLastSeq: e})
		wantSameEnvelope(t, fmt.Sprintf("retry with ExpectLastSeq %d", e), retry, first)
	}
	_, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 3), eventlog.EmitOptions{IdempotencyKey: "new", ExpectLastSeq: 3})
	checkErrIs(t, "new key with a stale ExpectLastSeq", err, eventlog.ErrStaleSequence)
	wantLogLen(t, b, task, 4, "at the end")
}

func testIdempotentBeatsEndedLease(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	first := mustEmitOpts(t, b, l, turnEnv(t, task, 1), keyed("k"))
	suspendOn(t, b, l, eventCond())
	retry := mustEmitOpts(t, b, l, turnEnv(t, task, 1), keyed("k"))
	wantSameEnvelope(t, "retry under a released lease", retry, first)
	_, err := b.Log.Emit(t.Context(), l, turnEnv(t, task, 2), keyed("new"))
	checkErrIs(t, "new key under a released lease", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task, 3, "after the released lease's attempts")

	task2, l2 := newLeased(t, b)
	first2 := mustEmitOpts(t, b, l2, turnEnv(t, task2, 1), keyed("k"))
	expire(t, b, l2)
	retry2 := mustEmitOpts(t, b, l2, turnEnv(t, task2, 1), keyed("k"))
	wantSameEnvelope(t, "retry under an expired lease", retry2, first2)
	_, err = b.Log.Emit(t.Context(), l2, turnEnv(t, task2, 2), keyed("new"))
	checkErrIs(t, "new key under an expired lease", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task2, 3, "after the expired lease's attempts")
}

func testIdempotentSurvivesTakeover(t *testing.T, b Backend) {
	task, la := newLeased(t, b)
	first := mustEmitOpts(t, b, la, turnEnv(t, task, 1), keyed("k"))
	expire(t, b, la)
	lb := leaseTaskAs(t, b, task, workerB)
	emitTurn(t, b, lb, 2)
	retry := mustEmitOpts(t, b, la, turnEnv(t, task, 1), keyed("k"))
	wantSameEnvelope(t, "A's retry after B's takeover", retry, first)
	_, err := b.Log.Emit(t.Context(), la, turnEnv(t, task, 3), keyed("new"))
	checkErrIs(t, "A's new key after the takeover", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task, 5, "at the end")
}

func testIdempotentScopeLease(t *testing.T, b Backend) {
	task, l1 := newLeased(t, b)
	first := mustEmitOpts(t, b, l1, turnEnv(t, task, 1), keyed("k"))
	yield(t, b, l1)
	l2 := leaseTask(t, b, task)
	second := mustEmitOpts(t, b, l2, turnEnv(t, task, 1), keyed("k"))
	if second.ID == first.ID || second.Seq != 5 || second.LeaseGen != l2.Generation {
		t.Errorf("same key under another lease: got ID %s seq %d gen %d, want a new record at seq 5 gen %d (first was %s)", second.ID, second.Seq, second.LeaseGen, l2.Generation, first.ID)
	}
	again := mustEmitOpts(t, b, l2, turnEnv(t, task, 1), keyed("k"))
	wantSameEnvelope(t, "retry under the second lease", again, second)
	wantLogLen(t, b, task, 5, "at the end")
}

func testIdempotentScopeTask(t *testing.T, b Backend) {
	a, la := newLeased(t, b)
	c, lc := newLeased(t, b)
	ea := mustEmitOpts(t, b, la, turnEnv(t, a, 1), keyed("shared"))
	ec := mustEmitOpts(t, b, lc, turnEnv(t, c, 1), keyed("shared"))
	if ea.ID == ec.ID || ec.Task != c || ec.Seq != 3 {
		t.Errorf("same key on another task: got %s seq %d of %s, want a new record at seq 3 of %s", ec.ID, ec.Seq, ec.Task, c)
	}
	wantLogLen(t, b, a, 3, "task A")
	wantLogLen(t, b, c, 3, "task C")
}

func testIdempotentRace(t *testing.T, b Backend) {
	const n = 16
	task, l := newLeased(t, b)
	got := make([]eventlog.Envelope, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = b.Log.Emit(t.Context(), l, rawEnv(task, rawType, fmt.Sprintf(`{"writer":%d}`, i)), keyed("same"))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("emit #%d: got error %v, want nil", i, errs[i])
			continue
		}
		if d := diffEnvelope(got[i], got[0]); errs[0] == nil && d != "" {
			t.Errorf("emit #%d vs #0: %s", i, d)
		}
	}
	envs := wantLogLen(t, b, task, 3, "after 16 emits with one key")
	if errs[0] == nil {
		wantSameEnvelope(t, "the stored record", envs[2], got[0])
	}
}

// ---- cap and precedence ----

func testCapExact(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	over := rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1))
	_, err := b.Log.Emit(ctx, l, over, eventlog.EmitOptions{})
	checkErrIs(t, "first emit of 4097 bytes", err, eventlog.ErrPayloadTooLarge)
	wantLogLen(t, b, task, 1, "after the refused first emit (no LeaseGranted)")

	exact := mustEmit(t, b, l, rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes)))
	if len(exact.Payload) != noeta.PayloadMaxBytes {
		t.Errorf("stored payload: got %d bytes, want %d", len(exact.Payload), noeta.PayloadMaxBytes)
	}
	_, err = b.Log.Emit(ctx, l, over, eventlog.EmitOptions{})
	checkErrIs(t, "emit of 4097 bytes", err, eventlog.ErrPayloadTooLarge)
	envs := wantLogLen(t, b, task, 3, "after the refused emit")
	if len(envs[2].Payload) != noeta.PayloadMaxBytes {
		t.Errorf("read payload: got %d bytes, want %d", len(envs[2].Payload), noeta.PayloadMaxBytes)
	}
}

func testCapCanonicalBytes(t *testing.T, b Backend) {
	ctx := t.Context()
	task, l := newLeased(t, b)
	canon := sizedPayload(noeta.PayloadMaxBytes)
	spaced := "{\n   \"pad\"   :   " + canon[len(`{"pad":`):len(canon)-1] + strings.Repeat(" ", 200) + "\n}"
	if len(spaced) <= noeta.PayloadMaxBytes {
		t.Fatalf("test payload is %d bytes raw, want more than %d", len(spaced), noeta.PayloadMaxBytes)
	}
	got := mustEmit(t, b, l, rawEnv(task, rawType, spaced))
	if string(got.Payload) != canon {
		t.Errorf("stored payload: got %d bytes, want the %d canonical bytes", len(got.Payload), len(canon))
	}

	// Non-ASCII grows when canonicalised (é is 2 bytes raw, 6 escaped).
	small := `{"s":"` + strings.Repeat("é", 1000) + `"}`
	if len(small) > noeta.PayloadMaxBytes {
		t.Fatalf("test payload is %d bytes raw, want at most %d", len(small), noeta.PayloadMaxBytes)
	}
	_, err := b.Log.Emit(ctx, l, rawEnv(task, rawType, small), eventlog.EmitOptions{})
	checkErrIs(t, "emit of a payload small raw but over the cap canonical", err, eventlog.ErrPayloadTooLarge)
	wantLogLen(t, b, task, 3, "at the end")
}

func testPrecedenceCapOverStale(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	_, err := b.Log.Emit(t.Context(), l, rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1)), eventlog.EmitOptions{ExpectLastSeq: 1})
	checkErrIs(t, "oversized emit with a stale ExpectLastSeq", err, eventlog.ErrPayloadTooLarge)
	if errors.Is(err, eventlog.ErrStaleSequence) {
		t.Errorf("oversized emit with a stale ExpectLastSeq: got %v, want only %v", err, eventlog.ErrPayloadTooLarge)
	}
	wantLogLen(t, b, task, 3, "at the end")
}

func testPrecedenceCapOverLease(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	yield(t, b, l)
	_, err := b.Log.Emit(t.Context(), l, rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1)), eventlog.EmitOptions{})
	checkErrIs(t, "oversized emit under an ended lease", err, eventlog.ErrPayloadTooLarge)
	if errors.Is(err, eventlog.ErrInvalidLease) {
		t.Errorf("oversized emit under an ended lease: got %v, want only %v", err, eventlog.ErrPayloadTooLarge)
	}
	wantLogLen(t, b, task, 3, "at the end")
}

func testPrecedenceStaleOverLease(t *testing.T, b Backend) {
	ctx := t.Context()
	task, la := newLeased(t, b)
	emitTurn(t, b, la, 1)
	yield(t, b, la)
	_, err := b.Log.Emit(ctx, la, turnEnv(t, task, 2), eventlog.EmitOptions{ExpectLastSeq: 1})
	checkErrIs(t, "stale emit under an ended lease", err, eventlog.ErrStaleSequence)
	if errors.Is(err, eventlog.ErrInvalidLease) {
		t.Errorf("stale emit under an ended lease: got %v, want only %v", err, eventlog.ErrStaleSequence)
	}

	// Also when a newer generation fenced the log.
	lb := leaseTaskAs(t, b, task, workerB)
	emitTurn(t, b, lb, 2)
	_, err = b.Log.Emit(ctx, la, turnEnv(t, task, 3), eventlog.EmitOptions{ExpectLastSeq: 3})
	checkErrIs(t, "stale emit under a fenced lease", err, eventlog.ErrStaleSequence)
	_, err = b.Log.Emit(ctx, la, turnEnv(t, task, 3), eventlog.EmitOptions{ExpectLastSeq: 5})
	checkErrIs(t, "emit with the right ExpectLastSeq under a fenced lease", err, eventlog.ErrInvalidLease)
	wantLogLen(t, b, task, 5, "at the end")
}

func testUnknownTypeRoundTrip(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	got := mustEmit(t, b, l, rawEnv(task, "FutureThing", `{"z":1,"nested":{"k":[true,null]}}`))
	envs := wantLogLen(t, b, task, 3, "after the emit")
	if envs[2].Type != "FutureThing" || string(envs[2].Payload) != `{"nested":{"k":[true,null]},"z":1}` {
		t.Errorf("unknown type read back: got %s %s, want FutureThing %s", envs[2].Type, envs[2].Payload, `{"nested":{"k":[true,null]},"z":1}`)
	}
	wantSameEnvelope(t, "read vs returned", envs[2], got)
	if _, ok, err := envs[2].Decode(); ok || err != nil {
		t.Errorf("Decode of an unknown type: got ok %v err %v, want false, nil", ok, err)
	}
}

// ---- snapshots and the index ----

func testLatestSnapshotNone(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	_, err := b.Log.LatestSnapshot(t.Context(), task)
	checkErrIs(t, "LatestSnapshot of a fresh task", err, eventlog.ErrNotFound)
	emitTurn(t, b, l, 1)
	_, err = b.Log.LatestSnapshot(t.Context(), task)
	checkErrIs(t, "LatestSnapshot of a task without baseline", err, eventlog.ErrNotFound)
}

func testLatestSnapshotHighest(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	ref := noeta.RefFor([]byte(`{}`), eventlog.MediaTypeJSON)
	first := mustEmit(t, b, l, mustEnvelope(t, task, noeta.TaskSnapshot{StateRef: ref, UptoSeq: 2})) // 3
	emitTurn(t, b, l, 1)                                                                             // 4
	// A seal is not a baseline: the snapshot before it stays the latest.
	mustEmit(t, b, l, mustEnvelope(t, task, noeta.StepAttemptAbandoned{BaselineSeq: 4, Action: noeta.AbandonRedrive, Reason: "crash"}))
	emitTurn(t, b, l, 2) // 6
	got, err := b.Log.LatestSnapshot(t.Context(), task)
	wantNoErr(t, "LatestSnapshot", err)
	wantSameEnvelope(t, "LatestSnapshot", got, first)

	snap := mustEmit(t, b, l, mustEnvelope(t, task, noeta.TaskSnapshot{StateRef: ref, UptoSeq: 6})) // 7
	emitTurn(t, b, l, 3)
	got, err = b.Log.LatestSnapshot(t.Context(), task)
	wantNoErr(t, "LatestSnapshot", err)
	wantSameEnvelope(t, "LatestSnapshot after a newer snapshot", got, snap)
}

// wantIndexSorted checks the rule of the whole index: LastTime descending,
// ties by task id ascending.
func wantIndexSorted(t *testing.T, sums []eventlog.TaskSummary) {
	t.Helper()
	for i := 1; i < len(sums); i++ {
		p, c := sums[i-1], sums[i]
		if c.LastTime.After(p.LastTime) || c.LastTime.Equal(p.LastTime) && c.Task < p.Task {
			t.Errorf("Tasks()[%d] (%s, %v) sorts before [%d] (%s, %v)", i, c.Task, c.LastTime, i-1, p.Task, p.LastTime)
		}
	}
}

func indexOf(t *testing.T, b Backend, tasks ...string) []eventlog.TaskSummary {
	t.Helper()
	sums, err := b.Log.Tasks(t.Context())
	if err != nil {
		t.Fatalf("Tasks: got error %v, want nil", err)
	}
	wantIndexSorted(t, sums)
	var mine []eventlog.TaskSummary
	count := map[string]int{}
	for _, s := range sums {
		if containsString(tasks, s.Task) {
			mine = append(mine, s)
			count[s.Task]++
		}
	}
	for _, task := range tasks {
		if count[task] != 1 {
			t.Errorf("Tasks: %s listed %d times, want once", task, count[task])
		}
	}
	return mine
}

func testTaskIndexOrder(t *testing.T, b Backend) {
	a := newTask(t, b)
	advance(t, b, time.Second)
	c := newTask(t, b)
	advance(t, b, time.Second)
	d := newTask(t, b)
	advance(t, b, time.Second)
	l := enqueueLease(t, b, a)
	emitTurn(t, b, l, 1)

	mine := indexOf(t, b, a, c, d)
	for _, s := range mine {
		envs := readAll(t, b, s.Task)
		last := envs[len(envs)-1]
		if s.LastSeq != last.Seq || !s.LastTime.Equal(last.Time) {
			t.Errorf("Tasks entry of %s: got LastSeq %d LastTime %v, want %d %v", s.Task, s.LastSeq, s.LastTime, last.Seq, last.Time)
		}
	}
	if b.Advance == nil {
		return // a wall clock gives no control over equal times; the rule was checked above
	}
	var got []string
	for _, s := range mine {
		got = append(got, s.Task)
	}
	if want := []string{a, d, c}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Tasks order: got %v, want %v (most recent first)", got, want)
	}

	// Equal times: ties by task id ascending.
	advance(t, b, time.Second)
	x, y := newTask(t, b), newTask(t, b)
	mine = indexOf(t, b, a, c, d, x, y)
	lo, hi := min(x, y), max(x, y)
	if len(mine) < 2 || mine[0].Task != lo || mine[1].Task != hi {
		t.Errorf("Tasks with equal times: got %v first, want %s then %s", mine, lo, hi)
	}
}

func testTaskIndexOnlyCreated(t *testing.T, b Backend) {
	ctx := t.Context()
	known := newTask(t, b)
	unknown := noeta.NewTaskID()
	_, err := b.Log.Read(ctx, unknown, 0)
	checkErrIs(t, "Read of an unknown task", err, eventlog.ErrNotFound)
	_, _ = b.Log.Inbox(ctx, unknown)
	_, _ = b.Log.LatestSnapshot(ctx, unknown)
	_, _ = b.Log.SystemEmit(ctx, unknown, "k", rawEnv(unknown, rawType, `{}`))
	_, _ = b.Log.Emit(ctx, fakeLease(unknown), turnEnv(t, unknown, 1), eventlog.EmitOptions{})
	refused := genesisEnv(t, noeta.NewTaskID())
	refused.Actor = ""
	_, _ = b.Log.Create(ctx, refused)

	sums, err := b.Log.Tasks(ctx)
	wantNoErr(t, "Tasks", err)
	seen := false
	for _, s := range sums {
		switch s.Task {
		case unknown, refused.Task:
			t.Errorf("Tasks lists %s, which was never created", s.Task)
		case known:
			seen = true
			if s.LastSeq != 1 {
				t.Errorf("Tasks entry of a fresh task: got LastSeq %d, want 1", s.LastSeq)
			}
		}
	}
	if !seen {
		t.Errorf("Tasks: %s missing, want it listed", known)
	}
}

// ---- inbox ----

func inboxEnv(t *testing.T, task, child string) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "child_observer", noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`"42"`)})
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	return env
}

func testInboxSystemEmit(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	emitTurn(t, b, l, 1)
	child := noeta.NewTaskID()
	key := "subtask-" + child
	in := inboxEnv(t, task, child)
	in.CausationID = "cause"
	got, err := b.Log.SystemEmit(t.Context(), task, key, in)
	wantNoErr(t, "SystemEmit", err)
	if got.Key != key || got.Seq != 0 || got.Task != task || got.LeaseGen != 0 {
		t.Errorf("inbox record: got Key %q Seq %d Task %q LeaseGen %d, want %q 0 %q 0", got.Key, got.Seq, got.Task, got.LeaseGen, key, task)
	}
	if !isULID(got.ID) || got.Time.IsZero() {
		t.Errorf("inbox record: got ID %q Time %v, want a ULID and a time", got.ID, got.Time)
	}
	if got.Type != noeta.TypeSubtaskCompleted || got.Origin != eventlog.OriginObserver || got.Actor != "child_observer" || got.CorrelationID != task || got.CausationID != "cause" {
		t.Errorf("inbox record: got Type %q Origin %q Actor %q CorrelationID %q CausationID %q", got.Type, got.Origin, got.Actor, got.CorrelationID, got.CausationID)
	}
	if !bytes.Equal(got.Payload, in.Payload) {
		t.Errorf("inbox payload: got %s, want %s", got.Payload, in.Payload)
	}
	inbox := readInbox(t, b, task)
	if len(inbox) != 1 {
		t.Fatalf("Inbox: got %d records, want 1", len(inbox))
	}
	wantSameEnvelope(t, "Inbox vs SystemEmit", inbox[0], got)
	envs := wantLogLen(t, b, task, 3, "log after SystemEmit (the inbox is not the log)")
	if countType(envs, noeta.TypeSubtaskCompleted) != 0 {
		t.Errorf("Read returned the inbox record: %v", typesOf(envs))
	}
	if next := emitTurn(t, b, l, 2); next.Seq != 4 {
		t.Errorf("emit after SystemEmit: got seq %d, want 4", next.Seq)
	}

	// A non-canonical payload is stored canonical.
	raw, err := b.Log.SystemEmit(t.Context(), task, "raw", rawEnv(task, rawType, `{"b":1, "a":2}`))
	wantNoErr(t, "SystemEmit of a raw payload", err)
	if string(raw.Payload) != `{"a":2,"b":1}` {
		t.Errorf("inbox payload: got %s, want %s", raw.Payload, `{"a":2,"b":1}`)
	}
}

func testInboxRepeatKey(t *testing.T, b Backend) {
	task := newTask(t, b)
	first, err := b.Log.SystemEmit(t.Context(), task, "once", rawEnv(task, rawType, `{"v":1}`))
	wantNoErr(t, "SystemEmit", err)
	again, err := b.Log.SystemEmit(t.Context(), task, "once", rawEnv(task, rawType, `{"v":2}`))
	wantErrIs(t, "SystemEmit with a written key", err, eventlog.ErrAlreadyExists)
	wantSameEnvelope(t, "envelope returned with ErrAlreadyExists", again, first)
	inbox := readInbox(t, b, task)
	if len(inbox) != 1 {
		t.Fatalf("Inbox: got %d records, want 1", len(inbox))
	}
	wantSameEnvelope(t, "Inbox", inbox[0], first)
}

func testInboxRace(t *testing.T, b Backend) {
	const n = 16
	task := newTask(t, b)
	got := make([]eventlog.Envelope, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = b.Log.SystemEmit(t.Context(), task, "race", rawEnv(task, rawType, fmt.Sprintf(`{"writer":%d}`, i)))
		})
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, eventlog.ErrAlreadyExists):
			t.Errorf("SystemEmit #%d: got error %v, want nil or %v", i, err, eventlog.ErrAlreadyExists)
		}
	}
	if wins != 1 {
		t.Errorf("SystemEmits that wrote: got %d, want 1", wins)
	}
	inbox := readInbox(t, b, task)
	if len(inbox) != 1 {
		t.Fatalf("Inbox: got %d records, want 1", len(inbox))
	}
	for i := range n {
		if errs[i] == nil || errors.Is(errs[i], eventlog.ErrAlreadyExists) {
			if d := diffEnvelope(got[i], inbox[0]); d != "" {
				t.Errorf("SystemEmit #%d returned: %s", i, d)
			}
		}
	}
}

func testInboxRequiresActorOrigin(t *testing.T, b Backend) {
	task := newTask(t, b)
	for what, mutate := range map[string]func(e *eventlog.Envelope){
		"an empty actor":  func(e *eventlog.Envelope) { e.Actor = "" },
		"an empty origin": func(e *eventlog.Envelope) { e.Origin = "" },
		"origin robot":    func(e *eventlog.Envelope) { e.Origin = "robot" },
		"an array":        func(e *eventlog.Envelope) { e.Payload = json.RawMessage(`[]`) },
		"an empty type":   func(e *eventlog.Envelope) { e.Type = "" },
	} {
		env := inboxEnv(t, task, "c1")
		mutate(&env)
		_, err := b.Log.SystemEmit(t.Context(), task, "k", env)
		checkErrIs(t, "SystemEmit with "+what, err, eventlog.ErrInvalidArgument)
	}
	if inbox := readInbox(t, b, task); len(inbox) != 0 {
		t.Errorf("Inbox after refused writes: got %d records, want 0", len(inbox))
	}
	if _, err := b.Log.SystemEmit(t.Context(), task, "k", inboxEnv(t, task, "c1")); err != nil {
		t.Errorf("SystemEmit after refused writes with the same key: got error %v, want nil", err)
	}
}

func testInboxBadKey(t *testing.T, b Backend) {
	task := newTask(t, b)
	for _, key := range []string{"", "a.b", "a b", "a>b", "*", "ünï", strings.Repeat("k", eventlog.MaxInboxKeyLen+1)} {
		_, err := b.Log.SystemEmit(t.Context(), task, key, inboxEnv(t, task, "c1"))
		checkErrIs(t, fmt.Sprintf("SystemEmit with key %q", key), err, eventlog.ErrInvalidArgument)
	}
	if inbox := readInbox(t, b, task); len(inbox) != 0 {
		t.Errorf("Inbox after refused keys: got %d records, want 0", len(inbox))
	}
	long := strings.Repeat("k", eventlog.MaxInboxKeyLen)
	got, err := b.Log.SystemEmit(t.Context(), task, long, inboxEnv(t, task, "c1"))
	wantNoErr(t, "SystemEmit with a key of MaxInboxKeyLen", err)
	if got.Key != long {
		t.Errorf("Key: got %q, want %q", got.Key, long)
	}
}

func testInboxUnknownTask(t *testing.T, b Backend) {
	unknown := noeta.NewTaskID()
	_, err := b.Log.SystemEmit(t.Context(), unknown, "k", inboxEnv(t, unknown, "c1"))
	checkErrIs(t, "SystemEmit to a task never created", err, eventlog.ErrNotFound)
	_, err = b.Log.Inbox(t.Context(), unknown)
	checkErrIs(t, "Inbox of a task never created", err, eventlog.ErrNotFound)
	_, err = b.Log.Read(t.Context(), unknown, 0)
	checkErrIs(t, "Read after the refused SystemEmit", err, eventlog.ErrNotFound)
}

func testInboxCap(t *testing.T, b Backend) {
	task := newTask(t, b)
	_, err := b.Log.SystemEmit(t.Context(), task, "big", rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes+1)))
	checkErrIs(t, "SystemEmit of 4097 bytes", err, eventlog.ErrPayloadTooLarge)
	if inbox := readInbox(t, b, task); len(inbox) != 0 {
		t.Errorf("Inbox after the refused write: got %d records, want 0", len(inbox))
	}
	got, err := b.Log.SystemEmit(t.Context(), task, "big", rawEnv(task, rawType, sizedPayload(noeta.PayloadMaxBytes)))
	wantNoErr(t, "SystemEmit of 4096 bytes with the key of the refused write", err)
	if len(got.Payload) != noeta.PayloadMaxBytes {
		t.Errorf("stored payload: got %d bytes, want %d", len(got.Payload), noeta.PayloadMaxBytes)
	}
}

func testInboxOrder(t *testing.T, b Backend) {
	task := newTask(t, b)
	keys := []string{"k5", "k1", "k3", "k0", "k9", "k2"}
	for i, k := range keys {
		if _, err := b.Log.SystemEmit(t.Context(), task, k, rawEnv(task, rawType, fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatalf("SystemEmit %s: got error %v, want nil", k, err)
		}
	}
	inbox := readInbox(t, b, task)
	var got []string
	for _, e := range inbox {
		got = append(got, e.Key)
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Errorf("Inbox order: got %v, want %v (write order)", got, keys)
	}
}

// ---- cancellation and Close ----

type call struct {
	name string
	do   func(ctx context.Context) error
}

// wantAll runs every call with ctx and checks each error is want. A call that
// blocks fails the case instead of hanging it.
func wantAll(t *testing.T, b Backend, ctx context.Context, calls []call, want error) {
	t.Helper()
	for _, c := range calls {
		checkErrIs(t, c.name, within(t, b, c.name, func() error { return c.do(ctx) }), want)
	}
}

func readerCalls(task string, r eventlog.Reader) []call {
	return []call{
		{"Read", func(ctx context.Context) error { _, err := r.Read(ctx, task, 0); return err }},
		{"Inbox", func(ctx context.Context) error { _, err := r.Inbox(ctx, task); return err }},
		{"LatestSnapshot", func(ctx context.Context) error { _, err := r.LatestSnapshot(ctx, task); return err }},
	}
}

func writerCalls(t *testing.T, b Backend, l eventlog.Lease, fresh string) []call {
	genesis := genesisEnv(t, fresh)
	turn := turnEnv(t, l.Task, 1)
	inbox := inboxEnv(t, l.Task, "c1")
	return []call{
		{"Create", func(ctx context.Context) error { _, err := b.Log.Create(ctx, genesis); return err }},
		{"Emit", func(ctx context.Context) error {
			_, err := b.Log.Emit(ctx, l, turn, eventlog.EmitOptions{})
			return err
		}},
		{"Emit with options", func(ctx context.Context) error {
			_, err := b.Log.Emit(ctx, l, turn, eventlog.EmitOptions{ExpectLastSeq: 1, IdempotencyKey: "k"})
			return err
		}},
		{"SystemEmit", func(ctx context.Context) error { _, err := b.Log.SystemEmit(ctx, l.Task, "k", inbox); return err }},
	}
}

func testCancelledReader(t *testing.T, b Backend) {
	task := newTask(t, b)
	wantAll(t, b, cancelledCtx(t), readerCalls(task, b.Log), context.Canceled)
}

func testCancelledWriter(t *testing.T, b Backend) {
	task, l := newLeased(t, b)
	fresh := noeta.NewTaskID()
	wantAll(t, b, cancelledCtx(t), writerCalls(t, b, l, fresh), context.Canceled)
	wantLogLen(t, b, task, 1, "after cancelled writes")
	if inbox := readInbox(t, b, task); len(inbox) != 0 {
		t.Errorf("Inbox after a cancelled SystemEmit: got %d records, want 0", len(inbox))
	}
	_, err := b.Log.Read(t.Context(), fresh, 0)
	checkErrIs(t, "Read after a cancelled Create", err, eventlog.ErrNotFound)
}

func testCancelledTaskIndex(t *testing.T, b Backend) {
	newTask(t, b)
	_, err := b.Log.Tasks(cancelledCtx(t))
	checkErrIs(t, "Tasks", err, context.Canceled)
}

func closeBackend(t *testing.T, b Backend) {
	t.Helper()
	if b.Close == nil {
		t.Fatalf("Backend.Close is nil; the factory must provide it")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: got error %v, want nil", err)
	}
}

func testClosedReader(t *testing.T, b Backend) {
	task := newTask(t, b)
	closeBackend(t, b)
	wantAll(t, b, t.Context(), readerCalls(task, b.Log), eventlog.ErrClosed)
}

func testClosedWriter(t *testing.T, b Backend) {
	_, l := newLeased(t, b)
	closeBackend(t, b)
	wantAll(t, b, t.Context(), writerCalls(t, b, l, noeta.NewTaskID()), eventlog.ErrClosed)
}

func testClosedTaskIndex(t *testing.T, b Backend) {
	newTask(t, b)
	closeBackend(t, b)
	_, err := b.Log.Tasks(t.Context())
	checkErrIs(t, "Tasks", err, eventlog.ErrClosed)
}

func testCloseIdempotent(t *testing.T, b Backend) {
	task := newTask(t, b)
	closeBackend(t, b)
	if err := b.Close(); err != nil {
		t.Errorf("second Close: got error %v, want nil", err)
	}
	_, err := b.Log.Read(t.Context(), task, 0)
	checkErrIs(t, "Read after two Closes", err, eventlog.ErrClosed)
	_, err = b.Dispatcher.Inspect(t.Context(), task)
	checkErrIs(t, "Inspect after two Closes", err, eventlog.ErrClosed)
	_, err = b.Content.Get(t.Context(), noeta.RefFor([]byte("x"), "text/plain"))
	checkErrIs(t, "Get after two Closes", err, eventlog.ErrClosed)
}
