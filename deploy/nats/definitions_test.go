package nats_test

//go:generate go test -run TestDefinitions -update .
//go:generate go run ./permgen -o users.conf users

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

var update = flag.Bool("update", false, "rewrite streams/*.json and consumers/*.json from what the code creates")

// clusterReplicas is the replica count of the definitions: they are the
// 3-node cluster's. On a single node every stream has 1 (README.md).
const clusterReplicas = 3

// definition is one JSON file and the stream or consumer it defines.
type definition struct {
	file     string // under deploy/nats
	stream   string
	consumer string // "" for a stream definition
	// declared is the code's exported definition (a StreamConfig or a
	// ConsumerConfig from package jetstream) when there is one: every field
	// it sets must be in the file as it sets it. The buckets' streams have
	// none: nats.go derives them from a KeyValueConfig or ObjectStoreConfig.
	declared any
}

// feedGroup is the group of the example feed consumer: cmd/observer-worker's
// audit observer with its default group prefix.
const feedGroup = "obs-audit"

func definitions() []definition {
	dc := jetstream.DispatcherConfig{Replicas: clusterReplicas}
	return []definition{
		{file: "streams/NOETA_TASKS.json", stream: "NOETA_TASKS", declared: jetstream.StreamConfig(jetstream.Config{Replicas: clusterReplicas})},
		{file: "streams/NOETA_READY.json", stream: "NOETA_READY", declared: jetstream.ReadyStreamConfig(dc)},
		{file: "streams/NOETA_WAKE.json", stream: "NOETA_WAKE", declared: jetstream.WakeStreamConfig(dc)},
		{file: "streams/NOETA_TIMERS.json", stream: "NOETA_TIMERS", declared: jetstream.TimerStreamConfig(dc)},
		{file: "streams/NOETA_DLQ.json", stream: "NOETA_DLQ", declared: jetstream.DeadLetterStreamConfig("", clusterReplicas)},
		{file: "streams/KV_noeta_tasks.json", stream: "KV_noeta_tasks"},
		{file: "streams/KV_noeta_leases.json", stream: "KV_noeta_leases"},
		{file: "streams/KV_noeta_idempotency.json", stream: "KV_noeta_idempotency"},
		{file: "streams/KV_noeta_waiting.json", stream: "KV_noeta_waiting"},
		{file: "streams/KV_noeta_rates.json", stream: "KV_noeta_rates"},
		{file: "streams/OBJ_noeta_content.json", stream: "OBJ_noeta_content"},
		{file: "streams/NOETA_CONTENT.json", stream: "NOETA_CONTENT", declared: jetstream.ContentStreamConfig(jetstream.Config{Replicas: clusterReplicas})},
		{file: "consumers/obs-audit-p00.json", stream: "NOETA_TASKS", consumer: feedGroup + "-p00",
			declared: jetstream.FeedConsumerConfig("", feedGroup, 0, eventlog.FeedConfig{})},
		{file: "consumers/dispatcher-ingress.json", stream: "NOETA_WAKE", consumer: "dispatcher-ingress"},
		{file: "consumers/dispatcher-timers.json", stream: "NOETA_TIMERS", consumer: "dispatcher-timers"},
		{file: "consumers/ready-default.json", stream: "NOETA_READY", consumer: "ready-" + eventlog.DefaultQueue},
	}
}

// TestDefinitions lets the code create every stream, bucket and consumer on
// an embedded server, with default settings, and compares what the server
// reports, field by field, with the JSON files. With -update it writes the
// files instead (go generate does).
func TestDefinitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	createEverything(ctx, t, nc)

	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defs := definitions()
	for _, d := range defs {
		t.Run(d.file, func(t *testing.T) {
			got := readBack(ctx, t, js, d)
			// The test server is one node: its streams have 1 replica, the
			// files' 3. Consumers inherit their stream's (num_replicas 0).
			if sc, ok := got.(*natsjs.StreamConfig); ok {
				sc.Replicas = clusterReplicas
				// A replicated task stream takes atomic batches (ADR
				// 0038); the code sets allow_atomic only with replicas.
				if sc.Name == "NOETA_TASKS" {
					sc.AllowAtomicPublish = true
				}
				// A bucket of one copy is read by direct gets, a
				// replicated one from its leader (ADR 0043).
				if strings.HasPrefix(sc.Name, "KV_") {
					sc.AllowDirect = false
				}
			}
			if *update {
				writeDefinition(t, d, got)
				return
			}
			checkDefinition(t, d, got)
		})
	}
	// Every file is a definition the test knows.
	known := map[string]bool{}
	for _, d := range defs {
		known[d.file] = true
	}
	for _, glob := range []string{"streams/*.json", "consumers/*.json"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			if !known[filepath.ToSlash(f)] {
				t.Errorf("%s is not a definition this test checks: remove it, or add it to definitions()", f)
			}
		}
	}
}

