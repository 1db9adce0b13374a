package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// The Feed tests run each on a prefix of its own: a feed reads whole
// partitions of the task stream, so on a shared stream it would see the
// records of every other test.

// feedPrefix returns a fresh prefix whose streams are removed when the test
// ends.
func feedPrefix(t testing.TB, url string) string {
	t.Helper()
	prefix := "fd" + strings.ToLower(noeta.NewID()[16:])
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			return
		}
		defer nc.Close()
		js, err := natsjs.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		up := strings.ToUpper(prefix)
		for _, s := range []string{up + "_TASKS", up + "_DLQ", up + "_CONTENT", "KV_" + prefix + "_idempotency", "OBJ_" + prefix + "_content"} {
			_ = js.DeleteStream(ctx, s)
		}
	})
	return prefix
}

// feedRig is a Log on a fresh prefix, and what the tests need to write
// records and read them back.
type feedRig struct {
	url      string
	replicas int
	prefix   string
	log      *jetstream.Log
	js       natsjs.JetStream
}

// retry runs open until it succeeds (creating replicated streams on a loaded
// cluster can outlast a request timeout), for up to a minute.
func retry[T any](t testing.TB, what string, open func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := open()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func newFeedRig(t testing.TB, url string, replicas int) *feedRig {
	t.Helper()
	prefix := feedPrefix(t, url)
	nc := connect(t, url)
	l := retry(t, "Open", func() (*jetstream.Log, error) {
		return jetstream.Open(context.Background(), nc, jetstream.Config{Prefix: prefix, Replicas: replicas, Registry: staleRegistry{}})
	})
	t.Cleanup(func() { _ = l.Close() })
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &feedRig{url: url, replicas: replicas, prefix: prefix, log: l, js: js}
}

// open opens a Feed on a connection of its own, as a separate process would.
func (r *feedRig) open(t testing.TB, opts jetstream.FeedOptions) (*jetstream.Feed, *nats.Conn) {
	t.Helper()
	nc := connect(t, r.url)
	opts.Prefix, opts.Replicas = r.prefix, r.replicas
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := retry(t, "OpenFeed", func() (*jetstream.Feed, error) { return jetstream.OpenFeed(context.Background(), nc, opts) })
	return f, nc
}

// taskIn returns a new task id in partition p.
func taskIn(p int) string {
	for {
		if task := noeta.NewTaskID(); noeta.Partition(task) == p {
			return task
		}
	}
}

func (r *feedRig) create(t testing.TB, task string) {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.log.Create(context.Background(), env); err != nil {
		t.Fatalf("Create(%s): %v", task, err)
	}
}

// turns appends TurnStarted from..to to task under one lease; the first
// Emit of the lease also appends its LeaseGranted.
func (r *feedRig) turns(t testing.TB, task string, from, to int) {
	t.Helper()
	lease := eventlog.Lease{ID: "lease-" + task, Task: task, Generation: 1, Worker: "feed-test"}
	for n := from; n <= to; n++ {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: n})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.log.Emit(context.Background(), lease, env, eventlog.EmitOptions{}); err != nil {
			t.Fatalf("Emit(%s, turn %d): %v", task, n, err)
		}
	}
}

func (r *feedRig) inbox(t testing.TB, task, key string) {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "test", noeta.SubtaskCompleted{SubtaskID: key, Status: noeta.SubtaskStatusCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.log.SystemEmit(context.Background(), task, key, env); err != nil {
		t.Fatalf("SystemEmit(%s, %s): %v", task, key, err)
	}
}

// want is what Read and Inbox return for tasks: log records in seq order,
// then inbox records.
func (r *feedRig) want(t testing.TB, tasks []string) map[string][]eventlog.Envelope {
	t.Helper()
	out := map[string][]eventlog.Envelope{}
	for _, task := range tasks {
		envs, err := r.log.Read(context.Background(), task, 0)
		if err != nil {
			t.Fatalf("Read(%s): %v", task, err)
		}
		in, err := r.log.Inbox(context.Background(), task)
		if err != nil {
			t.Fatalf("Inbox(%s): %v", task, err)
		}
		out[task] = append(envs, in...)
	}
	return out
}

func (r *feedRig) logSubject(task string) string {
	return fmt.Sprintf("%s.t.%d.%s.log", r.prefix, noeta.Partition(task), task)
}

func (r *feedRig) dlqStream() string { return strings.ToUpper(r.prefix) + "_DLQ" }

// consumerName is the durable of group on partition p.
func consumerName(group string, p int) string {
	return jetstream.FeedConsumerConfig("", group, p, eventlog.FeedConfig{}).Durable
}

// waitPulling waits until every partition's consumer of group has at least n
// pull requests waiting: n processes are ready for the next record.
func (r *feedRig) waitPulling(t *testing.T, group string, parts []int, n int) {
	t.Helper()
	stream := strings.ToUpper(r.prefix) + "_TASKS"
	for _, p := range parts {
		waitFor(t, 30*time.Second, fmt.Sprintf("%d pulls waiting on partition %d", n, p), func() error {
			c, err := r.js.Consumer(context.Background(), stream, consumerName(group, p))
			if err != nil {
				return err
			}
			info, err := c.Info(context.Background())
			if err != nil {
				return err
			}
			if info.NumWaiting < n {
				return fmt.Errorf("%d waiting", info.NumWaiting)
			}
			return nil
		})
	}
}

// partitionsOf returns the sorted partitions of tasks.
func partitionsOf(tasks []string) []int {
	var parts []int
	for _, task := range tasks {
		parts = append(parts, noeta.Partition(task))
	}
	slices.Sort(parts)
	return slices.Compact(parts)
}

// delivery is one handler call: which process, what, and when.
type delivery struct {
	proc int
	d    eventlog.Delivery
	at   time.Time
}

// collector records handler calls in the order they happen.
type collector struct {
	mu  sync.Mutex
	got []delivery
}

// handler returns the handler of process proc: it records the delivery,
// then answers with fn (nil: success).
func (c *collector) handler(proc int, fn func(context.Context, eventlog.Delivery) error) eventlog.FeedHandler {
	return func(ctx context.Context, d eventlog.Delivery) error {
		c.mu.Lock()
		c.got = append(c.got, delivery{proc: proc, d: d, at: time.Now()})
		c.mu.Unlock()
		if fn != nil {
			return fn(ctx, d)
		}
		return nil
	}
}

func (c *collector) snapshot() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *collector) waitLen(t *testing.T, n int, limit time.Duration) []delivery {
	t.Helper()
	waitFor(t, limit, fmt.Sprintf("%d deliveries", n), func() error {
		if got := c.snapshot(); len(got) < n {
			var trail []string
			for _, g := range got {
				trail = append(trail, fmt.Sprintf("%d:%s/seq%d/key%q/attempt%d", g.proc, g.d.Env.Task, g.d.Env.Seq, g.d.Env.Key, g.d.Attempt))
			}
			return fmt.Errorf("%d: %v", len(got), trail)
		}
		return nil
	})
	return c.snapshot()
}

