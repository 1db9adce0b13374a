package jetstream_test

// Benchmarks of the JetStream event log, each beside its baseline measured in
// the same run on the same server: a fenced append (Log.Emit under a lease)
// against a raw JetStream publish of the same encoded message to a plain
// stream, with the same per-subject compare-and-set
// (Nats-Expected-Last-Subject-Sequence) and the same Nats-Msg-Id dedupe. The
// difference is what the log adds: canonicalisation, schema validation,
// CloudEvents encoding, the registry check and its bookkeeping.
//
// Servers: "sync=always" is the package's single node (fsync per write);
// "sync=default" is a second embedded node started per benchmark with
// nats-server's own default sync interval (2m); the cluster is the package's
// 3-node cluster with R3 streams (sync always). Results are in
// docs/benchmarks.md.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

const (
	benchPrefix     = "bench"         // the Log's prefix: stream BENCH_TASKS
	benchRawStream  = "BENCH_RAW"     // the baseline's plain stream
	benchRawRoot    = "benchraw"      // its subjects: benchraw.t.<p>.<id>.log
	benchWriters    = 64              // tasks (and raw subjects) in the concurrent pair
	benchReadSize   = 10000           // records in BenchmarkRead10k's task
	benchServerSync = 2 * time.Minute // nats-server's default sync interval
)

// benchArgs is the ToolCallStarted arguments; with the rest of the payload the
// canonical JSON is about 200 bytes.
var benchArgs = json.RawMessage(`{"headers":{"accept":"application/json"},"method":"GET","timeout_ms":30000,"url":"https://example.com/api/v1/items?page=2&limit=50"}`)

// benchTarget is a server, the replication the benchmark uses on it, and how
// the benchmark connects: over TCP to url, or, when srv is set, in process
// (embedded.Server.ConnectInProcess, what the engine does with its own
// embedded server). Both sides of a pair share the connection kind.
type benchTarget struct {
	name     string
	url      string
	replicas int
	srv      *embedded.Server
}

