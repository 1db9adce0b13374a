package jetstream

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// boundServer starts a server whose user "engine" may publish anything but
// deny, and a Dispatcher on prefix for an admin who may do anything (the
// buckets and streams made as a deployment's set-up does) and one for the
// engine user.
func boundServer(t *testing.T, prefix string, deny ...string) (admin, engine *Dispatcher) {
	t.Helper()
	admin, engine, _ = boundServerWith(t, prefix, nil, deny...)
	return admin, engine
}

// boundServerWith is boundServer, with both Dispatchers' config changed by
// tune (nil: none).
func boundServerWith(t *testing.T, prefix string, tune func(*DispatcherConfig), deny ...string) (admin, engine *Dispatcher, denyLater func(...string)) {
	t.Helper()
	const user, pass = "engine", "engine-pw"
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, Users: boundUsers(deny)}
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	cfg := DispatcherConfig{Prefix: prefix, LeaseTTL: 2 * time.Second, SweepInterval: -1, RequestTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)}
	open := func(name, pw string) *Dispatcher {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(name, pw))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		d, err := OpenDispatcher(t.Context(), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	if tune != nil {
		tune(&cfg)
	}
	admin = open("admin", "admin-pw")
	// denyLater reloads the server with the engine denied subjects
	// instead: the Dispatchers stay connected, under the new rules.
	denyLater = func(subjects ...string) {
		c := *o
		c.Users = boundUsers(subjects)
		if err := srv.ReloadOptions(&c); err != nil {
			t.Fatal(err)
		}
	}
	return admin, open(user, pass), denyLater
}

// boundUsers are boundServer's users: "engine" may publish anything but
// deny.
func boundUsers(deny []string) []*server.User {
	return []*server.User{
		{Username: "admin", Password: "admin-pw"},
		{Username: "engine", Password: "engine-pw", Permissions: &server.Permissions{Publish: &server.SubjectPermission{
			Allow: []string{">"},
			Deny:  deny,
		}}},
	}
}

// TestReconcileRetryWithinSweep: after failed passes the loop tries again
// no later than its SweepInterval, however many failed: the repairs a
// failure holds back are wanted as soon as the servers answer again, and a
// short SweepInterval is a deployment that asked for them promptly. The
// waits are the loop's own, read from its log, not measured.
func TestReconcileRetryWithinSweep(t *testing.T) {
	const sweep = time.Second
	h := &retryLog{}
	ad, d, _ := boundServerWith(t, "retry", func(c *DispatcherConfig) {
		c.SweepInterval = sweep
		c.Logger = slog.New(h)
	}, "$JS.API.CONSUMER.CREATE.KV_retry_tasks", "$JS.API.CONSUMER.CREATE.KV_retry_tasks.>")
	// A row written after the loop's first pass: from then on the changes
	// cannot be read, and every pass fails.
	for d.Stats().Reconciles == 0 {
		if err := sleepCtx(t.Context(), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "retry"}); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{reconcileRetryMin, sweep, sweep, sweep}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got := h.waits(ctx, len(want))
	if len(got) < len(want) {
		t.Fatalf("%d failed passes logged in a minute, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("failed pass %d: next in %v, want %v (all: %v)", i+1, got[i], w, got[:len(want)])
		}
	}
	for _, c := range []struct{ sweep, want time.Duration }{
		{100 * time.Millisecond, reconcileRetryMin}, // never a tight loop
		{time.Second, time.Second},
		{15 * time.Second, reconcileRetryMax}, // the default: as before
	} {
		if got := retryCap(c.sweep); got != c.want {
			t.Errorf("retryCap(%v) = %v, want %v", c.sweep, got, c.want)
		}
	}
}

// retryLog is a slog handler that keeps the waits the reconcile loop logs
// after a failed pass.
type retryLog struct {
	mu sync.Mutex
	in []time.Duration
}