// consumeRun is one Consume call on a goroutine.
type consumeRun struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startConsume(t *testing.T, f *jetstream.Feed, fc eventlog.FeedConfig, h eventlog.FeedHandler) *consumeRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &consumeRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Consume(ctx, fc, h) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop cancels the Consume and returns what it returned.
func (r *consumeRun) stop(t *testing.T) error {
	r.cancel()
	return r.wait(t)
}

// wait waits for the Consume to return.
func (r *consumeRun) wait(t *testing.T) error {
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			r.err = errors.New("Consume did not return within 30s")
			t.Error(r.err)
		}
	})
	return r.err
}

// checkExactlyOnce checks that got holds every record of want once, equal
// to what Read and Inbox return, in the right partition; and each task's
// log records in seq order.
func checkExactlyOnce(t *testing.T, got []delivery, want map[string][]eventlog.Envelope) {
	t.Helper()
	byID := map[string]eventlog.Envelope{}
	total := 0
	for _, envs := range want {
		for _, e := range envs {
			byID[e.ID] = e
			total++
		}
	}
	seen := map[string]int{}
	logSeqs := map[string][]uint64{}
	for _, g := range got {
		e := g.d.Env
		seen[e.ID]++
		w, ok := byID[e.ID]
		switch {
		case !ok:
			t.Errorf("delivered a record nobody wrote: %+v", e)
			continue
		case !reflect.DeepEqual(e, w):
			t.Errorf("delivered %+v, Read/Inbox return %+v", e, w)
		}
		if g.d.Partition != noeta.Partition(e.Task) {
			t.Errorf("record of %s delivered as partition %d, want %d", e.Task, g.d.Partition, noeta.Partition(e.Task))
		}
		if e.Seq != 0 {
			logSeqs[e.Task] = append(logSeqs[e.Task], e.Seq)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("record %s delivered %d times, want once", id, n)
		}
	}
	if len(seen) != total {
		t.Errorf("delivered %d distinct records, want %d", len(seen), total)
	}
	for task, envs := range want {
		var wantSeqs []uint64
		for _, e := range envs {
			if e.Seq != 0 {
				wantSeqs = append(wantSeqs, e.Seq)
			}
		}
		if !slices.Equal(logSeqs[task], wantSeqs) {
			t.Errorf("log records of %s arrived as seqs %v, want %v", task, logSeqs[task], wantSeqs)
		}
	}
}

func countAll(want map[string][]eventlog.Envelope) int {
	n := 0
	for _, envs := range want {
		n += len(envs)
	}
	return n
}

func checkStats(t *testing.T, got, want jetstream.FeedStats) {
	t.Helper()
	if got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

// TestFeedDeliversEveryRecordOnce: log and inbox records of several tasks
// over several partitions, written before and while the group consumes,
// reach the handler once each, acknowledged, equal to what Read and Inbox
// return, each task's log in order. The cluster case runs on R3 streams.
func TestFeedDeliversEveryRecordOnce(t *testing.T) {
	for _, c := range []struct {
		name            string
		url             func() string
		replicas        int
		tasks, turns    int
		inbox           int
		allPartitions   bool
		deliveryTimeout time.Duration
	}{
		{"single", func() string { return singleURL }, 1, 12, 4, 2, true, 30 * time.Second},
		{"cluster", func() string { return clusterURL }, 3, 4, 3, 1, false, 60 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newFeedRig(t, c.url(), c.replicas)
			var tasks []string
			for range c.tasks {
				task := noeta.NewTaskID()
				tasks = append(tasks, task)
				r.create(t, task)
				r.turns(t, task, 1, c.turns/2)
			}
			fc := eventlog.FeedConfig{Group: "all"}
			if !c.allPartitions {
				fc.Partitions = partitionsOf(tasks)
			}
			f, _ := r.open(t, jetstream.FeedOptions{})
			var col collector
			run := startConsume(t, f, fc, col.handler(0, nil))
			// Half written before, half while it consumes.
			for i, task := range tasks {
				r.turns(t, task, c.turns/2+1, c.turns)
				for k := range c.inbox {
					r.inbox(t, task, fmt.Sprintf("subtask-%d-%d", i, k))
				}
			}
			want := r.want(t, tasks)
			total := countAll(want)
			col.waitLen(t, total, c.deliveryTimeout)
			time.Sleep(300 * time.Millisecond) // anything extra would show now
			if err := run.stop(t); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			got := col.snapshot()
			checkExactlyOnce(t, got, want)
			for _, g := range got {
				if g.d.Attempt != 1 {
					t.Errorf("record %s/%d delivered with attempt %d, want 1", g.d.Env.Task, g.d.Env.Seq, g.d.Attempt)
				}
			}
			checkStats(t, f.Stats(), jetstream.FeedStats{Delivered: uint64(total), Acked: uint64(total)})
		})
	}
}

