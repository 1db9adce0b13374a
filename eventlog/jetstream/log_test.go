package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// staleRegistry answers as a partitioned zombie's view would: its lease is
// always live. Only the broker's fence can stop it.
type staleRegistry struct{}

func (staleRegistry) Valid(context.Context, eventlog.Lease) (bool, error) { return true, nil }

func openLog(t *testing.T, url string, replicas int, cfg jetstream.Config) *jetstream.Log {
	t.Helper()
	cfg.Replicas = replicas
	if cfg.Registry == nil {
		cfg.Registry = staleRegistry{}
	}
	l, err := jetstream.Open(t.Context(), connect(t, url), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func create(t *testing.T, l *jetstream.Log) string {
	t.Helper()
	task := noeta.NewTaskID()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(t.Context(), env); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return task
}

func turn(t *testing.T, task string, n int) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: n})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestFencingTorture races two hosts on one task: holder A (its own
// connection and Log, and a registry that still believes in A, as a
// partitioned zombie's would) appends in a loop while B takes over. After B's LeaseGranted, not one record of A may
// land, and the log must stay dense.
func TestFencingTorture(t *testing.T) {
	for _, c := range []struct {
		name     string
		url      func() string
		replicas int
		rounds   int
	}{
		{"single", func() string { return singleURL }, 1, 100},
		{"cluster", func() string { return clusterURL }, 3, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			logA := openLog(t, c.url(), c.replicas, jetstream.Config{})
			logB := openLog(t, c.url(), c.replicas, jetstream.Config{})
			violations, aLanded, aRefused := 0, 0, 0
			for round := range c.rounds {
				v, landed, refused := tortureRound(t, logA, logB, round)
				violations += v
				aLanded += landed
				aRefused += refused
			}
			t.Logf("fencing torture (%s): %d rounds, %d records of A landed before the fence, %d of A's appends refused after it, %d violations",
				c.name, c.rounds, aLanded, aRefused, violations)
			if violations != 0 {
				t.Errorf("got %d violations, want 0", violations)
			}
		})
	}
}

func tortureRound(t *testing.T, logA, logB *jetstream.Log, round int) (violations, landed, refused int) {
	ctx := t.Context()
	task := create(t, logA)
	la := eventlog.Lease{ID: fmt.Sprintf("A-%d", round), Task: task, Generation: 1, Worker: "host-a"}
	lb := eventlog.Lease{ID: fmt.Sprintf("B-%d", round), Task: task, Generation: 2, Worker: "host-b"}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	started := make(chan struct{})
	var aErrs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		once := sync.OnceFunc(func() { close(started) })
		defer once()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := logA.Emit(ctx, la, turn(t, task, i), eventlog.EmitOptions{})
			if err != nil {
				aErrs = append(aErrs, err)
				if errors.Is(err, eventlog.ErrLeaseLost) {
					return // a holder that lost its lease stops
				}
				continue
			}
			landed++
			if landed == 2 {
				once()
			}
			// A zombie's appends are separated by the work of its step. With
			// none at all, a new holder's read-then-append loses the race
			// for as long as the old one keeps appending back to back.
			time.Sleep(time.Duration(rand.Int64N(int64(500 * time.Microsecond))))
		}
	}()
	<-started
	bRec, err := logB.Emit(ctx, lb, turn(t, task, 1_000_000), eventlog.EmitOptions{})
	if err != nil {
		t.Fatalf("round %d: B's takeover emit: %v", round, err)
	}
	// Let A keep trying after the fence for a moment.
	time.Sleep(2 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, err := range aErrs {
		if errors.Is(err, eventlog.ErrLeaseLost) {
			refused++
		} else {
			t.Logf("round %d: A's append failed with %v, want ErrLeaseLost", round, err)
			violations++
		}
	}

	envs, err := logB.Read(ctx, task, 0)
	if err != nil {
		t.Fatalf("round %d: Read: %v", round, err)
	}
	fence := uint64(0)
	for i, e := range envs {
		if e.Seq != uint64(i+1) {
			t.Logf("round %d: record %d has seq %d (gap)", round, i, e.Seq)
			violations++
		}
		if e.Type == noeta.TypeLeaseGranted && e.LeaseGen == 2 {
			fence = e.Seq
		}
		if fence != 0 && e.Seq > fence && e.LeaseGen != 2 {
			t.Logf("round %d: seq %d of generation %d landed after B's fence at %d", round, e.Seq, e.LeaseGen, fence)
			violations++
		}
	}
	if fence == 0 || bRec.Seq != fence+1 {
		t.Logf("round %d: B's fence at %d, B's record at %d", round, fence, bRec.Seq)
		violations++
	}
	if got := uint64(landed) + 3; got != fence { // genesis, A's LeaseGranted, A's records, then B's fence
		t.Logf("round %d: A reported %d records landed, the log has B's fence at seq %d", round, landed, fence)
		violations++
	}
	return violations, landed, refused
}

