package jetstream_test

import (
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestBucketReadMode: the key-value buckets of a single copy are read by direct gets
// (their one server is their leader), those of a replicated deployment from
// the leader (a replica may not have an acknowledged write yet), and a
// single-copy bucket created before with leader reads is switched (ADR
// 0043).
func TestBucketReadMode(t *testing.T) {
	for _, c := range []struct {
		name     string
		url      string
		replicas int
		direct   bool
	}{{"single node", singleURL, 1, true}, {"cluster", clusterURL, 3, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			nc := connect(t, c.url)
			prefix := uniquePrefix(t, c.url)
			js, err := natsjs.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if c.direct {
				// An older store: the rows' bucket made with leader reads.
				for {
					_, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: prefix + "_tasks", History: 1, Storage: natsjs.FileStorage})
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						t.Fatal(err)
					}
					time.Sleep(200 * time.Millisecond)
				}
				s, err := js.Stream(ctx, "KV_"+prefix+"_tasks")
				if err != nil {
					t.Fatal(err)
				}
				cfg := s.CachedInfo().Config
				cfg.AllowDirect = false
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			var d *jetstream.Dispatcher
			for {
				d, err = jetstream.OpenDispatcher(ctx, nc, jetstream.DispatcherConfig{Prefix: prefix, Replicas: c.replicas})
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Cleanup(func() { _ = d.Close() })
			if _, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: prefix, Replicas: c.replicas, Registry: d}); err != nil {
				t.Fatal(err)
			}
			for _, stream := range []string{"KV_" + prefix + "_tasks", "KV_" + prefix + "_leases", "KV_" + prefix + "_idempotency", "OBJ_" + prefix + "_content"} {
				s, err := js.Stream(ctx, stream)
				if err != nil {
					t.Fatal(err)
				}
				want := c.direct && !strings.HasPrefix(stream, "OBJ_") // objects: leader reads always
				if got := s.CachedInfo().Config.AllowDirect; got != want {
					t.Errorf("%s: allow_direct %v, want %v", stream, got, want)
				}
			}
		})
	}
}
