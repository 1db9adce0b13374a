package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
)

// openOn is a gateway enlisted in the registry of the NATS server at url,
// one of several on it.
func openOn(t testing.TB, url, yaml string, o gateway.Options) *rig {
	t.Helper()
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	o.Agent = "dev"
	gw := gateway.New(o)
	ctx := context.Background()
	h, err := hostconfig.Open(ctx, hostconfig.Options{NATS: hostconfig.Connection{URL: url}, Config: cfg, Workers: 2, Workspace: t.TempDir(),
		Policies: gw.Policies, Queue: gw.Queue(), Guards: []guards.Guard{gw.Guard()}, Name: "gateway", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := gateway.OpenRegistry(ctx, h.Conn(), hostconfig.DefaultPrefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	gw.Attach(h.Host, nil)
	t.Cleanup(func() {
		gw.Close()
		h.Close()
	})
	if err := gw.Enlist(ctx, reg); err != nil {
		t.Fatal(err)
	}
	return &rig{gw: gw, h: h}
}

// newTask waits for a task of r that is not in before.
func (r *rig) newTask(t testing.TB, before ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ts, err := r.h.Tasks(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ts {
			if !slices.Contains(before, s.Task) {
				return s.Task
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no new task")
	return ""
}

// TestSweepDeadGateway: two gateways on one server; one dies (no settling:
// its sessions' tasks stay parked, waiting for an approval, or ready on
// its queue); a third starts and cancels the dead one's tasks, saying
// why, and not the live one's, whose session goes on.
func TestSweepDeadGateway(t *testing.T) {
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	yaml := config(t, "1h")
	o := gateway.Options{Idle: 100 * time.Millisecond, HeartbeatEvery: 50 * time.Millisecond, GoneAfter: 500 * time.Millisecond}
	a := openOn(t, srv.ClientURL(), yaml, o)
	// B takes a gateway for gone only after an hour: the third one sweeps.
	ob := o
	ob.GoneAfter = time.Hour
	b := openOn(t, srv.ClientURL(), yaml, ob)
	ctx := context.Background()

	// A: a session that called and parked; a session whose call waits for
	// an approval. B: a session that called and parked.
	a1, stopA1 := a.connect(t)
	defer stopA1()
	if res, err := a1.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "a1"}}); err != nil || res.IsError {
		t.Fatalf("a1: %+v %v", res, err)
	}
	parked := a.newTask(t)
	a.waitFor(t, parked, noeta.TypeTaskSuspended)
	a2, stopA2 := a.connect(t)
	defer stopA2()
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = a2.CallTool(waitCtx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	}()
	awaiting := a.newTask(t, parked)
	a.waitFor(t, awaiting, noeta.TypeApprovalRequested)
	b1, stopB1 := b.connect(t)
	defer stopB1()
	if res, err := b1.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "b1"}}); err != nil || res.IsError {
		t.Fatalf("b1: %+v %v", res, err)
	}
	live := b.newTask(t, parked, awaiting)
	b.waitFor(t, live, noeta.TypeTaskSuspended)

	// A dies. A wake makes its parked task ready on A's queue, which no
	// one works now.
	a.gw.Kill()
	a.h.Close()
	if _, err := b.h.Backend().Dispatcher().Wake(ctx, parked, noeta.ExternalWake(gateway.EventKind)); err != nil {
		t.Fatal(err)
	}
	if ds, err := b.h.Dispatch(ctx, parked); err != nil || ds.Status != eventlog.DispatchReady || ds.Queue != a.gw.Queue() {
		t.Fatalf("the dead gateway's woken task: %+v %v", ds, err)
	}

	t0 := time.Now()
	c := openOn(t, srv.ClientURL(), yaml, o)
	for _, task := range []string{parked, awaiting} {
		env := c.waitFor(t, task, noeta.TypeTaskCancelled)
		p, _, err := env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if why := p.(*noeta.TaskCancelled).Reason; !strings.Contains(why, gateway.SweepReason) || !strings.Contains(why, a.gw.Queue()) {
			t.Errorf("task %s cancelled for %q", task, why)
		}
	}
	t.Logf("the third gateway swept the dead one's tasks %v after it started (GoneAfter %v)", time.Since(t0).Round(time.Millisecond), o.GoneAfter)
	// The call that waited for an approval never ran.
	if n := c.count(t, awaiting); n[noeta.TypeToolCallStarted] != 0 {
		t.Errorf("the swept task's call ran: %v", n)
	}
	// One more full pass of the sweep: the live gateway's task is left,
	// even listed under a gateway that is gone.
	js, err := jetstream.New(c.h.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, gateway.RegistryBucket(hostconfig.DefaultPrefix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t.gateway-forged."+live, nil); err != nil {
		t.Fatal(err)
	}
	swept, err := c.gw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(swept, live) {
		t.Fatalf("the live gateway's task was swept: %v", swept)
	}
	if ds, err := c.h.Dispatch(ctx, live); err != nil || ds.Status == eventlog.DispatchTerminal {
		t.Fatalf("the live gateway's task: %+v %v", ds, err)
	}
	if res, err := b1.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "b1 again"}}); err != nil || res.IsError {
		t.Fatalf("the live gateway's session after the sweep: %+v %v", res, err)
	}
	cancelWait()
	<-waited
}

