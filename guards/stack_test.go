package guards

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
)

// recorder makes guards that record the order they were called in.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) guard(name string, priority int, res noeta.VerdictResult) Guard {
	return Func(name, priority, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		r.mu.Lock()
		r.calls = append(r.calls, name)
		r.mu.Unlock()
		return res, nil
	})
}

func (r *recorder) got() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.calls, ",")
}

// slowInline is a guard of this package's kind (run on the caller's
// goroutine) that takes too long: the deadline is checked after it returns.
type slowInline struct{ d time.Duration }

func (slowInline) Name() string  { return "slow-inline" }
func (slowInline) Priority() int { return 100 }
func (slowInline) inline()       {}
func (g slowInline) Check(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
	time.Sleep(g.d)
	return noeta.Allow(), nil
}

func mustStack(t *testing.T, gs []Guard, opts ...StackOption) *Stack {
	t.Helper()
	s, err := NewStack(gs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStackOrder(t *testing.T) {
	tests := []struct {
		name    string
		guards  func(r *recorder) []Guard
		calls   string
		verdict noeta.Verdict
		decider string
		reason  string
	}{
		{
			name: "ascending priority whatever the registration order",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("c", 300, allow()), r.guard("a", 10, allow()), r.guard("b", 20, allow())}
			},
			calls: "a,b,c", verdict: noeta.VerdictAllow,
		},
		{
			name: "ties run in registration order",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("x", 100, allow()), r.guard("early", 5, allow()), r.guard("y", 100, allow()), r.guard("z", 100, allow())}
			},
			calls: "early,x,y,z", verdict: noeta.VerdictAllow,
		},
		{
			name: "negative priorities sort first",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("zero", 0, allow()), r.guard("neg", -5, allow())}
			},
			calls: "neg,zero", verdict: noeta.VerdictAllow,
		},
		{
			name: "first deny decides and later guards are not called",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("a", 1, allow()), r.guard("b", 2, noeta.Deny("no")), r.guard("c", 3, noeta.RequireApproval("ask"))}
			},
			calls: "a,b", verdict: noeta.VerdictDeny, decider: "b", reason: "no",
		},
		{
			name: "an early approval is not overridden by a later deny",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("deny", 2, noeta.Deny("no")), r.guard("ask", 1, noeta.RequireApproval("ask"))}
			},
			calls: "ask", verdict: noeta.VerdictRequireApproval, decider: "ask", reason: "ask",
		},
		{
			name: "a deny without a reason gets one",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("a", 1, noeta.VerdictResult{Verdict: noeta.VerdictDeny})}
			},
			calls: "a", verdict: noeta.VerdictDeny, decider: "a", reason: "denied",
		},
		{
			name: "an approval without a reason gets one",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("a", 1, noeta.VerdictResult{Verdict: noeta.VerdictRequireApproval})}
			},
			calls: "a", verdict: noeta.VerdictRequireApproval, decider: "a", reason: "requires approval",
		},
		{
			name: "the zero verdict is a deny",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("forgetful", 1, noeta.VerdictResult{}), r.guard("after", 2, allow())}
			},
			calls: "forgetful", verdict: noeta.VerdictDeny, decider: "forgetful", reason: `guard "forgetful" returned no verdict`,
		},
		{
			name: "an out-of-range verdict is a deny",
			guards: func(r *recorder) []Guard {
				return []Guard{r.guard("odd", 1, noeta.VerdictResult{Verdict: 9})}
			},
			calls: "odd", verdict: noeta.VerdictDeny, decider: "odd", reason: `guard "odd" returned an invalid verdict verdict(9)`,
		},
		{
			name:    "no guards allow",
			guards:  func(*recorder) []Guard { return nil },
			verdict: noeta.VerdictAllow,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			s := mustStack(t, tt.guards(r))
			d := s.Check(t.Context(), toolCall("echo", `{}`), gctx(noeta.GovernanceState{}, 0))
			if got := r.got(); got != tt.calls {
				t.Errorf("calls = %q, want %q", got, tt.calls)
			}
			if d.Verdict != tt.verdict || d.Guard != tt.decider || (tt.reason != "" && d.Reason != tt.reason) {
				t.Errorf("got %v %q by %q, want %v %q by %q", d.Verdict, d.Reason, d.Guard, tt.verdict, tt.reason, tt.decider)
			}
			if d.Verdict != noeta.VerdictAllow && d.Reason == "" {
				t.Errorf("a %v without a reason", d.Verdict)
			}
		})
	}
}

