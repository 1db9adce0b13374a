package jetstream_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestOpenReader: a Reader binds to the task stream an engine's Open
// created, without creating anything, and reads what the Log wrote; its one
// write is SystemEmit. Without a task stream it fails and creates none.
func TestOpenReader(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// A prefix nobody opened: no stream, and OpenReader does not make one.
	if _, err := jetstream.OpenReader(ctx, nc, jetstream.Config{Prefix: "reader-none"}); !errors.Is(err, jetstream.ErrStreamMissing) {
		t.Fatalf("OpenReader without a stream: %v, want ErrStreamMissing", err)
	}
	if _, err := js.Stream(ctx, "READER_NONE_TASKS"); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Fatalf("OpenReader created the stream: %v", err)
	}

	// A prefix of its own: other tests put corrupt records in the default's.
	l := openLog(t, singleURL, 1, jetstream.Config{Prefix: "reader-test"})
	task := create(t, l)
	body := []byte(strings.Repeat("body ", 100))
	ref, err := l.Put(ctx, body, "text/plain")
	if err != nil {
		t.Fatal(err)
	}

	// Replicas is not compared: a reader does not define the stream.
	r, err := jetstream.OpenReader(ctx, nc, jetstream.Config{Prefix: "reader-test", Replicas: 3})
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	var _ interface {
		eventlog.Reader
		eventlog.TaskIndex
	} = r

	got, err := r.Read(ctx, task, 0)
	if err != nil || len(got) != 1 || got[0].Type != noeta.TypeTaskCreated {
		t.Fatalf("Read: %v %v", got, err)
	}
	env, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "reader-test", noeta.SubtaskCompleted{SubtaskID: "c", Status: "completed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SystemEmit(ctx, task, "k", env); err != nil {
		t.Fatalf("SystemEmit: %v", err)
	}
	if in, err := r.Inbox(ctx, task); err != nil || len(in) != 1 || in[0].Key != "k" {
		t.Fatalf("Inbox: %v %v", in, err)
	}
	if _, err := r.LatestSnapshot(ctx, task); !errors.Is(err, eventlog.ErrNotFound) {
		t.Errorf("LatestSnapshot of a task without one: %v", err)
	}
	if tasks, err := r.Tasks(ctx); err != nil || !slices.ContainsFunc(tasks, func(s eventlog.TaskSummary) bool { return s.Task == task }) {
		t.Errorf("Tasks: %v %v", tasks, err)
	}
	if b, err := r.Get(ctx, ref); err != nil || string(b) != string(body) {
		t.Errorf("Get: %q %v", b, err)
	}
	if m, err := r.GetMany(ctx, []noeta.ContentRef{ref}); err != nil || len(m) != 1 {
		t.Errorf("GetMany: %v %v", m, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, task, 0); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
}

// TestEnsureDeadLetterStream creates the dead-letter stream once, accepts it
// as it is, and refuses one with other settings.
func TestEnsureDeadLetterStream(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	for range 2 {
		if err := jetstream.EnsureDeadLetterStream(ctx, nc, "ensure-dlq", 1); err != nil {
			t.Fatalf("EnsureDeadLetterStream: %v", err)
		}
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "ENSURE_DLQ_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; strings.Join(got, " ") != "ensure-dlq.dlq.> ensure-dlq.quarantine.>" {
		t.Errorf("subjects %v", got)
	}
	cfg := jetstream.DeadLetterStreamConfig("ensure-other", 1)
	cfg.MaxAge = 1e12
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := jetstream.EnsureDeadLetterStream(ctx, nc, "ensure-other", 1); !errors.Is(err, jetstream.ErrConfigMismatch) {
		t.Errorf("EnsureDeadLetterStream over other settings: %v, want ErrConfigMismatch", err)
	}
}

// TestReaderReadsWithoutAConsumer: a Reader reads a task's records with
// direct gets, in batches, and creates no consumer on the task stream, so a
// user allowed only its own feed consumers there (deploy/nats's observer
// groups) can read.
//
// Before: every Read and Inbox created an ordered consumer under a random
// name, so an observer's user needed the right to create, pull and delete
// any consumer on the task stream, another group's durable included.
func TestReaderReadsWithoutAConsumer(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	l := openLog(t, singleURL, 1, jetstream.Config{Prefix: "reader-direct"})
	task := create(t, l)
	// More than one batch of records (500 a batch).
	const n = 612
	for i := range n {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "reader-test", noeta.SubtaskCompleted{SubtaskID: "c", Status: "completed"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.SystemEmit(ctx, task, fmt.Sprintf("k%04d", i), env); err != nil {
			t.Fatal(err)
		}
	}
	r, err := jetstream.OpenReader(ctx, nc, jetstream.Config{Prefix: "reader-direct"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	created, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.CREATED.READER_DIRECT_TASKS.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	in, err := r.Inbox(ctx, task)
	if err != nil || len(in) != n {
		t.Fatalf("Inbox: %d records, %v; want %d", len(in), err, n)
	}
	for i, env := range in {
		if want := fmt.Sprintf("k%04d", i); env.Key != want {
			t.Fatalf("inbox record %d has key %s, want %s", i, env.Key, want)
		}
	}
	if recs, err := r.Read(ctx, task, 0); err != nil || len(recs) != 1 {
		t.Fatalf("Read: %v %v", recs, err)
	}

	// The first consumer created on the stream after the reads is the
	// marker: the reads created none.
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "READER_DIRECT_TASKS", natsjs.ConsumerConfig{Name: "marker"}); err != nil {
		t.Fatal(err)
	}
	m, err := created.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(m.Subject, ".marker") {
		t.Errorf("the reads created consumer %s", m.Subject)
	}
}