// TestSweepSparesLiveGateway: a gateway beating all the time, whose
// heartbeat is rewritten while others list the bucket, is never taken for
// gone. Before, a listing that missed a heartbeat put while it ran (the
// bucket keeps one revision) took its gateway for gone and cancelled its
// tasks.
func TestSweepSparesLiveGateway(t *testing.T) {
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	yaml := config(t, "1h")
	a := openOn(t, srv.ClientURL(), yaml, gateway.Options{HeartbeatEvery: time.Millisecond, GoneAfter: time.Hour})
	c := openOn(t, srv.ClientURL(), yaml, gateway.Options{HeartbeatEvery: time.Hour, GoneAfter: time.Hour})
	cs, stop := a.connect(t)
	defer stop()
	ctx := context.Background()
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__echo", Arguments: map[string]any{"message": "alive"}}); err != nil || res.IsError {
		t.Fatalf("echo: %+v %v", res, err)
	}
	task := a.newTask(t)
	for i := range 200 {
		swept, err := c.gw.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(swept) > 0 {
			t.Fatalf("pass %d swept the live gateway's tasks: %v", i, swept)
		}
	}
	if ds, err := c.h.Dispatch(ctx, task); err != nil || ds.Status == eventlog.DispatchTerminal {
		t.Fatalf("the live gateway's task: %+v %v", ds, err)
	}
}

// closedMidApproval closes a, and its host, while its one session's call
// waits for an approval: its heartbeat deleted, it is gone, and its task
// still waits. It returns the task.
func closedMidApproval(t *testing.T, a *rig) string {
	t.Helper()
	cs, stop := a.connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	}()
	task := a.newTask(t)
	a.waitFor(t, task, noeta.TypeApprovalRequested)
	cancel()
	<-done
	stop()
	a.gw.Close()
	if ds, err := a.h.Dispatch(context.Background(), task); err != nil || ds.Status != eventlog.DispatchSuspended {
		t.Fatalf("the closed gateway's task: %+v %v", ds, err)
	}
	a.h.Close()
	return task
}

// TestSweepAfterClose: a gateway that closes while a call waits for an
// approval deletes its heartbeat; the next sweep, here another gateway's,
// cancels the task at once, and the call never runs.
func TestSweepAfterClose(t *testing.T) {
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	yaml := config(t, "1h")
	o := gateway.Options{HeartbeatEvery: time.Hour, GoneAfter: time.Hour}
	task := closedMidApproval(t, openOn(t, srv.ClientURL(), yaml, o))

	b := openOn(t, srv.ClientURL(), yaml, o) // its first sweep runs as it enlists
	env := b.waitFor(t, task, noeta.TypeTaskCancelled)
	p, _, err := env.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if why := p.(*noeta.TaskCancelled).Reason; !strings.Contains(why, "it has no heartbeat") {
		t.Errorf("cancelled for %q", why)
	}
	if n := b.count(t, task); n[noeta.TypeToolCallStarted] != 0 {
		t.Errorf("the call ran: %v", n)
	}
}

// TestSweeperWithoutGateway: a process that runs no gateway (engine serve
// without --gateway) sweeps the tasks of a gateway gone, once the
// gateways' bucket exists; where none does, it makes none.
func TestSweeperWithoutGateway(t *testing.T) {
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	yaml := config(t, "1h")
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	serve, err := hostconfig.Open(context.Background(), hostconfig.Options{NATS: hostconfig.Connection{URL: srv.ClientURL()}, Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "serve",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	defer serve.Close()
	sw := gateway.StartSweeper(serve.Host, serve.Conn(), hostconfig.DefaultPrefix, gateway.Options{HeartbeatEvery: 20 * time.Millisecond, GoneAfter: time.Hour})
	defer sw.Close()
	time.Sleep(100 * time.Millisecond) // several passes with no bucket
	js, err := jetstream.New(serve.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(context.Background(), gateway.RegistryBucket(hostconfig.DefaultPrefix)); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("the sweeper made the gateways' bucket, or could not tell: %v", err)
	}

	task := closedMidApproval(t, openOn(t, srv.ClientURL(), yaml, gateway.Options{HeartbeatEvery: time.Hour, GoneAfter: time.Hour}))

	env := (&rig{h: serve}).waitFor(t, task, noeta.TypeTaskCancelled)
	p, _, err := env.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if why := p.(*noeta.TaskCancelled).Reason; !strings.Contains(why, gateway.SweepReason) {
		t.Errorf("cancelled for %q", why)
	}
}
