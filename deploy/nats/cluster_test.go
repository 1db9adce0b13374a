package nats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
)

// Scripts of the tasks the tests run.
const (
	scriptEcho     = `[{"tool_calls":[{"tool":"echo","args":{"x":1}}]},{"finish":{"answer":"ok"}}]`
	scriptExternal = `[{"wait_external":{"event_kind":"go"}},{"finish":{"answer":"ok"}}]`
	scriptHuman    = `[{"yield_for_human":{"question":"ship it?"}},{"finish":{"answer":"shipped"}}]`
	scriptSpawn    = `[{"spawn":[{"agent":"helper","goal":"a","script":[{"finish":{"answer":"1"}}]},{"agent":"helper","goal":"b","script":[{"finish":{"answer":"2"}}]}]},{"finish":{"answer":"both"}}]`
	scriptTimer    = `[{"wait_timer":{"seconds":1}},{"finish":{"answer":"later"}}]`
	// scriptLong is the restart test's: several turns, so records are being
	// appended throughout.
	scriptLong = `[{"tool_calls":[{"tool":"echo","args":{"n":1}}]},{"tool_calls":[{"tool":"echo","args":{"n":2}}]},{"tool_calls":[{"tool":"echo","args":{"n":3}}]},` +
		`{"tool_calls":[{"tool":"echo","args":{"n":4}}]},{"tool_calls":[{"tool":"echo","args":{"n":5}}]},{"finish":{"answer":"done"}}]`
)

func logSubject(task string) string {
	return fmt.Sprintf("noeta.t.%d.%s.log", noeta.Partition(task), task)
}

