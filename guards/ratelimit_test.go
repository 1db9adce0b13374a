package guards

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
)

// clock is a settable clock for windows.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func byPrincipal(p string) *Context {
	return NewContext(ContextParams{TaskID: "task-1", SubmittedBy: p})
}

// failingRates fails every take.
type failingRates struct{ err error }

func (f failingRates) Take(context.Context, string, int64, time.Duration) (int64, bool, error) {
	return 0, false, f.err
}

func TestRateLimiter(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 4, 1, 0, 10, 0, time.UTC)}
	rates := NewMemRates(clk.now)
	rl, err := NewRateLimiter("dev", []RateLimit{
		{Tool: "mcp__*", Calls: 2, Window: time.Minute},
		{Tool: "*", Calls: 3, Window: time.Hour, Per: RatePerAgent},
	}, rates, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := byPrincipal("http:alice"), byPrincipal("http:bob")
	call := toolCall("mcp__gh__search", `{}`)

	wantVerdict(t, checkGuard(t, rl, call, alice), noeta.VerdictAllow, "")
	wantVerdict(t, checkGuard(t, rl, call, alice), noeta.VerdictAllow, "")
	// The third call of alice in the minute: over the per-principal limit.
	got := checkGuard(t, rl, call, alice)
	wantVerdict(t, got, noeta.VerdictDeny, "")
	for _, w := range []string{`2 calls per 1m of "mcp__*"`, `principal "http:alice"`, "resets at 2026-12-04T01:01:00Z", "in 50s"} {
		if !strings.Contains(got.Reason, w) {
			t.Errorf("reason %q does not say %q", got.Reason, w)
		}
	}
	// bob has a count of his own per principal, but the agent-wide hour
	// counts both: alice's two calls and bob's one fill it.
	wantVerdict(t, checkGuard(t, rl, call, bob), noeta.VerdictAllow, "")
	got = checkGuard(t, rl, call, bob)
	wantVerdict(t, got, noeta.VerdictDeny, "")
	if !strings.Contains(got.Reason, `3 calls per 1h of "*" for agent "dev"`) {
		t.Errorf("reason %q does not name the agent-wide limit", got.Reason)
	}
	// Spawns and finishes are never counted nor limited.
	wantVerdict(t, checkGuard(t, rl, spawn("x"), alice), noeta.VerdictAllow, "")
	wantVerdict(t, checkGuard(t, rl, finish(), alice), noeta.VerdictAllow, "")
}

func TestRateLimiterWindowResets(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 4, 1, 0, 59, 0, time.UTC)}
	rl, err := NewRateLimiter("dev", []RateLimit{{Calls: 1, Window: time.Minute}}, NewMemRates(clk.now), clk.now)
	if err != nil {
		t.Fatal(err)
	}
	c := byPrincipal("alice")
	wantVerdict(t, checkGuard(t, rl, toolCall("echo", `{}`), c), noeta.VerdictAllow, "")
	wantVerdict(t, checkGuard(t, rl, toolCall("echo", `{}`), c), noeta.VerdictDeny, "")
	clk.add(time.Second) // 01:01:00, a new window
	wantVerdict(t, checkGuard(t, rl, toolCall("echo", `{}`), c), noeta.VerdictAllow, "")
	wantVerdict(t, checkGuard(t, rl, toolCall("echo", `{}`), c), noeta.VerdictDeny, "")
}

func TestRateLimiterFailsClosed(t *testing.T) {
	limits := []RateLimit{{Tool: "echo", Calls: 100, Window: time.Minute}}
	for _, tt := range []struct {
		name    string
		counter RateCounter
		want    string
	}{
		{"no counter", nil, "could not be checked: no rate counter"},
		{"counter fails", failingRates{errors.New("nats: connection closed")}, "could not be checked, so the call is refused: nats: connection closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rl, err := NewRateLimiter("dev", limits, tt.counter, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := checkGuard(t, rl, toolCall("echo", `{}`), byPrincipal(""))
			if got.Verdict != noeta.VerdictDeny || !strings.Contains(got.Reason, tt.want) || !strings.Contains(got.Reason, "principal (none)") {
				t.Errorf("got %v %q, want a deny saying %q", got.Verdict, got.Reason, tt.want)
			}
			// A tool no limit applies to needs no counter.
			wantVerdict(t, checkGuard(t, rl, toolCall("shell", `{}`), byPrincipal("")), noeta.VerdictAllow, "")
		})
	}
}