func TestStackFailClosed(t *testing.T) {
	errBoom := errors.New("policy service unreachable")
	tests := []struct {
		name   string
		guard  Guard
		reason string // prefix
	}{
		{
			name: "panic with a string",
			guard: Func("explody", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				panic("guard crashed")
			}),
			reason: `guard "explody" panicked: guard crashed`,
		},
		{
			name: "panic with a runtime error",
			guard: Func("nilmap", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				var m map[string]int
				m["x"] = 1
				return allow(), nil
			}),
			reason: `guard "nilmap" panicked: assignment to entry in nil map`,
		},
		{
			name: "panic(nil)",
			guard: Func("nilpanic", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				panic(nil)
			}),
			reason: `guard "nilpanic" panicked: panic called with nil argument`,
		},
		{
			name: "error",
			guard: Func("remote", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				return noeta.VerdictResult{}, errBoom
			}),
			reason: `guard "remote" failed: policy service unreachable`,
		},
		{
			name: "error with an allow is still a deny",
			guard: Func("confused", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				return allow(), errBoom
			}),
			reason: `guard "confused" failed: policy service unreachable`,
		},
		{
			name: "deadline, guard blocks until its context ends",
			guard: Func("stuck", 50, func(ctx context.Context, _ noeta.ProposedAction, _ *Context) (noeta.VerdictResult, error) {
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond) // and answers late anyway
				return allow(), nil
			}),
			reason: `guard "stuck" exceeded its deadline of 250ms`,
		},
		{
			name: "deadline, guard never returns",
			guard: Func("hung", 50, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
				select {} //nolint:staticcheck // never returns, on purpose
			}),
			reason: `guard "hung" exceeded its deadline of 250ms`,
		},
		{
			name:   "deadline, inline guard checked after it returns",
			guard:  slowInline{d: 600 * time.Millisecond},
			reason: `guard "slow-inline" exceeded its deadline of 250ms (took`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			var logs bytes.Buffer
			s := mustStack(t, []Guard{r.guard("before", 10, allow()), tt.guard, r.guard("after", 200, allow())},
				WithTimeout(250*time.Millisecond), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			start := time.Now()
			d := s.Check(t.Context(), toolCall("echo", `{}`), gctx(noeta.GovernanceState{}, 0))
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Errorf("check took %v", elapsed)
			}
			if d.Verdict != noeta.VerdictDeny || d.Guard != tt.guard.Name() || !strings.HasPrefix(d.Reason, tt.reason) {
				t.Errorf("got %v %q by %q, want deny %q… by %q", d.Verdict, d.Reason, d.Guard, tt.reason, tt.guard.Name())
			}
			if got := r.got(); got != "before" {
				t.Errorf("calls = %q, want only the guard before the failing one", got)
			}
			if !strings.Contains(logs.String(), "treating as deny") {
				t.Errorf("failure not logged: %q", logs.String())
			}
		})
	}
}

func TestStackPanicLogsStack(t *testing.T) {
	var logs bytes.Buffer
	s := mustStack(t, []Guard{Func("explody", 100, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		panic("boom")
	})}, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	s.Check(t.Context(), finish(), gctx(noeta.GovernanceState{}, 0))
	if !strings.Contains(logs.String(), "stack_test.go") {
		t.Errorf("the log has no stack trace of the panic: %q", logs.String())
	}
}

func TestStackRefusesWithoutAsking(t *testing.T) {
	r := &recorder{}
	s := mustStack(t, []Guard{r.guard("a", 1, allow())})
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	var nilCall *noeta.ProposedToolCall
	tests := []struct {
		name    string
		s       *Stack
		ctx     context.Context
		a       noeta.ProposedAction
		c       *Context
		decider string
		reason  string
	}{
		{"nil stack", nil, t.Context(), finish(), gctx(noeta.GovernanceState{}, 0), StackName, "no guard stack"},
		{"nil context", s, t.Context(), finish(), nil, StackName, "no guard context"},
		{"nil action", s, t.Context(), nil, gctx(noeta.GovernanceState{}, 0), StackName, "unsupported action <nil>"},
		{"nil action pointer", s, t.Context(), nilCall, gctx(noeta.GovernanceState{}, 0), StackName, "unsupported action *noeta.ProposedToolCall"},
		{"cancelled", s, cancelled, finish(), gctx(noeta.GovernanceState{}, 0), "a", `guard "a" not run: context canceled`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.s.Check(tt.ctx, tt.a, tt.c)
			if d.Verdict != noeta.VerdictDeny || d.Guard != tt.decider || d.Reason != tt.reason {
				t.Errorf("got %v %q by %q, want deny %q by %q", d.Verdict, d.Reason, d.Guard, tt.reason, tt.decider)
			}
		})
	}
	if got := r.got(); got != "" {
		t.Errorf("guards were called: %q", got)
	}
}

