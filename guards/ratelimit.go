package guards

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/glob"
)

// RateScope says whose calls a rate limit counts together.
type RateScope string

// The scopes of a [RateLimit].
const (
	// RatePerPrincipal counts the calls of each principal (the task's
	// submitter: the HTTP or gateway principal, cli:$USER) apart.
	RatePerPrincipal RateScope = "principal"
	// RatePerAgent counts every call of the agent together, whoever
	// submitted the task.
	RatePerAgent RateScope = "agent"
)

// Bounds of a [RateLimit].
const (
	// MaxRateWindow is the longest window: a rate limit is a bound on
	// bursts, and a counter lives as long as its window.
	MaxRateWindow = 24 * time.Hour
	// MaxRateCalls bounds calls.
	MaxRateCalls = 1_000_000_000
	// RateClockSlack is how long a window's count outlives its end, for
	// hosts whose clocks are behind: their calls still find it.
	RateClockSlack = time.Minute
)

// RateLimit is one entry of an agent's rate_limits: at most Calls calls of
// the tools Tool matches in each window of length Window, counted per
// principal or for the whole agent. Windows are fixed and aligned to the
// Unix epoch (a 1m window starts at every whole minute, UTC); the count is
// shared by every host of the deployment.
//
//	rate_limits:
//	  - {tool: "mcp__github__*", calls: 60, window: 1m}
//	  - {calls: 1000, window: 1h, per: agent}
type RateLimit struct {
	// Tool is a glob over tool names, as a rule's match_tool, matching the
	// whole name; * by default (every tool).
	Tool string
	// Calls is how many calls each window admits: at least 1.
	Calls int
	// Window is the window's length, a duration in whole seconds from 1s
	// to 24h (30s, 1m, 1h).
	Window time.Duration
	// Per says whose calls are counted together: principal (the default),
	// each submitter of tasks apart, or agent, every call of the agent
	// whoever submitted the task.
	Per RateScope
}

func (l RateLimit) tool() string {
	if l.Tool == "" {
		return "*"
	}
	return l.Tool
}

func (l RateLimit) scope() RateScope {
	if l.Per == "" {
		return RatePerPrincipal
	}
	return l.Per
}

func validateRateLimits(limits []RateLimit, path string, errs *configErrors) {
	type ident struct {
		tool   string
		window time.Duration
		per    RateScope
	}
	seen := map[ident]int{}
	for i, l := range limits {
		p := index(path, i)
		if l.Calls < 1 || l.Calls > MaxRateCalls {
			errs.addf(join(p, "calls"), "must be from 1 to %d, not %d", MaxRateCalls, l.Calls)
		}
		switch {
		case l.Window < time.Second:
			errs.addf(join(p, "window"), "must be at least 1s, not %v", l.Window)
		case l.Window > MaxRateWindow:
			errs.addf(join(p, "window"), "must be at most %v, not %v", MaxRateWindow, l.Window)
		case l.Window%time.Second != 0:
			errs.addf(join(p, "window"), "must be whole seconds, not %v", l.Window)
		}
		switch l.Per {
		case "", RatePerPrincipal, RatePerAgent:
		default:
			errs.addf(join(p, "per"), "must be principal or agent, not %q", l.Per)
		}
		id := ident{l.tool(), l.Window, l.scope()}
		if j, ok := seen[id]; ok {
			errs.addf(p, "counts the same calls in the same windows as rate_limits[%d] (tool %q, window %v, per %s); keep one, with the calls you mean", j, id.tool, id.window, id.per)
			continue
		}
		seen[id] = i
	}
}

// RateCounter counts calls in fixed windows for the [RateLimiter]. The
// hosts that run an agent's tasks must share one counter for its limits to
// hold across them: on NATS, a JetStream key-value bucket of the deployment
// (eventlog/jetstream's Rates); in one process, [NewMemRates].
//
// Its signature holds only standard types so that a backend can implement
// it without importing this package.
type RateCounter interface {
	// Take counts one call under key if fewer than limit are counted
	// there, and returns the count after (taken) or the count that
	// refused it (not taken). The count under key must last at least ttl
	// after a take. An error means nothing is known; the guard denies.
	// key is a NATS key-value key: dot-separated tokens of
	// [A-Za-z0-9_=-].
	Take(ctx context.Context, key string, limit int64, ttl time.Duration) (count int64, taken bool, err error)
}