// TestFeedGroupSharedByTwoProcesses: two Consume calls in one group, on
// connections of their own, share the partitions: together they see every
// record once, each task's log in order, and both get some.
func TestFeedGroupSharedByTwoProcesses(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	parts := []int{3, 17, 42}
	var tasks []string
	for i := range 9 {
		tasks = append(tasks, taskIn(parts[i%len(parts)]))
	}
	fc := eventlog.FeedConfig{Group: "shared", Partitions: parts}
	var col collector
	for proc := range 2 {
		f, _ := r.open(t, jetstream.FeedOptions{})
		startConsume(t, f, fc, col.handler(proc, nil))
	}
	r.waitPulling(t, fc.Group, parts, 2)
	for i, task := range tasks {
		r.create(t, task)
		r.turns(t, task, 1, 4)
		r.inbox(t, task, fmt.Sprintf("subtask-%d", i))
	}
	want := r.want(t, tasks)
	got := col.waitLen(t, countAll(want), 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	got = col.snapshot()
	checkExactlyOnce(t, got, want)
	per := [2]int{}
	for _, g := range got {
		per[g.proc]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("the processes handled %d and %d records: want both to take some", per[0], per[1])
	}
	t.Logf("process 0 handled %d records, process 1 %d", per[0], per[1])
}

// TestFeedRetriesThenDeadLetters: a record whose handler fails (or panics)
// is delivered again after each backoff with Attempt 2, 3; after MaxDeliver
// attempts it is copied to the group's dead-letter subject, and the
// partition moves on to the next record.
func TestFeedRetriesThenDeadLetters(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func() error
	}{
		{"error", func() error { return errors.New("poison record") }},
		{"panic", func() error { panic("poison record") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newFeedRig(t, singleURL, 1)
			task := noeta.NewTaskID()
			p := noeta.Partition(task)
			backoff := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}
			fc := eventlog.FeedConfig{Group: "retry", Partitions: []int{p}, MaxDeliver: 3, Backoff: backoff, AckWait: 10 * time.Second}
			f, _ := r.open(t, jetstream.FeedOptions{})
			var col collector
			const poison = 3 // TaskCreated, LeaseGranted, then turn 1
			run := startConsume(t, f, fc, col.handler(0, func(_ context.Context, d eventlog.Delivery) error {
				if d.Env.Seq == poison {
					return c.fail()
				}
				return nil
			}))
			r.create(t, task)
			r.turns(t, task, 1, 3) // seqs 2 (LeaseGranted) to 5
			got := col.waitLen(t, 7, 30*time.Second)
			time.Sleep(300 * time.Millisecond)
			if err := run.stop(t); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			got = col.snapshot()

			var seqs []uint64
			var attempts []int
			var poisonAt []time.Time
			for _, g := range got {
				seqs = append(seqs, g.d.Env.Seq)
				attempts = append(attempts, g.d.Attempt)
				if g.d.Env.Seq == poison {
					poisonAt = append(poisonAt, g.at)
				}
			}
			if want := []uint64{1, 2, 3, 3, 3, 4, 5}; !slices.Equal(seqs, want) {
				t.Fatalf("delivered seqs %v, want %v", seqs, want)
			}
			if want := []int{1, 1, 1, 2, 3, 1, 1}; !slices.Equal(attempts, want) {
				t.Errorf("attempts %v, want %v", attempts, want)
			}
			for i, b := range backoff {
				if gap := poisonAt[i+1].Sub(poisonAt[i]); gap < b*3/4 {
					t.Errorf("attempt %d came %v after attempt %d, want about the backoff %v", i+2, gap, i+1, b)
				}
			}
			checkStats(t, f.Stats(), jetstream.FeedStats{Delivered: 7, Acked: 4, Redelivered: 2, Failed: 2, DeadLettered: 1})

			dl, err := r.js.Stream(t.Context(), r.dlqStream())
			if err != nil {
				t.Fatal(err)
			}
			m, err := dl.GetLastMsgForSubject(t.Context(), jetstream.DeadLetterSubject(r.prefix, fc.Group))
			if err != nil {
				t.Fatalf("dead letter: %v", err)
			}
			if e := m.Header.Get(jetstream.HeaderError); !strings.Contains(e, "poison record") {
				t.Errorf("%s is %q, want the handler's error", jetstream.HeaderError, e)
			}
			if a := m.Header.Get(jetstream.HeaderAttempts); a != "3" {
				t.Errorf("%s is %q, want 3", jetstream.HeaderAttempts, a)
			}
			if g := m.Header.Get(jetstream.HeaderGroup); g != fc.Group {
				t.Errorf("%s is %q, want %q", jetstream.HeaderGroup, g, fc.Group)
			}
			if s := m.Header.Get(jetstream.HeaderOriginalSubject); s != r.logSubject(task) {
				t.Errorf("%s is %q, want %q", jetstream.HeaderOriginalSubject, s, r.logSubject(task))
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.HeaderOriginalStreamSeq), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", jetstream.HeaderOriginalStreamSeq, err)
			}
			ts, err := r.js.Stream(t.Context(), strings.ToUpper(r.prefix)+"_TASKS")
			if err != nil {
				t.Fatal(err)
			}
			orig, err := ts.GetMsg(t.Context(), seq)
			if err != nil {
				t.Fatal(err)
			}
			if orig.Subject != r.logSubject(task) || !bytes.Equal(orig.Data, m.Data) || m.Header.Get("Noeta-Seq") != strconv.Itoa(poison) {
				t.Errorf("the dead letter is not a copy of record %d (stream seq %d): headers %v", poison, seq, m.Header)
			}
		})
	}
}

