package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

var waitingPrefixes atomic.Int64

// waitingPrefix is a prefix of its own for one test: the listing is of the
// whole bucket, so cases may not share one.
func waitingPrefix() string { return fmt.Sprintf("widx%d", waitingPrefixes.Add(1)) }

func openWaiting(t *testing.T, url string, cfg jetstream.WaitingConfig) *jetstream.WaitingIndex {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = waitingPrefix()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	x, err := jetstream.OpenWaitingIndex(t.Context(), connect(t, url), cfg)
	if err != nil {
		t.Fatalf("OpenWaitingIndex: %v", err)
	}
	return x
}

func waitingFactory(url string, replicas int) eventlogtest.WaitingFactory {
	return func(t *testing.T) eventlog.WaitingIndex {
		return openWaiting(t, url, jetstream.WaitingConfig{Replicas: replicas})
	}
}

func TestWaitingSuiteSingleNode(t *testing.T) {
	eventlogtest.RunWaitingSuite(t, waitingFactory(singleURL, 1))
}

func TestWaitingSuiteCluster(t *testing.T) {
	eventlogtest.RunWaitingSuite(t, waitingFactory(clusterURL, 3))
}

func testWaiting(task, handle string) eventlog.Waiting {
	return eventlog.Waiting{Task: task, Handle: handle, Kind: eventlog.WaitingApproval, Agent: "ops", RequestedAt: time.Now()}
}

