package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/guards"
)

var ratePrefixes atomic.Int64

func ratePrefix() string { return fmt.Sprintf("rate%d", ratePrefixes.Add(1)) }

// rateClock is a settable clock for the windows.
type rateClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *rateClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *rateClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openRates(t *testing.T, url, prefix string, replicas int) *jetstream.Rates {
	t.Helper()
	r, err := jetstream.OpenRates(t.Context(), connect(t, url), prefix, replicas)
	if err != nil {
		t.Fatalf("OpenRates: %v", err)
	}
	return r
}

func rateCall(tool string) noeta.ProposedAction {
	return noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "c", Tool: tool}}
}

func rateCtx(principal string) *guards.Context {
	return guards.NewContext(guards.ContextParams{TaskID: "t", SubmittedBy: principal})
}

func check(t *testing.T, g guards.Guard, tool, principal string) noeta.VerdictResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := g.Check(ctx, rateCall(tool), rateCtx(principal))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRatesAcrossHosts: two hosts, each with its own connection and
// counter, share the counts of one deployment.
func TestRatesAcrossHosts(t *testing.T) {
	prefix := ratePrefix()
	clk := &rateClock{t: time.Date(2026, 12, 4, 1, 0, 30, 0, time.UTC)}
	limits := []guards.RateLimit{
		{Tool: "mcp__*", Calls: 3, Window: time.Minute},
		{Tool: "shell", Calls: 2, Window: time.Minute, Per: guards.RatePerAgent},
	}
	var hosts [2]*guards.RateLimiter
	for i := range hosts {
		rl, err := guards.NewRateLimiter("dev", limits, openRates(t, singleURL, prefix, 1), clk.now)
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = rl
	}
	a, b := hosts[0], hosts[1]
	for i, g := range []*guards.RateLimiter{a, b, a} {
		if r := check(t, g, "mcp__gh__search", "alice"); !r.IsAllow() {
			t.Fatalf("call %d of alice: %v %s", i+1, r.Verdict, r.Reason)
		}
	}
	r := check(t, b, "mcp__gh__search", "alice")
	if r.Verdict != noeta.VerdictDeny || !strings.Contains(r.Reason, `rate limit reached: 3 calls per 1m of "mcp__*" for principal "alice" (3 counted); the window resets at 2026-12-04T01:01:00Z, in 30s`) {
		t.Fatalf("the 4th call: %v %q", r.Verdict, r.Reason)
	}
	// Per principal: bob's count is his own.
	if r := check(t, b, "mcp__gh__search", "bob"); !r.IsAllow() {
		t.Fatalf("bob: %v %s", r.Verdict, r.Reason)
	}
	// Per agent: alice and bob count together.
	check(t, a, "shell", "alice")
	check(t, b, "shell", "bob")
	if r := check(t, a, "shell", "carol"); r.Verdict != noeta.VerdictDeny || !strings.Contains(r.Reason, `for agent "dev"`) {
		t.Fatalf("the 3rd shell call of the agent: %v %q", r.Verdict, r.Reason)
	}
	// The next window starts from 0.
	clk.add(30 * time.Second)
	for _, g := range []*guards.RateLimiter{a, b} {
		if r := check(t, g, "mcp__gh__search", "alice"); !r.IsAllow() {
			t.Fatalf("after the window: %v %s", r.Verdict, r.Reason)
		}
		if r := check(t, g, "shell", "alice"); !r.IsAllow() {
			t.Fatalf("after the window: %v %s", r.Verdict, r.Reason)
		}
	}
}

