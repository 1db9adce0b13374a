package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// The batch cases run packed (BatchAuto) on the single node and the cluster
// within TestSuiteSingleNode and TestSuiteCluster, and in the other two
// modes here.
func TestBatchSuiteSingleNodeAtomic(t *testing.T) {
	eventlogtest.RunBatchSuite(t, factoryConfig(singleURL, jetstream.Config{Batch: jetstream.BatchAtomic}))
}

func TestBatchSuiteSingleNodeSequential(t *testing.T) {
	eventlogtest.RunBatchSuite(t, factoryConfig(singleURL, jetstream.Config{Batch: jetstream.BatchSequential}))
}

// liveRegistry holds every lease live: only the log's own fence stands
// between a stale holder and the log, as when the holder checked the
// registry just before the takeover.
type liveRegistry struct{}

func (liveRegistry) Valid(context.Context, eventlog.Lease) (bool, error) { return true, nil }

// TestBatchFencedAtServer: holder A, with a cached tail and a registry that
// still says yes, sends a batch after B's LeaseGranted landed. The batch's
// compare-and-set on the tail A knew fails at the server, A stops with
// ErrLeaseLost, and none of the batch's records is in the log (atomic: the
// first message's failed check refuses the batch; sequential: the first
// record is refused and the rest are never sent).
func TestBatchFencedAtServer(t *testing.T) {
	for _, mode := range []struct {
		name string
		mode jetstream.BatchMode
	}{{"sequential", jetstream.BatchSequential}, {"atomic", jetstream.BatchAtomic}, {"packed", jetstream.BatchPacked}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := uniquePrefix(t, singleURL)
			open := func() *jetstream.Log {
				l, err := jetstream.Open(ctx, connect(t, singleURL), jetstream.Config{Prefix: prefix, Registry: liveRegistry{}, Batch: mode.mode})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			la, lb := open(), open()
			task := noeta.NewTaskID()
			genesis, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := la.Create(ctx, genesis); err != nil {
				t.Fatal(err)
			}
			turns := func(from int) []eventlog.Envelope {
				var out []eventlog.Envelope
				for i := range 3 {
					env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: from + i})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, env)
				}
				return out
			}
			a := eventlog.Lease{ID: "lease-a", Task: task, Generation: 1, Worker: "a"}
			b := eventlog.Lease{ID: "lease-b", Task: task, Generation: 2, Worker: "b"}
			if _, err := la.EmitBatch(ctx, a, turns(1), eventlog.EmitOptions{}); err != nil {
				t.Fatalf("A's first batch: %v", err)
			}
			if _, err := lb.EmitBatch(ctx, b, turns(4), eventlog.EmitOptions{}); err != nil {
				t.Fatalf("B's batch: %v", err)
			}
			got, err := la.EmitBatch(ctx, a, turns(7), eventlog.EmitOptions{})
			if !errors.Is(err, eventlog.ErrLeaseLost) || len(got) != 0 {
				t.Fatalf("A's batch after B's LeaseGranted: got %d records, %v; want none and ErrLeaseLost", len(got), err)
			}
			log, err := lb.Read(ctx, task, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(log) != 9 {
				t.Fatalf("log has %d records, want 9 (genesis, A's grant and batch, B's grant and batch)", len(log))
			}
			for _, r := range log[5:] {
				if r.LeaseGen != 2 {
					t.Fatalf("record %d (%s) has lease gen %d after B's LeaseGranted", r.Seq, r.Type, r.LeaseGen)
				}
			}
		})
	}
}

// TestBatchModeChosen: BatchAuto packs a batch into one message on a
// single node, on a cluster and on a stream defined without allow_atomic (as
// deploy/nats's was); the other modes are what they say; only sequential
// batches may leave a prefix; a Batch value out of range is refused.
func TestBatchModeChosen(t *testing.T) {
	ctx := t.Context()
	open := func(url string, cfg jetstream.Config) (*jetstream.Log, error) {
		return jetstream.Open(ctx, connect(t, url), cfg)
	}
	check := func(name string, l *jetstream.Log, want jetstream.BatchMode) {
		t.Helper()
		if got := l.Batch(); got != want {
			t.Errorf("%s: Batch() = %v, want %v", name, got, want)
		}
		if got := l.BatchAtomic(); got != (want != jetstream.BatchSequential) {
			t.Errorf("%s: BatchAtomic() = %v for %v", name, got, want)
		}
	}
	cases := []struct {
		name string
		url  string
		cfg  jetstream.Config
		want jetstream.BatchMode
	}{
		{"single node, auto", singleURL, jetstream.Config{Replicas: 1}, jetstream.BatchPacked},
		{"single node, atomic", singleURL, jetstream.Config{Replicas: 1, Prefix: uniquePrefix(t, singleURL), Batch: jetstream.BatchAtomic}, jetstream.BatchAtomic},
		{"single node, sequential", singleURL, jetstream.Config{Replicas: 1, Batch: jetstream.BatchSequential}, jetstream.BatchSequential},
		{"cluster, auto", clusterURL, jetstream.Config{Replicas: 3}, jetstream.BatchPacked},
		{"cluster, atomic", clusterURL, jetstream.Config{Replicas: 3, Batch: jetstream.BatchAtomic}, jetstream.BatchAtomic},
		{"cluster, sequential", clusterURL, jetstream.Config{Replicas: 3, Batch: jetstream.BatchSequential}, jetstream.BatchSequential},
	}
	for _, c := range cases {
		l, err := open(c.url, c.cfg)
		if err != nil {
			t.Fatalf("%s: Open: %v", c.name, err)
		}
		check(c.name, l, c.want)
	}
	// A replicated stream created from the definition, without allow_atomic.
	prefix := uniquePrefix(t, clusterURL)
	js, err := natsjs.New(connect(t, clusterURL))
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig(jetstream.Config{Prefix: prefix, Replicas: 3}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	l, err := open(clusterURL, jetstream.Config{Prefix: prefix, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	check("auto on a stream without allow_atomic", l, jetstream.BatchPacked)
	if _, err := open(singleURL, jetstream.Config{Batch: jetstream.BatchMode(7)}); err == nil || !strings.Contains(err.Error(), "Config.Batch") {
		t.Errorf("Open with Batch 7: got %v, want an error naming Config.Batch", err)
	}
}
