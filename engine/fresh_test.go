package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// readCounter is a log that counts the reads of each task's log, and the
// snapshot lookups.
type readCounter struct {
	engine.Log
	mu        sync.Mutex
	reads     map[string]int
	snapshots map[string]int
}

// countedHarness is a harness on b whose engine reads b's log through a
// readCounter.
func countedHarness(t *testing.T, b backend) (*readCounter, *harness) {
	rc := &readCounter{Log: b.log, reads: map[string]int{}, snapshots: map[string]int{}}
	return rc, newHarness(t, b, readExample(t, "noeta.yaml"), func(c *engine.Config) { c.Log = rc })
}

func (r *readCounter) of(task string) (reads, snapshots int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[task], r.snapshots[task]
}

func (r *readCounter) Read(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error) {
	r.mu.Lock()
	r.reads[task]++
	r.mu.Unlock()
	return r.Log.Read(ctx, task, after)
}

func (r *readCounter) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	r.mu.Lock()
	r.snapshots[task]++
	r.mu.Unlock()
	return r.Log.LatestSnapshot(ctx, task)
}

func (r *readCounter) EmitBatch(ctx context.Context, lease eventlog.Lease, envs []eventlog.Envelope, opts eventlog.EmitOptions) ([]eventlog.Envelope, error) {
	return eventlog.EmitAll(ctx, r.Log, lease, envs, opts)
}

func (r *readCounter) BatchAtomic() bool {
	bw, ok := r.Log.(eventlog.BatchWriter)
	return ok && bw.BatchAtomic()
}

// TestFirstSegmentFoldsTheGenesisInHand: the first segment of a task this
// engine created folds the genesis it wrote, reading only what follows it
// (ADR 0113), and ends as a task folded from the log does; a later
// segment, and a task this engine did not create, fold from the log.
func TestFirstSegmentFoldsTheGenesisInHand(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			rc, h := countedHarness(t, b)
			other := newHarness(t, b, readExample(t, "noeta.yaml"))
			ctx := context.Background()

			mine := h.submit(readExample(t, "01-allowed-call.yaml"))
			theirs := other.submit(readExample(t, "01-allowed-call.yaml"))
			parked := h.submit("agent: researcher\ngoal: g\nscript:\n  - wait_external: {event_kind: go}\n  - finish: {answer: done}\n")
			for _, task := range []string{mine, theirs, parked} {
				lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task, TTL: b.ttl})
				if err != nil {
					t.Fatal(err)
				}
				if lease.Generation != 1 {
					t.Fatalf("first lease of %s at generation %d", task, lease.Generation)
				}
				if _, err := h.eng.RunLease(ctx, lease); err != nil {
					t.Fatalf("%s: %v", task, err)
				}
			}
			if reads, snaps := rc.of(mine); reads != 1 || snaps != 0 {
				t.Errorf("the first segment of a task created here read its log %d times and looked for a snapshot %d times, want once and never", reads, snaps)
			}
			if _, snaps := rc.of(theirs); snaps == 0 {
				t.Error("the first segment of a task created by another engine did not fold from the log")
			}
			st, _, err := engine.FoldTask(ctx, b.log, b.content, mine)
			if err != nil || st.Status != noeta.StatusTerminal {
				t.Fatalf("task created here: %v %v\n%s", st, err, h.dump(mine))
			}
			wantLog(t, h, mine,
				e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
				e("ToolCallStarted"), tl("ToolCallFinished"), e("ToolCallStarted"), tl("ToolCallFinished"),
				e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))

			// The parked task's second segment reads the log.
			_, before := rc.of(parked)
			if _, err := b.disp.Wake(ctx, parked, noeta.ExternalWake("go")); err != nil {
				t.Fatal(err)
			}
			lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: parked, TTL: b.ttl})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := h.eng.RunLease(ctx, lease); err != nil || out.Status != noeta.StatusTerminal {
				t.Fatalf("woken segment: %+v %v\n%s", out, err, h.dump(parked))
			}
			if _, snaps := rc.of(parked); snaps == before {
				t.Error("a second segment did not fold from the log")
			}
		})
	}
}

