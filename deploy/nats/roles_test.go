package nats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/backoff"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// governance of the tasks the tests run: a boss that may spawn helpers, and
// a gated agent whose echo calls need an approval.
const governance = `
agents:
  boss:
    tools: [echo]
    permission_mode: bypassPermissions
    budget: {max_spawned_subtasks: 20}
    permissions: {allowed_subtask_agents: [helper]}
  helper:
    tools: [echo]
    permission_mode: bypassPermissions
  gated:
    tools: [echo]
    permissions: {require_approval_tools: [echo]}
`

// engineSide is an engine process's NATS side, connected as the engine user:
// the dispatcher, the log, the engine and its pool of workers.
type engineSide struct {
	nc   *nats.Conn
	errs *asyncErrs
	disp *jetstream.Dispatcher
	log  *jetstream.Log
	eng  *engine.Engine
}

// startEngine opens the dispatcher and the log as the engine user (creating
// every stream and bucket, and the dead-letter stream observers need), and
// runs workers until the test ends.
func startEngine(t testing.TB, urls string, replicas, workers int) *engineSide {
	t.Helper()
	return startEngineWith(t, urls, jetstream.DispatcherConfig{Replicas: replicas, RequestTimeout: 10 * time.Second}, workers)
}

// startEngineWith is startEngine with a dispatcher configuration of its own
// (a lease TTL the serve processes share; no reconciler).
func startEngineWith(t testing.TB, urls string, dc jetstream.DispatcherConfig, workers int) *engineSide {
	t.Helper()
	nc, errs := connect(t, urls, "engine")
	return startEngineOn(t, nc, errs, dc, workers, governance)
}

// startEngineOn is startEngineWith on a connection of the caller's, with
// its own governance config.
func startEngineOn(t testing.TB, nc *nats.Conn, errs *asyncErrs, dc jetstream.DispatcherConfig, workers int, govYAML string) *engineSide {
	t.Helper()
	replicas := dc.Replicas
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if dc.ApproveSubjectAuth == "" {
		// These accounts let each approver publish under its own name.
		dc.ApproveSubjectAuth = noeta.AuthNATS
	}
	// A cluster that has just come up, on a loaded machine, may take
	// longer than one request to place a new replicated bucket (a request
	// that times out, 10005 "no suitable peers"): that passes, as the
	// host's RetryStart lets it.
	var disp *jetstream.Dispatcher
	if err := retrySetup(ctx, func() (err error) {
		disp, err = jetstream.OpenDispatcher(ctx, nc, dc)
		return err
	}); err != nil {
		t.Fatalf("OpenDispatcher as engine: %v", err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	var log *jetstream.Log
	if err := retrySetup(ctx, func() (err error) {
		log, err = jetstream.Open(ctx, nc, jetstream.Config{Replicas: replicas, Registry: disp, RequestTimeout: 10 * time.Second})
		return err
	}); err != nil {
		t.Fatalf("Open as engine: %v", err)
	}
	t.Cleanup(func() { _ = log.Close() })
	if err := retrySetup(ctx, func() error { return jetstream.EnsureDeadLetterStream(ctx, nc, "", replicas) }); err != nil {
		t.Fatalf("EnsureDeadLetterStream as engine: %v", err)
	}
	var waiting *jetstream.WaitingIndex
	if err := retrySetup(ctx, func() (err error) {
		waiting, err = jetstream.OpenWaitingIndex(ctx, nc, jetstream.WaitingConfig{Replicas: replicas})
		return err
	}); err != nil {
		t.Fatalf("OpenWaitingIndex as engine: %v", err)
	}
	cf, err := config.Parse("", []byte(govYAML))
	if err != nil {
		t.Fatal(err)
	}
	gov := cf.Governance
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{
		Log: log, Dispatcher: disp, Content: log, Governance: gov, Tools: reg, Actor: "deploy-test",
		Policies: engine.ScriptedPolicies(log, policy.ParseScripted),
		// As every engine a host builds on a remote NATS: an approval
		// answered on a plain wake proves nothing.
		RequireAuthenticatedApprovals: true,
		Waiting:                       waiting,
	})
	if err != nil {
		t.Fatal(err)
	}
	if workers > 0 {
		run, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			eng.NewPool("w", workers).Run(run)
		}()
		t.Cleanup(func() {
			stop()
			<-done
		})
	}
	return &engineSide{nc: nc, errs: errs, disp: disp, log: log, eng: eng}
}

// observerSide is an observer worker's NATS side, connected as the observer
// user, as cmd/observer-worker wires it: the log opened read-only, the feed,
// ChildLifecycle (inbox writes and wakes) and an audit trail published on
// noeta.audit.<task>, each through a durable consumer group.
type observerSide struct {
	nc     *nats.Conn
	errs   *asyncErrs
	reader *jetstream.Reader
	feed   *jetstream.Feed
	waker  *jetstream.WakePublisher

	mu      sync.Mutex
	audited map[string]int // highest log seq seen per task
}

