package host

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/tools"
)

// foldCounter is a memlog backend that counts the folds of each task's log:
// every fold (engine.FoldTask) starts at the log's latest snapshot.
type foldCounter struct {
	*memlog.Store
	index *memlog.WaitingIndex
	mu    sync.Mutex
	folds map[string]int
}

func (f *foldCounter) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	f.mu.Lock()
	f.folds[task]++
	f.mu.Unlock()
	return f.Store.LatestSnapshot(ctx, task)
}

func (f *foldCounter) count(task string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.folds[task]
}

func (f *foldCounter) Log() eventlog.EventLog          { return f }
func (f *foldCounter) Dispatcher() eventlog.Dispatcher { return f.Store }
func (f *foldCounter) Content() eventlog.ContentStore  { return f.Store }
func (f *foldCounter) Waiting() eventlog.WaitingIndex  { return f.index }

// TestAnAnswerFoldsTwice: from the answer to the task's end, the task's log
// is folded twice — once by Approve, which checks the request is open and
// this approver may answer, and once by the worker that resolves it and
// runs the call. Before the cut, one answer through the inbox folded it
// eight times.
func TestAnAnswerFoldsTwice(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte(rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	s, err := memlog.New(memlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := &foldCounter{Store: s, index: memlog.NewWaitingIndex(), folds: map[string]int{}}
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(t.Context(), b, Options{Governance: cfg.Governance, Approvals: cfg.Approvals, Tools: reg, Workers: 1, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := t.Context()
	sub := task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'true'}}]\n  - finish: {answer: done}\n")
	sub.SubmittedBy = "cli:ann"
	id, err := h.Submit(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != RestWaiting {
		t.Fatalf("waiting: %+v, %v", rest, err)
	}
	before := b.count(id)
	if err := h.Approve(ctx, id, rest.Waiting[0].Handle, Answer{Decision: noeta.ApprovalApprove, Approver: "sre", Auth: noeta.AuthToken}); err != nil {
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
	if n := b.count(id) - before; n > 2 {
		t.Errorf("one answer folded the task's log %d times, want at most 2", n)
	} else {
		t.Logf("one answer folded the task's log %d times", n)
	}
}
