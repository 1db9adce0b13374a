package hostconfig

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/host"
)

func waitingEntry(task string) eventlog.Waiting {
	return eventlog.Waiting{Task: task, Handle: "approval-1", Kind: eventlog.WaitingApproval, Agent: "ops",
		Tool: "shell", RequestedAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
}

// TestWaitingEmbedded: on the embedded default the runner's index is the
// one a client attached to its server lists and watches.
func TestWaitingEmbedded(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	runner := openRunner(t, data)
	if runner.WaitingIndex() == nil {
		t.Fatal("a runner host has no waiting index")
	}
	client, err := Open(t.Context(), Options{DataDir: data, Name: "test-client", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if ws, err := client.Waiting(t.Context()); err != nil || len(ws) != 0 {
		t.Fatalf("Waiting of an empty fleet: %v, %v", ws, err)
	}
	got := make(chan eventlog.WaitingChange, 8)
	stop, err := client.WatchWaiting(t.Context(), func(c eventlog.WaitingChange) { got <- c })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if c := <-got; c.Entry.Task != "" {
		t.Fatalf("first change %+v, want the marker", c)
	}
	if err := runner.WaitingIndex().PutWaiting(t.Context(), waitingEntry("hw-1")); err != nil {
		t.Fatal(err)
	}
	if c := <-got; c.Entry.Task != "hw-1" || c.Entry.Tool != "shell" {
		t.Fatalf("change %+v, want hw-1", c)
	}
	ws, err := client.Waiting(t.Context())
	if err != nil || len(ws) != 1 || ws[0].Task != "hw-1" {
		t.Fatalf("Waiting: %+v, %v", ws, err)
	}
}

// TestWaitingRemoteReadOnly: a read-only host on a remote NATS binds to the
// bucket and never creates it; before any engine made it, Waiting says so
// (host.ErrNoWaitingIndex) and the host still opens for its other reads.
func TestWaitingRemoteReadOnly(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A deployment made before the index: the task stream and rows only.
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer disp.Close()
	lg, err := jetstream.Open(t.Context(), nc, jetstream.Config{Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	remote := Connection{URL: srv.ClientURL()}
	ro, err := Open(t.Context(), Options{NATS: remote, ReadOnly: true, Name: "test-ro"})
	if err != nil {
		t.Fatalf("a read-only host without a waiting index: %v", err)
	}
	if _, err := ro.Waiting(t.Context()); !errors.Is(err, host.ErrNoWaitingIndex) {
		t.Fatalf("Waiting without the bucket: %v, want %v", err, host.ErrNoWaitingIndex)
	}
	if _, err := ro.WatchWaiting(t.Context(), func(eventlog.WaitingChange) {}); !errors.Is(err, host.ErrNoWaitingIndex) {
		t.Fatalf("WatchWaiting without the bucket: %v, want %v", err, host.ErrNoWaitingIndex)
	}
	ro.Close()
	// A client that may write creates it; its engine is given it.
	cl, err := Open(t.Context(), Options{NATS: remote, Name: "test-client"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.WaitingIndex().PutWaiting(t.Context(), waitingEntry("hr-1")); err != nil {
		t.Fatal(err)
	}
	ro, err = Open(t.Context(), Options{NATS: remote, ReadOnly: true, Name: "test-ro"})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ws, err := ro.Waiting(t.Context())
	if err != nil || len(ws) != 1 || ws[0].Task != "hr-1" {
		t.Fatalf("read-only Waiting: %+v, %v", ws, err)
	}
	if err := ro.WaitingIndex().PutWaiting(t.Context(), waitingEntry("hr-2")); err == nil {
		t.Fatal("a read-only host wrote the index")
	}
}
