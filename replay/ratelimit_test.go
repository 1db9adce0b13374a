package replay_test

import (
	"strings"
	"testing"

	"github.com/noeta-go/noeta/replay"
)

const echoLimit = `
    rate_limits:
      - {tool: echo, calls: 1, window: 1h}
`

// TestRateLimitsReplay: a rate limit's count is of every task in its
// window, outside one task's log, so a replay reports the calls it would
// have counted as not replayable, unless a guard after it denies them
// anyway; the calls a recorded rate limit denied come out changed under a
// config without it. The tasks are recorded on the in-memory backend,
// whose host counts in process.
func TestRateLimitsReplay(t *testing.T) {
	t.Parallel()
	limited := agentsDoc + echoLimit
	t.Run("recorded without, replayed with", func(t *testing.T) {
		t.Parallel()
		b := record(t, agentsDoc+denySecret, 1)
		rep, err := replay.Run(t.Context(), b.Store, b.Store, judge(t, limited+denySecret), replay.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		// hello, LOUD and quiet could each be the rate limit's deny; the
		// secret is the rules' deny whatever the count; the finish is
		// not counted.
		if rep.Actions != 5 || rep.NotReplayed["not_replayable"] != 3 || rep.Changed != 0 {
			t.Fatalf("%+v", rep)
		}
	})
	t.Run("recorded with, replayed without", func(t *testing.T) {
		t.Parallel()
		b := record(t, limited, 1)
		rep, err := replay.Run(t.Context(), b.Store, b.Store, judge(t, agentsDoc), replay.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		// The first echo ran; the rate limit denied the other three.
		if rep.Actions != 5 || rep.Changed != 3 || len(rep.Changes) != 1 {
			t.Fatalf("%+v", rep)
		}
		if g := rep.Changes[0]; g.From != "deny" || g.To != "allow" || g.Count != 3 || !strings.Contains(g.Examples[0].Recorded.Reason, "rate limit reached") {
			t.Fatalf("%+v", g)
		}
	})
}

// TestRateLimitsCases: a policy test's case is one call, the first of its
// window: a rate limit admits it and the other guards decide.
func TestRateLimitsCases(t *testing.T) {
	t.Parallel()
	cases, err := replay.ParseCases("cases.yaml", strings.NewReader(`
cases:
  - {name: a greeting runs, agent: a, tool_call: {tool: echo, args: {text: hello}}, expect: allow}
  - {name: no secrets, agent: a, tool_call: {tool: echo, args: {text: "a secret"}}, expect: deny, guard: rules}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range replay.Test(t.Context(), judge(t, agentsDoc+echoLimit+denySecret), cases) {
		if !r.Pass {
			t.Errorf("%s: got %+v, err %q", r.Name, r.Got, r.Err)
		}
	}
}
