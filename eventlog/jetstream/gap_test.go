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
	// A prefix of its own: the damage it publishes must not reach the
	// listings of the suites on the default prefix (on a second run,
	// -count, it did).
	prefix := freshPrefix("gap")
	var reported []error
	var mu sync.Mutex
	strict := openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix})
	lenient := openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix, OnCorrupt: func(err error) {
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
	msg := nats.NewMsg(fmt.Sprintf(prefix+".t.%d.%s.log", jetstream.Partition(task), task))
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
	// A prefix of this run's own: a second run (-count) would find the
	// first one's buckets without their stream.
	prefix := freshPrefix("lost")
	stream := strings.ToUpper(prefix) + "_TASKS"
	cfg := jetstream.Config{Prefix: prefix, Registry: staleRegistry{}}
	l, err := jetstream.Open(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	create(t, l)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, stream); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.Open(ctx, nc, cfg)
	if !errors.Is(err, jetstream.ErrStreamLost) || !errors.Is(err, jetstream.ErrStreamMissing) {
		t.Fatalf("Open after the stream was removed: got %v, want ErrStreamLost", err)
	}
	if !strings.Contains(err.Error(), stream) {
		t.Errorf("error %q does not name the stream", err)
	}
	if _, err := js.Stream(ctx, stream); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("Open recreated the lost stream (lookup: %v)", err)
	}
	if _, err := jetstream.OpenReader(ctx, nc, cfg); !errors.Is(err, jetstream.ErrStreamLost) {
		t.Errorf("OpenReader after the stream was removed: got %v, want ErrStreamLost", err)
	}
	if _, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: freshPrefix("neverused"), Registry: staleRegistry{}}); err != nil {
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
	prefix := freshPrefix("lostrows")
	bucket := prefix + "_tasks"
	dcfg := testDispatcherConfig(1, prefix)
	d, err := jetstream.OpenDispatcher(ctx, nc, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: prefix, Registry: d})
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
	if err := js.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.OpenDispatcher(ctx, nc, dcfg)
	if !errors.Is(err, jetstream.ErrStreamLost) || !strings.Contains(err.Error(), "KV_"+bucket) {
		t.Fatalf("OpenDispatcher after the rows were removed: got %v, want ErrStreamLost naming the bucket", err)
	}
	if _, err := js.KeyValue(ctx, bucket); !errors.Is(err, natsjs.ErrBucketNotFound) {
		t.Errorf("OpenDispatcher recreated the lost rows (lookup: %v)", err)
	}
}

// freshPrefix is base and a suffix no other run of the test binary used, so
// that a test which deletes part of a store can run again (-count) on the
// package's one server.
func freshPrefix(base string) string {
	return base + strings.ToLower(noeta.NewID()[20:])
}
