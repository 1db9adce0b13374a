package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

func readExample(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rec is one expected record: its type and origin.
type rec struct {
	typ    string
	origin eventlog.Origin
}

func e(typ string) rec  { return rec{typ, eventlog.OriginEngine} }
func tl(typ string) rec { return rec{typ, eventlog.OriginTool} }

// wantLog checks a task's whole log: dense seqs from 1, and exactly the
// expected types and origins.
func wantLog(t *testing.T, h *harness, task string, want ...rec) []eventlog.Envelope {
	t.Helper()
	envs := h.log(task)
	got := types(t, envs)
	var wantTypes []string
	for _, w := range want {
		wantTypes = append(wantTypes, w.typ)
	}
	if !slices.Equal(got, wantTypes) {
		t.Fatalf("task %s log:\n got  %v\n want %v\n%s", task, got, wantTypes, h.dump(task))
	}
	for i, w := range want {
		if w.typ == noeta.TypeTaskCreated {
			continue
		}
		if envs[i].Origin != w.origin {
			t.Errorf("record %d (%s) origin %s, want %s", i+1, w.typ, envs[i].Origin, w.origin)
		}
	}
	return envs
}

// governance is what a test pins of the folded governance slice.
type governance struct {
	Iterations, ToolCalls, SpawnedSubtasks int
	CostUSD                                float64
	Denials                                []noeta.Denial
	Approvals                              []noeta.ApprovalRecord
	Results                                []string // subtask id:status
	Pending                                int
}

func wantGovernance(t *testing.T, st *engine.State, want governance) {
	t.Helper()
	g := st.Governance
	got := governance{
		Iterations: g.Iterations, ToolCalls: g.ToolCalls, SpawnedSubtasks: g.SpawnedSubtasks, CostUSD: g.CostUSD,
		Denials: g.Denials, Approvals: g.Approvals, Pending: len(g.PendingApprovals),
	}
	for _, r := range g.SubtaskResults {
		got.Results = append(got.Results, r.SubtaskID+":"+string(r.Status))
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("governance:\n got  %s\n want %s", gj, wj)
	}
}

// eachBackend runs f on memlog and on embedded JetStream.
func eachBackend(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, readExample(t, "noeta.yaml"))
			h.start(2)
			f(t, h)
		})
	}
}

func TestAllowedCalls(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "01-allowed-call.yaml"))
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ToolCallStarted"), tl("ToolCallFinished"), e("ToolCallStarted"), tl("ToolCallFinished"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		if envs[0].Origin != eventlog.OriginSystem {
			t.Errorf("TaskCreated origin %s", envs[0].Origin)
		}
		fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
		if !fin.OK || !bytes.Contains(fin.Output, []byte("hello")) {
			t.Errorf("read_file result %+v", fin)
		}
		if string(st.Answer) != `"The README says hello."` {
			t.Errorf("answer %s", st.Answer)
		}
		wantGovernance(t, st, governance{Iterations: 2, ToolCalls: 2, CostUSD: 0.01})
		h.waitReleased(id, eventlog.DispatchTerminal)
	})
}

func TestBudgetDenial(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "02-budget-denial.yaml"))
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ToolCallStarted"), tl("ToolCallFinished"), e("ToolCallDenied"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		d := payload[noeta.ToolCallDenied](t, envs, noeta.TypeToolCallDenied)
		if d.Guard != "budget" || d.CallID != "call-1-1" {
			t.Errorf("denial %+v", d)
		}
		wantGovernance(t, st, governance{Iterations: 2, ToolCalls: 1, Denials: []noeta.Denial{
			{Type: "ToolCallDenied", Guard: "budget", Reason: d.Reason, CallID: "call-1-1", Tool: "echo"},
		}})
	})
}

func TestPermissionDenial(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "03-permission-denial.yaml"))
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"), e("ToolCallDenied"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		d := payload[noeta.ToolCallDenied](t, envs, noeta.TypeToolCallDenied)
		if d.Guard != "permission" || d.Tool != "write_file" {
			t.Errorf("denial %+v", d)
		}
		wantGovernance(t, st, governance{Iterations: 2, Denials: []noeta.Denial{
			{Type: "ToolCallDenied", Guard: "permission", Reason: d.Reason, CallID: "call-1-0", Tool: "write_file"},
		}})
		if _, err := os.Stat(filepath.Join(h.ws, "notes.txt")); !os.IsNotExist(err) {
			t.Errorf("the denied write happened: %v", err)
		}
	})
}

func TestRuleDenial(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "04-rule-denial.yaml"))
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ToolCallDenied"), e("ToolCallStarted"), tl("ToolCallFinished"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		d := payload[noeta.ToolCallDenied](t, envs, noeta.TypeToolCallDenied)
		if d.Guard != "rules" || d.Reason != "destructive shell command" {
			t.Errorf("denial %+v", d)
		}
		wantGovernance(t, st, governance{Iterations: 2, ToolCalls: 1, Denials: []noeta.Denial{
			{Type: "ToolCallDenied", Guard: "rules", Reason: "destructive shell command", CallID: "call-1-0", Tool: "shell"},
		}})
	})
}

// approve waits for task to wait on an approval whose handle is prefix, a
// dash and a 10-character nonce, answers it and returns the handle.
func approve(t *testing.T, h *harness, task, prefix string, d noeta.ApprovalDecision, reason string) string {
	t.Helper()
	st := h.waitStatus(task, noeta.StatusSuspended)
	if st.WakeOn == nil || !approvalHandle(prefix).MatchString(st.WakeOn.Handle) || st.Reason != engine.ReasonWaitingApproval {
		t.Fatalf("task %s suspended %q on %+v, want an approval on %s-<nonce>", task, st.Reason, st.WakeOn, prefix)
	}
	if err := h.eng.Approve(context.Background(), task, st.WakeOn.Handle, d, "alice@example.com", reason, noeta.AuthLocal); err != nil {
		t.Fatal(err)
	}
	return st.WakeOn.Handle
}