func (tg benchTarget) connect(b *testing.B) *nats.Conn {
	if tg.srv == nil {
		return connect(b, tg.url)
	}
	nc, err := tg.srv.ConnectInProcess(nats.MaxReconnects(-1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// benchSyncTargets returns the single node with sync always and a fresh node
// with the server's default sync interval, shut down when b ends, each
// reached in process and over TCP.
func benchSyncTargets(b *testing.B) []benchTarget {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: b.TempDir(), ServerName: "bench-sync-default", SyncInterval: benchServerSync})
	if err != nil {
		b.Fatalf("start server with the default sync interval: %v", err)
	}
	b.Cleanup(srv.Shutdown)
	return []benchTarget{
		{"sync=always/inproc", singleURL, 1, singleServer},
		{"sync=always/tcp", singleURL, 1, nil},
		{"sync=default/inproc", srv.ClientURL(), 1, srv},
		{"sync=default/tcp", srv.ClientURL(), 1, nil},
	}
}

// benchRig is a Log with a memlog dispatcher as its lease registry, and a raw
// JetStream handle with the baseline stream, all on one server.
type benchRig struct {
	nc   *nats.Conn
	log  *jetstream.Log
	disp *memlog.Store
	js   natsjs.JetStream
	raw  natsjs.Stream
	tpl  benchTemplate

	retries atomic.Uint64 // raw publishes refused with 10164 and retried
	cpu0    time.Duration // cpuTime when the timed loop started
}

// benchTemplate is a stored fenced record, replayed by the raw publishers so
// both sides send the same bytes.
type benchTemplate struct {
	hdr  nats.Header
	data []byte
}

// size is the record's encoded size: headers plus body.
func (t benchTemplate) size() int {
	n := len(t.data)
	for k, vs := range t.hdr {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

func newBenchRig(b *testing.B, tg benchTarget) *benchRig {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	disp, err := memlog.New(memlog.Options{LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = disp.Close() })
	nc := tg.connect(b)
	var log *jetstream.Log
	for { // a cluster may refuse a stream create while it settles
		log, err = jetstream.Open(ctx, nc, jetstream.Config{Prefix: benchPrefix, Replicas: tg.replicas, Registry: disp})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("open log: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Cleanup(func() { _ = log.Close() })
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	want := jetstream.StreamConfig(jetstream.Config{Prefix: benchPrefix, Replicas: tg.replicas})
	want.Name = benchRawStream
	want.Description = "noeta benchmark baseline: raw publishes"
	want.Subjects = []string{benchRawRoot + ".>"}
	var raw natsjs.Stream
	for {
		raw, err = js.CreateOrUpdateStream(ctx, want)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("create raw stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := &benchRig{nc: nc, log: log, disp: disp, js: js, raw: raw}
	// The template: one fenced record as stored.
	task := r.newTask(b)
	tasks, err := js.Stream(ctx, strings.ToUpper(benchPrefix)+"_TASKS")
	if err != nil {
		b.Fatal(err)
	}
	m, err := tasks.GetLastMsgForSubject(ctx, benchLogSubject(benchPrefix, task.id))
	if err != nil {
		b.Fatalf("read the template record: %v", err)
	}
	r.tpl = benchTemplate{hdr: nats.Header{}, data: m.Data}
	for k, v := range m.Header {
		if !strings.HasPrefix(k, "Nats-Expected") {
			r.tpl.hdr[k] = v
		}
	}
	return r
}

func benchLogSubject(root, id string) string {
	return fmt.Sprintf("%s.t.%d.%s.log", root, jetstream.Partition(id), id)
}

// benchTask is a created task, leased, with the LeaseGranted already in the
// log, so every timed Emit is one steady-state append.
type benchTask struct {
	id    string
	lease eventlog.Lease
	env   eventlog.Envelope
}

func (r *benchRig) newTask(b *testing.B) benchTask {
	t, err := r.tryNewTask(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return t
}

func (r *benchRig) tryNewTask(ctx context.Context) (benchTask, error) {
	id := noeta.NewTaskID()
	created, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.TaskCreated{TaskID: id, Agent: "a", Goal: "g", RootTaskID: id})
	if err != nil {
		return benchTask{}, err
	}
	if _, err := r.log.Create(ctx, created); err != nil {
		return benchTask{}, fmt.Errorf("create %s: %w", id, err)
	}
	if err := r.disp.Enqueue(ctx, id, eventlog.EnqueueOptions{}); err != nil {
		return benchTask{}, err
	}
	lease, err := r.disp.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: id})
	if err != nil {
		return benchTask{}, err
	}
	env, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.ToolCallStarted{CallID: noeta.NewID(), Tool: "http_get", Args: benchArgs, Turn: 3})
	if err != nil {
		return benchTask{}, err
	}
	t := benchTask{id: id, lease: lease, env: env}
	if err := t.emit(ctx, r.log); err != nil {
		return benchTask{}, err
	}
	return t, nil
}

func (t benchTask) emit(ctx context.Context, log *jetstream.Log) error {
	if _, err := log.Emit(ctx, t.lease, t.env, eventlog.EmitOptions{}); err != nil {
		return fmt.Errorf("emit to %s: %w", t.id, err)
	}
	return nil
}

// benchRawSubject is one raw publisher's subject and the stream sequence of
// its last message, the compare-and-set point of its next publish.
type benchRawSubject struct {
	subject string
	last    uint64
}

func (r *benchRig) newRawSubject() *benchRawSubject {
	return &benchRawSubject{subject: benchLogSubject(benchRawRoot, noeta.NewTaskID())}
}

// publish sends the template with a fresh message id, expecting last.
func (r *benchRig) publish(ctx context.Context, s *benchRawSubject) error {
	msg := &nats.Msg{Subject: s.subject, Header: make(nats.Header, len(r.tpl.hdr)+2), Data: r.tpl.data}
	for k, v := range r.tpl.hdr {
		msg.Header[k] = v
	}
	msg.Header.Set(nats.MsgIdHdr, noeta.NewID())
	// As the Log does: a replicated stream refuses an expected-last-sequence
	// publish while a write is in flight (10164); retry it after a pause.
	pause := 200 * time.Microsecond
	for {
		ack, err := r.js.PublishMsg(ctx, msg, natsjs.WithExpectLastSequencePerSubject(s.last), natsjs.WithRetryAttempts(2))
		if err == nil {
			s.last = ack.Sequence
			return nil
		}
		var jsErr natsjs.JetStreamError
		if !errors.As(err, &jsErr) || jsErr.APIError() == nil || jsErr.APIError().ErrorCode != natsjs.JSErrCodeStreamWrongLastSequenceConstant {
			return fmt.Errorf("raw publish to %s: %w", s.subject, err)
		}
		r.retries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 20*time.Millisecond)
	}
}

// cpuTime is the process's user plus system CPU time so far. Per append it
// is the client's and the embedded server's work together, which load from
// other processes on the machine stretches far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sent is how many messages the rig's connection has sent: publishes and
// requests, one per round trip to the server.
func (r *benchRig) sent() uint64 { return r.nc.Stats().OutMsgs }

// reportAppends reports the rate, the record size, and the messages sent per
// append since sent0 (the round trips an append costs; 1 for a raw publish).
func reportAppends(b *testing.B, r *benchRig, sent0 uint64) {
	b.ReportMetric(float64(cpuTime()-r.cpu0)/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	b.ReportMetric(float64(r.tpl.size()), "B/record")
	b.ReportMetric(float64(r.sent()-sent0)/float64(b.N), "msgs/op")
}

// reportRaw adds how many raw publishes per append were refused with 10164
// and retried since r.retries was last zeroed (the Log retries those too, but
// does not count them).
func reportRaw(b *testing.B, r *benchRig, sent0 uint64) {
	reportAppends(b, r, sent0)
	b.ReportMetric(float64(r.retries.Load())/float64(b.N), "retries/op")
}

// BenchmarkAppend: one task, appends one after another; fenced Emit against a
// raw publish of the same bytes to one subject.
func BenchmarkAppend(b *testing.B) {
	for _, tg := range benchSyncTargets(b) {
		b.Run(tg.name, func(b *testing.B) { benchAppendPair(b, tg) })
	}
}

// BenchmarkAppendCluster is BenchmarkAppend and BenchmarkAppend64 on the
// 3-node cluster with R3 streams, sync always.
func BenchmarkAppendCluster(b *testing.B) {
	tg := benchTarget{"R3", clusterURL, 3, nil}
	b.Run("1task", func(b *testing.B) { benchAppendPair(b, tg) })
	b.Run("64tasks", func(b *testing.B) { benchAppend64Pair(b, tg) })
}

func benchAppendPair(b *testing.B, tg benchTarget) {
	r := newBenchRig(b, tg)
	b.Run("fenced", func(b *testing.B) {
		ctx := context.Background()
		t := r.newTask(b)
		sent0 := r.sent()
		r.cpu0 = cpuTime()
		for b.Loop() {
			if err := t.emit(ctx, r.log); err != nil {
				b.Fatal(err)
			}
		}
		reportAppends(b, r, sent0)
	})
	b.Run("raw", func(b *testing.B) {
		ctx := context.Background()
		s := r.newRawSubject()
		if err := r.publish(ctx, s); err != nil { // as the fenced task has its first records
			b.Fatal(err)
		}
		r.retries.Store(0)
		sent0 := r.sent()
		r.cpu0 = cpuTime()
		for b.Loop() {
			if err := r.publish(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
		reportRaw(b, r, sent0)
	})
}

// BenchmarkAppend64: 64 goroutines, each appending to its own task, b.N
// appends in all; against 64 raw publishers, each on its own subject.
func BenchmarkAppend64(b *testing.B) {
	for _, tg := range benchSyncTargets(b) {
		b.Run(tg.name, func(b *testing.B) { benchAppend64Pair(b, tg) })
	}
}

func benchAppend64Pair(b *testing.B, tg benchTarget) {
	r := newBenchRig(b, tg)
	// The writers outlive the calls of one sub-benchmark (one per b.N tried).
	var tasks []benchTask
	var subjects []*benchRawSubject
	b.Run("fenced", func(b *testing.B) {
		if tasks == nil {
			tasks = make([]benchTask, benchWriters)
			err := benchSpread(benchWriters, func(i, _ int) (err error) {
				tasks[i], err = r.tryNewTask(context.Background())
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		ctx := context.Background()
		sent0 := r.sent()
		r.cpu0 = cpuTime()
		b.ResetTimer()
		err := benchSpread(b.N, func(i, n int) error {
			for range n {
				if err := tasks[i].emit(ctx, r.log); err != nil {
					return err
				}
			}
			return nil
		})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		reportAppends(b, r, sent0)
	})
	b.Run("raw", func(b *testing.B) {
		ctx := context.Background()
		if subjects == nil {
			subjects = make([]*benchRawSubject, benchWriters)
			for i := range subjects {
				subjects[i] = r.newRawSubject()
			}
			if err := benchSpread(benchWriters, func(i, _ int) error { return r.publish(ctx, subjects[i]) }); err != nil {
				b.Fatal(err)
			}
		}
		r.retries.Store(0)
		sent0 := r.sent()
		r.cpu0 = cpuTime()
		b.ResetTimer()
		err := benchSpread(b.N, func(i, n int) error {
			for range n {
				if err := r.publish(ctx, subjects[i]); err != nil {
					return err
				}
			}
			return nil
		})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		reportRaw(b, r, sent0)
	})
}

// benchSpread splits total over benchWriters goroutines, writer i getting n
// of them (writers with none are not started), and returns the first error.
func benchSpread(total int, fn func(i, n int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for i := range benchWriters {
		n := total / benchWriters
		if i < total%benchWriters {
			n++
		}
		if n == 0 {
			continue
		}
		wg.Go(func() {
			if err := fn(i, n); err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	return first
}

// benchReadTask is the 10,000-record task BenchmarkRead10k reads, written
// once per process on the single node.
var benchReadTask struct {
	mu sync.Mutex
	id string
}

// BenchmarkRead10k reads a whole 10,000-record log with Log.Read.
func BenchmarkRead10k(b *testing.B) {
	r := newBenchRig(b, benchTarget{"sync=always", singleURL, 1, nil})
	ctx := context.Background()
	benchReadTask.mu.Lock()
	if benchReadTask.id == "" {
		t := r.newTask(b) // TaskCreated, LeaseGranted, one ToolCallStarted
		for range benchReadSize - 3 {
			if err := t.emit(ctx, r.log); err != nil {
				benchReadTask.mu.Unlock()
				b.Fatal(err)
			}
		}
		benchReadTask.id = t.id
	}
	task := benchReadTask.id
	benchReadTask.mu.Unlock()
	for b.Loop() {
		out, err := r.log.Read(ctx, task, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != benchReadSize {
			b.Fatalf("read %d records, want %d", len(out), benchReadSize)
		}
	}
	b.ReportMetric(float64(b.N*benchReadSize)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkEmitPack writes packs of four records (a tool call's pack:
// ADR 0040) to one task on the single node, in process, with EmitBatch
// under the task's lease (memlog's registry, so the registry check costs
// no request). Run with -benchmem: the fsync dominates the time, the
// allocations show the log's own work per pack.
func BenchmarkEmitPack(b *testing.B) {
	r := newBenchRig(b, benchTarget{"sync=always", singleURL, 1, singleServer})
	t := r.newTask(b)
	ctx := context.Background()
	batch := []eventlog.Envelope{t.env, t.env, t.env, t.env}
	for b.Loop() {
		if _, err := r.log.EmitBatch(ctx, t.lease, batch, eventlog.EmitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadShort reads a task's whole short log (TaskCreated,
// LeaseGranted and a ToolCallStarted: what a segment's fold reads of a task
// just created) on the single node, in process, as the engine does: by an
// ordered consumer (create, pull, delete) and by a batched direct get (ADR
// 0103), on one Log.
func BenchmarkReadShort(b *testing.B) {
	r := newBenchRig(b, benchTarget{"sync=always", singleURL, 1, singleServer})
	t := r.newTask(b)
	ctx := context.Background()
	for _, mode := range []struct {
		name   string
		direct bool
	}{{"consumer", false}, {"direct", true}} {
		b.Run(mode.name, func(b *testing.B) {
			was := jetstream.ReadsDirectForTest(r.log, mode.direct)
			defer jetstream.ReadsDirectForTest(r.log, was)
			for b.Loop() {
				out, err := r.log.Read(ctx, t.id, 0)
				if err != nil {
					b.Fatal(err)
				}
				if len(out) != 3 {
					b.Fatalf("read %d records, want 3", len(out))
				}
			}
		})
	}
}

// BenchmarkSubscriberDelivery: fenced appends to one task with one in-process
// subscriber counting what it is handed; records/s is deliveries per second.
func BenchmarkSubscriberDelivery(b *testing.B) {
	for _, tg := range benchSyncTargets(b) {
		b.Run(tg.name, func(b *testing.B) {
			r := newBenchRig(b, tg)
			ctx := context.Background()
			t := r.newTask(b)
			var got atomic.Uint64
			sub := r.log.Subscribe(func(_ context.Context, env eventlog.Envelope) error {
				if env.Task == t.id {
					got.Add(1)
				}
				return nil
			})
			defer sub.Cancel()
			for b.Loop() {
				if err := t.emit(ctx, r.log); err != nil {
					b.Fatal(err)
				}
			}
			if n := got.Load(); n != uint64(b.N) {
				b.Fatalf("subscriber got %d records, want %d", n, b.N)
			}
			b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "records/s")
		})
	}
}