// ErrNoRateCounter is the error of a rate limit in a stack built without
// a counter ([WithRates]): every call it limits is denied.
var ErrNoRateCounter = errors.New("no rate counter: the host was built without one")

// WithRates gives the rate limits of a stack built by [Config.AgentStack]
// their counter. Without it, a call an agent's rate limit applies to is
// denied (fail closed). Stacks built by [NewStack] ignore it.
func WithRates(c RateCounter) StackOption {
	return func(s *Stack) error {
		if c == nil {
			return errors.New("guards: WithRates: nil counter")
		}
		s.rates = c
		return nil
	}
}

// WithRateClock sets the clock a stack's rate limits place calls in their
// windows by (time.Now): for tests, and for replays that judge a call at
// its recorded time.
func WithRateClock(now func() time.Time) StackOption {
	return func(s *Stack) error {
		if now == nil {
			return errors.New("guards: WithRateClock: nil clock")
		}
		s.rateNow = now
		return nil
	}
}

// RateLimiter denies a tool call that would go over one of its agent's
// rate limits: for each limit whose tool pattern matches, in order, it
// counts the call in the current window of the principal (or of the
// agent), and denies when the window is full, naming the limit, the
// pattern, the principal and when the window resets. A counter that cannot
// be read or written denies too, saying the limit could not be checked.
// Spawning and finishing are always allowed.
//
// A call is counted when it is judged, whatever the guards after this one
// decide; a call judged twice (a turn resumed after a crash between the
// check and its record) counts twice. Both err toward denying.
type RateLimiter struct {
	agent   string
	limits  []rateRule
	counter RateCounter
	now     func() time.Time
}

type rateRule struct {
	RateLimit
	match glob.Pattern
	tag   string // identifies the limit in its keys
	desc  string // "5 calls per 1m of "mcp__*""
}

// NewRateLimiter returns the rate limit guard of agent's limits, counting
// in counter (nil: it denies every call a limit applies to) and placing
// calls in windows by now (nil: time.Now).
func NewRateLimiter(agent string, limits []RateLimit, counter RateCounter, now func() time.Time) (*RateLimiter, error) {
	var errs configErrors
	validateRateLimits(limits, "rate_limits", &errs)
	if err := errs.err(); err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	r := &RateLimiter{agent: agent, counter: counter, now: now}
	for _, l := range limits {
		h := fnv.New64a()
		_, _ = h.Write([]byte(l.tool() + "\x00" + strconv.FormatInt(int64(l.Window/time.Second), 10)))
		r.limits = append(r.limits, rateRule{
			RateLimit: l, match: glob.Compile(l.tool()), tag: hex.EncodeToString(h.Sum(nil)),
			desc: fmt.Sprintf("%d calls per %s of %q", l.Calls, shortDuration(l.Window), l.tool()),
		})
	}
	return r, nil
}

// Name is "rate_limit".
func (*RateLimiter) Name() string { return NameRateLimit }

// Priority is PriorityRateLimit: after the budget, the permissions and the
// repetition guard, so that a call they refuse is never counted (and costs
// no round trip), and before the rules.
func (*RateLimiter) Priority() int { return PriorityRateLimit }

// Limits returns a copy of the guard's limits.
func (r *RateLimiter) Limits() []RateLimit {
	out := make([]RateLimit, len(r.limits))
	for i, l := range r.limits {
		out[i] = l.RateLimit
	}
	return out
}

// Applies reports whether a limit of the guard matches tool.
func (r *RateLimiter) Applies(tool string) bool {
	for _, l := range r.limits {
		if l.match.Match(tool) {
			return true
		}
	}
	return false
}