func TestStackCancelledWhileIsolatedGuardRuns(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	s := mustStack(t, []Guard{Func("waiting", 100, func(ctx context.Context, _ noeta.ProposedAction, _ *Context) (noeta.VerdictResult, error) {
		close(started)
		<-ctx.Done()
		return allow(), nil
	})})
	go func() { <-started; cancel() }()
	d := s.Check(ctx, finish(), gctx(noeta.GovernanceState{}, 0))
	if d.Verdict != noeta.VerdictDeny || d.Reason != `guard "waiting" interrupted: context canceled` {
		t.Errorf("got %v %q", d.Verdict, d.Reason)
	}
}

func TestStackAcceptsPointerActions(t *testing.T) {
	b, _ := NewBudget(BudgetLimits{MaxToolCalls: new(1)})
	s := mustStack(t, []Guard{b})
	c := gctx(noeta.GovernanceState{ToolCalls: 1}, 0)
	d := s.Check(t.Context(), &noeta.ProposedToolCall{Call: noeta.ToolCall{Tool: "echo"}}, c)
	if d.Verdict != noeta.VerdictDeny || d.Reason != "max_tool_calls=1 reached" {
		t.Errorf("got %v %q", d.Verdict, d.Reason)
	}
}

func TestNewStackErrors(t *testing.T) {
	ok := Func("ok", 1, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		return allow(), nil
	})
	tests := []struct {
		name   string
		guards []Guard
		opts   []StackOption
		want   string
	}{
		{"nil guard", []Guard{ok, nil}, nil, "guard 1 is nil"},
		{"no name", []Guard{Func("", 1, nil)}, nil, "has no name"},
		{"duplicate name", []Guard{ok, Func("ok", 5, nil)}, nil, `two guards are named "ok"`},
		{"zero timeout", []Guard{ok}, []StackOption{WithTimeout(0)}, "timeout 0s must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewStack(tt.guards, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestStackGuardsInOrder(t *testing.T) {
	r := &recorder{}
	s := mustStack(t, []Guard{r.guard("b", 20, allow()), r.guard("a", 10, allow())})
	var names []string
	for _, g := range s.Guards() {
		names = append(names, g.Name())
	}
	if got := strings.Join(names, ","); got != "a,b" {
		t.Errorf("Guards() = %s, want a,b", got)
	}
}

func TestCheckFanOut(t *testing.T) {
	members := func(n int) []noeta.SpawnSubtask {
		ms := make([]noeta.SpawnSubtask, n)
		for i := range ms {
			ms[i] = noeta.SpawnSubtask{Agent: "helper", Goal: "g", GroupID: "grp", CallID: "c"}
		}
		return ms
	}
	b, _ := NewBudget(BudgetLimits{MaxSpawnedSubtasks: new(3)})
	tests := []struct {
		name    string
		guards  []Guard
		current int
		n       int
		member  int
		verdict noeta.Verdict
		reason  string
	}{
		{"all fit", []Guard{b}, 1, 2, -1, noeta.VerdictAllow, ""},
		{"member i is checked against current+i", []Guard{b}, 1, 3, 2, noeta.VerdictDeny, "max_spawned_subtasks=3 reached"},
		{"the first member already over", []Guard{b}, 3, 2, 0, noeta.VerdictDeny, "max_spawned_subtasks=3 reached"},
		{"approval refuses the batch", []Guard{Func("ask", 100, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
			return noeta.RequireApproval("a human must look"), nil
		})}, 0, 2, 0, noeta.VerdictDeny, "approval_unsupported_in_fanout"},
		{"no members", []Guard{b}, 0, 0, -1, noeta.VerdictDeny, "fan-out has no members"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStack(t, tt.guards)
			c := gctx(noeta.GovernanceState{SpawnedSubtasks: tt.current}, 0)
			d := s.CheckFanOut(t.Context(), members(tt.n), c)
			if d.Verdict != tt.verdict || d.Member != tt.member || d.Reason != tt.reason {
				t.Errorf("got %v %q member %d, want %v %q member %d", d.Verdict, d.Reason, d.Member, tt.verdict, tt.reason, tt.member)
			}
			if c.SpawnedSubtasks() != tt.current {
				t.Errorf("the caller's context changed: %d", c.SpawnedSubtasks())
			}
		})
	}
}

