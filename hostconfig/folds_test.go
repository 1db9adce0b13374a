package hostconfig

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/tools"
)

// foldingLog counts the folds of each task's log: every fold
// (engine.FoldTask) starts at the log's latest snapshot.
type foldingLog struct {
	*jetstream.Log
	mu    sync.Mutex
	folds map[string]int
}

func (f *foldingLog) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	f.mu.Lock()
	f.folds[task]++
	f.mu.Unlock()
	return f.Log.LatestSnapshot(ctx, task)
}

func (f *foldingLog) count(task string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.folds[task]
}

// foldingBackend is a JetStream backend, with every capability, whose log
// counts folds.
type foldingBackend struct {
	*jshost.Backend
	log *foldingLog
}

func (b *foldingBackend) Log() eventlog.EventLog { return b.log }

const echoApprovalDoc = `
agents:
  researcher:
    tools: [echo]
    permissions: {require_approval_tools: [echo]}
approvals:
  rules:
    - {name: sre-echo, when: 'tool == "echo"', approvers: 'approver == "sre" && auth == "nats"'}
`

// TestARemoteAnswerFoldsTwice: on a remote NATS, from an answer given
// through Approve (sent on the approver's subject, the broker vouching for
// the sender) to the task's end, the task's log is folded twice: once by
// Approve, which checks the request and notes where the log ends, and once
// by the worker that resolves it and runs the call; Approve reads only the
// records after that point to learn what came of its answer. Before, it
// folded the log again for the deadline and again for who resolved it.
func TestARemoteAnswerFoldsTwice(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js, err := jshost.Open(ctx, jshost.Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "folds", Runs: true, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.Close() })
	b := &foldingBackend{Backend: js, log: &foldingLog{Log: js.JetStreamLog(), folds: map[string]int{}}}
	cfg, err := config.Parse("noeta.yaml", []byte(echoApprovalDoc))
	if err != nil {
		t.Fatal(err)
	}
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins[0]) // echo
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(ctx, b, host.Options{Governance: cfg.Governance, Approvals: cfg.Approvals, Tools: reg, Workers: 1, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	id, err := h.Submit(ctx, task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestWaiting {
		t.Fatalf("waiting: %+v, %v", rest, err)
	}
	for {
		// The row waits on the request once the worker has released it.
		if ds, err := h.Dispatch(ctx, id); err == nil && ds.Status == eventlog.DispatchSuspended {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	before := b.log.count(id)
	if err := h.Approve(ctx, id, rest.Waiting[0].Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "sre"}); err != nil {
		t.Fatal(err)
	}
	for {
		ds, err := h.Dispatch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ds.Status == eventlog.DispatchTerminal {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	n := b.log.count(id) - before
	if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("after the answer: %+v, %v", rest, err)
	}
	if n > 2 {
		t.Errorf("one answer folded the task's log %d times, want at most 2", n)
	} else {
		t.Logf("one answer folded the task's log %d times", n)
	}
}