// Check counts a tool call against every limit that matches its tool.
func (r *RateLimiter) Check(ctx context.Context, a noeta.ProposedAction, c *Context) (noeta.VerdictResult, error) {
	switch kindOf(a) {
	case kindSpawn, kindFinish:
		return noeta.Allow(), nil
	case kindUnknown:
		return noeta.VerdictResult{}, errUnsupportedAction(a)
	}
	call, _ := toolCallOf(a)
	principal := c.SubmittedBy()
	for _, l := range r.limits {
		if !l.match.Match(call.Tool) {
			continue
		}
		now := r.now()
		win := int64(l.Window / time.Second)
		start := now.Unix() - mod(now.Unix(), win)
		end := time.Unix(start+win, 0).UTC()
		who := "agent " + strconv.Quote(r.agent)
		key := "a." + token(r.agent) + "." + l.tag
		if l.scope() == RatePerPrincipal {
			who = "principal " + describePrincipal(principal)
			key = "p." + token(r.agent) + "." + l.tag + "." + token(principal)
		}
		key += "." + strconv.FormatInt(start, 10)
		if r.counter == nil {
			return noeta.Deny(fmt.Sprintf("rate limit %s for %s could not be checked: %v", l.desc, who, ErrNoRateCounter)), nil
		}
		ttl := max(end.Sub(now), 0) + RateClockSlack
		cctx, cancel := counterContext(ctx)
		n, taken, err := r.counter.Take(cctx, key, int64(l.Calls), ttl)
		cancel()
		if err != nil {
			return noeta.Deny(fmt.Sprintf("rate limit %s for %s could not be checked, so the call is refused: %v", l.desc, who, err)), nil
		}
		if !taken {
			return noeta.Deny(fmt.Sprintf("rate limit reached: %s for %s (%d counted); the window resets at %s, in %s",
				l.desc, who, n, end.Format(time.RFC3339), shortDuration(end.Sub(now).Round(time.Second)))), nil
		}
	}
	return noeta.Allow(), nil
}

// counterContext leaves the guard a tenth of its deadline to say that the
// counter did not answer, before the stack's deadline speaks for it.
func counterContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, dl.Add(-time.Until(dl)/10))
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// token is a key token for a name: its base64url, "_" for the empty
// name, or "=" and a hash for a long one (base64url never writes '=', and
// the encoding of a non-empty name is at least two characters).
func token(s string) string {
	switch {
	case s == "":
		return "_"
	case len(s) > 96:
		sum := sha256.Sum256([]byte(s))
		return "=" + hex.EncodeToString(sum[:20])
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func describePrincipal(p string) string {
	if p == "" {
		return "(none)"
	}
	if len(p) > 128 {
		p = p[:128] + "…"
	}
	return strconv.Quote(p)
}

// shortDuration writes 1m for 1m0s and 1h for 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MemRates is a [RateCounter] in memory: for a host whose every engine is
// in one process (the in-memory backend), and for tests. Counts are
// forgotten when their ttl has passed. Safe for concurrent use.
type MemRates struct {
	mu        sync.Mutex
	now       func() time.Time
	counts    map[string]memRate
	nextSweep int
}

type memRate struct {
	n       int64
	expires time.Time
}

// NewMemRates returns an empty counter whose counts expire by now
// (nil: time.Now).
func NewMemRates(now func() time.Time) *MemRates {
	if now == nil {
		now = time.Now
	}
	return &MemRates{now: now, counts: map[string]memRate{}, nextSweep: 1024}
}

// Take counts a call under key if fewer than limit are counted there.
func (m *MemRates) Take(ctx context.Context, key string, limit int64, ttl time.Duration) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.counts) >= m.nextSweep {
		for k, e := range m.counts {
			if !now.Before(e.expires) {
				delete(m.counts, k)
			}
		}
		m.nextSweep = max(1024, 2*len(m.counts))
	}
	e := m.counts[key]
	if !now.Before(e.expires) {
		e = memRate{}
	}
	if e.n >= limit {
		return e.n, false, nil
	}
	e.n++
	e.expires = now.Add(ttl)
	m.counts[key] = e
	return e.n, true, nil
}
