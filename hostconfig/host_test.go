package hostconfig

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// exampleConfig is examples/noeta.yaml.
func exampleConfig(t *testing.T) *config.File {
	t.Helper()
	cfg, err := config.Load(t.Context(), "../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// task parses a task file.
func task(t *testing.T, body string) host.Submission {
	t.Helper()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func openRunner(t *testing.T, data string) *Host {
	t.Helper()
	h, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Workers: 2, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestDataDirOwnership: a second host that runs tasks is refused a data
// directory another holds, naming the holder; a client host attaches to the
// holder's server, submits there, and the holder runs the task.
func TestDataDirOwnership(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	runner := openRunner(t, data)
	_, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Workers: 1, Name: "second"})
	var busy *jshost.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, jshost.ErrBusy) || busy.Holder.Verb != "test" || busy.Holder.PID != os.Getpid() {
		t.Fatalf("second runner: %v", err)
	}
	client, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if holder, ok := client.Attached(); !ok || holder.Verb != "test" {
		t.Fatalf("client: attached %v %+v", ok, holder)
	}
	id, err := client.Submit(t.Context(), task(t, "agent: helper\ngoal: g\nscript: [{tool_calls: [{tool: echo, args: {text: hi}}]}, {finish: {answer: ok}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := client.Wait(t.Context(), id)
	if err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("client wait: %+v, %v", rest, err)
	}
	if runner.Segments() == 0 {
		t.Errorf("the holder ran no segment")
	}
	// A client runs nothing: no pool of its own, attached or not.
	if _, err := client.StartPool(t.Context(), host.PoolOptions{Workers: 1}); !errors.Is(err, host.ErrNotRunning) {
		t.Errorf("a client started a pool: %v", err)
	}
	// An answer must say what it decides: none is never taken for an
	// approval.
	if err := client.Approve(t.Context(), id, "approval-call-1-0-0000000000", host.Answer{Approver: "alice"}); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("an answer without a decision: %v", err)
	}
}

// TestConfigNamesUnknownTool: a config whose agent names a tool the host
// does not have is refused at Open, naming the field; with that tool among
// Options.Tools it opens.
func TestConfigNamesUnknownTool(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  a: {tools: [echo, frobnicate]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "agents.a.tools[1]") || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("open: %v, want ErrBadConfig naming agents.a.tools[1]", err)
	}
	frob := tools.Define(tools.Def{Name: "frobnicate", Risk: tools.RiskLow, Run: func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{OK: true, Output: json.RawMessage(`"ok"`)}, nil
	}})
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Tools: []tools.Tool{frob}})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// TestStartRedoesOwedHandoffs: subtasks that ended while no process handed
// their results over (here a host that leaves it to an observer-worker that
// never ran) reach their parent once a host with the child-lifecycle
// observer starts, without Wait's own recovery: its dispatcher's first pass
// redoes the handoffs of the parents waiting on ended subtasks.
// Reproduction: the start-up recovery listed every task and read its log,
// and at a million tasks ran out of its deadline on every start.
func TestStartRedoesOwedHandoffs(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	ctx := t.Context()
	body, err := os.ReadFile("../examples/08-fan-out.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first, err := Open(ctx, Options{DataDir: data, Config: exampleConfig(t), Workers: 2, Workspace: t.TempDir(), Name: "first", Skip: Skip{ChildLifecycle: true}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := first.Submit(ctx, task(t, string(body)))
	if err != nil {
		first.Close()
		t.Fatal(err)
	}
	// The parent suspends on its three subtasks, which all end.
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			first.Close()
			t.Fatal("the fan-out did not reach its subtasks' end")
		}
		time.Sleep(20 * time.Millisecond)
		var kids []string
		envs, _ := first.Events(ctx, id, 0)
		for _, env := range envs {
			if p, _, err := env.Decode(); err == nil {
				if sp, ok := p.(*noeta.SubtaskSpawned); ok {
					kids = append(kids, sp.SubtaskID)
				}
			}
		}
		if len(kids) == 3 && allSuspended(t, first, []string{id}) && allEnded(t, first, kids) {
			break
		}
	}
	first.Close()

	second := openRunner(t, data)
	deadline = time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the parent never received its subtasks' results")
		}
		if ds, err := second.Dispatch(ctx, id); err == nil && ds.Status == eventlog.DispatchTerminal {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rest, err := second.Wait(ctx, id)
	if err != nil || rest.Status != host.RestCompleted || string(rest.Answer) != `"1, 2 and 3"` {
		t.Fatalf("fan-out: %+v, %v", rest, err)
	}
}

func allEnded(t *testing.T, h *Host, ids []string) bool {
	for _, id := range ids {
		ds, err := h.Dispatch(t.Context(), id)
		if err != nil || ds.Status != eventlog.DispatchTerminal {
			return false
		}
	}
	return true
}

func allSuspended(t *testing.T, h *Host, ids []string) bool {
	for _, id := range ids {
		ds, err := h.Dispatch(t.Context(), id)
		if err != nil || ds.Status != eventlog.DispatchSuspended {
			return false
		}
	}
	return true
}