// TestRatesConcurrentTakes: takes racing from several hosts admit exactly
// the limit, on one server and on a cluster.
func TestRatesConcurrentTakes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		url      string
		replicas int
	}{{"single", singleURL, 1}, {"cluster", clusterURL, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := ratePrefix()
			counters := []*jetstream.Rates{openRates(t, tc.url, prefix, tc.replicas), openRates(t, tc.url, prefix, tc.replicas), openRates(t, tc.url, prefix, tc.replicas)}
			const limit, takers, each = 25, 6, 8
			var taken, refused, failed atomic.Int64
			var wg sync.WaitGroup
			for i := range takers {
				wg.Go(func() {
					c := counters[i%len(counters)]
					for range each {
						ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
						_, ok, err := c.Take(ctx, "k.race", limit, time.Minute)
						cancel()
						switch {
						case err != nil:
							failed.Add(1)
						case ok:
							taken.Add(1)
						default:
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			// A take that failed (the count kept changing) counted nothing
			// or, its write ambiguous, may have: never more than the limit.
			if taken.Load() > limit {
				t.Fatalf("%d takes admitted over a limit of %d", taken.Load(), limit)
			}
			if taken.Load()+failed.Load() < limit {
				t.Fatalf("only %d takes admitted (%d failed) of a limit of %d", taken.Load(), failed.Load(), limit)
			}
			n, ok, err := counters[0].Take(t.Context(), "k.race", limit, time.Minute)
			if err != nil || ok || n != limit {
				t.Fatalf("after the race: %d %v %v, want the count at the limit, refused", n, ok, err)
			}
			t.Logf("taken %d, refused %d, failed %d", taken.Load(), refused.Load(), failed.Load())
		})
	}
}

// TestRatesEntriesCarryTTL: every write of a count sets its TTL.
func TestRatesEntriesCarryTTL(t *testing.T) {
	prefix := ratePrefix()
	r := openRates(t, singleURL, prefix, 1)
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "KV_"+jetstream.RatesBucket(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowMsgTTL {
		t.Fatal("the bucket does not allow per-entry TTLs")
	}
	for i, ttl := range []time.Duration{90 * time.Second, 1500 * time.Millisecond} {
		if _, ok, err := r.Take(t.Context(), "k.ttl", 5, ttl); err != nil || !ok {
			t.Fatalf("take %d: %v %v", i, ok, err)
		}
		m, err := s.GetLastMsgForSubject(t.Context(), "$KV."+jetstream.RatesBucket(prefix)+".k.ttl")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1m30s", "2s"}[i]
		if got := m.Header.Get("Nats-TTL"); got != want {
			t.Errorf("write %d has Nats-TTL %q, want %q", i, got, want)
		}
		if string(m.Data) != fmt.Sprint(i+1) {
			t.Errorf("write %d holds %q", i, m.Data)
		}
	}
}

// TestRatesUnreachableDenies: a counter that cannot be read or written
// denies, saying the limit could not be checked.
func TestRatesUnreachableDenies(t *testing.T) {
	limits := []guards.RateLimit{{Calls: 100, Window: time.Minute}}
	t.Run("connection closed", func(t *testing.T) {
		nc := connect(t, singleURL)
		r, err := jetstream.OpenRates(t.Context(), nc, ratePrefix(), 1)
		if err != nil {
			t.Fatal(err)
		}
		rl, _ := guards.NewRateLimiter("dev", limits, r, nil)
		if v := check(t, rl, "echo", "alice"); !v.IsAllow() {
			t.Fatalf("before: %v %s", v.Verdict, v.Reason)
		}
		nc.Close()
		v := check(t, rl, "echo", "alice")
		if v.Verdict != noeta.VerdictDeny || !strings.Contains(v.Reason, "could not be checked") {
			t.Fatalf("got %v %q", v.Verdict, v.Reason)
		}
	})
	t.Run("bucket deleted", func(t *testing.T) {
		prefix := ratePrefix()
		nc := connect(t, singleURL)
		r, err := jetstream.OpenRates(t.Context(), nc, prefix, 1)
		if err != nil {
			t.Fatal(err)
		}
		rl, _ := guards.NewRateLimiter("dev", limits, r, nil)
		check(t, rl, "echo", "alice")
		js, _ := natsjs.New(nc)
		if err := js.DeleteKeyValue(t.Context(), jetstream.RatesBucket(prefix)); err != nil {
			t.Fatal(err)
		}
		v := check(t, rl, "echo", "alice")
		if v.Verdict != noeta.VerdictDeny || !strings.Contains(v.Reason, "could not be checked") {
			t.Fatalf("got %v %q", v.Verdict, v.Reason)
		}
	})
	t.Run("stack deadline", func(t *testing.T) {
		// A counter that does not answer in the stack's deadline: the
		// guard says so itself, before the stack's deadline does.
		r := openRates(t, singleURL, ratePrefix(), 1)
		rl, _ := guards.NewRateLimiter("dev", limits, r, nil)
		ctx, cancel := context.WithDeadline(t.Context(), time.Now())
		defer cancel()
		v, err := rl.Check(ctx, rateCall("echo"), rateCtx("alice"))
		if err != nil || v.Verdict != noeta.VerdictDeny || !strings.Contains(v.Reason, "could not be checked") {
			t.Fatalf("got %v %q %v", v.Verdict, v.Reason, err)
		}
	})
}

func TestOpenRatesRefusesABucketWithoutTTLs(t *testing.T) {
	prefix := ratePrefix()
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.RatesBucketConfig(prefix, 1)
	cfg.LimitMarkerTTL = 0
	if _, err := js.CreateKeyValue(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.OpenRates(t.Context(), connect(t, singleURL), prefix, 1)
	if !errors.Is(err, jetstream.ErrConfigMismatch) {
		t.Fatalf("got %v, want ErrConfigMismatch", err)
	}
}

// BenchmarkRatesTake is one take on the embedded single node: a read and
// a compare-and-set write, what the rate_limit guard adds to a call per
// limit that matches it. Parallel: takes on keys of their own.
func BenchmarkRatesTake(b *testing.B) {
	r, err := jetstream.OpenRates(b.Context(), connect(b, singleURL), ratePrefix(), 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("one key", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := r.Take(b.Context(), "bench.one", 1<<40, time.Minute); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("parallel keys", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("bench.p%d", n.Add(1))
			for pb.Next() {
				if _, ok, err := r.Take(b.Context(), key, 1<<40, time.Minute); err != nil || !ok {
					b.Error(ok, err)
					return
				}
			}
		})
	})
}