// TestFeedProcessDeathHandsRecordOver: a process of the group stops while
// its handler holds a record, without acknowledging it. Cancelled, it hands
// the record back at once; with its connection gone, the record goes after
// AckWait. Either way the other process gets it, with Attempt 2, and then the
// rest of the partition.
func TestFeedProcessDeathHandsRecordOver(t *testing.T) {
	for _, c := range []struct {
		name  string
		close bool // the connection (else the context)
	}{
		{"context cancelled", false},
		{"connection closed", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newFeedRig(t, singleURL, 1)
			task := noeta.NewTaskID()
			p := noeta.Partition(task)
			fc := eventlog.FeedConfig{Group: "death", Partitions: []int{p}, AckWait: time.Second}
			const held = 3
			var col collector
			holding := make(chan struct{})
			release := make(chan struct{})
			fa, ncA := r.open(t, jetstream.FeedOptions{})
			runA := startConsume(t, fa, fc, col.handler(0, func(ctx context.Context, d eventlog.Delivery) error {
				if d.Env.Seq != held {
					return nil
				}
				close(holding)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-release:
					return nil
				}
			}))
			r.create(t, task)
			r.turns(t, task, 1, 2) // seqs 2 to 4
			select {
			case <-holding:
			case <-time.After(30 * time.Second):
				t.Fatal("process A never got the record")
			}
			fb, _ := r.open(t, jetstream.FeedOptions{})
			startConsume(t, fb, fc, col.handler(1, nil))
			r.waitPulling(t, fc.Group, []int{p}, 1)
			stopped := time.Now()
			if c.close {
				ncA.Close()
			} else if err := runA.stop(t); err != nil {
				t.Errorf("A's Consume returned %v, want nil", err)
			}
			got := col.waitLen(t, 5, 30*time.Second)
			handedOver := time.Since(stopped)
			close(release)
			if c.close {
				if err := runA.wait(t); !errors.Is(err, nats.ErrConnectionClosed) {
					t.Errorf("A's Consume returned %v, want the closed connection", err)
				}
			}
			time.Sleep(300 * time.Millisecond)
			got = col.snapshot()
			var trail []string
			for _, g := range got {
				trail = append(trail, fmt.Sprintf("%d:seq%d/attempt%d", g.proc, g.d.Env.Seq, g.d.Attempt))
			}
			want := []string{"0:seq1/attempt1", "0:seq2/attempt1", "0:seq3/attempt1", "1:seq3/attempt2", "1:seq4/attempt1"}
			if !slices.Equal(trail, want) {
				t.Errorf("deliveries %v, want %v", trail, want)
			}
			t.Logf("handed over %v after A stopped", handedOver)
		})
	}
}