// TestSingleNode runs single.conf as a real nats-server process with the
// roles doing their real work through the code: an engine runs tasks
// that touch every stream and bucket (content, spawns, timers, approvals); an
// observer worker's child, audit and counting observers consume every
// partition, hand children's results to their parents and wake them, and
// dead-letter a record; an approver answers a question and an approval on
// its approval subject; an operator inspects, reads a dispatcher row and
// deletes the dead letter. Not one permission violation may
// appear in the server's log: the roles are wide enough.
func TestSingleNode(t *testing.T) {
	n := materializeSingle(t, t.TempDir())
	n.start(t)
	n.waitHealthy(t, 30*time.Second)
	e := startEngine(t, n.url(), 1, 4)
	o := startObserver(t, n.url(), 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	big := e.submit(t, "boss", strings.Repeat("a goal over the payload cap ", 200), scriptEcho)
	spawn := e.submit(t, "boss", "spawn", scriptSpawn)
	timer := e.submit(t, "boss", "timer", scriptTimer)
	human := e.submit(t, "boss", "question", scriptHuman)
	gated := e.submit(t, "gated", "approval", scriptGated)

	// An approver answers the question and an approval on its approval
	// subject, as engine approve --nats does; the operator inspects.
	onc, _ := connect(t, n.url(), "operator")
	op, err := jetstream.OpenReader(ctx, onc, jetstream.Config{})
	if err != nil {
		t.Fatalf("OpenReader as operator: %v", err)
	}
	alice := openApprover(t, ctx, n.url(), "alice")
	for _, id := range []string{human, gated} {
		st := waitFold(t, foldTask(op), id, time.Minute, "the request", suspendedOn(noeta.WakeHumanResponse))
		waitRowSuspended(t, onc, id, time.Minute)
		if err := alice.Approve(ctx, id, st.WakeOn.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "yes"}); err != nil {
			t.Fatalf("alice answers %s: %v", id, err)
		}
	}
	if pending, err := alice.Tasks(ctx); err != nil || len(pending) < 5 {
		t.Errorf("alice lists the tasks: %d, %v", len(pending), err)
	}
	for _, id := range []string{big, spawn, timer, human, gated} {
		st := waitFold(t, foldTask(op), id, time.Minute, "the end", terminal)
		if len(st.Answer) == 0 {
			t.Errorf("task %s ended without an answer: %+v", id, st)
		}
	}
	if st, _, err := engine.FoldTask(ctx, op, op, big); err != nil || st.GoalRef == nil {
		t.Errorf("operator fold of %s: %+v %v (want its goal in the content store)", big, st, err)
	} else if b, err := op.Get(ctx, *st.GoalRef); err != nil || len(b) < 4096 {
		t.Errorf("operator content read: %d bytes, %v", len(b), err)
	}
	// A body big enough that reading it back takes flow control (the
	// object store's push consumer asks the reader to answer on $JS.FC).
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16)
	ref, err := e.log.Put(ctx, body, "application/octet-stream")
	if err != nil {
		t.Fatalf("engine Put: %v", err)
	}
	if b, err := op.Get(ctx, ref); err != nil || !bytes.Equal(b, body) {
		t.Errorf("operator reads a %d-byte body: %d bytes, %v", len(body), len(b), err)
	}
	// Two engines storing one body at once both write it (Put looks, then
	// writes): the second write purges the first one's chunks, which the
	// engine's role must allow (the violations check below), or they stay.
	ejs, err := natsjs.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ejs.ObjectStore(ctx, "noeta_content")
	if err != nil {
		t.Fatalf("engine binds the content store: %v", err)
	}
	stored := func() uint64 {
		info, err := objs.Status(ctx)
		if err != nil {
			t.Fatalf("content store status: %v", err)
		}
		return info.Size()
	}
	before := stored()
	if _, err := objs.PutBytes(ctx, ref.Hash, body); err != nil {
		t.Fatalf("engine writes a stored body again: %v", err)
	}
	if after := stored(); after > before+4096 {
		t.Errorf("a body written twice takes %d bytes, once %d: the first write's chunks were not purged", after, before)
	}
	if b, err := op.Get(ctx, ref); err != nil || !bytes.Equal(b, body) {
		t.Errorf("operator reads the body written twice: %d bytes, %v", len(b), err)
	}
	// The rate limits' counts, as an engine whose agents have rate_limits
	// takes them: the bucket made, a count created, then updated.
	rates, err := jetstream.OpenRates(ctx, e.nc, "noeta", 1)
	if err != nil {
		t.Fatalf("engine opens the rate limits' bucket: %v", err)
	}
	for i := range 2 {
		if n, ok, err := rates.Take(ctx, "p.ZGV2.0.YWxpY2U.1", 5, time.Minute); err != nil || !ok || n != int64(i+1) {
			t.Fatalf("engine takes a rate count: %d %v %v", n, ok, err)
		}
	}
	if tasks, err := op.Tasks(ctx); err != nil || len(tasks) < 6 {
		t.Errorf("operator task list: %d tasks, %v", len(tasks), err)
	}
	ojs, err := natsjs.New(onc)
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := ojs.KeyValue(ctx, "noeta_tasks"); err != nil {
		t.Errorf("operator binds the dispatcher rows: %v", err)
	} else if row, err := kv.Get(ctx, big); err != nil || !strings.Contains(string(row.Value()), `"terminal"`) {
		t.Errorf("operator reads a dispatcher row: %v", err)
	}

	// Every log record reaches the observers.
	for _, id := range []string{big, spawn, timer, human, gated} {
		st := waitFold(t, foldTask(e.log), id, time.Second, "the end", terminal)
		deadline := time.Now().Add(time.Minute)
		for o.auditedOf(id) < int(st.LastSeq) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := o.auditedOf(id); got != int(st.LastSeq) {
			t.Errorf("observers saw %d of task %s's %d records", got, id, st.LastSeq)
		}
	}

	// A record whose handler keeps failing is dead-lettered (the observer
	// publishes the copy), and the operator deletes the dead letter.
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- o.feed.Consume(fctx, eventlog.FeedConfig{Group: "obs-hooks", Partitions: []int{noeta.Partition(big)},
			MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond}},
			func(_ context.Context, d eventlog.Delivery) error {
				if d.Env.Task == big && d.Env.Seq == 1 {
					return errors.New("this handler always fails")
				}
				return nil
			})
	}()
	for deadline := time.Now().Add(time.Minute); o.feed.Stats().DeadLettered == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("nothing dead-lettered: %+v", o.feed.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	dlq, err := ojs.Stream(ctx, "NOETA_DLQ")
	if err != nil {
		t.Fatalf("operator binds the dead letters: %v", err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, jetstream.DeadLetterSubject("noeta", "obs-hooks"))
	if err != nil || m.Header.Get(jetstream.HeaderOriginalSubject) != logSubject(big) {
		t.Fatalf("operator reads the dead letter: %v", err)
	}
	if err := dlq.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Errorf("operator deletes the dead letter: %v", err)
	}

	if v := n.violations(); len(v) > 0 {
		t.Errorf("the roles' real work met %d permission violations:\n%s", len(v), strings.Join(v, "\n"))
	}
}