// TestRestartKeepsEveryAcknowledgedRecord stops the server and starts it on
// the same directory: every acknowledged record is there, and the log goes on
// with the next seq.
func TestRestartKeepsEveryAcknowledgedRecord(t *testing.T) {
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	l := openLog(t, srv.ClientURL(), 1, jetstream.Config{})
	task := create(t, l)
	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}
	var acked []eventlog.Envelope
	for i := range 50 {
		env, err := l.Emit(ctx, lease, turn(t, task, i), eventlog.EmitOptions{})
		if err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
		acked = append(acked, env)
	}
	srv.Shutdown()
	srv, err = srv.Restart(ctx)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	l2 := openLog(t, srv.ClientURL(), 1, jetstream.Config{})
	envs, err := l2.Read(ctx, task, 0)
	if err != nil {
		t.Fatalf("Read after restart: %v", err)
	}
	if got, want := len(envs), 2+len(acked); got != want { // genesis + LeaseGranted + records
		t.Fatalf("records after restart: got %d, want %d", got, want)
	}
	for i, a := range acked {
		g := envs[i+2]
		if g.ID != a.ID || g.Seq != a.Seq || string(g.Payload) != string(a.Payload) {
			t.Errorf("record %d after restart: got %s seq %d %s, want %s seq %d %s", i, g.ID, g.Seq, g.Payload, a.ID, a.Seq, a.Payload)
		}
	}
	next, err := l2.Emit(ctx, eventlog.Lease{ID: "L2", Task: task, Generation: 2, Worker: "w"}, turn(t, task, 99), eventlog.EmitOptions{})
	if err != nil {
		t.Fatalf("Emit after restart: %v", err)
	}
	if want := uint64(len(acked) + 4); next.Seq != want { // + the new LeaseGranted
		t.Errorf("first record after restart: got seq %d, want %d", next.Seq, want)
	}
	t.Logf("restart: %d acknowledged records survived; the log continued at seq %d", len(acked)+2, next.Seq)
}

// suspended is a typed TaskSuspended envelope, valid as NewEnvelope made it.
func suspended(t *testing.T) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope("", eventlog.OriginEngine, "t", noeta.TaskSuspended{
		Reason: "waiting_human", WakeOn: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "h1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !eventlog.FromTyped(env) {
		t.Fatal("NewEnvelope's envelope is not vouched for")
	}
	return env
}

