package jetstream_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestReadReportsAGap puts a log with a hole in it on the stream — genesis,
// LeaseGranted, TurnStarted (seqs 1–3), then a well-formed record claiming
// seq 6 — as a store that lost records 4 and 5 to a damaged message block
// leaves it. Before, Read returned 1, 2, 3, 6 and nothing else said a
// word: `engine events` printed the log without #4 and #5 and exited 0. Now
// Read fails with a *eventlog.GapError naming the task and seqs 4-5, from
// genesis and from after seq 2, while a read that ends before the hole is
// fine; with OnCorrupt set, the gap is reported there and the read goes on.
func TestReadReportsAGap(t *testing.T) {
	ctx := t.Context()
	var reported []error
	var mu sync.Mutex
	strict := openLog(t, singleURL, 1, jetstream.Config{})
	lenient := openLog(t, singleURL, 1, jetstream.Config{OnCorrupt: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err)
	}})
	task := create(t, strict)
	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}
	if _, err := strict.Emit(ctx, lease, turn(t, task, 1), eventlog.EmitOptions{}); err != nil {
		t.Fatal(err)
	}
	// The record a writer would have put at seq 6.
	env := turn(t, task, 2)
	env.ID, env.Seq, env.Time, env.LeaseGen, env.CorrelationID = noeta.NewID(), 6, time.Now(), 1, task
	body, err := jetstream.CloudEvent(env)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(fmt.Sprintf("noeta.t.%d.%s.log", jetstream.Partition(task), task))
	msg.Data = body
	msg.Header.Set("Noeta-Type", env.Type)
	msg.Header.Set("Noeta-Seq", strconv.FormatUint(env.Seq, 10))
	msg.Header.Set("Noeta-Lease", "L1")
	msg.Header.Set("Noeta-Lease-Gen", "1")
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("raw publish: %v", err)
	}

	for _, after := range []uint64{0, 2, 3} {
		envs, err := strict.Read(ctx, task, after)
		var gap *eventlog.GapError
		if !errors.As(err, &gap) || !errors.Is(err, eventlog.ErrGap) {
			t.Fatalf("Read after %d: got %d records, %v; want a GapError", after, len(envs), err)
		}
		if gap.Task != task || gap.First != 4 || gap.Last != 5 || gap.Next != 6 || gap.After != 3 {
			t.Errorf("Read after %d: gap %+v, want task %s seqs 4-5 before 6", after, *gap, task)
		}
		for _, want := range []string{task, "missing seq 4-5"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Read after %d: error %q does not name %q", after, err, want)
			}
		}
	}
	if envs, err := strict.Read(ctx, task, 5); err != nil || len(envs) != 1 || envs[0].Seq != 6 {
		t.Errorf("Read after 5: got %d records, %v; want seq 6 alone", len(envs), err)
	}

	envs, err := lenient.Read(ctx, task, 0)
	if err != nil || len(envs) != 4 {
		t.Fatalf("lenient Read: got %d records, %v; want 4 and the gap reported", len(envs), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || !errors.Is(reported[0], eventlog.ErrGap) {
		t.Errorf("lenient Read reported %v, want the one gap", reported)
	}
}

// TestOpenRefusesALostStream removes the task stream of a store that was
// used, as `rm -r <data>/nats/jetstream/$G/streams/NOETA_TASKS` does on the
// embedded server. Before, the next Open created a fresh, empty stream and
// every verb carried on as if no task had ever run. Now Open (and a Reader)
// refuse with ErrStreamLost, and create nothing; a prefix never used still
// opens.
func TestOpenRefusesALostStream(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	cfg := jetstream.Config{Prefix: "lost", Registry: staleRegistry{}}
	l, err := jetstream.Open(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	create(t, l)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "LOST_TASKS"); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.Open(ctx, nc, cfg)
	if !errors.Is(err, jetstream.ErrStreamLost) || !errors.Is(err, jetstream.ErrStreamMissing) {
		t.Fatalf("Open after the stream was removed: got %v, want ErrStreamLost", err)
	}
	if !strings.Contains(err.Error(), "LOST_TASKS") {
		t.Errorf("error %q does not name the stream", err)
	}
	if _, err := js.Stream(ctx, "LOST_TASKS"); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("Open recreated the lost stream (lookup: %v)", err)
	}
	if _, err := jetstream.OpenReader(ctx, nc, cfg); !errors.Is(err, jetstream.ErrStreamLost) {
		t.Errorf("OpenReader after the stream was removed: got %v, want ErrStreamLost", err)
	}
	if _, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: "neverused", Registry: staleRegistry{}}); err != nil {
		t.Errorf("Open of a fresh prefix: %v", err)
	}
}

// TestOpenDispatcherRefusesLostRows: the rows bucket removed beside a task
// stream that holds records is refused, not created afresh. Reproduction:
// rm -rf the KV_noeta_tasks stream directory; engine tasks then exited 0
// with every task's dispatch state blank, and engine approve on a waiting
// task said "no task in this deployment".
func TestOpenDispatcherRefusesLostRows(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	dcfg := testDispatcherConfig(1, "lostrows")
	d, err := jetstream.OpenDispatcher(ctx, nc, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: "lostrows", Registry: d})
	if err != nil {
		t.Fatal(err)
	}
	create(t, l)
	_ = l.Close()
	_ = d.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "lostrows_tasks"); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.OpenDispatcher(ctx, nc, dcfg)
	if !errors.Is(err, jetstream.ErrStreamLost) || !strings.Contains(err.Error(), "KV_lostrows_tasks") {
		t.Fatalf("OpenDispatcher after the rows were removed: got %v, want ErrStreamLost naming the bucket", err)
	}
	if _, err := js.KeyValue(ctx, "lostrows_tasks"); !errors.Is(err, natsjs.ErrBucketNotFound) {
		t.Errorf("OpenDispatcher recreated the lost rows (lookup: %v)", err)
	}
}