// approvalHandle matches the handles of requests named prefix.
func approvalHandle(prefix string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-[0-9a-hjkmnp-tv-z]{10}$`)
}

func TestRepetitionApproval(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "05-repetition-approval.yaml"))
		handle := approve(t, h, id, "approval-call-1-2", noeta.ApprovalApprove, "")
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ToolCallStarted"), tl("ToolCallFinished"), e("ToolCallStarted"), tl("ToolCallFinished"),
			e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
			e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"), e("ToolCallStarted"), tl("ToolCallFinished"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		req := payload[noeta.ApprovalRequested](t, envs, noeta.TypeApprovalRequested)
		if req.Guard != "repetition" || req.Action != noeta.ApprovalToolCall || req.CallID != "call-1-2" || string(req.Args) != `{"text":"ping"}` {
			t.Errorf("request %+v", req)
		}
		wantGovernance(t, st, governance{Iterations: 2, ToolCalls: 3, Approvals: []noeta.ApprovalRecord{
			{Handle: handle, Action: noeta.ApprovalToolCall, CallID: "call-1-2", Tool: "echo", Decision: noeta.ApprovalApprove, Approver: "alice@example.com", Auth: noeta.AuthLocal},
		}})
	})
}

func TestApprovalGranted(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "06-approval-granted.yaml"))
		handle := approve(t, h, id, "approval-call-1-0", noeta.ApprovalApprove, "looks safe")
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
			e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"), e("ToolCallStarted"), tl("ToolCallFinished"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		fin := payload[noeta.ToolCallFinished](t, envs, noeta.TypeToolCallFinished)
		if !fin.OK || !bytes.Contains(fin.Output, []byte("README.md")) {
			t.Errorf("ls result %+v %s", fin, fin.Output)
		}
		wantGovernance(t, st, governance{Iterations: 2, ToolCalls: 1, Approvals: []noeta.ApprovalRecord{
			{Handle: handle, Action: noeta.ApprovalToolCall, CallID: "call-1-0", Tool: "shell", Decision: noeta.ApprovalApprove, Approver: "alice@example.com", Reason: "looks safe", Auth: noeta.AuthLocal},
		}})
	})
}

func TestApprovalRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "07-approval-refused.yaml"))
		handle := approve(t, h, id, "approval-call-1-0", noeta.ApprovalDeny, "not today")
		st := h.waitStatus(id, noeta.StatusTerminal)
		wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ApprovalRequested"), e("TaskSnapshot"), e("TaskSuspended"),
			e("LeaseGranted"), e("TaskWoken"), e("ApprovalResolved"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		wantGovernance(t, st, governance{Iterations: 2,
			Denials: []noeta.Denial{{Type: "ApprovalResolved", Reason: "not today", CallID: "call-1-0", Tool: "shell"}},
			Approvals: []noeta.ApprovalRecord{
				{Handle: handle, Action: noeta.ApprovalToolCall, CallID: "call-1-0", Tool: "shell", Decision: noeta.ApprovalDeny, Approver: "alice@example.com", Reason: "not today", Auth: noeta.AuthLocal},
			}})
	})
}

func TestFanOut(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		id := h.submit(readExample(t, "08-fan-out.yaml"))
		st := h.waitStatus(id, noeta.StatusTerminal)
		envs := wantLog(t, h, id,
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("SubtaskSpawned"), e("SubtaskSpawned"), e("SubtaskSpawned"), e("TaskSnapshot"), e("TaskSuspended"),
			e("LeaseGranted"), e("TaskWoken"), e("SubtaskResultRecorded"), e("SubtaskResultRecorded"), e("SubtaskResultRecorded"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		var kids []string
		for _, env := range envs {
			if env.Type == noeta.TypeSubtaskSpawned {
				var p noeta.SubtaskSpawned
				_ = json.Unmarshal(env.Payload, &p)
				kids = append(kids, p.SubtaskID)
			}
		}
		woken := payload[noeta.TaskWoken](t, envs, noeta.TypeTaskWoken)
		if woken.WakeEvent.Kind != noeta.WakeSubtaskGroupCompleted || !slices.Equal(woken.WakeEvent.SubtaskIDs, kids) {
			t.Errorf("woken by %+v, children %v", woken.WakeEvent, kids)
		}
		var results []string
		for _, k := range kids {
			results = append(results, k+":completed")
		}
		wantGovernance(t, st, governance{Iterations: 2, SpawnedSubtasks: 3, Results: results})
		first := wantLog(t, h, kids[0],
			e("TaskCreated"), e("LeaseGranted"), e("TurnStarted"), e("PolicyDecided"),
			e("ToolCallStarted"), tl("ToolCallFinished"),
			e("TurnStarted"), e("PolicyDecided"), e("TaskSnapshot"), e("TaskCompleted"))
		tc := payload[noeta.TaskCreated](t, first, noeta.TypeTaskCreated)
		if tc.ParentTaskID != id || tc.RootTaskID != id || tc.SubtaskDepth != 1 || tc.GroupID != woken.WakeEvent.GroupID {
			t.Errorf("child genesis %+v", tc)
		}
		rr := payload[noeta.SubtaskResultRecorded](t, envs, noeta.TypeSubtaskResultRecorded)
		if string(rr.Result) != "1" {
			t.Errorf("first result %+v", rr)
		}
	})
}