// createEverything runs the code that creates the streams, buckets and
// consumers, as an engine and an observer worker do: OpenDispatcher (and a
// Lease, which creates the default queue's consumer), Open,
// OpenWaitingIndex, OpenFeed and a Consume of the example group on
// partition 0.
func createEverything(ctx context.Context, t testing.TB, nc *nats.Conn) {
	t.Helper()
	disp, err := jetstream.OpenDispatcher(ctx, nc, jetstream.DispatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	if _, err := disp.Lease(ctx, eventlog.LeaseRequest{Worker: "definitions"}); !errors.Is(err, eventlog.ErrNoReadyTask) {
		t.Fatalf("Lease on an empty queue: %v, want ErrNoReadyTask", err)
	}
	log, err := jetstream.Open(ctx, nc, jetstream.Config{Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	if _, err := jetstream.OpenWaitingIndex(ctx, nc, jetstream.WaitingConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.OpenRates(ctx, nc, "noeta", 1); err != nil {
		t.Fatal(err)
	}
	feed, err := jetstream.OpenFeed(ctx, nc, jetstream.FeedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- feed.Consume(cctx, eventlog.FeedConfig{Group: feedGroup, Partitions: []int{0}},
			func(context.Context, eventlog.Delivery) error { return nil })
	}()
	for {
		_, err := js.Consumer(ctx, "NOETA_TASKS", feedGroup+"-p00")
		if err == nil {
			break
		}
		if !errors.Is(err, natsjs.ErrConsumerNotFound) || ctx.Err() != nil {
			t.Fatalf("feed consumer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
}

// readBack returns the configuration the server reports for d, with what the
// server stamps on every asset itself taken out (normalize).
func readBack(ctx context.Context, t testing.TB, js natsjs.JetStream, d definition) any {
	t.Helper()
	s, err := js.Stream(ctx, d.stream)
	if err != nil {
		t.Fatalf("stream %s: %v", d.stream, err)
	}
	if d.consumer == "" {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		cfg.Metadata = normalizeMetadata(cfg.Metadata)
		return &cfg
	}
	c, err := s.Consumer(ctx, d.consumer)
	if err != nil {
		t.Fatalf("consumer %s on %s: %v", d.consumer, d.stream, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.Metadata = normalizeMetadata(cfg.Metadata)
	return &cfg
}

// normalizeMetadata drops the metadata the server writes into every stream
// and consumer configuration on its own: _nats.ver (the server's version),
// _nats.level and _nats.req.level (the API level it runs and the one the
// configuration needs). They describe the server that created the asset, not
// the asset, and nats tooling or a newer server writes its own. Nothing else
// is normalised: the files hold the whole configuration, server defaults
// included, so `nats stream add --config` creates exactly what the code does.
func normalizeMetadata(m map[string]string) map[string]string {
	for k := range m {
		if strings.HasPrefix(k, "_nats.") {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// marshalDefinition is the files' format: indented, with <, > and & as
// themselves (subjects end in >).
func marshalDefinition(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeDefinition(t testing.TB, d definition, got any) {
	t.Helper()
	b, err := marshalDefinition(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(d.file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", d.file)
}

// checkDefinition compares the file of d with got (what the server reports)
// field by field, and with what the code declares.
func checkDefinition(t testing.TB, d definition, got any) {
	t.Helper()
	b, err := os.ReadFile(d.file)
	if err != nil {
		t.Fatalf("%v (go generate ./deploy/nats writes it)", err)
	}
	// The file decodes into the same type, with nothing the type does not
	// know: a field the server would ignore is a mistake in the file.
	want := reflect.New(reflect.TypeOf(got).Elem()).Interface()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(want); err != nil {
		t.Fatalf("%s: %v", d.file, err)
	}
	for _, f := range fieldDiffs(want, got) {
		t.Errorf("%s: %s: the file has %s, the code creates %s", d.file, f.name, f.a, f.b)
	}
	if d.consumer == "" && reflect.ValueOf(want).Elem().FieldByName("Name").String() != d.stream {
		t.Errorf("%s: name is not %s", d.file, d.stream)
	}
	if d.declared != nil {
		// Every field the code's definition sets is in the file as set.
		decl := reflect.New(reflect.TypeOf(d.declared)).Interface()
		reflect.ValueOf(decl).Elem().Set(reflect.ValueOf(d.declared))
		for _, f := range fieldDiffs(decl, want) {
			if !f.zeroA {
				t.Errorf("%s: %s: the file has %s, the code declares %s", d.file, f.name, f.b, f.a)
			}
		}
	}
	// And the file is formatted as -update writes it, so a regenerated file
	// shows only real changes in a diff.
	if canon, err := marshalDefinition(want); err == nil && !bytes.Equal(canon, b) {
		t.Errorf("%s is not formatted as go generate writes it; run go generate ./deploy/nats", d.file)
	}
}

type fieldDiff struct {
	name  string // the JSON name
	a, b  string
	zeroA bool
}

// fieldDiffs compares two pointers to structs of one type field by field.
func fieldDiffs(a, b any) []fieldDiff {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []fieldDiff
	for i := range va.NumField() {
		fa, fb := va.Field(i), vb.Field(i)
		if reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			continue
		}
		name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
		out = append(out, fieldDiff{name: name, a: show(fa), b: show(fb), zeroA: fa.IsZero()})
	}
	slices.SortFunc(out, func(x, y fieldDiff) int { return strings.Compare(x.name, y.name) })
	return out
}

func show(v reflect.Value) string {
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return string(b)
}
