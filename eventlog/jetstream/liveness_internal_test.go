package jetstream

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestKVStreamConfig: the stream ensureKVMode makes for a bucket is the
// one nats.go's CreateKeyValue makes, as the server stores it, for each
// kind of bucket noeta has (so a bucket created either way is bound and
// checked alike, and a later nats.go that changes its buckets fails here).
func TestKVStreamConfig(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(embeddedConn(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []jetstream.KeyValueConfig{
		{Description: "rows", History: 1, Storage: jetstream.FileStorage, Replicas: 1},
		{Description: "leases", History: 1, TTL: 30 * time.Second, LimitMarkerTTL: 30 * time.Second, Storage: jetstream.FileStorage, Replicas: 1},
		{Description: "history and limits", History: 5, TTL: 10 * time.Minute, MaxBytes: 1 << 20, MaxValueSize: 4096, Storage: jetstream.FileStorage, Replicas: 1},
	} {
		a, b := want, want
		a.Bucket, b.Bucket = "natsgo"+string(rune('a'+i)), "noeta"+string(rune('a'+i))
		if _, err := js.CreateKeyValue(t.Context(), a); err != nil {
			t.Fatalf("CreateKeyValue %s: %v", want.Description, err)
		}
		if _, err := ensureKVMode(t.Context(), js, jetstream.AsyncPersistMode, b); err != nil {
			t.Fatalf("ensureKVMode %s: %v", want.Description, err)
		}
		ca, cb := streamConfig(t, js, "KV_"+a.Bucket), streamConfig(t, js, "KV_"+b.Bucket)
		if cb.PersistMode != jetstream.AsyncPersistMode {
			t.Errorf("%s: persist mode %v, want async", want.Description, cb.PersistMode)
		}
		cb.Name, cb.Subjects, cb.PersistMode = ca.Name, ca.Subjects, ca.PersistMode
		// The API level the server records is what the stream's features
		// need: async persist asks for a later one.
		delete(ca.Metadata, "_nats.req.level")
		delete(cb.Metadata, "_nats.req.level")
		if !reflect.DeepEqual(ca, cb) {
			t.Errorf("%s:\nnats.go's bucket %+v\nnoeta's         %+v", want.Description, ca, cb)
		}
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

// TestAsyncLiveness: with AsyncLiveness the lease keys' bucket and the
// ready stream are persisted asynchronously and nothing else is; without
// it nothing is; with replicas it is refused, naming the setting.
func TestAsyncLiveness(t *testing.T) {
	t.Parallel()
	nc := embeddedConn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, async := range []bool{true, false} {
		c := DispatcherConfig{Prefix: "live" + map[bool]string{true: "async", false: "sync"}[async], AsyncLiveness: async,
			SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)}
		d, err := OpenDispatcher(t.Context(), nc, c)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		c, _ = c.withDefaults()
		for _, s := range []struct {
			stream string
			async  bool
		}{
			{"KV_" + c.leasesBucket(), async},
			{c.readyStream(), async},
			{"KV_" + c.tasksBucket(), false},
			{c.wakeStream(), false},
			{c.timerStream(), false},
		} {
			if got := streamConfig(t, js, s.stream).PersistMode == jetstream.AsyncPersistMode; got != s.async {
				t.Errorf("AsyncLiveness %v: %s persisted asynchronously = %v, want %v", async, s.stream, got, s.async)
			}
		}
	}
	// A deployment made before keeps its synced bucket and stream: the
	// mode cannot change, and the dispatcher opens on them all the same.
	c := DispatcherConfig{Prefix: "livesync", AsyncLiveness: true, SweepInterval: -1, Logger: slog.New(slog.DiscardHandler)}
	d, err := OpenDispatcher(t.Context(), nc, c)
	if err != nil {
		t.Fatalf("AsyncLiveness on a deployment made without it: %v", err)
	}
	defer d.Close()
	c, _ = c.withDefaults()
	for _, stream := range []string{"KV_" + c.leasesBucket(), c.readyStream()} {
		if streamConfig(t, js, stream).PersistMode != jetstream.DefaultPersistMode {
			t.Errorf("%s, made synced, changed its persist mode", stream)
		}
	}
	_, err = OpenDispatcher(t.Context(), nc, DispatcherConfig{Prefix: "livebad", Replicas: 3, AsyncLiveness: true})
	if err == nil || !strings.Contains(err.Error(), "AsyncLiveness") || errors.Is(err, ErrConfigMismatch) {
		t.Errorf("AsyncLiveness with 3 replicas: %v, want an error naming AsyncLiveness", err)
	}
}
