package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestReconcilePassRequestsBounded: a request of a reconcile pass that the
// server never answers fails the pass within the request timeout, not at
// the end of the pass's own deadline. Reproduction (deploy/nats
// TestPartition, short form under load): after a fault, the creation of
// the consumer that reads the rows went unanswered and every serve's pass
// waited out its two minutes; a parent whose subtask handoff had been lost
// waited with it, past the run's calm window. The server here leaves the
// request unanswered as a deployment's role would (a publish the user may
// not make: the engine role of deploy/nats refused an unfiltered read this
// way).
func TestReconcilePassRequestsBounded(t *testing.T) {
	const user, pass = "engine", "engine-pw"
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		Users: []*server.User{
			{Username: "admin", Password: "admin-pw"},
			{Username: user, Password: pass, Permissions: &server.Permissions{Publish: &server.SubjectPermission{
				Allow: []string{">"},
				Deny:  []string{"$JS.API.CONSUMER.CREATE.KV_bound_tasks", "$JS.API.CONSUMER.CREATE.KV_bound_tasks.>"},
			}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	cfg := jetstream.DispatcherConfig{Prefix: "bound", LeaseTTL: 2 * time.Second, SweepInterval: -1, RequestTimeout: time.Second}
	// The buckets and streams made by a user who may, as a deployment's
	// set-up does.
	admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ad, err := jetstream.OpenDispatcher(t.Context(), admin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ad.Close() })
	// A row for the pass to read (an empty bucket needs no consumer).
	if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "bound"}); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	// A deadline as the reconcile loop gives a pass: far longer than a
	// request may take. The first pass's slice of the round cannot read
	// the rows: reported, and the pass goes on with its repairs.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := d.RequeueStale(ctx); err != nil {
		t.Fatalf("a pass whose slice of the round failed: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the pass waited out its own deadline on an unanswered request")
	}
	if s := d.Stats(); s.FullReconciles != 0 {
		t.Fatalf("%d rounds ended though no row could be read", s.FullReconciles)
	}
	// A row written since: the changes cannot be read either, and the
	// pass fails, at once.
	if err := ad.Enqueue(t.Context(), noeta.NewTaskID(), eventlog.EnqueueOptions{Queue: "bound"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.RequeueStale(ctx)
	if err == nil {
		t.Fatal("the pass read the rows through a consumer the user may not create")
	}
	if ctx.Err() != nil {
		t.Fatalf("the pass waited out its own deadline on an unanswered request: %v", err)
	}
	t.Logf("the pass failed at once: %v", err)
}