// TestCluster runs cluster-1.conf, cluster-2.conf and cluster-3.conf as three
// real nats-server processes, and checks each role against them with R3
// streams: what the broker refuses each, what each can do, that the streams
// the code creates on the cluster are the files', and that a node killed and
// restarted while an engine runs a hundred tasks loses no acknowledged record.
func TestCluster(t *testing.T) {
	began := time.Now()
	nodes := materializeCluster(t, t.TempDir())
	for _, n := range nodes {
		n.start(t)
	}
	for _, n := range nodes {
		n.waitHealthy(t, time.Minute)
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url())
	}
	all := strings.Join(urls, ",")
	e := startEngine(t, all, clusterReplicas, 8)
	t.Logf("cluster up and streams created in %v", time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The rate limits' bucket, made as an engine whose agents have
	// rate_limits makes it (the engine here has none): its definition is
	// checked with the others.
	if _, err := jetstream.OpenRates(ctx, e.nc, "noeta", clusterReplicas); err != nil {
		t.Fatalf("engine opens the rate limits' bucket: %v", err)
	}
	onc, oerrs := connect(t, all, "observer")
	reader, err := jetstream.OpenReader(ctx, onc, jetstream.Config{RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("OpenReader as observer: %v", err)
	}
	// One finished task to read and to try to write to.
	done := e.submit(t, "boss", "finished", scriptEcho)
	waitFold(t, foldRead(reader), done, time.Minute, "the end", terminal)
	// expected collects the subjects the test provokes violations on.
	var expected []string

	t.Run("observer cannot write a log", func(t *testing.T) {
		before, err := reader.Read(ctx, done, 0)
		if err != nil {
			t.Fatal(err)
		}
		subj := logSubject(done)
		// A plain publish: the server refuses it and says so.
		if err := onc.Publish(subj, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		if err := onc.Flush(); err != nil {
			t.Fatal(err)
		}
		if oerrs.violation(subj, 10*time.Second) == nil {
			t.Errorf("no permissions violation for the observer's publish to %s; async errors: %v", subj, oerrs.all())
		}
		// A JetStream publish, fenced as a writer's append would be.
		ojs, err := natsjs.New(onc)
		if err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err = ojs.Publish(pctx, subj, []byte("forged"), natsjs.WithExpectLastSequencePerSubject(0), natsjs.WithRetryAttempts(0))
		pcancel()
		if err == nil {
			t.Errorf("the observer's JetStream publish to %s succeeded", subj)
		}
		// A new task's genesis.
		fresh := logSubject("forged-task")
		pctx, pcancel = context.WithTimeout(ctx, time.Second)
		_, err = ojs.Publish(pctx, fresh, []byte("forged"), natsjs.WithRetryAttempts(0))
		pcancel()
		if err == nil || oerrs.violation(fresh, 10*time.Second) == nil {
			t.Errorf("the observer's publish to %s: %v, want a permissions violation", fresh, err)
		}
		// The buckets and the stream definitions are out of reach too.
		kvSubj := "$KV.noeta_tasks." + done
		pctx, pcancel = context.WithTimeout(ctx, time.Second)
		_, err = ojs.Publish(pctx, kvSubj, []byte(`{"status":"ready"}`), natsjs.WithRetryAttempts(0))
		pcancel()
		if err == nil || oerrs.violation(kvSubj, 10*time.Second) == nil {
			t.Errorf("the observer's write of %s: %v, want a permissions violation", kvSubj, err)
		}
		pctx, pcancel = context.WithTimeout(ctx, time.Second)
		_, err = ojs.CreateStream(pctx, natsjs.StreamConfig{Name: "FORGED", Subjects: []string{"forged.>"}})
		pcancel()
		if err == nil || oerrs.violation("$JS.API.STREAM.CREATE.FORGED", 10*time.Second) == nil {
			t.Errorf("the observer's stream create: %v, want a permissions violation", err)
		}
		pctx, pcancel = context.WithTimeout(ctx, time.Second)
		err = ojs.DeleteStream(pctx, "NOETA_TASKS")
		pcancel()
		if err == nil || oerrs.violation("$JS.API.STREAM.DELETE.NOETA_TASKS", 10*time.Second) == nil {
			t.Errorf("the observer's stream delete: %v, want a permissions violation", err)
		}
		expected = append(expected, subj, fresh, kvSubj, "$JS.API.STREAM.CREATE.FORGED", "$JS.API.STREAM.DELETE.NOETA_TASKS")

		after, err := reader.Read(ctx, done, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("the log of %s went from %d to %d records", done, len(before), len(after))
		}
		if _, err := reader.Read(ctx, "forged-task", 0); !errors.Is(err, eventlog.ErrNotFound) {
			t.Errorf("forged-task has a log: %v", err)
		}

		// The engine's append to a .log subject, through Emit under a lease,
		// succeeds: a task of its own, on a queue no worker takes from.
		id := noeta.NewTaskID()
		genesis, err := eventlog.NewEnvelope(id, eventlog.OriginSystem, "deploy-test",
			noeta.TaskCreated{TaskID: id, Agent: "boss", Goal: "g", RootTaskID: id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.log.Create(ctx, genesis); err != nil {
			t.Fatalf("engine Create: %v", err)
		}
		if err := e.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{Queue: "manual"}); err != nil {
			t.Fatal(err)
		}
		lease, err := e.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "deploy-test", Task: id})
		if err != nil {
			t.Fatal(err)
		}
		patch, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "deploy-test", noeta.TaskStatePatched{Patch: json.RawMessage(`{"by":"engine"}`)})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := e.log.Emit(ctx, lease, patch, eventlog.EmitOptions{})
		if err != nil {
			t.Fatalf("engine Emit under a lease: %v", err)
		}
		if err := e.disp.Release(ctx, lease, eventlog.Release{Next: eventlog.DispatchTerminal, Reason: "test done"}); err != nil {
			t.Fatal(err)
		}
		recs, err := reader.Read(ctx, id, 0)
		if err != nil || len(recs) != 3 || recs[2].ID != stored.ID {
			t.Errorf("the observer reads %d records of the engine's task (%v), want TaskCreated, LeaseGranted and the patch", len(recs), err)
		}
	})

	t.Run("observer does its work", func(t *testing.T) {
		// Read a task's records.
		got, err := reader.Read(ctx, done, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.log.Read(ctx, done, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, func(a, b eventlog.Envelope) bool { return a.ID == b.ID && a.Seq == b.Seq }) {
			t.Errorf("the observer reads %d records, the engine %d", len(got), len(want))
		}
		// Consume its durable feed: a group of its own on the task's
		// partition, R3 consumers, every record of the task in order.
		feed, err := jetstream.OpenFeed(ctx, onc, jetstream.FeedOptions{Replicas: clusterReplicas})
		if err != nil {
			t.Fatalf("OpenFeed as observer: %v", err)
		}
		var mu sync.Mutex
		var seqs []uint64
		fctx, stop := context.WithCancel(ctx)
		consumed := make(chan error, 1)
		go func() {
			consumed <- feed.Consume(fctx, eventlog.FeedConfig{Group: "obs-trace", Partitions: []int{noeta.Partition(done)}},
				func(_ context.Context, d eventlog.Delivery) error {
					if d.Env.Task == done && d.Env.Seq > 0 {
						mu.Lock()
						seqs = append(seqs, d.Env.Seq)
						mu.Unlock()
					}
					return nil
				})
		}()
		for deadline := time.Now().Add(time.Minute); ; {
			mu.Lock()
			n := len(seqs)
			mu.Unlock()
			if n >= len(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the feed delivered %d of %d records: %+v", n, len(want), feed.Stats())
			}
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		if err := <-consumed; err != nil {
			t.Fatalf("Consume as observer: %v", err)
		}
		for i, s := range seqs[:len(want)] {
			if s != uint64(i+1) {
				t.Fatalf("the feed delivered seqs %v", seqs)
			}
		}
		// SystemEmit into an inbox, once per key.
		env, err := eventlog.NewEnvelope(done, eventlog.OriginObserver, "deploy-test",
			noeta.SubtaskCompleted{SubtaskID: "child-1", Status: noeta.SubtaskStatus("completed")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reader.SystemEmit(ctx, done, "subtask-child-1", env); err != nil {
			t.Fatalf("SystemEmit as observer: %v", err)
		}
		if _, err := reader.SystemEmit(ctx, done, "subtask-child-1", env); !errors.Is(err, eventlog.ErrAlreadyExists) {
			t.Errorf("second SystemEmit of one key: %v, want ErrAlreadyExists", err)
		}
		if inbox, err := reader.Inbox(ctx, done); err != nil || len(inbox) != 1 || inbox[0].Key != "subtask-child-1" {
			t.Errorf("inbox: %v %v", inbox, err)
		}
		// Wake a task through the ingress.
		waker, err := jetstream.NewWakePublisher(onc, "")
		if err != nil {
			t.Fatal(err)
		}
		id := e.submit(t, "boss", "wait for the observer", scriptExternal)
		waitFold(t, foldRead(reader), id, time.Minute, "the external wait", suspendedOn(noeta.WakeExternalEvent))
		if _, err := waker.Wake(ctx, id, noeta.ExternalWake("go")); err != nil {
			t.Fatalf("WakePublisher as observer: %v", err)
		}
		if st := waitFold(t, foldRead(reader), id, time.Minute, "the end", terminal); string(st.Answer) != `"ok"` {
			t.Errorf("woken task ended with %s", st.Answer)
		}
		// Audit records on noeta.audit.
		if err := onc.Publish("noeta.audit."+done, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		// But never a timer: neither a schedule on the engine-only timer
		// stream nor a fired timer's subject, nor the old layout's schedule
		// subject beside the ingress.
		for _, timerSubj := range []string{"noeta.timer.0.x.1", "noeta.timer.0.x", "noeta.wake.0.x.timer.1"} {
			if err := onc.Publish(timerSubj, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			_ = onc.Flush()
			if oerrs.violation(timerSubj, 10*time.Second) == nil {
				t.Errorf("no permissions violation for the observer's publish to %s", timerSubj)
			}
			expected = append(expected, timerSubj)
		}
	})

	t.Run("an approver answers a question, the operator inspects", func(t *testing.T) {
		pnc, perrs := connect(t, all, "operator")
		op, err := jetstream.OpenReader(ctx, pnc, jetstream.Config{RequestTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("OpenReader as operator: %v", err)
		}
		id := e.submit(t, "boss", "ask", scriptHuman)
		st := waitFold(t, foldTask(op), id, time.Minute, "the question", suspendedOn(noeta.WakeHumanResponse))
		waitRowSuspended(t, pnc, id, time.Minute)
		alice := openApprover(t, ctx, all, "alice")
		if err := alice.Approve(ctx, id, st.WakeOn.Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "yes"}); err != nil {
			t.Fatalf("alice answers: %v", err)
		}
		if st := waitFold(t, foldTask(op), id, time.Minute, "the end", terminal); string(st.Answer) != `"shipped"` {
			t.Errorf("approved task ended with %s", st.Answer)
		}
		pjs, err := natsjs.New(pnc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := pjs.KeyValue(ctx, "noeta_tasks")
		if err != nil {
			t.Fatalf("operator binds the dispatcher rows: %v", err)
		}
		if row, err := kv.Get(ctx, id); err != nil || !strings.Contains(string(row.Value()), `"terminal"`) {
			t.Errorf("operator reads the dispatcher row: %v", err)
		}
		// Never a log, an inbox or a bucket.
		for _, subj := range []string{logSubject(id), fmt.Sprintf("noeta.t.%d.%s.in.forged", noeta.Partition(id), id), "$KV.noeta_tasks." + id} {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			_, err := pjs.Publish(pctx, subj, []byte("forged"), natsjs.WithRetryAttempts(0))
			pcancel()
			if err == nil || perrs.violation(subj, 10*time.Second) == nil {
				t.Errorf("the operator's publish to %s: %v, want a permissions violation", subj, err)
			}
			expected = append(expected, subj)
		}
	})

	ar := approvalsRun{ctx: ctx, urls: all, e: e, reader: reader, expected: &expected}
	t.Run("an approver answers on its own subject", ar.approverAnswers)
	t.Run("an approver cannot answer under another name", ar.approverUnderAnotherName)
	t.Run("the operator cannot answer through a wake", ar.operatorCannotWake)
	t.Run("the engine refuses an approval on a plain wake", ar.plainWakeRefused)
	t.Run("an observer group cannot touch another's consumers", func(t *testing.T) { ar.groupIsolation(t, done) })
	t.Run("a roll-up by a wake publisher purges nothing", ar.rollupPurgesNothing)
	t.Run("a flood of wakes to one task is refused past the cap", ar.floodRefused)

	t.Run("the streams are the files'", func(t *testing.T) {
		// Read as the operator, whose job inspection is.
		pnc, _ := connect(t, all, "operator")
		js, err := natsjs.New(pnc)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range definitions() {
			if d.consumer == feedGroup+"-p00" {
				continue // no observer runs that group here
			}
			checkDefinition(t, d, readBack(ctx, t, js, d))
		}
	})

	t.Run("two engine serve processes share the tasks", func(t *testing.T) {
		twoServesShare(t, all, e)
	})

	t.Run("a node restarts under load", func(t *testing.T) {
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer rcancel()
		restartUnderLoad(rctx, t, e, reader, nodes)
	})

	// The only violations are the ones the test provoked.
	for _, n := range nodes {
		for _, v := range n.violations() {
			if !slices.ContainsFunc(expected, func(s string) bool { return strings.Contains(v, `"`+s+`"`) }) {
				t.Errorf("unexpected permission violation on %s: %s", n.name, v)
			}
		}
	}
	t.Logf("TestCluster took %v", time.Since(began).Round(time.Millisecond))
}

// restartUnderLoad submits a hundred tasks over several seconds, kills the
// node leading the task stream with SIGKILL once a fifth of them are in,
// waits for the other two to make progress without it, starts it again, and
// checks that every task completes and that every record an append acknowledged (the engine's
// subscribers are told of each after the broker acknowledged it) is in its
// log, at its seq, in a dense log that folds.
func restartUnderLoad(ctx context.Context, t *testing.T, e *engineSide, reader *jetstream.Reader, nodes []*node) {
	const (
		tasks = 100
		every = 80 * time.Millisecond // between submissions
	)
	var mu sync.Mutex
	acked := map[string]map[uint64]string{} // task -> seq -> envelope id
	sub := e.log.Subscribe(func(_ context.Context, env eventlog.Envelope) error {
		if env.Seq == 0 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if acked[env.Task] == nil {
			acked[env.Task] = map[uint64]string{}
		}
		acked[env.Task][env.Seq] = env.ID
		return nil
	})
	defer sub.Cancel()
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range acked {
			n += len(m)
		}
		return n
	}

	began := time.Now()
	ids := make(chan string, tasks)
	submitted := make(chan error, 1)
	go func() {
		defer close(ids)
		for i := range tasks {
			// Submitting retries through the failover: the test is about
			// what was acknowledged, and a refused submission is not.
			var err error
			for attempt := 0; attempt < 20; attempt++ {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var id string
				id, err = e.eng.Submit(sctx, engine.Submission{Agent: "boss", Goal: fmt.Sprintf("task %d", i), Script: json.RawMessage(scriptLong)})
				cancel()
				if err == nil {
					ids <- id
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if err != nil {
				submitted <- fmt.Errorf("submit task %d: %w", i, err)
				return
			}
			time.Sleep(every)
		}
		submitted <- nil
	}()

	// Kill the task stream's leader once a fifth of the tasks are in.
	time.Sleep(tasks / 5 * every)
	js, err := natsjs.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	victim := nodes[0]
	if s, err := js.Stream(ctx, "NOETA_TASKS"); err == nil {
		if info, err := s.Info(ctx); err == nil && info.Cluster != nil {
			for _, n := range nodes {
				if n.name == info.Cluster.Leader {
					victim = n
				}
			}
		}
	}
	atKill, killedAt := ackedCount(), time.Since(began)
	victim.kill()
	// The two others elect new leaders and go on: wait for some progress
	// with the node down (the requests that were out to the dead leader time
	// out first), then start it again.
	for ackedCount() < atKill+200 {
		if time.Since(began)-killedAt > 45*time.Second {
			t.Errorf("no progress in 45s with %s down: %d records acknowledged, %d at the kill", victim.name, ackedCount(), atKill)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	restartedAt, atRestart := time.Since(began), ackedCount()
	victim.restarts++
	victim.start(t)
	victim.waitHealthy(t, time.Minute)
	t.Logf("killed %s (the task stream's leader) at %v with %d records acknowledged; restarted it at %v with %d; healthy again at %v with %d",
		victim.name, killedAt.Round(time.Millisecond), atKill, restartedAt.Round(time.Millisecond), atRestart,
		time.Since(began).Round(time.Millisecond), ackedCount())

	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	for _, id := range all {
		waitFold(t, foldRead(reader), id, 2*time.Minute, "the end", terminal)
	}
	t.Logf("%d tasks ended %v after the first was submitted", len(all), time.Since(began).Round(time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	records := 0
	for _, id := range all {
		envs, err := reader.Read(ctx, id, 0)
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		st, err := checkDense(envs)
		if err != nil {
			t.Errorf("task %s: %v", id, err)
			continue
		}
		if st.Status != noeta.StatusTerminal || string(st.Answer) != `"done"` {
			t.Errorf("task %s ended %s (%s) with answer %s, want completed with \"done\"", id, st.Status, st.Reason, st.Answer)
		}
		records += len(envs)
		if len(acked[id]) == 0 {
			t.Errorf("task %s: no acknowledged record seen", id)
		}
		for seq, envID := range acked[id] {
			if seq > uint64(len(envs)) || envs[seq-1].ID != envID {
				t.Errorf("task %s: acknowledged record %s at seq %d is not in the log", id, envID, seq)
			}
		}
	}
	t.Logf("%d records in %d dense logs that fold; every acknowledged one is there", records, len(all))
}