func startObserver(t testing.TB, urls string, replicas int, partitions []int) *observerSide {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, errs := connect(t, urls, "observer")
	o := &observerSide{nc: nc, errs: errs, audited: map[string]int{}}
	var err error
	if o.reader, err = jetstream.OpenReader(ctx, nc, jetstream.Config{Replicas: replicas, RequestTimeout: 10 * time.Second}); err != nil {
		t.Fatalf("OpenReader as observer: %v", err)
	}
	if o.feed, err = jetstream.OpenFeed(ctx, nc, jetstream.FeedOptions{Replicas: replicas}); err != nil {
		t.Fatalf("OpenFeed as observer: %v", err)
	}
	if o.waker, err = jetstream.NewWakePublisher(nc, ""); err != nil {
		t.Fatal(err)
	}
	child, err := observers.NewChildLifecycle(observers.ChildLifecycleConfig{Log: o.reader, Index: o.reader, Waker: o.waker})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := observers.NewAuditPublishSink(nc, "noeta.audit", true)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := observers.NewAudit(observers.AuditConfig{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	counter := countObserver{o}
	fc := eventlog.FeedConfig{Partitions: partitions, AckWait: 5 * time.Second}
	run, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, obs := range []observers.Observer{child, audit, counter} {
		d, err := observers.NewDurable(o.feed, observers.DurableConfig{GroupPrefix: "obs-", Feed: fc}, obs)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := d.Run(run); err != nil {
				t.Errorf("observer %s: %v", obs.Name(), err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		wg.Wait()
		_ = audit.Close()
	})
	return o
}

// countObserver counts the log records it sees per task (once each, by seq:
// a redelivery does not count twice). It runs in the metrics observer's
// group, obs-metrics, one the observer user's permissions name.
type countObserver struct{ o *observerSide }

func (countObserver) Name() string { return "metrics" }

func (c countObserver) Observe(_ context.Context, env eventlog.Envelope) error {
	if env.Seq == 0 {
		return nil // an inbox record
	}
	c.o.mu.Lock()
	defer c.o.mu.Unlock()
	if k := env.Task; uint64(c.o.audited[k]) < env.Seq {
		c.o.audited[k] = int(env.Seq)
	}
	return nil
}

func (o *observerSide) auditedOf(task string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.audited[task]
}

// submit submits a task running script (JSON) for agent.
func (e *engineSide) submit(t testing.TB, agent, goal, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := e.eng.Submit(ctx, engine.Submission{Agent: agent, Goal: goal, Script: json.RawMessage(script)})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return id
}

// folder folds a task's log.
type folder func(ctx context.Context, task string) (*engine.State, error)

// foldRead folds from genesis through a reader that needs no content store
// (what an observer may read).
func foldRead(r interface {
	Read(context.Context, string, uint64) ([]eventlog.Envelope, error)
}) folder {
	return func(ctx context.Context, task string) (*engine.State, error) {
		envs, err := r.Read(ctx, task, 0)
		if err != nil {
			return nil, err
		}
		if len(envs) == 0 {
			return nil, fmt.Errorf("task %s has no log", task)
		}
		return engine.Fold(envs)
	}
}

// foldTask folds from the latest snapshot, as engine inspect does (the
// snapshot's body is in the content store).
func foldTask(r interface {
	Read(context.Context, string, uint64) ([]eventlog.Envelope, error)
	LatestSnapshot(context.Context, string) (eventlog.Envelope, error)
	Get(context.Context, noeta.ContentRef) ([]byte, error)
}) folder {
	return func(ctx context.Context, task string) (*engine.State, error) {
		st, _, err := engine.FoldTask(ctx, r, r, task)
		return st, err
	}
}

// waitFold waits until the task's folded state satisfies ok, and returns it.
func waitFold(t testing.TB, fold folder, task string, within time.Duration, what string, ok func(*engine.State) bool) *engine.State {
	t.Helper()
	deadline := time.Now().Add(within)
	var last *engine.State
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		st, err := fold(ctx, task)
		cancel()
		if err == nil && ok(st) {
			return st
		}
		last, lastErr = st, err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s: %s not reached within %v: %+v %v", task, what, within, last, lastErr)
	return nil
}

func terminal(s *engine.State) bool { return s.Status == noeta.StatusTerminal }

// waitRowSuspended waits until the dispatcher holds task suspended: a
// human's answer applies only to the suspend of that moment, and the log
// says "suspended" a moment before the worker hands the task back.
func waitRowSuspended(t testing.TB, nc *nats.Conn, task string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	rows, err := jetstream.OpenRowReader(ctx, nc, "")
	if err != nil {
		t.Fatalf("open the row reader: %v", err)
	}
	for {
		ds, err := rows.Inspect(ctx, task)
		if err == nil && ds.Status == eventlog.DispatchSuspended {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("task %s: the dispatcher does not hold it suspended within %v: %+v %v", task, within, ds, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func suspendedOn(kind noeta.WakeKind) func(*engine.State) bool {
	return func(s *engine.State) bool {
		return s.Status == noeta.StatusSuspended && s.WakeOn != nil && s.WakeOn.Kind == kind
	}
}

// checkDense checks that a task's log has the seqs 1..n without a gap or a
// repeat, and folds it.
func checkDense(envs []eventlog.Envelope) (*engine.State, error) {
	for i, env := range envs {
		if env.Seq != uint64(i+1) {
			return nil, fmt.Errorf("record %d has seq %d", i+1, env.Seq)
		}
	}
	return engine.Fold(envs)
}

// retrySetup runs create until it succeeds, fails for good (not
// setupTransient) or ctx ends, and returns its last error. A peer that
// answered its health check may still drop out of placement for a moment
// while the cluster settles.
func retrySetup(ctx context.Context, create func() error) error {
	pause := backoff.New(250*time.Millisecond, 2*time.Second)
	for {
		err := create()
		if err == nil || !setupTransient(err) || pause.Wait(ctx) != nil {
			return err
		}
	}
}

// setupTransient reports an error of creating a replicated stream or
// bucket that passes once the cluster has settled: a request that timed
// out, or no peers current enough to place it yet.
func setupTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || strings.Contains(err.Error(), "err_code=10005")
}