func TestBadInput(t *testing.T) {
	ctx := t.Context()
	l := openLog(t, singleURL, 1, jetstream.Config{})
	task := create(t, l)
	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}

	tests := []struct {
		name    string
		do      func() error
		want    error
		mention string
	}{
		{"payload over the cap", func() error {
			env := turn(t, task, 1)
			env.Payload = []byte(`{"turn":1,"x":"` + strings.Repeat("a", 4096) + `"}`)
			env.Type = "FutureThing"
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrPayloadTooLarge, "size=4113"},
		{"invalid task id", func() error {
			env, _ := eventlog.NewEnvelope("bad.id", eventlog.OriginEngine, "t", noeta.TaskCreated{TaskID: "bad.id", Agent: "a", RootTaskID: "bad.id"})
			_, err := l.Create(ctx, env)
			return err
		}, eventlog.ErrInvalidArgument, `'.' at byte 3`},
		{"unknown origin", func() error {
			env := turn(t, task, 1)
			env.Origin = "robot"
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrInvalidArgument, `origin "robot"`},
		{"schema violation", func() error {
			env := eventlog.Envelope{Type: noeta.TypeTaskSuspended, Origin: eventlog.OriginEngine, Actor: "t",
				Payload: []byte(`{"reason":"waiting_human","wake_on":{"kind":"human_response"}}`)}
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrInvalidArgument, "/wake_on"},
		// A typed envelope skips the schema only while its payload is what
		// NewEnvelope made (ADR 0037): replacing it, editing it in place, or
		// relabelling its type puts it back under the schema.
		{"typed envelope, payload replaced", func() error {
			env := suspended(t)
			env.Payload = []byte(`{"reason":"waiting_human","wake_on":{"kind":"human_response"}}`)
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrInvalidArgument, "/wake_on"},
		{"typed envelope, payload edited in place", func() error {
			env := suspended(t)
			i := bytes.Index(env.Payload, []byte(`"handle"`))
			copy(env.Payload[i:], `"xandle"`)
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrInvalidArgument, "/wake_on"},
		{"typed envelope, type relabelled", func() error {
			env := suspended(t)
			env.Type = noeta.TypeTurnStarted
			_, err := l.Emit(ctx, lease, env, eventlog.EmitOptions{})
			return err
		}, eventlog.ErrInvalidArgument, "TurnStarted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
	envs, err := l.Read(ctx, task, 0)
	if err != nil || len(envs) != 1 {
		t.Errorf("after refused writes: got %d records, %v; want only the genesis", len(envs), err)
	}
}

// TestMalformedRecordOnTaskSubject publishes garbage straight to a task's log
// and inbox, as a buggy or hostile client could: reads report it with its
// stream sequence, or skip and count it when asked to; appends refuse to build
// on it; nothing panics.
func TestMalformedRecordOnTaskSubject(t *testing.T) {
	ctx := t.Context()
	// A prefix of its own: the damage it publishes must not reach the
	// listings of the suites on the default prefix (on a second run,
	// -count, it did).
	prefix := freshPrefix("junk")
	var skipped []error
	var mu sync.Mutex
	strict := openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix})
	lenient := openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix, OnCorrupt: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		skipped = append(skipped, err)
	}})
	task := create(t, strict)
	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}
	if _, err := strict.Emit(ctx, lease, turn(t, task, 1), eventlog.EmitOptions{}); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf(prefix+".t.%d.%s.log", jetstream.Partition(task), task)
	ack, err := js.Publish(ctx, subject, []byte("this is not a CloudEvent"))
	if err != nil {
		t.Fatalf("raw publish: %v", err)
	}

	_, err = strict.Read(ctx, task, 0)
	var corrupt *jetstream.CorruptRecordError
	if !errors.As(err, &corrupt) || !errors.Is(err, jetstream.ErrCorrupt) {
		t.Fatalf("strict Read: got %v, want a CorruptRecordError", err)
	}
	if corrupt.StreamSeq != ack.Sequence || !strings.Contains(err.Error(), fmt.Sprint(ack.Sequence)) {
		t.Errorf("strict Read: error %q names stream sequence %d, want %d", err, corrupt.StreamSeq, ack.Sequence)
	}

	envs, err := lenient.Read(ctx, task, 0)
	if err != nil {
		t.Fatalf("lenient Read: %v", err)
	}
	if len(envs) != 3 || len(skipped) != 1 || lenient.CorruptRecords() != 1 {
		t.Errorf("lenient Read: got %d records, %d skipped (counter %d), want 3 and 1", len(envs), len(skipped), lenient.CorruptRecords())
	}

	_, err = strict.Emit(ctx, eventlog.Lease{ID: "L2", Task: task, Generation: 2, Worker: "w"}, turn(t, task, 2), eventlog.EmitOptions{})
	if !errors.Is(err, jetstream.ErrCorrupt) {
		t.Errorf("Emit after a corrupt tail: got %v, want ErrCorrupt", err)
	}

	inbox := fmt.Sprintf(prefix+".t.%d.%s.in.junk", jetstream.Partition(task), task)
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: inbox, Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Inbox(ctx, task); !errors.Is(err, jetstream.ErrCorrupt) {
		t.Errorf("strict Inbox: got %v, want ErrCorrupt", err)
	}
	if got, err := lenient.Inbox(ctx, task); err != nil || len(got) != 0 {
		t.Errorf("lenient Inbox: got %d records, %v; want 0, nil", len(got), err)
	}
}

func TestOpenRefusesAMismatchedStream(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	want := jetstream.StreamConfig(jetstream.Config{Prefix: "mismatch"})
	want.DenyDelete = false
	want.AllowDirect = false
	if _, err := js.CreateStream(ctx, want); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.Open(ctx, nc, jetstream.Config{Prefix: "mismatch"})
	if !errors.Is(err, jetstream.ErrConfigMismatch) {
		t.Fatalf("Open over a mismatched stream: got %v, want ErrConfigMismatch", err)
	}
	for _, field := range []string{"deny_delete", "allow_direct"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	// Opening twice with matching settings is fine.
	for range 2 {
		if _, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: "again"}); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	_ = time.Second
}