// TestWaitingMalformedSkipped: values someone else wrote into the bucket —
// not JSON, under a key that is not <task>.<handle>, or the entry of another
// key — are skipped and counted by a listing and a watch; neither fails.
func TestWaitingMalformedSkipped(t *testing.T) {
	prefix := waitingPrefix()
	x := openWaiting(t, singleURL, jetstream.WaitingConfig{Prefix: prefix})
	if err := x.PutWaiting(t.Context(), testWaiting("wm-good", "approval-1")); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), jetstream.WaitingBucket(prefix))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"wm-bad.approval-1":   `{not json`,
		"nodot":               `{"task":"nodot","handle":"x","kind":"approval"}`,
		"wm-other.approval-1": `{"task":"wm-good","handle":"approval-1","kind":"approval"}`,
		"wm-kind.approval-1":  `{"task":"wm-kind","handle":"approval-1","kind":"payment"}`,
	} {
		if _, err := kv.PutString(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := x.ListWaiting(t.Context())
	if err != nil {
		t.Fatalf("ListWaiting over malformed entries: %v", err)
	}
	if len(ws) != 1 || ws[0].Task != "wm-good" {
		t.Fatalf("listing: %+v, want wm-good only", ws)
	}
	if n := x.Malformed(); n != 4 {
		t.Fatalf("Malformed after a listing: %d, want 4", n)
	}
	got := make(chan eventlog.WaitingChange, 16)
	stop, err := x.WatchWaiting(t.Context(), func(c eventlog.WaitingChange) { got <- c })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if c := <-got; c.Entry.Task != "wm-good" {
		t.Fatalf("watch: first change %+v, want wm-good", c)
	}
	if c := <-got; c.Entry.Task != "" || c.Deleted {
		t.Fatalf("watch: second change %+v, want the marker", c)
	}
	if n := x.Malformed(); n != 8 {
		t.Fatalf("Malformed after a watch: %d, want 8", n)
	}
}

// TestWaitingListCut: a listing past ListMax returns what it read and
// ErrWaitingCut, never an error alone (the inbox shows the oldest it has).
func TestWaitingListCut(t *testing.T) {
	x := openWaiting(t, singleURL, jetstream.WaitingConfig{ListMax: 3})
	for i := range 5 {
		if err := x.PutWaiting(t.Context(), testWaiting(fmt.Sprintf("wc-%d", i), "approval-1")); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := x.ListWaiting(t.Context())
	if !errors.Is(err, jetstream.ErrWaitingCut) || len(ws) != 3 {
		t.Fatalf("ListWaiting over 5 with ListMax 3: %d entries, %v; want 3 and %v", len(ws), err, jetstream.ErrWaitingCut)
	}
}

// TestWaitingBindReadOnly: a read-only process binds to the bucket without
// creating it (a missing one is ErrStreamMissing), reads it, and cannot
// write through it.
func TestWaitingBindReadOnly(t *testing.T) {
	nc := connect(t, singleURL)
	missing := waitingPrefix()
	if _, err := jetstream.BindWaitingIndex(t.Context(), nc, jetstream.WaitingConfig{Prefix: missing}); !errors.Is(err, jetstream.ErrStreamMissing) {
		t.Fatalf("BindWaitingIndex of a missing bucket: %v, want %v", err, jetstream.ErrStreamMissing)
	}
	js, _ := natsjs.New(nc)
	if _, err := js.KeyValue(t.Context(), jetstream.WaitingBucket(missing)); !errors.Is(err, natsjs.ErrBucketNotFound) {
		t.Fatalf("binding created the bucket: %v", err)
	}
	prefix := waitingPrefix()
	x := openWaiting(t, singleURL, jetstream.WaitingConfig{Prefix: prefix})
	if err := x.PutWaiting(t.Context(), testWaiting("wr-1", "question-1")); err != nil {
		t.Fatal(err)
	}
	ro, err := jetstream.BindWaitingIndex(t.Context(), nc, jetstream.WaitingConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := ro.ListWaiting(t.Context()); err != nil || len(ws) != 1 {
		t.Fatalf("read-only listing: %v, %v", ws, err)
	}
	if err := ro.PutWaiting(t.Context(), testWaiting("wr-2", "question-1")); err == nil {
		t.Fatal("a read-only index put an entry")
	}
	if err := ro.DeleteWaiting(t.Context(), "wr-1", "question-1"); err == nil {
		t.Fatal("a read-only index deleted an entry")
	}
}

// TestWaitingConfigMismatch: a bucket made with other settings is refused,
// not silently used.
func TestWaitingConfigMismatch(t *testing.T) {
	prefix := waitingPrefix()
	openWaiting(t, singleURL, jetstream.WaitingConfig{Prefix: prefix})
	_, err := jetstream.OpenWaitingIndex(t.Context(), connect(t, singleURL), jetstream.WaitingConfig{Prefix: prefix, MarkerTTL: time.Hour})
	if !errors.Is(err, jetstream.ErrConfigMismatch) {
		t.Fatalf("OpenWaitingIndex with another marker TTL: %v, want %v", err, jetstream.ErrConfigMismatch)
	}
	for _, bad := range []jetstream.WaitingConfig{
		{Prefix: "a.b"}, {Replicas: 7}, {ListMax: -1}, {MarkerTTL: time.Millisecond},
	} {
		if _, err := jetstream.OpenWaitingIndex(t.Context(), connect(t, singleURL), bad); err == nil {
			t.Errorf("OpenWaitingIndex(%+v): no error", bad)
		}
	}
}

// TestWaitingDeleteMarkersExpire: a delete leaves a marker that watchers
// see and that the server removes after MarkerTTL, so the bucket does not
// keep one message for every request ever answered. A listing of the
// emptied bucket then returns at once: the stream's last sequence is a
// message gone, which a listing bounded by it would wait for until its
// timeout.
func TestWaitingDeleteMarkersExpire(t *testing.T) {
	for _, c := range []struct {
		name     string
		url      string
		replicas int
	}{{"SingleNode", singleURL, 1}, {"Cluster", clusterURL, 3}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			prefix := waitingPrefix()
			x := openWaiting(t, c.url, jetstream.WaitingConfig{Prefix: prefix, Replicas: c.replicas, MarkerTTL: time.Second})
			for i := range 3 {
				task := fmt.Sprintf("wx-%d", i)
				if err := x.PutWaiting(t.Context(), testWaiting(task, "approval-1")); err != nil {
					t.Fatal(err)
				}
				if err := x.DeleteWaiting(t.Context(), task, "approval-1"); err != nil {
					t.Fatal(err)
				}
			}
			js, _ := natsjs.New(connect(t, c.url))
			s, err := js.Stream(t.Context(), "KV_"+jetstream.WaitingBucket(prefix))
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				info, err := s.Info(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the bucket still holds %d messages long after the markers' TTL", info.State.Msgs)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if ws, err := x.ListWaiting(t.Context()); err != nil || len(ws) != 0 {
				t.Fatalf("ListWaiting of a bucket whose markers expired: %v, %v; want none and no error", ws, err)
			}
			if ws, err := x.ListTaskWaiting(t.Context(), "wx-2"); err != nil || len(ws) != 0 {
				t.Fatalf("ListTaskWaiting of a task whose marker expired: %v, %v; want none and no error", ws, err)
			}
		})
	}
}

// TestWaitingWatchSurvivesRestart: a watch outlives a restart of the
// server: the key-value watcher's ordered consumer resumes after the last
// change it delivered, so a put made after the restart arrives, and
// nothing already delivered comes again.
func TestWaitingWatchSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	url := srv.ClientURL()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	x, err := jetstream.OpenWaitingIndex(t.Context(), nc, jetstream.WaitingConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.PutWaiting(t.Context(), testWaiting("wrs-1", "approval-1")); err != nil {
		t.Fatal(err)
	}
	got := make(chan eventlog.WaitingChange, 16)
	stop, err := x.WatchWaiting(t.Context(), func(c eventlog.WaitingChange) { got <- c })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := func() eventlog.WaitingChange {
		t.Helper()
		select {
		case c := <-got:
			return c
		case <-time.After(90 * time.Second):
			t.Fatal("the watch delivered nothing within 90s")
		}
		return eventlog.WaitingChange{}
	}
	if c := next(); c.Entry.Task != "wrs-1" {
		t.Fatalf("first change %+v", c)
	}
	if c := next(); c.Entry.Task != "" {
		t.Fatalf("second change %+v, want the marker", c)
	}
	srv.Shutdown()
	if srv, err = embedded.Start(t.Context(), embedded.Config{Dir: dir, Port: port}); err != nil {
		t.Fatal(err)
	}
	// Puts until one is through: the client reconnects on its own time.
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := x.PutWaiting(ctx, testWaiting("wrs-2", "approval-1"))
		cancel()
		if err == nil {
			break
		}
		if t.Context().Err() != nil {
			t.Fatal(err)
		}
	}
	if c := next(); c.Entry.Task != "wrs-2" || c.Deleted {
		t.Fatalf("after the restart: %+v, want the put of wrs-2 (and not wrs-1 again)", c)
	}
}

