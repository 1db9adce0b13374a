package jetstream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestCloudEventIsTheStoredBody checks CloudEvent against the bytes the
// stream holds: for a genesis, a leased append (after its LeaseGranted) and an
// inbox record, both as the write returned the record and as Read and Inbox
// return it.
func TestCloudEventIsTheStoredBody(t *testing.T) {
	ctx := t.Context()
	nc := connect(t, singleURL)
	l := openLog(t, singleURL, 1, jetstream.Config{})
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "NOETA_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	stored := func(subject string) []byte {
		t.Helper()
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatalf("get %s: %v", subject, err)
		}
		return m.Data
	}
	task := noeta.NewTaskID()
	logSubject := fmt.Sprintf("noeta.t.%d.%s.log", jetstream.Partition(task), task)
	genesis, err := eventlog.NewEnvelope(task, eventlog.OriginSystem, "cli", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "say <hi> & bye", RootTaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	created, err := l.Create(ctx, genesis)
	if err != nil {
		t.Fatal(err)
	}
	checkBody(t, "TaskCreated as written", created, stored(logSubject))

	lease := eventlog.Lease{ID: "L1", Task: task, Generation: 1, Worker: "w"}
	emitted, err := l.Emit(ctx, lease, turn(t, task, 1), eventlog.EmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBody(t, "TurnStarted as written", emitted, stored(logSubject))

	inboxEnv, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "child_lifecycle", noeta.SubtaskCompleted{SubtaskID: "child-1", Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`"42"`)})
	if err != nil {
		t.Fatal(err)
	}
	inboxEnv.CausationID = emitted.ID
	in, err := l.SystemEmit(ctx, task, "subtask-child-1", inboxEnv)
	if err != nil {
		t.Fatal(err)
	}
	inboxSubject := fmt.Sprintf("noeta.t.%d.%s.in.subtask-child-1", jetstream.Partition(task), task)
	checkBody(t, "SubtaskCompleted as written", in, stored(inboxSubject))

	// Read back: every record of the log, LeaseGranted included, and the
	// inbox, against the stored message at the same position.
	envs, err := l.Read(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 3 || envs[1].Type != noeta.TypeLeaseGranted {
		t.Fatalf("read %d records, want TaskCreated, LeaseGranted, TurnStarted", len(envs))
	}
	for i, body := range storedBodies(t, stream, logSubject, len(envs)) {
		checkBody(t, envs[i].Type+" as read", envs[i], body)
	}
	inbox, err := l.Inbox(ctx, task)
	if err != nil || len(inbox) != 1 {
		t.Fatalf("inbox: %d records, %v", len(inbox), err)
	}
	checkBody(t, "SubtaskCompleted as read", inbox[0], stored(inboxSubject))
}

// storedBodies returns the first n message bodies on subject, in order.
func storedBodies(t *testing.T, stream natsjs.Stream, subject string, n int) [][]byte {
	t.Helper()
	cons, err := stream.OrderedConsumer(t.Context(), natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for range n {
		msg, err := cons.Next(natsjs.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("next message on %s: %v", subject, err)
		}
		out = append(out, msg.Data())
	}
	return out
}

func checkBody(t *testing.T, what string, env eventlog.Envelope, want []byte) {
	t.Helper()
	got, err := jetstream.CloudEvent(env)
	if err != nil {
		t.Fatalf("%s: CloudEvent: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: CloudEvent differs from the stored body\n got  %s\n want %s", what, got, want)
	}
	var ce map[string]any
	if err := json.Unmarshal(got, &ce); err != nil {
		t.Fatalf("%s: not JSON: %v", what, err)
	}
	if ce["specversion"] != "1.0" || ce["type"] != "noeta."+env.Type || ce["subject"] != env.Task || ce["id"] != env.ID {
		t.Errorf("%s: attributes %v", what, ce)
	}
	if env.Seq != 0 && ce["sequence"] != fmt.Sprint(env.Seq) {
		t.Errorf("%s: sequence %v, want %d", what, ce["sequence"], env.Seq)
	}
}

func TestCloudEventRefusesAnInvalidEnvelope(t *testing.T) {
	env, err := eventlog.NewEnvelope("task-1", eventlog.OriginEngine, "engine", noeta.TurnStarted{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	env.ID = ""
	if _, err := jetstream.CloudEvent(env); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("CloudEvent without an id: %v, want ErrInvalidArgument", err)
	}
}
