// Command embed runs noeta from Go, in memory: the memlog backend (no
// server, nothing kept past the process), the examples' governance config,
// the built-in tools but the shell, one guard and one observer of its own.
// It runs a task whose second call the guard denies, and prints what
// happened.
//
// It composes package host itself and so links neither NATS nor the model
// SDKs, OpenTelemetry or MCP; hostconfig is the composition that does.
//
//	go run ./examples/embed
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
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

const task = `
agent: helper
goal: "say hello, then try to leak"
script:
  - tool_calls: [{tool: echo, args: {text: hello}}]
  - tool_calls: [{tool: echo, args: {text: "the password is hunter2"}}]
  - finish: {answer: done}
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, "examples/noeta.yaml", os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, configPath string, out io.Writer) error {
	cfg, err := config.Load(ctx, configPath)
	if err != nil {
		return err
	}
	backend, err := memlog.NewBackend(memlog.Options{})
	if err != nil {
		return err
	}
	defer backend.Close()
	reg, err := toolsButShell()
	if err != nil {
		return err
	}
	counts := &byType{n: map[string]int{}}
	h, err := host.Open(ctx, backend, host.Options{
		Governance: cfg.Governance,
		Approvals:  cfg.Approvals,
		Tools:      reg,
		Guards:     []guards.Guard{guards.Func("no-passwords", guards.MinUserPriority, noPasswords)},
		Observers:  []observers.Observer{counts},
		Workers:    2,
	})
	if err != nil {
		return err
	}
	defer h.Close()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(task))
	if err != nil {
		return err
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		return err
	}
	id, err := h.Submit(ctx, sub)
	if err != nil {
		return err
	}
	rest, err := h.Wait(ctx, id)
	if err != nil {
		return err
	}
	h.Close() // hands the observers every record still queued
	fmt.Fprintf(out, "task %s: %s %s\n", id, rest.Status, rest.Detail)
	fmt.Fprint(out, counts)
	return nil
}

// toolsButShell is the built-in tools without the shell: a shell command
// runs confined only under the sandbox hostconfig sets up from the config,
// and this program sets up none.
func toolsButShell() (*tools.Registry, error) {
	all, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		return nil, err
	}
	var keep []tools.Tool
	for _, t := range all {
		if t.Name() != "shell" {
			keep = append(keep, t)
		}
	}
	return tools.NewRegistry(keep...)
}

// noPasswords denies a tool call whose arguments mention a password.
func noPasswords(_ context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
	if c, ok := a.(noeta.ProposedToolCall); ok && strings.Contains(string(c.Call.Args), "password") {
		return noeta.Deny("arguments mention a password"), nil
	}
	return noeta.Allow(), nil
}

// byType counts the committed records by type.
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

func (c *byType) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, t := range noeta.EventTypes() {
		if n := c.n[t]; n > 0 {
			fmt.Fprintf(&b, "%-22s %d\n", t, n)
		}
	}
	return b.String()
}
