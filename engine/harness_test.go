package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// natsURL is the embedded single-node server every JetStream test shares;
// each test has a prefix of its own.
var natsURL string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "noeta-engine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := embedded.Start(ctx, embedded.Config{Dir: dir})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded server:", err)
		return 1
	}
	defer srv.Shutdown()
	natsURL = srv.ClientURL()
	return m.Run()
}

// backend is one event log backend, every seam the engine and the observer
// use.
type backend struct {
	name string
	log  interface {
		engine.Log
		eventlog.Subscriber
		eventlog.TaskIndex
	}
	disp    eventlog.Dispatcher
	content eventlog.ContentStore
	ttl     time.Duration
	// nc and prefix: the JetStream backend's connection and prefix, for
	// answers sent over the broker (nil and "" on memlog).
	nc     *nats.Conn
	prefix string
}

func memBackend(t testing.TB, ttl time.Duration) backend {
	t.Helper()
	s, err := memlog.New(memlog.Options{LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return backend{name: "memlog", log: s, disp: s, content: s, ttl: ttl}
}

var prefixes atomic.Int64

func jsBackend(t testing.TB, ttl time.Duration) backend {
	t.Helper()
	return jsBackendBatch(t, ttl, jetstream.BatchAuto)
}

// jsBackendBatch is jsBackend with the log's batch mode set (ADR 0038).
func jsBackendBatch(t testing.TB, ttl time.Duration, mode jetstream.BatchMode) backend {
	t.Helper()
	return jsBackendAt(t, ttl, natsURL, 1, mode)
}

// jsBackendAt is a JetStream backend on the server at url with streams of
// the given replicas.
func jsBackendAt(t testing.TB, ttl time.Duration, url string, replicas int, mode jetstream.BatchMode) backend {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	prefix := fmt.Sprintf("e%d", prefixes.Add(1))
	// A cluster may refuse a stream create while it settles: retry there.
	settle := time.Now().Add(time.Minute)
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{
		Prefix: prefix, LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 1000, Replicas: replicas,
		ApproveSubjectAuth: noeta.AuthNATS, // as on a deployment whose broker vouches for approvers
	})
	for err != nil && replicas > 1 && time.Now().Before(settle) {
		time.Sleep(200 * time.Millisecond)
		disp, err = jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{
			Prefix: prefix, LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 1000, Replicas: replicas,
			ApproveSubjectAuth: noeta.AuthNATS, // as on a deployment whose broker vouches for approvers
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp, Batch: mode, Replicas: replicas})
	for err != nil && replicas > 1 && time.Now().Before(settle) {
		time.Sleep(200 * time.Millisecond)
		log, err = jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp, Batch: mode, Replicas: replicas})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return backend{name: "jetstream", log: log, disp: disp, content: log, ttl: ttl, nc: nc, prefix: prefix}
}

// backends returns the backends an end-to-end test runs on.
func backends(t *testing.T) []func(testing.TB) backend {
	return []func(testing.TB) backend{
		func(t testing.TB) backend { return memBackend(t, 2*time.Second) },
		func(t testing.TB) backend { return jsBackend(t, 2*time.Second) },
	}
}

type harness struct {
	t     testing.TB
	b     backend
	eng   *engine.Engine
	child *observers.ChildLifecycle
	ws    string

	mu       sync.Mutex
	segments []segmentResult
}

type segmentResult struct {
	out engine.Outcome
	err error
}

func newHarness(t testing.TB, b backend, doc string, edit ...func(*engine.Config)) *harness {
	t.Helper()
	cf, err := config.Parse("", []byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("# demo\nhello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{
		Log: b.log, Dispatcher: b.disp, Content: b.content, Governance: cf.Governance, Tools: reg,
		Policies:  engine.ScriptedPolicies(b.content, policy.ParseScripted),
		Workspace: ws, Actor: "engine-test", LeaseTTL: b.ttl,
	}
	for _, f := range edit {
		f(&cfg)
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	child, err := observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: b.log, Index: b.log, Waker: b.disp})
	if err != nil {
		t.Fatal(err)
	}
	sub := b.log.Subscribe(child.Handle)
	t.Cleanup(sub.Cancel)
	return &harness{t: t, b: b, eng: eng, child: child, ws: ws}
}

// start runs n workers until the test ends.
func (h *harness) start(n int) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := h.eng.NewPool("w", n)
	for _, w := range pool.Workers {
		w.OnSegment = func(out engine.Outcome, err error) {
			h.mu.Lock()
			h.segments = append(h.segments, segmentResult{out, err})
			h.mu.Unlock()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// submit creates a root task from a task file.
func (h *harness) submit(taskFile string) string {
	h.t.Helper()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(taskFile))
	if err != nil {
		h.t.Fatalf("task file: %v", err)
	}
	script, err := json.Marshal(tf.Script)
	if err != nil {
		h.t.Fatal(err)
	}
	id, err := h.eng.Submit(context.Background(), engine.Submission{Agent: tf.Agent, Goal: tf.Goal, Script: script})
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	return id
}

// waitFor polls the folded state of task until cond holds.
func (h *harness) waitFor(task, what string, cond func(*engine.State) bool) *engine.State {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := h.eng.Inspect(context.Background(), task)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("task %s: waited 60s for %s; state %+v, err %v\nlog:\n%s", task, what, st, err, h.dump(task))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) waitStatus(task string, status noeta.TaskStatus) *engine.State {
	h.t.Helper()
	return h.waitFor(task, string(status), func(s *engine.State) bool { return s.Status == status })
}

// waitReleased waits until the dispatcher has the task in status (the
// worker released it), so a following wake finds it suspended.
func (h *harness) waitReleased(task string, status eventlog.DispatchStatus) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ds, err := h.b.disp.Inspect(context.Background(), task)
		if err == nil && ds.Status == status {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("task %s: dispatcher state %+v (err %v), want %s", task, ds, err, status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) log(task string) []eventlog.Envelope {
	h.t.Helper()
	envs, err := h.b.log.Read(context.Background(), task, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return envs
}

func (h *harness) dump(task string) string {
	envs, err := h.b.log.Read(context.Background(), task, 0)
	if err != nil {
		return err.Error()
	}
	var sb strings.Builder
	for _, e := range envs {
		fmt.Fprintf(&sb, "  %3d %-22s %-8s %s\n", e.Seq, e.Type, e.Origin, e.Payload)
	}
	return sb.String()
}

// types returns the record types of a log, and checks its seq density.
func types(t testing.TB, envs []eventlog.Envelope) []string {
	t.Helper()
	out := make([]string, len(envs))
	for i, e := range envs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d: the log is not dense", i, e.Seq)
		}
		out[i] = e.Type
	}
	return out
}

// payload decodes the payload of the first record of type typ.
func payload[T any](t testing.TB, envs []eventlog.Envelope, typ string) T {
	t.Helper()
	var v T
	for _, e := range envs {
		if e.Type == typ {
			if err := json.Unmarshal(e.Payload, &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s record", typ)
	return v
}

func isLeaseLost(err error) bool { return errors.Is(err, eventlog.ErrInvalidLease) }