func (h *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *retryLog) WithGroup(string) slog.Handler            { return h }
func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "reconcile pass failed; retrying" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "in" {
			h.mu.Lock()
			h.in = append(h.in, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// waits returns the first n waits logged, or those logged when ctx ends.
func (h *retryLog) waits(ctx context.Context, n int) []time.Duration {
	for {
		h.mu.Lock()
		got := slices.Clone(h.in)
		h.mu.Unlock()
		if len(got) >= n || ctx.Err() != nil {
			return got
		}
		_ = sleepCtx(ctx, 50*time.Millisecond)
	}
}

// TestReconcilePassRequestsBounded: a request of a reconcile pass that the
// server never answers fails the pass within the request timeout, not at
// the end of the pass's own deadline. Reproduction (deploy/nats
// TestPartition, short form under load): after a fault, the creation of
// the consumer that reads the rows went unanswered and every serve's pass
// waited out its two minutes; a parent whose subtask handoff had been lost
// waited with it, past the run's calm window. The server here leaves the
// request unanswered as a deployment's role would (a publish the user may
// not make: the engine role of deploy/nats refused an unfiltered read this
// way). A pass of the loop whose slice of the round fails goes on with its
// repairs; a pass on demand (RequeueStale), which promises every row,
// fails; so does any pass whose changes cannot be read.
func TestReconcilePassRequestsBounded(t *testing.T) {
	ad, d := boundServer(t, "bound", "$JS.API.CONSUMER.CREATE.KV_bound_tasks", "$JS.API.CONSUMER.CREATE.KV_bound_tasks.>")
	// A row for the pass to read (an empty bucket needs no consumer).
	if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "bound"}); err != nil {
		t.Fatal(err)
	}
	// A deadline as the reconcile loop gives a pass: far longer than a
	// request may take.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := d.RequeueStale(ctx); err == nil {
		t.Fatal("a pass on demand read the rows through a consumer the user may not create")
	} else if ctx.Err() != nil {
		t.Fatalf("the pass waited out its own deadline on an unanswered request: %v", err)
	}
	// The round still catches up: the loop's next pass comes after a
	// wait that grows while slices read nothing.
	for _, want := range []time.Duration{reconcileRetryMin, 2 * reconcileRetryMin} {
		_, hurry, err := d.pass(ctx, false)
		if err != nil {
			t.Fatalf("a pass of the loop whose slice failed: %v", err)
		}
		if hurry != want {
			t.Errorf("after a slice that read nothing the next pass is asked within %v, want %v", hurry, want)
		}
	}
	if s := d.Stats(); s.FullReconciles != 0 || ctx.Err() != nil {
		t.Fatalf("%d rounds ended though no row could be read (deadline: %v)", s.FullReconciles, ctx.Err())
	}
	// A row written since: the changes cannot be read either.
	if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "bound"}); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.pass(ctx, false)
	if err == nil {
		t.Fatal("the pass read the changes through a consumer the user may not create")
	}
	if ctx.Err() != nil {
		t.Fatalf("the pass waited out its own deadline on an unanswered request: %v", err)
	}
	t.Logf("the pass failed at once: %v", err)
}