// TestFeedQuarantinesWhatDoesNotDecode: messages published straight onto the
// task stream that are not records of ours, or not of the subject they sit
// on, are copied to the quarantine subject, counted, reported, and skipped:
// the records after them are delivered.
func TestFeedQuarantinesWhatDoesNotDecode(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	task := noeta.NewTaskID()
	p := noeta.Partition(task)
	r.create(t, task)
	r.turns(t, task, 1, 1)
	ctx := t.Context()
	ts, err := r.js.Stream(ctx, strings.ToUpper(r.prefix)+"_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	last, err := ts.GetLastMsgForSubject(ctx, r.logSubject(task))
	if err != nil {
		t.Fatal(err)
	}
	other := taskIn(p)
	bad := []struct {
		name    string
		subject string
		data    []byte
		hdr     nats.Header
	}{
		{"not a CloudEvent", r.logSubject(other), []byte("this is not a CloudEvent"), nats.Header{"Noeta-Type": {"TurnStarted"}, "Noeta-Seq": {"1"}}},
		{"empty body", r.logSubject(taskIn(p)), nil, nats.Header{"Noeta-Type": {"TurnStarted"}}},
		{"another task's record", r.logSubject(other), last.Data, last.Header},
		{"a log record in an inbox", fmt.Sprintf("%s.t.%d.%s.in.k1", r.prefix, p, task), last.Data, nil},
	}
	seqOf := map[uint64]string{}
	for _, b := range bad {
		m := nats.NewMsg(b.subject)
		m.Data = b.data
		for k, v := range b.hdr {
			if !strings.HasPrefix(k, "Nats-") {
				m.Header[k] = v
			}
		}
		if len(m.Header) == 0 {
			m.Header = nil
		}
		ack, err := r.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish %s: %v", b.name, err)
		}
		seqOf[ack.Sequence] = b.name
	}
	r.turns(t, task, 2, 3)

	type reported struct {
		subject string
		seq     uint64
		err     error
	}
	var mu sync.Mutex
	var reports []reported
	f, _ := r.open(t, jetstream.FeedOptions{OnQuarantine: func(subject string, seq uint64, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, reported{subject, seq, err})
	}})
	var col collector
	run := startConsume(t, f, eventlog.FeedConfig{Group: "q", Partitions: []int{p}}, col.handler(0, nil))
	// The task's log only: Inbox would return the log record put in its
	// inbox, which the Feed refuses.
	envs, err := r.log.Read(ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]eventlog.Envelope{task: envs}
	col.waitLen(t, countAll(want), 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	if err := run.stop(t); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	checkExactlyOnce(t, col.snapshot(), want)
	checkStats(t, f.Stats(), jetstream.FeedStats{Delivered: uint64(countAll(want)), Acked: uint64(countAll(want)), Quarantined: uint64(len(bad))})

	mu.Lock()
	defer mu.Unlock()
	if len(reports) != len(bad) {
		t.Fatalf("OnQuarantine told of %d records, want %d", len(reports), len(bad))
	}
	for _, rep := range reports {
		name, ok := seqOf[rep.seq]
		if !ok {
			t.Errorf("OnQuarantine told of stream sequence %d (%s), which is not one of the bad messages", rep.seq, rep.subject)
		}
		if !errors.Is(rep.err, jetstream.ErrCorrupt) {
			t.Errorf("%s: OnQuarantine error %v, want ErrCorrupt", name, rep.err)
		}
	}
	dl, err := r.js.Stream(ctx, r.dlqStream())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := dl.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{jetstream.QuarantineSubject(r.prefix, "q")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(len(bad), natsjs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for m := range batch.Messages() {
		b := bad[i]
		i++
		h := m.Headers()
		if h.Get(jetstream.HeaderOriginalSubject) != b.subject || !bytes.Equal(m.Data(), b.data) {
			t.Errorf("quarantined copy %d: subject %q, data %q; want %q, %q", i, h.Get(jetstream.HeaderOriginalSubject), m.Data(), b.subject, b.data)
		}
		if h.Get(jetstream.HeaderError) == "" || h.Get(jetstream.HeaderOriginalStreamSeq) == "" {
			t.Errorf("quarantined copy %d lacks the error or the stream sequence: %v", i, h)
		}
	}
	if i != len(bad) {
		t.Errorf("the quarantine subject holds %d copies, want %d", i, len(bad))
	}
}

// TestFeedRestartResumes: a group consumes half the records and stops; a new
// Consume in the same group gets the rest, and nothing acknowledged comes
// back.
func TestFeedRestartResumes(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	var tasks []string
	for range 6 {
		task := noeta.NewTaskID()
		tasks = append(tasks, task)
		r.create(t, task)
		r.turns(t, task, 1, 5)
	}
	want := r.want(t, tasks)
	total := countAll(want)
	fc := eventlog.FeedConfig{Group: "restart", Partitions: partitionsOf(tasks)}

	f1, _ := r.open(t, jetstream.FeedOptions{})
	var first collector
	var n atomic.Int64
	var run1 *consumeRun
	stop1 := make(chan struct{})
	var once sync.Once
	run1 = startConsume(t, f1, fc, first.handler(0, func(context.Context, eventlog.Delivery) error {
		if n.Add(1) == int64(total/2) {
			once.Do(func() { close(stop1) })
		}
		return nil
	}))
	select {
	case <-stop1:
	case <-time.After(30 * time.Second):
		t.Fatal("the first run never got half the records")
	}
	if err := run1.stop(t); err != nil {
		t.Fatalf("first Consume: %v", err)
	}
	got1 := first.snapshot()
	if s := f1.Stats(); s.Acked != uint64(len(got1)) || s.Delivered != uint64(len(got1)) {
		t.Errorf("first run: handled %d records, Stats() = %+v: want every one acknowledged", len(got1), s)
	}
	if len(got1) >= total {
		t.Fatalf("the first run handled all %d records before it stopped", total)
	}

	f2, _ := r.open(t, jetstream.FeedOptions{})
	var second collector
	startConsume(t, f2, fc, second.handler(1, nil))
	second.waitLen(t, total-len(got1), 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	got2 := second.snapshot()
	t.Logf("first run handled %d records, second %d", len(got1), len(got2))
	checkExactlyOnce(t, append(got1, got2...), want)
}

// TestFeedShutdown: cancelling Consume while a handler is in flight lets it
// finish, acknowledges its record, and returns promptly, with no goroutine of
// the Feed left; the group resumes after that record. Not parallel: it looks
// at every goroutine of the process.
func TestFeedShutdown(t *testing.T) {
	r := newFeedRig(t, singleURL, 1)
	task := noeta.NewTaskID()
	fc := eventlog.FeedConfig{Group: "shutdown", Partitions: []int{noeta.Partition(task)}}
	f, _ := r.open(t, jetstream.FeedOptions{})
	const slow = 3
	entered := make(chan struct{})
	var finished atomic.Bool
	var col collector
	run := startConsume(t, f, fc, col.handler(0, func(ctx context.Context, d eventlog.Delivery) error {
		if d.Env.Seq == slow {
			close(entered)
			time.Sleep(500 * time.Millisecond) // ignores ctx: a handler finishing its work
			finished.Store(true)
		}
		return nil
	}))
	r.create(t, task)
	r.turns(t, task, 1, 2) // seqs 2 to 4
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never got the record")
	}
	start := time.Now()
	if err := run.stop(t); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	took := time.Since(start)
	if !finished.Load() {
		t.Error("Consume returned before the handler in flight finished")
	}
	if took > 5*time.Second {
		t.Errorf("Consume took %v to return after its context ended", took)
	}
	t.Logf("Consume returned %v after its context ended (the handler had 500ms of work left)", took)
	if s := f.Stats(); s.Delivered != 3 || s.Acked != 3 {
		t.Errorf("Stats() = %+v, want 3 delivered and acknowledged", s)
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "jetstream.(*Feed)") {
		t.Errorf("a goroutine of the Feed outlived Consume:\n%s", stacks)
	}

	var again collector
	startConsume(t, f, fc, again.handler(1, nil))
	got := again.waitLen(t, 1, 30*time.Second)
	if d := got[0].d; d.Env.Seq != slow+1 || d.Attempt != 1 {
		t.Errorf("after the restart the group got seq %d (attempt %d), want seq %d (attempt 1)", d.Env.Seq, d.Attempt, slow+1)
	}
}

// TestFeedNeverStalls: a partition's records, one after another as fast as
// they are acknowledged, with no pause between two of them. (nats.go's
// Consume and Messages, asked for one message at a time, now and then sat
// out their 30s heartbeat check here: about one record in a few thousand.)
func TestFeedNeverStalls(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	const p = 5
	var tasks []string
	for range 4 {
		task := taskIn(p)
		tasks = append(tasks, task)
		r.create(t, task)
		r.turns(t, task, 1, 300)
	}
	want := r.want(t, tasks)
	f, _ := r.open(t, jetstream.FeedOptions{})
	var col collector
	startConsume(t, f, eventlog.FeedConfig{Group: "fast", Partitions: []int{p}}, col.handler(0, nil))
	got := col.waitLen(t, countAll(want), 60*time.Second)
	var gap time.Duration
	for i := 1; i < len(got); i++ {
		gap = max(gap, got[i].at.Sub(got[i-1].at))
	}
	t.Logf("%d records in %v, the longest wait between two %v", len(got), got[len(got)-1].at.Sub(got[0].at), gap)
	if gap > 2*time.Second {
		t.Errorf("the partition stalled for %v between two records", gap)
	}
	// Everything was written before the group started: Pending counts down.
	if first, last := got[0].d.Pending, got[len(got)-1].d.Pending; first != uint64(len(got)-1) || last != 0 {
		t.Errorf("Pending went from %d to %d, want %d to 0", first, last, len(got)-1)
	}
	checkExactlyOnce(t, got, want)
}

// TestFeedSurvivesServerRestart: the server restarts under a consuming
// group; its pull requests die with it, and the group asks again once the
// connection is back, so records written after the restart arrive.
func TestFeedSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	// A configured port: Restart keeps it (or fails), so the clients'
	// reconnects find the server again.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), ServerName: "feed-restart", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	r := newFeedRig(t, srv.ClientURL(), 1)
	task := noeta.NewTaskID()
	f, _ := r.open(t, jetstream.FeedOptions{})
	var col collector
	startConsume(t, f, eventlog.FeedConfig{Group: "restart", Partitions: []int{noeta.Partition(task)}}, col.handler(0, nil))
	r.create(t, task)
	r.turns(t, task, 1, 2)
	col.waitLen(t, 4, 30*time.Second)

	if srv, err = srv.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.ClientURL() != r.url {
		t.Fatalf("the restarted server listens on %s, not %s, though its port was configured", srv.ClientURL(), r.url)
	}
	// The Log's connection reconnects too; its first appends may meet a
	// server still starting JetStream.
	lease := eventlog.Lease{ID: "lease-" + task, Task: task, Generation: 1, Worker: "feed-test"}
	for n := 3; n <= 4; n++ {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: n})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, fmt.Sprintf("append turn %d after the restart", n), func() error {
			_, err := r.log.Emit(t.Context(), lease, env, eventlog.EmitOptions{})
			return err
		})
	}
	started := time.Now()
	col.waitLen(t, 6, 60*time.Second)
	t.Logf("records written after the restart arrived within %v", time.Since(started))
	checkExactlyOnce(t, col.snapshot(), r.want(t, []string{task}))
}

