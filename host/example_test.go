package host_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/tools"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/policy"
)

// byType is an Observer that counts the committed records by type.
type byType struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *byType) Name() string { return "by-type" }

func (c *byType) Observe(_ context.Context, env eventlog.Envelope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[env.Type]++
	return nil
}

// noPasswords is a Guard that denies a tool call whose arguments mention a
// password.
func noPasswords(_ context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
	if c, ok := a.(noeta.ProposedToolCall); ok && strings.Contains(string(c.Call.Args), "password") {
		return noeta.Deny("arguments mention a password"), nil
	}
	return noeta.Allow(), nil
}

const noetaYAML = `
agents:
  assistant: {tools: [echo]}
`

const taskYAML = `
agent: assistant
goal: "say hello, then try to leak"
script:
  - tool_calls: [{tool: echo, args: {text: hello}}]
  - tool_calls: [{tool: echo, args: {text: "the password is hunter2"}}]
  - finish: {answer: done}
`

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A program that runs noeta in memory (the memlog backend; JetStream's is
// eventlog/jetstream/jshost) with a guard and an observer of its own,
// submits a task and waits for it to end.
func Example() {
	ctx := context.Background()

	// The wiring (20 lines).
	cfg, err := config.Parse("noeta.yaml", []byte(noetaYAML))
	check(err)
	backend, err := memlog.NewBackend(memlog.Options{})
	check(err)
	defer backend.Close()
	echo, err := tools.Builtins(tools.BuiltinConfig{})
	check(err)
	reg, err := tools.NewRegistry(echo[0]) // echo
	check(err)
	counts := &byType{n: map[string]int{}}
	h, err := host.Open(ctx, backend, host.Options{
		Governance: cfg.Governance,
		Tools:      reg,
		Guards:     []guards.Guard{guards.Func("no-passwords", guards.MinUserPriority, noPasswords)},
		Observers:  []observers.Observer{counts},
		Workers:    2,
	})
	check(err)
	defer h.Close()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(taskYAML))
	check(err)
	sub, err := host.TaskFromFile(tf)
	check(err)
	id, err := h.Submit(ctx, sub)
	check(err)
	rest, err := h.Wait(ctx, id)
	check(err)

	// What happened: the answer, the guard's denial in the log, and the
	// observer's count of every record the log holds (complete once Close
	// has handed it what was queued).
	fmt.Println(rest.Status, rest.Detail)
	log, err := h.Events(ctx, id, 0)
	check(err)
	inLog := map[string]int{}
	for _, env := range log {
		inLog[env.Type]++
		if p, _, err := env.Decode(); err == nil {
			if d, ok := p.(*noeta.ToolCallDenied); ok {
				fmt.Printf("denied by %s: %s\n", d.Guard, d.Reason)
			}
		}
	}
	h.Close()
	fmt.Println("the observer counted what the log holds:", maps.Equal(inLog, counts.n), counts.n[noeta.TypeToolCallFinished], "call ran")
	// Output:
	// completed "done"
	// denied by no-passwords: arguments mention a password
	// the observer counted what the log holds: true 1 call ran
}