// TestWaitingListReadsItsWrites: on a bucket of three copies, a listing
// started after an acknowledged put or delete sees it, whoever's replica
// holds the watch's consumer. The consumer lands on a replica the write may
// not have reached yet (the put is acknowledged by two of three), so before
// listings were bounded by the leader this failed now and then (a put
// missing, a deleted entry still listed); writers run side by side to keep
// the replicas busy.
func TestWaitingListReadsItsWrites(t *testing.T) {
	x := openWaiting(t, clusterURL, jetstream.WaitingConfig{Replicas: 3})
	const writers, rounds = 4, 60
	errs := make(chan error, writers)
	for g := range writers {
		go func() {
			errs <- func() error {
				for i := range rounds {
					task := fmt.Sprintf("wrw-%d-%d", g, i)
					for _, h := range []string{"approval-1", "approval-2"} {
						if err := x.PutWaiting(t.Context(), testWaiting(task, h)); err != nil {
							return err
						}
					}
					ws, err := x.ListTaskWaiting(t.Context(), task)
					if err != nil {
						return err
					}
					if len(ws) != 2 {
						return fmt.Errorf("round %d: ListTaskWaiting(%s) right after two puts: %d entries, want 2", i, task, len(ws))
					}
					if err := x.DeleteWaiting(t.Context(), task, "approval-1"); err != nil {
						return err
					}
					ws, err = x.ListTaskWaiting(t.Context(), task)
					if err != nil {
						return err
					}
					if len(ws) != 1 || ws[0].Handle != "approval-2" {
						return fmt.Errorf("round %d: ListTaskWaiting(%s) right after a delete: %d entries, want approval-2 alone", i, task, len(ws))
					}
				}
				return nil
			}()
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkListTaskWaiting is what the engine's reconcile reads every
// segment: one task's two entries in a bucket of 1,000 tasks' entries, on
// the single node (R1: no bound) and on the cluster (R3: the leader get
// first). leader-get is that get alone, the bound's cost. msgs/op counts
// what the connection sent (requests and pulls); cpu-µs/op is the process's
// CPU, the embedded servers included.
func BenchmarkListTaskWaiting(b *testing.B) {
	for _, c := range []struct {
		name     string
		url      string
		replicas int
	}{{"R1", singleURL, 1}, {"R3", clusterURL, 3}} {
		b.Run(c.name, func(b *testing.B) {
			prefix := waitingPrefix()
			nc := connect(b, c.url)
			x, err := jetstream.OpenWaitingIndex(b.Context(), nc, jetstream.WaitingConfig{
				Prefix: prefix, Replicas: c.replicas, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			for i := range 1000 {
				if err := x.PutWaiting(b.Context(), testWaiting(fmt.Sprintf("wb-%d", i), "approval-1")); err != nil {
					b.Fatal(err)
				}
			}
			if err := x.PutWaiting(b.Context(), testWaiting("wb-500", "question-2")); err != nil {
				b.Fatal(err)
			}
			measure := func(b *testing.B, op func() error) {
				sent0, cpu0 := nc.Stats().OutMsgs, cpuTime()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(nc.Stats().OutMsgs-sent0)/float64(b.N), "msgs/op")
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			}
			b.Run("list", func(b *testing.B) {
				measure(b, func() error {
					ws, err := x.ListTaskWaiting(b.Context(), "wb-500")
					if err == nil && len(ws) != 2 {
						err = fmt.Errorf("%d entries, want 2", len(ws))
					}
					return err
				})
			})
			b.Run("leader-get", func(b *testing.B) {
				req := []byte(`{"last_by_subj":"$KV.` + jetstream.WaitingBucket(prefix) + `.wb-500.*","no_hdr":true}`)
				measure(b, func() error {
					_, err := nc.RequestWithContext(b.Context(), "$JS.API.STREAM.MSG.GET.KV_"+jetstream.WaitingBucket(prefix), req)
					return err
				})
			})
		})
	}
}

// TestWaitingListBoundAskedWhenReplicated: a listing asks the leader for its
// bound on a replicated bucket only, a task's for the task's keys alone; on
// a bucket of one copy it sends nothing more than before.
func TestWaitingListBoundAskedWhenReplicated(t *testing.T) {
	for _, c := range []struct {
		name     string
		url      string
		replicas int
		want     []string // the last_by_subj of each look-up, after the bucket's "$KV.<bucket>."
	}{
		{"SingleNode", singleURL, 1, nil},
		{"Cluster", clusterURL, 3, []string{"wl-1.*", ">"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			prefix := waitingPrefix()
			bucket := jetstream.WaitingBucket(prefix)
			nc := connect(t, c.url)
			x, err := jetstream.OpenWaitingIndex(t.Context(), nc, jetstream.WaitingConfig{
				Prefix: prefix, Replicas: c.replicas, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := x.PutWaiting(t.Context(), testWaiting("wl-1", "approval-1")); err != nil {
				t.Fatal(err)
			}
			// The look-ups the connection sends come back to it (echo), in
			// the order sent: the end marker, sent last, follows them all.
			seen := make(chan *nats.Msg, 64)
			end := "waiting-test-end." + prefix
			for _, subj := range []string{"$JS.API.STREAM.MSG.GET.KV_" + bucket, end} {
				sub, err := nc.ChanSubscribe(subj, seen)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if ws, err := x.ListTaskWaiting(t.Context(), "wl-1"); err != nil || len(ws) != 1 {
				t.Fatalf("ListTaskWaiting: %v, %v", ws, err)
			}
			if ws, err := x.ListWaiting(t.Context()); err != nil || len(ws) != 1 {
				t.Fatalf("ListWaiting: %v, %v", ws, err)
			}
			if err := nc.Publish(end, nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			for m := range seen {
				if m.Subject == end {
					break
				}
				var req struct {
					LastFor string `json:"last_by_subj"`
				}
				if err := json.Unmarshal(m.Data, &req); err != nil {
					t.Fatalf("look-up %q: %v", m.Data, err)
				}
				got = append(got, strings.TrimPrefix(req.LastFor, "$KV."+bucket+"."))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("look-ups: %q, want %q", got, c.want)
			}
		})
	}
}

// TestWaitingListFailsWithoutItsBound: on a replicated bucket, a listing
// whose leader look-up fails returns that error, not a listing without the
// bound that may lack an entry.
func TestWaitingListFailsWithoutItsBound(t *testing.T) {
	x := openWaiting(t, clusterURL, jetstream.WaitingConfig{Replicas: 3})
	if err := x.PutWaiting(t.Context(), testWaiting("wf-1", "approval-1")); err != nil {
		t.Fatal(err)
	}
	jetstream.AskWaitingBoundOfForTest(x, jetstream.WaitingBucket(waitingPrefix())) // a bucket never made
	if ws, err := x.ListTaskWaiting(t.Context(), "wf-1"); err == nil || !strings.Contains(err.Error(), "leader get") {
		t.Fatalf("ListTaskWaiting with a failed look-up: %v, %v; want the look-up's error", ws, err)
	}
	if ws, err := x.ListWaiting(t.Context()); err == nil || !strings.Contains(err.Error(), "leader get") {
		t.Fatalf("ListWaiting with a failed look-up: %v, %v; want the look-up's error", ws, err)
	}
}