// TestFeedStartsWhileClusterElects: a group started while its cluster has
// lost its quorum (two of three nodes down: no meta leader, every consumer
// creation refused or unanswered) waits for the cluster rather than
// ending, and consumes once the nodes are back.
//
// Before: a consumer's creation was tried five times within about two
// seconds, and an observer group started beside a cluster electing its
// leader under load ended with "no responders".
func TestFeedStartsWhileClusterElects(t *testing.T) {
	t.Parallel()
	cl, err := embedded.StartCluster(t.Context(), embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	r := newFeedRig(t, cl.ClientURL(), 3)
	task := noeta.NewTaskID()
	r.create(t, task)
	f, _ := r.open(t, jetstream.FeedOptions{})

	cl.StopNode(1)
	cl.StopNode(2)
	var col collector
	run := startConsume(t, f, eventlog.FeedConfig{Group: "elects", Partitions: []int{noeta.Partition(task)}}, col.handler(0, nil))
	select {
	case err := <-run.done:
		run.done <- err // for the cleanup's stop
		t.Fatalf("Consume ended while the cluster had no leader: %v", err)
	case <-time.After(5 * time.Second):
	}
	for _, i := range []int{1, 2} {
		if err := cl.RestartNode(t.Context(), i); err != nil {
			t.Fatalf("RestartNode(%d): %v", i, err)
		}
	}
	col.waitLen(t, 1, 60*time.Second)
	if err := run.stop(t); err != nil {
		t.Errorf("Consume: %v", err)
	}
	checkExactlyOnce(t, col.snapshot(), r.want(t, []string{task}))
}

// TestFeedConsumerDeleted: a consumer deleted under a running group (by an
// operator, say) is created again, and the group goes on: from the start of
// the stream, as a new group would.
func TestFeedConsumerDeleted(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	task := noeta.NewTaskID()
	p := noeta.Partition(task)
	f, _ := r.open(t, jetstream.FeedOptions{})
	var col collector
	startConsume(t, f, eventlog.FeedConfig{Group: "deleted", Partitions: []int{p}}, col.handler(0, nil))
	r.create(t, task)
	col.waitLen(t, 1, 30*time.Second)
	r.waitPulling(t, "deleted", []int{p}, 1)
	if err := r.js.DeleteConsumer(t.Context(), strings.ToUpper(r.prefix)+"_TASKS", consumerName("deleted", p)); err != nil {
		t.Fatal(err)
	}
	r.turns(t, task, 1, 1) // seqs 2 and 3
	got := col.waitLen(t, 4, 30*time.Second)
	var seqs []uint64
	for _, g := range got {
		seqs = append(seqs, g.d.Env.Seq)
	}
	if want := []uint64{1, 1, 2, 3}; !slices.Equal(seqs, want) {
		t.Errorf("delivered seqs %v, want %v (the new consumer starts over)", seqs, want)
	}
}

// TestFeedBadInput: invalid configs and a missing task stream are refused.
func TestFeedBadInput(t *testing.T) {
	t.Parallel()
	r := newFeedRig(t, singleURL, 1)
	f, nc := r.open(t, jetstream.FeedOptions{})
	h := func(context.Context, eventlog.Delivery) error { return nil }
	for _, c := range []struct {
		name string
		fc   eventlog.FeedConfig
		h    eventlog.FeedHandler
	}{
		{"no group", eventlog.FeedConfig{}, h},
		{"group with a dot", eventlog.FeedConfig{Group: "a.b"}, h},
		{"partition out of range", eventlog.FeedConfig{Group: "g", Partitions: []int{64}}, h},
		{"negative MaxDeliver", eventlog.FeedConfig{Group: "g", MaxDeliver: -1}, h},
		{"negative backoff", eventlog.FeedConfig{Group: "g", Backoff: []time.Duration{-1}}, h},
		{"nil handler", eventlog.FeedConfig{Group: "g"}, nil},
	} {
		if err := f.Consume(t.Context(), c.fc, c.h); !errors.Is(err, eventlog.ErrInvalidArgument) {
			t.Errorf("%s: Consume returned %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if _, err := jetstream.OpenFeed(t.Context(), nc, jetstream.FeedOptions{Prefix: "nosuchprefix"}); err == nil {
		t.Error("OpenFeed on a prefix without a task stream succeeded")
	}
	if _, err := jetstream.OpenFeed(t.Context(), nc, jetstream.FeedOptions{Prefix: r.prefix, Replicas: 3}); !errors.Is(err, jetstream.ErrConfigMismatch) {
		t.Errorf("OpenFeed with other replicas than the existing dead-letter stream: %v, want ErrConfigMismatch", err)
	}
}

// TestFeedConsumerConfig pins the consumer definition deploy/ must match.
func TestFeedConsumerConfig(t *testing.T) {
	t.Parallel()
	got := jetstream.FeedConsumerConfig("", "obs-audit", 7, eventlog.FeedConfig{Group: "obs-audit", AckWait: 3 * time.Second, MaxDeliver: 9})
	want := natsjs.ConsumerConfig{
		Durable:       "obs-audit-p07",
		Description:   got.Description,
		FilterSubject: "noeta.t.7.>",
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       3 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FeedConsumerConfig = %+v, want %+v", got, want)
	}
	if d := jetstream.FeedConsumerConfig("x", "g", 63, eventlog.FeedConfig{}); d.Durable != "g-p63" || d.FilterSubject != "x.t.63.>" || d.AckWait != eventlog.DefaultAckWait {
		t.Errorf("FeedConsumerConfig(x, g, 63) = %+v", d)
	}
	if s := jetstream.DeadLetterSubject("noeta", "g"); s != "noeta.dlq.g" {
		t.Errorf("DeadLetterSubject = %q", s)
	}
}

// BenchmarkFeedLatency: writers append TurnStarted records to many tasks at
// a fixed rate for feedBenchFor while one Consume (all partitions) handles
// them; latency is the handler's clock minus the record's time (stamped by
// the Log just before its publish), so it spans the fenced append, its
// fsync, delivery and the handler call; append-p50/p99 are the appends alone
// (the record's time to Emit's return); commit-p50/p99 are from the commit,
// as its writer learns of it (Emit's return), to the handler, 0 when the
// handler ran first. On the single node with sync always
// (the package's server) and on one with nats-server's default sync
// interval; records/s is the rate the writers reached.
func BenchmarkFeedLatency(b *testing.B) {
	for _, tg := range benchSyncTargets(b) {
		for _, rate := range []int{1000, 2500, 5000} {
			b.Run(fmt.Sprintf("%s/rate=%d", tg.name, rate), func(b *testing.B) { benchFeedLatency(b, tg.url, rate) })
		}
	}
}

func benchFeedLatency(b *testing.B, url string, rate int) {
	const (
		feedBenchFor     = 4 * time.Second
		feedBenchWriters = 32
		feedBenchTasks   = 256
	)
	r := newFeedRig(b, url, 1)
	tasks := make([]string, feedBenchTasks)
	for i := range tasks {
		tasks[i] = noeta.NewTaskID()
		r.create(b, tasks[i])
		r.turns(b, tasks[i], 1, 1)
	}
	f, _ := r.open(b, jetstream.FeedOptions{})
	var (
		mu      sync.Mutex
		lats    []time.Duration // commit to handler
		appends []time.Duration // Emit: from the record's time to its return
		since   time.Time
		// met holds, by record, the first of its two moments to arrive:
		// Emit's return or the handler's call; the second computes the
		// commit-to-handler latency.
		met     = map[string]time.Time{}
		commits []time.Duration
	)
	meet := func(key string, now time.Time, handler bool) {
		first, ok := met[key]
		if !ok {
			met[key] = now
			return
		}
		delete(met, key)
		d := now.Sub(first) // handler after commit
		if !handler {
			d = 0 // the handler ran before Emit returned
		}
		commits = append(commits, d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.Consume(ctx, eventlog.FeedConfig{Group: "bench"}, func(_ context.Context, d eventlog.Delivery) error {
			now := time.Now()
			mu.Lock()
			if !since.IsZero() && d.Env.Time.After(since) {
				lats = append(lats, now.Sub(d.Env.Time))
				meet(fmt.Sprint(d.Env.Task, "/", d.Env.Seq), now, true)
			}
			mu.Unlock()
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Consume: %v", err)
		}
	}()
	// Let it catch up with the setup records first.
	pre := uint64(3 * feedBenchTasks) // TaskCreated, LeaseGranted, TurnStarted
	deadline := time.Now().Add(time.Minute)
	for f.Stats().Acked < pre {
		if time.Now().After(deadline) {
			b.Fatalf("the feed caught up with %d of %d setup records", f.Stats().Acked, pre)
		}
		time.Sleep(10 * time.Millisecond)
	}

	var written atomic.Int64
	b.ResetTimer()
	for range b.N {
		mu.Lock()
		since = time.Now()
		mu.Unlock()
		start := time.Now()
		interval := time.Duration(float64(time.Second) * feedBenchWriters / float64(rate))
		var wg sync.WaitGroup
		for w := range feedBenchWriters {
			wg.Go(func() {
				mine := tasks[w*feedBenchTasks/feedBenchWriters : (w+1)*feedBenchTasks/feedBenchWriters]
				// Stagger the writers over one interval.
				next := start.Add(interval * time.Duration(w) / feedBenchWriters)
				for i := 0; ; i++ {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					if time.Since(start) >= feedBenchFor {
						return
					}
					task := mine[i%len(mine)]
					lease := eventlog.Lease{ID: "lease-" + task, Task: task, Generation: 1, Worker: "feed-test"}
					env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "bench", noeta.TurnStarted{Turn: i + 2})
					var stored eventlog.Envelope
					if err == nil {
						stored, err = r.log.Emit(context.Background(), lease, env, eventlog.EmitOptions{})
					}
					if err != nil {
						b.Errorf("Emit: %v", err)
						return
					}
					now := time.Now()
					took := now.Sub(stored.Time)
					mu.Lock()
					appends = append(appends, took)
					meet(fmt.Sprint(stored.Task, "/", stored.Seq), now, false)
					mu.Unlock()
					written.Add(1)
					next = next.Add(interval)
				}
			})
		}
		wg.Wait()
		want := int(written.Load())
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			n := len(lats)
			mu.Unlock()
			if n >= want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("handled %d of %d records", n, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.StopTimer()
	mu.Lock()
	sorted := slices.Clone(lats)
	mu.Unlock()
	slices.Sort(sorted)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(written.Load())/(feedBenchFor.Seconds()*float64(b.N)), "records/s")
	b.ReportMetric(ms(percentile(sorted, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(sorted, 0.99)), "p99-ms")
	b.ReportMetric(ms(sorted[len(sorted)-1]), "max-ms")
	mu.Lock()
	slices.Sort(appends)
	b.ReportMetric(ms(percentile(appends, 0.50)), "append-p50-ms")
	b.ReportMetric(ms(percentile(appends, 0.99)), "append-p99-ms")
	slices.Sort(commits)
	if len(commits) > 0 {
		b.ReportMetric(ms(percentile(commits, 0.50)), "commit-p50-ms")
		b.ReportMetric(ms(percentile(commits, 0.99)), "commit-p99-ms")
	}
	mu.Unlock()
}