// TestFirstSegmentFoldsWhatFollowsItsGenesis: should the log hold more
// than the genesis at the first lease (something wrote under that lease
// before the engine ran it), the segment folds it, as a fold of the log
// would, and writes after it. A log damaged there is refused as ever
// (TestEngineRefusesAGappedLog).
func TestFirstSegmentFoldsWhatFollowsItsGenesis(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			rc, h := countedHarness(t, b)
			ctx := context.Background()
			task := h.submit(readExample(t, "01-allowed-call.yaml"))
			lease, err := b.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task, TTL: b.ttl})
			if err != nil {
				t.Fatal(err)
			}
			foreign, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "elsewhere", noeta.TaskStatePatched{Patch: []byte(`{"by":"elsewhere"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.log.Emit(ctx, lease, foreign, eventlog.EmitOptions{ExpectLastSeq: 1}); err != nil {
				t.Fatal(err)
			}
			if out, err := h.eng.RunLease(ctx, lease); err != nil || out.Status != noeta.StatusTerminal {
				t.Fatalf("RunLease on a log past its genesis: %+v %v\n%s", out, err, h.dump(task))
			}
			if reads, snaps := rc.of(task); reads != 1 || snaps != 0 {
				t.Errorf("the segment read the log %d times and looked for a snapshot %d times: not the genesis in hand", reads, snaps)
			}
			st, _, err := engine.FoldTask(ctx, b.log, b.content, task)
			if err != nil {
				t.Fatal(err)
			}
			if string(st.Data) != `{"by":"elsewhere"}` {
				t.Errorf("state data %s, want the patch written before the segment", st.Data)
			}
			envs := h.log(task)
			if envs[2].Type != noeta.TypeTaskStatePatched || envs[3].Type != noeta.TypeTurnStarted {
				t.Errorf("the segment did not write after the record it found\n%s", h.dump(task))
			}
		})
	}
}

// TestFreshTasksSharedAcrossLogs: engines on two logs that share one
// FreshTasks, each creating a task of the same id for a different agent:
// each task's first segment folds its own log's genesis, so the budget of
// the agent its log names is the one enforced.
func TestFreshTasksSharedAcrossLogs(t *testing.T) {
	for _, mk := range backends(t) {
		a := mk(t)
		t.Run(a.name, func(t *testing.T) {
			shared := &engine.FreshTasks{}
			share := func(c *engine.Config) { c.Fresh = shared }
			b := mk(t)
			ha := newHarness(t, a, readExample(t, "noeta.yaml"), share)
			hb := newHarness(t, b, readExample(t, "noeta.yaml"), share)
			ctx := context.Background()
			script := []byte(`[{"tool_calls":[{"tool":"echo","args":{"i":1}}]},{"tool_calls":[{"tool":"echo","args":{"i":2}}]},{"finish":{"answer":"done"}}]`)
			if _, err := ha.eng.Submit(ctx, engine.Submission{ID: "same-id", Agent: "frugal", Goal: "g", Script: script}); err != nil {
				t.Fatal(err)
			}
			if _, err := hb.eng.Submit(ctx, engine.Submission{ID: "same-id", Agent: "researcher", Goal: "g", Script: script}); err != nil {
				t.Fatal(err)
			}
			lease, err := a.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: "same-id", TTL: a.ttl})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ha.eng.RunLease(ctx, lease); err != nil {
				t.Fatal(err)
			}
			st, _, err := engine.FoldTask(ctx, a.log, a.content, "same-id")
			if err != nil {
				t.Fatal(err)
			}
			if st.Agent != "frugal" {
				t.Fatalf("agent %q", st.Agent)
			}
			denied := 0
			for _, env := range ha.log("same-id") {
				if env.Type == noeta.TypeToolCallDenied {
					denied++
				}
			}
			if denied != 1 {
				t.Errorf("frugal's second call was denied %d times, want once: the segment folded another log's genesis\n%s", denied, ha.dump("same-id"))
			}
		})
	}
}