func TestContextIsACopy(t *testing.T) {
	g := noeta.GovernanceState{
		Iterations:      3,
		RecentToolCalls: []noeta.ToolCallKey{{Tool: "echo", Args: "{}"}},
		Denials:         []noeta.Denial{{Reason: "r"}},
	}
	skills := []string{"a"}
	md := map[string]string{"k": "v"}
	c := NewContext(ContextParams{TaskID: "t", Governance: g, ActiveSkills: skills, Metadata: md, SubtaskDepth: 2})

	// Changing what the engine passed does not reach the Context...
	g.RecentToolCalls[0].Tool = "shell"
	skills[0] = "b"
	md["k"] = "w"
	if c.RecentToolCalls()[0].Tool != "echo" || c.ActiveSkills()[0] != "a" || c.Metadata()["k"] != "v" {
		t.Errorf("the context shares memory with its inputs")
	}
	// ...and changing what a guard gets does not reach the Context.
	c.RecentToolCalls()[0].Tool = "shell"
	c.ActiveSkills()[0] = "b"
	c.Metadata()["k"] = "w"
	gov := c.Governance()
	gov.Denials[0].Reason = "x"
	gov.Iterations = 99
	if c.RecentToolCalls()[0].Tool != "echo" || c.ActiveSkills()[0] != "a" || c.Metadata()["k"] != "v" ||
		c.Governance().Denials[0].Reason != "r" || c.Iterations() != 3 {
		t.Errorf("a guard could change the context")
	}
	if c.TaskID() != "t" || c.SubtaskDepth() != 2 {
		t.Errorf("TaskID, SubtaskDepth = %q, %d", c.TaskID(), c.SubtaskDepth())
	}
}

// TestStackConcurrent runs one stack from many goroutines, for -race.
func TestStackConcurrent(t *testing.T) {
	cfg, err := parseConfig([]byte(benchConfig))
	if err != nil {
		t.Fatal(err)
	}
	user := Func("user", 200, func(context.Context, noeta.ProposedAction, *Context) (noeta.VerdictResult, error) {
		return allow(), nil
	})
	s, err := cfg.AgentStack("bench", RiskMap(benchTools), []Guard{user})
	if err != nil {
		t.Fatal(err)
	}
	c := gctx(noeta.GovernanceState{}, 0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				a := toolCall("read_file", `{"path":"docs/x.md"}`)
				want := noeta.VerdictAllow
				if (i+j)%3 == 0 {
					a, want = toolCall("read_file", `{"path":"/proc/self/environ"}`), noeta.VerdictDeny
				}
				if d := s.Check(t.Context(), a, c); d.Verdict != want {
					t.Errorf("got %v %q, want %v", d.Verdict, d.Reason, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestAllowPathDoesNotAllocate pins the ALLOW path of the built-ins, of a
// stack with rules for an action no rule looks at, and of match_arg rules
// (equals, contains, regex) at zero allocations. Only CEL rules allocate.
func TestAllowPathDoesNotAllocate(t *testing.T) {
	cfg, err := parseConfig([]byte(benchConfig))
	if err != nil {
		t.Fatal(err)
	}
	withRules, err := cfg.AgentStack("bench", RiskMap(benchTools), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.rules = nil
	builtins, err := cfg.AgentStack("bench", RiskMap(benchTools), nil)
	if err != nil {
		t.Fatal(err)
	}
	argRules := mustStack(t, []Guard{mustRules(t,
		Rule{MatchTool: "shell", When: "true", Action: noeta.VerdictDeny},
		Rule{MatchTool: "*_file", MatchArg: &MatchArg{Path: "path", Op: MatchRegex, Value: `^/etc/|\.ssh/`}, Action: noeta.VerdictDeny},
		Rule{MatchTool: "*", MatchArg: &MatchArg{Path: "path", Op: MatchContains, Value: ".."}, Action: noeta.VerdictDeny},
		Rule{MatchTool: "read_*", MatchArg: &MatchArg{Path: "mode", Op: MatchEquals, Value: "w"}, Action: noeta.VerdictDeny},
	)})
	var g noeta.GovernanceState
	for range noeta.RecentToolCallsWindow {
		g.NoteToolCall(noeta.ToolCallKey{Tool: "grep", Args: `{"pattern":"x"}`})
	}
	c := gctx(g, 1)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		s    *Stack
		a    noeta.ProposedAction
		max  float64
	}{
		{"built-ins, tool call", builtins, toolCall("read_file", `{"path":"docs/README.md"}`), 0},
		{"built-ins, spawn", builtins, spawn("bench"), 0},
		{"built-ins, finish", builtins, finish(), 0},
		{"with rules, finish", withRules, finish(), 0},
		{"match_arg rules but no CEL rule for the tool", argRules, toolCall("read_file", `{"path":"docs/README.md"}`), 0},
	} {
		if d := tt.s.Check(ctx, tt.a, c); !d.IsAllow() {
			t.Fatalf("%s: got %v %q by %s", tt.name, d.Verdict, d.Reason, d.Guard)
		}
		if n := testing.AllocsPerRun(200, func() { tt.s.Check(ctx, tt.a, c) }); n > tt.max {
			t.Errorf("%s: %v allocations per check, want <= %v", tt.name, n, tt.max)
		}
	}
}