func TestRateLimiterKeys(t *testing.T) {
	// Principals and agents that differ only in spelling or length get
	// keys of their own, each a valid key.
	rec := &recordingRates{}
	rl, err := NewRateLimiter("dev.team", []RateLimit{{Calls: 10, Window: time.Minute}}, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 200)
	for _, p := range []string{"", "alice", "alice ", "a.b", "ünï", long, long + "y"} {
		checkGuard(t, rl, toolCall("echo", `{}`), byPrincipal(p))
	}
	seen := map[string]bool{}
	for _, k := range rec.keys {
		if seen[k] {
			t.Errorf("key %q used for two principals", k)
		}
		seen[k] = true
		for _, tok := range strings.Split(k, ".") {
			if tok == "" || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_=-") != "" {
				t.Errorf("key %q has a bad token %q", k, tok)
			}
		}
		if len(k) > 200 {
			t.Errorf("key %q is long", k)
		}
	}
}

type recordingRates struct{ keys []string }

func (r *recordingRates) Take(_ context.Context, key string, _ int64, _ time.Duration) (int64, bool, error) {
	r.keys = append(r.keys, key)
	return 1, true, nil
}

func TestAgentStackRateLimit(t *testing.T) {
	cfg, err := NewConfig(map[string]AgentConfig{
		"dev": {Tools: []string{"echo", "shell"}, RateLimits: []RateLimit{{Calls: 1, Window: time.Hour}}},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	risks := RiskMap(map[string]string{"echo": "low", "shell": "high"})
	clk := &clock{t: time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)}
	st, err := cfg.AgentStack("dev", risks, nil, WithRates(NewMemRates(clk.now)), WithRateClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	c := byPrincipal("alice")
	// A call the permission guard refuses (not in the tools) is not
	// counted: the rate limit runs after it.
	if d := st.Check(context.Background(), toolCall("write_file", `{}`), c); d.Guard != NamePermission {
		t.Fatalf("got %+v, want the permission guard to deny", d)
	}
	if d := st.Check(context.Background(), toolCall("echo", `{}`), c); !d.IsAllow() {
		t.Fatalf("got %+v", d)
	}
	d := st.Check(context.Background(), toolCall("echo", `{}`), c)
	if d.Verdict != noeta.VerdictDeny || d.Guard != NameRateLimit {
		t.Fatalf("got %+v, want a rate_limit deny", d)
	}
	// Without a counter the stack still builds, and denies what a limit
	// applies to.
	st, err = cfg.AgentStack("dev", risks, nil)
	if err != nil {
		t.Fatal(err)
	}
	d = st.Check(context.Background(), toolCall("echo", `{}`), c)
	if d.Verdict != noeta.VerdictDeny || d.Guard != NameRateLimit || !strings.Contains(d.Reason, "could not be checked") {
		t.Fatalf("got %+v, want a fail-closed rate_limit deny", d)
	}
}

func TestRateLimitValidation(t *testing.T) {
	_, err := NewConfig(map[string]AgentConfig{"dev": {RateLimits: []RateLimit{
		{Calls: 1, Window: time.Minute},
		{Calls: 0, Window: 0, Per: "team"},
	}}}, nil, nil)
	for _, w := range []string{
		"agents.dev.rate_limits[1].calls: must be from 1",
		"agents.dev.rate_limits[1].window: must be at least 1s",
		`agents.dev.rate_limits[1].per: must be principal or agent, not "team"`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("got %v, want %q", err, w)
		}
	}
}

func TestMemRatesExpire(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	m := NewMemRates(clk.now)
	ctx := context.Background()
	for i := range 3000 {
		if _, ok, _ := m.Take(ctx, "k"+string(rune('a'+i%26))+strings.Repeat("x", i/26), 1, time.Second); !ok {
			t.Fatal("a fresh key was refused")
		}
		clk.add(10 * time.Millisecond)
	}
	m.mu.Lock()
	n := len(m.counts)
	m.mu.Unlock()
	if n > 2048 {
		t.Errorf("%d counts kept; expired ones are not swept", n)
	}
	if _, ok, _ := m.Take(ctx, "once", 1, time.Second); !ok {
		t.Fatal("refused")
	}
	if n, ok, _ := m.Take(ctx, "once", 1, time.Second); ok || n != 1 {
		t.Fatalf("second take: %d %v", n, ok)
	}
	clk.add(time.Second)
	if _, ok, _ := m.Take(ctx, "once", 1, time.Second); !ok {
		t.Fatal("an expired count still refuses")
	}
}