// TestReconcileSliceFailureKeepsTheRepairs: a slice whose leader read goes
// unanswered (the round's last message purged, so the slice asks the
// leader whether anything is left before it) is bounded by the request
// timeout, and the pass still repairs what the slice read: a ready row
// whose signal was lost gets it again.
func TestReconcileSliceFailureKeepsTheRepairs(t *testing.T) {
	ad, d := boundServer(t, "slice", "$JS.API.STREAM.MSG.GET.KV_slice_tasks")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ready, last := noeta.NewTaskID(), noeta.NewTaskID()
	for _, task := range []string{ready, last} {
		if err := ad.Enqueue(ctx, task, eventlog.EnqueueOptions{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ad.ready.Purge(ctx, jetstream.WithPurgeSubject(ad.subj.ready("q", ready))); err != nil {
		t.Fatal(err)
	}
	rows, err := ad.js.Stream(ctx, "KV_"+ad.cfg.tasksBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := rows.Purge(ctx, jetstream.WithPurgeSubject("$KV."+ad.cfg.tasksBucket()+"."+last)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, _, err := d.pass(ctx, false); err != nil {
		t.Fatalf("a pass whose slice failed: %v", err)
	}
	if took := time.Since(began); ctx.Err() != nil {
		t.Fatalf("the pass waited out its deadline (%v)", took)
	}
	if s := d.Stats(); s.Resignalled != 1 || s.FullReconciles != 0 {
		t.Errorf("re-signalled %d and ended %d rounds, want 1 and 0 (the round cannot tell it is done)", s.Resignalled, s.FullReconciles)
	}
}

// TestAckWaitFollowsTheLeaseTTL: the shared consumers give a message back
// after the lease TTL (within [ackWaitMin, their ceiling]), so a process
// cut off holding a ready signal, a wake or a fired timer delays it no
// longer than a lease it held. Read from the server's consumer info.
func TestAckWaitFollowsTheLeaseTTL(t *testing.T) {
	for _, c := range []struct {
		ttl, ready, ingress time.Duration
	}{
		{time.Second, ackWaitMin, ackWaitMin},
		{3 * time.Second, 3 * time.Second, 3 * time.Second},
		{30 * time.Second, readyAckWait, ingressAckWait}, // the default: as before
	} {
		t.Run(c.ttl.String(), func(t *testing.T) {
			_, d, _ := boundServerWith(t, "ack", func(cfg *DispatcherConfig) { cfg.LeaseTTL = c.ttl })
			ctx := t.Context()
			if _, err := d.queueConsumer(ctx, "q", false); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				stream, consumer string
				want             time.Duration
			}{
				{d.cfg.readyStream(), "ready-q", c.ready},
				{d.cfg.wakeStream(), ingressConsumer, c.ingress},
				{d.cfg.timerStream(), timersConsumer, c.ingress},
			} {
				cons, err := d.js.Consumer(ctx, w.stream, w.consumer)
				if err != nil {
					t.Fatalf("%s: %v", w.consumer, err)
				}
				if got := cons.CachedInfo().Config.AckWait; got != w.want {
					t.Errorf("%s: ack wait %v with lease TTL %v, want %v", w.consumer, got, c.ttl, w.want)
				}
			}
			if got, want := d.strandAfter(), max(2*d.cfg.SweepInterval, c.ready); got != want {
				t.Errorf("strandAfter %v, want %v", got, want)
			}
		})
	}
}

// TestReconcileListingsBounded: the signals listing of a pass, and each
// row's repair, are bounded by the request timeout, as the pass's other
// requests are, not by the pass's two minutes. Reproduction (deploy/nats
// TestPartition under load): the listing of the ready stream's subjects,
// sent while the stream's leader was killed, was never answered, and
// every serve's passes waited out their two minutes; a parent whose last
// child's handoff had failed waited with them, 60-80 s past the faults.
// The server here leaves the request unanswered as a role that may not
// make it would.
func TestReconcileListingsBounded(t *testing.T) {
	for _, c := range []struct {
		name  string
		deny  string
		purge bool // the ready signal lost: the row is a candidate
	}{
		{"signals listing", "$JS.API.STREAM.INFO.LST1_READY", false},
		{"a row's repair", "$JS.API.STREAM.MSG.GET.LST2_READY", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := strings.ToLower(strings.TrimSuffix(c.deny[strings.LastIndex(c.deny, ".")+1:], "_READY"))
			// Opening looks the streams up: the request is denied only
			// once the Dispatchers are open.
			ad, d, denyLater := boundServerWith(t, prefix, nil)
			if got := ad.cfg.readyStream(); !strings.HasSuffix(c.deny, "."+got) {
				t.Fatalf("the denied subject %s does not name the ready stream %s", c.deny, got)
			}
			denyLater(c.deny)
			if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "q"}); err != nil {
				t.Fatal(err)
			}
			if c.purge {
				if err := ad.ready.Purge(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, _, err := d.pass(ctx, false)
			if err == nil {
				t.Fatal("the pass succeeded though a request it needs is never answered")
			}
			if ctx.Err() != nil {
				t.Fatalf("the pass waited out its own deadline on an unanswered request: %v", err)
			}
			t.Logf("the pass failed within the request timeout: %v", err)
		})
	}
}
