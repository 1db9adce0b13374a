package observers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// The publish sink takes a *nats.Conn as it is.
var _ AuditPublisher = (*nats.Conn)(nil)

// auditMarker stands in for every body (goal, args, output, answer, result,
// patch, question, wake data): it must never reach an audit record.
const auditMarker = "SECRET-BODY-7f3a"

var auditT0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func auditNow() time.Time { return auditT0.Add(time.Hour) }

var auditRef = &noeta.ContentRef{Hash: strings.Repeat("ab", 32), Size: 9000, MediaType: "application/json"}

// auditLogs keeps what an Audit logged and passes it to the test log.
type auditLogs struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *auditLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *auditLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *auditLogs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// auditEnv builds the log record seq of task.
func auditEnv(t testing.TB, task string, seq uint64, p noeta.Payload) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "worker-1", p)
	if err != nil {
		t.Fatalf("NewEnvelope(%s): %v", p.EventType(), err)
	}
	env.ID = fmt.Sprintf("env-%s-%d", task, seq)
	env.Seq = seq
	env.Time = auditT0.Add(time.Duration(seq) * time.Millisecond)
	if seq > 1 {
		env.LeaseGen = 1
		env.CausationID = fmt.Sprintf("env-%s-%d", task, seq-1)
	}
	env.CorrelationID = "root-" + task
	env.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	return env
}

// auditInbox builds the inbox record key of task.
func auditInbox(t testing.TB, task, key string, p noeta.Payload) eventlog.Envelope {
	t.Helper()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "child_lifecycle", p)
	if err != nil {
		t.Fatalf("NewEnvelope(%s): %v", p.EventType(), err)
	}
	env.ID = fmt.Sprintf("env-%s-%s", task, key)
	env.Key = key
	env.Time = auditT0
	env.CorrelationID = "root-" + task
	return env
}

func openAuditFile(t *testing.T, path string, syncEvery time.Duration) (*Audit, *auditLogs) {
	t.Helper()
	logs := &auditLogs{t: t}
	sink, err := NewAuditFileSink(AuditFileConfig{Path: path, SyncEvery: syncEvery, Logger: logs.logger()})
	if err != nil {
		t.Fatalf("NewAuditFileSink: %v", err)
	}
	a, err := NewAudit(AuditConfig{Sink: sink, Logger: logs.logger(), Now: auditNow})
	if err != nil {
		_ = sink.Close()
		t.Fatalf("NewAudit: %v", err)
	}
	return a, logs
}

func auditObserve(t *testing.T, a *Audit, envs ...eventlog.Envelope) {
	t.Helper()
	for _, env := range envs {
		if err := a.Observe(t.Context(), env); err != nil {
			t.Fatalf("Observe(%s %s %s): %v", env.Task, auditPosition(env.Seq, env.Key), env.Type, err)
		}
	}
}

func auditClose(t *testing.T, a *Audit) {
	t.Helper()
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func auditLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	return strings.Split(string(b[:len(b)-1]), "\n")
}

func auditDecode(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("record %s: %v", line, err)
	}
	return m
}

// auditRehash is the hash of a record computed independently of the
// package: sha256 over the canonical JSON of the record without hash.
func auditRehash(t *testing.T, m map[string]any) string {
	t.Helper()
	c := maps.Clone(m)
	delete(c, "hash")
	b, err := noeta.Canonical(c)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func auditVerifyOK(t *testing.T, path string) AuditReport {
	t.Helper()
	rep, err := VerifyAuditFile(path)
	if err != nil {
		t.Fatalf("VerifyAuditFile: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("VerifyAuditFile: %v", rep)
	}
	return rep
}

// auditCommon is every record's own fields; the rest depend on the type.
var auditCommon = []string{
	"v", "task", "seq", "key", "type", "time", "origin", "actor", "lease_gen", "correlation_id",
	"causation_id", "trace_parent", "envelope_id", "audited_at", "prev", "hash",
}

func TestAuditProjection(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	secret := raw(`{"text":"` + auditMarker + `"}`)
	cases := []struct {
		name string
		env  func(task string) eventlog.Envelope
		want string // the type's fields, exactly
	}{
		{"TaskCreated child", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskCreated{TaskID: task, Agent: "researcher", Goal: auditMarker, ParentTaskID: "root-1",
				RootTaskID: "root-1", SubtaskDepth: 1, GroupID: "g-1", ScriptRef: auditRef})
		}, `{"agent":"researcher","parent_task_id":"root-1","root_task_id":"root-1","subtask_depth":1,"group_id":"g-1"}`},
		{"TaskCreated root, goal spilled", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskCreated{TaskID: task, Agent: "researcher", GoalRef: auditRef, RootTaskID: task})
		}, `{"agent":"researcher","root_task_id":"` + "%TASK%" + `","subtask_depth":0}`},
		{"LeaseGranted", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.LeaseGranted{LeaseID: "L-1", Generation: 3, Worker: "host-a"})
		}, `{"lease_id":"L-1","generation":3,"worker":"host-a"}`},
		{"TurnStarted", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TurnStarted{Turn: 4})
		}, `{"turn":4}`},
		{"PolicyDecided", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionToolCalls, CostUSD: 0.0125, InputTokens: 1200, OutputTokens: 80})
		}, `{"turn":4,"decision":"tool_calls","cost_usd":0.0125,"input_tokens":1200,"output_tokens":80}`},
		{"ToolCallStarted inline args", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ToolCallStarted{CallID: "c-1", Tool: "shell", Args: secret, Turn: 2})
		}, `{"call_id":"c-1","tool":"shell","turn":2,"args_spilled":false}`},
		{"ToolCallStarted spilled args", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ToolCallStarted{CallID: "c-1", Tool: "shell", ArgsRef: auditRef, Turn: 2})
		}, `{"call_id":"c-1","tool":"shell","turn":2,"args_spilled":true}`},
		{"ToolCallFinished ok", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ToolCallFinished{CallID: "c-1", Tool: "shell", OK: true, Output: secret, DurationMS: 42, CostUSD: 0.5})
		}, `{"call_id":"c-1","tool":"shell","ok":true,"duration_ms":42,"cost_usd":0.5,"output_spilled":false}`},
		{"ToolCallFinished failed, long error, spilled output", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ToolCallFinished{CallID: "c-1", Tool: "shell", OutputRef: auditRef, Error: strings.Repeat("é", 400), DurationMS: 7})
		}, `{"call_id":"c-1","tool":"shell","ok":false,"duration_ms":7,"cost_usd":0,"error":"` + strings.Repeat("é", 256) + `","output_spilled":true}`},
		{"ToolCallDenied", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ToolCallDenied{CallID: "c-2", Tool: "rm", Guard: "permission", Reason: "tool rm is denied"})
		}, `{"call_id":"c-2","tool":"rm","guard":"permission","reason":"tool rm is denied","verdict":"deny"}`},
		{"SubtaskSpawned", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.SubtaskSpawned{SubtaskID: "child-1", Agent: "helper", Goal: auditMarker, GroupID: "g-1", CallID: "c-3"})
		}, `{"subtask_id":"child-1","agent":"helper","group_id":"g-1","call_id":"c-3"}`},
		{"SubtaskDenied", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.SubtaskDenied{Agent: "helper", Guard: "budget", Reason: "max_spawned_subtasks 5 reached"})
		}, `{"agent":"helper","guard":"budget","reason":"max_spawned_subtasks 5 reached","verdict":"deny"}`},
		{"FinishDenied", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.FinishDenied{Guard: "rules", Reason: "no finish before review"})
		}, `{"guard":"rules","reason":"no finish before review","verdict":"deny"}`},
		{"GuardShadowed", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "c-5", Tool: "shell", Guard: "rules", Rule: "rules[0]",
				Verdict: noeta.VerdictDeny, Reason: "new ban", Decided: noeta.VerdictAllow})
		}, `{"action":"tool_call","call_id":"c-5","tool":"shell","guard":"rules","rule":"rules[0]","shadow_verdict":"deny","reason":"new ban","decided":"allow"}`},
		{"GuardShadowed failed", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: "c-5", Tool: "shell", Guard: "trial",
				Verdict: noeta.VerdictDeny, Reason: "panicked", Failed: true, Decided: noeta.VerdictDeny, DecidedBy: "permission"})
		}, `{"action":"tool_call","call_id":"c-5","tool":"shell","guard":"trial","shadow_verdict":"deny","reason":"panicked","failed":true,"decided":"deny","decided_by":"permission"}`},
		{"ApprovalRequested", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ApprovalRequested{Handle: "h-1", Action: noeta.ApprovalToolCall, CallID: "c-4", Tool: "shell",
				Args: secret, Guard: "permission", Reason: "shell needs approval"})
		}, `{"handle":"h-1","action":"tool_call","guard":"permission","reason":"shell needs approval","verdict":"require_approval","call_id":"c-4","tool":"shell"}`},
		{"ApprovalRequested spawn", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ApprovalRequested{Handle: "h-2", Action: noeta.ApprovalSpawnSubtask, Agent: "helper", Guard: "permission", Reason: "r"})
		}, `{"handle":"h-2","action":"spawn_subtask","guard":"permission","reason":"r","verdict":"require_approval","agent":"helper"}`},
		{"ApprovalResolved", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.ApprovalResolved{Handle: "h-1", Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "looks fine"})
		}, `{"handle":"h-1","decision":"approve","approver":"alice","reason":"looks fine"}`},
		{"SubtaskCompleted (inbox)", func(task string) eventlog.Envelope {
			return auditInbox(t, task, "subtask-child-1", noeta.SubtaskCompleted{SubtaskID: "child-1", Status: noeta.SubtaskStatusFailed, Result: secret, Error: "boom", GroupID: "g-1"})
		}, `{"subtask_id":"child-1","status":"failed","group_id":"g-1","error":"boom"}`},
		{"SubtaskResultRecorded", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.SubtaskResultRecorded{SubtaskID: "child-1", Status: noeta.SubtaskStatusCompleted, Result: secret})
		}, `{"subtask_id":"child-1","status":"completed"}`},
		{"TaskStatePatched", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskStatePatched{Patch: secret})
		}, `{}`},
		{"TaskSuspended external", func(task string) eventlog.Envelope {
			w := noeta.ExternalWake("deploy")
			w.Data = secret
			return auditEnv(t, task, 1, noeta.TaskSuspended{Reason: "wait_external", WakeOn: w})
		}, `{"reason":"wait_external","wake":{"kind":"external_event","event_kind":"deploy"}}`},
		{"TaskSuspended group", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskSuspended{Reason: "spawn", WakeOn: noeta.GroupCompletedWake("g-1", []string{"a", "b"})})
		}, `{"reason":"spawn","wake":{"kind":"subtask_group_completed","group_id":"g-1"}}`},
		{"TaskSuspended timer", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskSuspended{Reason: "wait_timer", WakeOn: noeta.TimerWake(auditT0.Add(time.Minute))})
		}, `{"reason":"wait_timer","wake":{"kind":"timer_fired","fire_at":"2026-03-01T12:01:00.123456789Z"}}`},
		{"TaskWoken human", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskWoken{WakeEvent: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "h-1", Decision: "approve", Approver: "alice", Text: auditMarker}})
		}, `{"wake":{"kind":"human_response","handle":"h-1","decision":"approve","approver":"alice"}}`},
		{"TaskWoken subtask", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskWoken{WakeEvent: noeta.SubtaskCompletedWake("child-1")})
		}, `{"wake":{"kind":"subtask_completed","subtask_id":"child-1"}}`},
		{"TaskSnapshot", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskSnapshot{StateRef: *auditRef, UptoSeq: 40})
		}, `{"upto_seq":40}`},
		{"StepAttemptAbandoned", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.StepAttemptAbandoned{BaselineSeq: 12, Action: noeta.AbandonRedrive, Reason: "lease lost mid-turn"})
		}, `{"baseline_seq":12,"action":"redrive","reason":"lease lost mid-turn"}`},
		{"TaskCompleted inline", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskCompleted{Answer: secret})
		}, `{"answer_spilled":false}`},
		{"TaskCompleted spilled", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskCompleted{AnswerRef: auditRef})
		}, `{"answer_spilled":true}`},
		{"TaskFailed", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskFailed{Error: "finish denied", Guard: "rules"})
		}, `{"error":"finish denied","guard":"rules"}`},
		{"TaskCancelled", func(task string) eventlog.Envelope {
			return auditEnv(t, task, 1, noeta.TaskCancelled{Reason: "operator"})
		}, `{"reason":"operator"}`},
		{"type outside the catalogue", func(task string) eventlog.Envelope {
			return eventlog.Envelope{ID: "env-x", Task: task, Seq: 1, Type: "QuestionAsked", Time: auditT0, Actor: "future", Origin: eventlog.OriginEngine,
				CorrelationID: task, Payload: raw(`{"question":"` + auditMarker + `","goal":"` + auditMarker + `"}`)}
		}, `{}`},
	}

	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	for i, tc := range cases {
		auditObserve(t, a, tc.env(fmt.Sprintf("task-%02d", i)))
	}
	auditClose(t, a)

	lines := auditLines(t, path)
	if len(lines) != len(cases) {
		t.Fatalf("%d lines, want %d", len(lines), len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := fmt.Sprintf("task-%02d", i)
			rec := auditDecode(t, lines[i])
			env := tc.env(task)
			common := map[string]any{
				"v": json.Number("1"), "task": task, "type": env.Type, "time": env.Time.UTC().Format(time.RFC3339Nano),
				"origin": string(env.Origin), "actor": env.Actor, "lease_gen": json.Number(fmt.Sprint(env.LeaseGen)),
				"correlation_id": env.CorrelationID, "causation_id": env.CausationID, "envelope_id": env.ID,
				"audited_at": auditNow().Format(time.RFC3339Nano), "prev": "",
			}
			if env.Key != "" {
				common["key"] = env.Key
			} else {
				common["seq"] = json.Number(fmt.Sprint(env.Seq))
			}
			if env.TraceParent != "" {
				common["trace_parent"] = env.TraceParent
			}
			for k, v := range common {
				if got := rec[k]; !reflect.DeepEqual(got, v) {
					t.Errorf("%s = %#v, want %#v", k, got, v)
				}
			}
			if got := rec["hash"]; got != auditRehash(t, rec) {
				t.Errorf("hash %v is not the sha256 of the record's canonical JSON", got)
			}
			own := maps.Clone(rec)
			for _, k := range auditCommon {
				delete(own, k)
			}
			want := auditDecode(t, strings.ReplaceAll(tc.want, "%TASK%", task))
			if !reflect.DeepEqual(own, want) {
				t.Errorf("type fields\n got %v\nwant %v\nline %s", own, want, lines[i])
			}
		})
	}
	b, _ := os.ReadFile(path)
	if bytes.Contains(b, []byte(auditMarker)) {
		t.Errorf("a body reached the audit file:\n%s", b)
	}
	auditVerifyOK(t, path)
}

// auditTrail writes the trail the verify cases mutate:
//
//	1 A seq 1   2 B seq 1   3 A seq 2   4 A seq 3   5 B seq 2
//	6 A key subtask-x   7 A seq 4   8 B seq 3   9 A seq 5
func auditTrail(t *testing.T, path string) {
	t.Helper()
	a, _ := openAuditFile(t, path, 0)
	auditObserve(t, a,
		auditEnv(t, "A", 1, noeta.TaskCreated{TaskID: "A", Agent: "researcher", Goal: auditMarker, RootTaskID: "A"}),
		auditEnv(t, "B", 1, noeta.TaskCreated{TaskID: "B", Agent: "helper", Goal: auditMarker, RootTaskID: "B"}),
		auditEnv(t, "A", 2, noeta.LeaseGranted{LeaseID: "L-A", Generation: 1, Worker: "w"}),
		auditEnv(t, "A", 3, noeta.ToolCallStarted{CallID: "c-1", Tool: "shell", Args: json.RawMessage(`"` + auditMarker + `"`), Turn: 1}),
		auditEnv(t, "B", 2, noeta.LeaseGranted{LeaseID: "L-B", Generation: 1, Worker: "w"}),
		auditInbox(t, "A", "subtask-x", noeta.SubtaskCompleted{SubtaskID: "x", Status: noeta.SubtaskStatusCompleted}),
		auditEnv(t, "A", 4, noeta.ToolCallFinished{CallID: "c-1", Tool: "shell", OK: true, DurationMS: 3, CostUSD: 0.25}),
		auditEnv(t, "B", 3, noeta.TaskCompleted{Answer: json.RawMessage(`"` + auditMarker + `"`)}),
		auditEnv(t, "A", 5, noeta.TaskCancelled{Reason: "operator"}),
	)
	auditClose(t, a)
}

func TestAuditChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	auditTrail(t, path)
	lines := auditLines(t, path)
	last := map[string]string{}
	for i, line := range lines {
		rec := auditDecode(t, line)
		task := rec["task"].(string)
		if rec["prev"] != last[task] {
			t.Errorf("line %d: prev %v, want %q (the hash of the task's previous record)", i+1, rec["prev"], last[task])
		}
		h := auditRehash(t, rec)
		if rec["hash"] != h {
			t.Errorf("line %d: hash %v, want %s", i+1, rec["hash"], h)
		}
		last[task] = h
	}
	rep := auditVerifyOK(t, path)
	if rep.Records != 9 || rep.Tasks != 2 {
		t.Errorf("report %+v, want 9 records of 2 tasks", rep)
	}
	if got, want := rep.String(), "ok: 9 records, 2 tasks, chains intact"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	t.Logf("an audit line: %s", lines[6])
}

func TestAuditVerifyNamesTheFirstBrokenRecord(t *testing.T) {
	src := filepath.Join(t.TempDir(), "audit.jsonl")
	auditTrail(t, src)
	good := auditLines(t, src)
	rehash := func(line string, edit func(map[string]any)) string {
		rec := auditDecode(t, line)
		edit(rec)
		rec["hash"] = auditRehash(t, rec)
		b, err := noeta.Canonical(rec)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name   string
		mutate func(lines []string) []string
		torn   bool
		want   AuditBreak
	}{
		{"an edited field", func(l []string) []string {
			l[3] = strings.Replace(l[3], `"tool":"shell"`, `"tool":"shelx"`, 1)
			return l
		}, false, AuditBreak{Line: 4, Task: "A", Seq: 3, Why: "hash does not match"}},
		{"an edited field with its hash recomputed", func(l []string) []string {
			l[3] = rehash(l[3], func(m map[string]any) { m["tool"] = "read_file" })
			return l
		}, false, AuditBreak{Line: 6, Task: "A", Key: "subtask-x", Why: "prev does not match the hash of line 4"}},
		{"a deleted log line", func(l []string) []string {
			return slices.Delete(l, 6, 7) // A seq 4
		}, false, AuditBreak{Line: 8, Task: "A", Seq: 5, Why: "seq 5 follows seq 3 (line 4): seq 4 is missing"}},
		{"a deleted line followed by an inbox record", func(l []string) []string {
			return slices.Delete(l, 3, 4) // A seq 3
		}, false, AuditBreak{Line: 5, Task: "A", Key: "subtask-x", Why: "prev does not match the hash of line 3"}},
		{"a deleted first record", func(l []string) []string {
			return slices.Delete(l, 0, 1) // A seq 1
		}, false, AuditBreak{Line: 2, Task: "A", Seq: 2, Why: "prev is set but no earlier record"}},
		{"a swapped pair", func(l []string) []string {
			l[2], l[3] = l[3], l[2] // A seq 2 and 3
			return l
		}, false, AuditBreak{Line: 3, Task: "A", Seq: 3, Why: "seq 3 follows seq 1 (line 1): seq 2 is missing or out of order"}},
		{"a duplicated log line", func(l []string) []string {
			return slices.Insert(l, 4, l[3])
		}, false, AuditBreak{Line: 5, Task: "A", Seq: 3, Why: "duplicate of line 4"}},
		{"a duplicated inbox line", func(l []string) []string {
			return slices.Insert(l, 6, l[5])
		}, false, AuditBreak{Line: 7, Task: "A", Key: "subtask-x", Why: "duplicate of line 6 (same task and key)"}},
		{"a line that is not JSON", func(l []string) []string {
			l[4] = "hello"
			return l
		}, false, AuditBreak{Line: 5, Why: "not a JSON record"}},
		{"a torn last line", func(l []string) []string {
			return append(l, `{"v":1,"task":"A","se`)
		}, true, AuditBreak{Line: 10, Why: "torn last line"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines := tc.mutate(slices.Clone(good))
			text := strings.Join(lines, "\n")
			if !tc.torn {
				text += "\n"
			}
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			rep, err := VerifyAuditFile(path)
			if err != nil {
				t.Fatalf("VerifyAuditFile: %v", err)
			}
			t.Log(rep)
			b := rep.FirstBroken
			if b == nil {
				t.Fatalf("report %v: want a break at line %d", rep, tc.want.Line)
			}
			if b.Line != tc.want.Line || b.Task != tc.want.Task || b.Seq != tc.want.Seq || b.Key != tc.want.Key || !strings.Contains(b.Why, tc.want.Why) {
				t.Errorf("first break %+v, want %+v", *b, tc.want)
			}
			if rep.Records != len(lines) {
				t.Errorf("Records = %d, want %d", rep.Records, len(lines))
			}
			if !strings.HasPrefix(rep.String(), fmt.Sprintf("broken at line %d", tc.want.Line)) {
				t.Errorf("String() = %q", rep.String())
			}
		})
	}
	t.Run("String", func(t *testing.T) {
		rep := AuditReport{Records: 20, Tasks: 2, FirstBroken: &AuditBreak{Line: 17, Task: "X", Seq: 5, Why: "prev does not match the hash of line 12"}}
		if got, want := rep.String(), "broken at line 17 (task X seq 5): prev does not match the hash of line 12"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	})
	t.Run("an empty trail", func(t *testing.T) {
		rep, err := VerifyAudit(strings.NewReader(""))
		if err != nil || !rep.OK() || rep.String() != "ok: 0 records, 0 tasks, chains intact" {
			t.Errorf("VerifyAudit(\"\") = %v, %v", rep, err)
		}
	})
	t.Run("a missing file", func(t *testing.T) {
		if _, err := VerifyAuditFile(filepath.Join(t.TempDir(), "nope.jsonl")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want os.ErrNotExist", err)
		}
	})
}

func TestAuditIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	created := auditEnv(t, "A", 1, noeta.TaskCreated{TaskID: "A", Agent: "researcher", Goal: "g", RootTaskID: "A"})
	lease := auditEnv(t, "A", 2, noeta.LeaseGranted{LeaseID: "L", Generation: 1, Worker: "w"})
	inbox := auditInbox(t, "A", "subtask-x", noeta.SubtaskCompleted{SubtaskID: "x", Status: noeta.SubtaskStatusCompleted})
	turn := auditEnv(t, "A", 3, noeta.TurnStarted{Turn: 1})

	a, _ := openAuditFile(t, path, 0)
	auditObserve(t, a, created, created, lease, inbox, inbox, lease)
	if st := a.Stats(); st.Written != 3 || st.Duplicates != 3 || st.Tasks != 1 {
		t.Errorf("stats %+v, want 3 written, 3 duplicates, 1 task", st)
	}
	auditClose(t, a)
	if n := len(auditLines(t, path)); n != 3 {
		t.Fatalf("%d lines, want 3", n)
	}

	// A restart: a new Audit over the same file skips the redeliveries and
	// continues the chain from the file's last record of the task.
	a, logs := openAuditFile(t, path, 0)
	if st := a.Stats(); st.Tasks != 1 || st.Written != 0 {
		t.Errorf("stats after the restart %+v, want 1 task and nothing written", st)
	}
	auditObserve(t, a, created, lease, inbox, turn, turn)
	if st := a.Stats(); st.Written != 1 || st.Duplicates != 4 {
		t.Errorf("stats %+v, want 1 written, 4 duplicates", st)
	}
	auditClose(t, a)
	if !strings.Contains(logs.String(), "audit state rebuilt") {
		t.Errorf("no rebuild logged:\n%s", logs)
	}
	lines := auditLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4", len(lines))
	}
	if prev, want := auditDecode(t, lines[3])["prev"], auditDecode(t, lines[2])["hash"]; prev != want {
		t.Errorf("the record after the restart has prev %v, want %v (the inbox record's hash)", prev, want)
	}
	auditVerifyOK(t, path)
}

func TestAuditManyInboxKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	inbox := func(i int) eventlog.Envelope {
		return auditInbox(t, "P", fmt.Sprintf("subtask-%d", i), noeta.SubtaskCompleted{SubtaskID: fmt.Sprint(i), Status: noeta.SubtaskStatusCompleted})
	}
	a, _ := openAuditFile(t, path, time.Hour)
	for i := range 40 {
		auditObserve(t, a, inbox(i), inbox(i), inbox(i/2))
	}
	if st := a.Stats(); st.Written != 40 || st.Duplicates != 80 {
		t.Errorf("stats %+v, want 40 written, 80 duplicates", st)
	}
	auditClose(t, a)
	a, _ = openAuditFile(t, path, time.Hour)
	for i := range 41 {
		auditObserve(t, a, inbox(i))
	}
	if st := a.Stats(); st.Written != 1 || st.Duplicates != 40 {
		t.Errorf("stats after a restart %+v, want 1 written, 40 duplicates", st)
	}
	auditClose(t, a)
	if rep := auditVerifyOK(t, path); rep.Records != 41 {
		t.Errorf("report %v", rep)
	}
}

func TestAuditRefusesAGap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	defer auditClose(t, a)
	e1 := auditEnv(t, "A", 1, noeta.TaskCreated{TaskID: "A", Agent: "x", RootTaskID: "A"})
	e2 := auditEnv(t, "A", 2, noeta.TurnStarted{Turn: 1})
	e3 := auditEnv(t, "A", 3, noeta.TurnStarted{Turn: 2})
	auditObserve(t, a, e1)
	err := a.Observe(t.Context(), e3)
	if !errors.Is(err, ErrAuditGap) {
		t.Fatalf("Observe(seq 3 after seq 1) = %v, want ErrAuditGap", err)
	}
	t.Log(err)
	if n := len(auditLines(t, path)); n != 1 {
		t.Fatalf("%d lines after the refused record, want 1", n)
	}
	// A first record that is not seq 1 is a gap too.
	if err := a.Observe(t.Context(), auditEnv(t, "B", 2, noeta.TurnStarted{Turn: 1})); !errors.Is(err, ErrAuditGap) {
		t.Errorf("Observe(B seq 2 first) = %v, want ErrAuditGap", err)
	}
	// The redelivery, once the predecessor is in, goes through.
	auditObserve(t, a, e2, e3)
	if st := a.Stats(); st.Gaps != 2 || st.Written != 3 {
		t.Errorf("stats %+v, want 2 gaps, 3 written", st)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	auditVerifyOK(t, path)
}

func TestAuditTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	e := func(seq uint64) eventlog.Envelope { return auditEnv(t, "A", seq, noeta.TurnStarted{Turn: int(seq)}) }
	auditObserve(t, a, e(1), e(2), e(3))
	auditClose(t, a)
	whole, _ := os.ReadFile(path)
	lines := auditLines(t, path)

	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	// A crash in the middle of writing seq 4.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"v":1,"task":"A","seq":4,"type":"Tur`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if rep, _ := VerifyAuditFile(path); rep.OK() {
		t.Fatalf("verify passed a torn file: %v", rep)
	}

	a, logs := openAuditFile(t, path, 0)
	if got, _ := os.ReadFile(path); !bytes.Equal(got, whole) {
		t.Fatalf("after reopening the file is\n%s\nwant\n%s", got, whole)
	}
	if !strings.Contains(logs.String(), "torn last line") {
		t.Errorf("no warning about the torn line:\n%s", logs)
	}
	auditObserve(t, a, e(3), e(4), e(5))
	auditClose(t, a)
	if n := len(auditLines(t, path)); n != 5 {
		t.Errorf("%d lines, want 5", n)
	}
	auditVerifyOK(t, path)
}

func TestAuditRebuildRefusesACorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte("{\"v\":1}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sink, err := NewAuditFileSink(AuditFileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	if _, err := NewAudit(AuditConfig{Sink: sink}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("NewAudit over a corrupt file = %v, want an error naming line 1", err)
	}
}

// TestAuditFileSharedByTwoWriters: two Audits (as in two observer workers)
// share one file; a task's records reach either of them, some reach both
// (a redelivery after a handover). Each record is in the file once and every
// chain is intact.
func TestAuditFileSharedByTwoWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	b, _ := openAuditFile(t, path, 0)
	for i := range 60 {
		task := fmt.Sprintf("T%d", i%3)
		env := auditEnv(t, task, uint64(i/3+1), noeta.TurnStarted{Turn: i / 3})
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		auditObserve(t, first, env)
		if i%5 == 0 {
			auditObserve(t, second, env) // a redelivery to the other worker
		}
	}
	auditClose(t, a)
	auditClose(t, b)
	rep, err := VerifyAuditFile(path)
	if err != nil || !rep.OK() || rep.Records != 60 || rep.Tasks != 3 {
		t.Errorf("verify: %v %v", rep, err)
	}
}

func TestAuditFileSyncEvery(t *testing.T) {
	for _, every := range []time.Duration{0, 10 * time.Millisecond, time.Hour} {
		t.Run(every.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
			a, _ := openAuditFile(t, path, every)
			for i := range 50 {
				task := fmt.Sprintf("T%d", i%5)
				auditObserve(t, a, auditEnv(t, task, uint64(i/5+1), noeta.TurnStarted{Turn: i / 5}))
			}
			auditClose(t, a)
			if err := a.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := a.Observe(t.Context(), auditEnv(t, "T0", 11, noeta.TurnStarted{})); !errors.Is(err, ErrAuditClosed) {
				t.Errorf("Observe after Close = %v, want ErrAuditClosed", err)
			}
			if n := len(auditLines(t, path)); n != 50 {
				t.Errorf("%d lines after Close, want 50", n)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", st.Mode().Perm())
			}
			rep := auditVerifyOK(t, path)
			if rep.Records != 50 || rep.Tasks != 5 {
				t.Errorf("report %v", rep)
			}
		})
	}
}

func TestAuditWriterSink(t *testing.T) {
	var buf bytes.Buffer
	a, err := NewAudit(AuditConfig{Sink: NewAuditWriterSink(&buf), Now: auditNow})
	if err != nil {
		t.Fatal(err)
	}
	auditObserve(t, a,
		auditEnv(t, "A", 1, noeta.TaskCreated{TaskID: "A", Agent: "x", Goal: auditMarker, RootTaskID: "A"}),
		auditEnv(t, "A", 2, noeta.ToolCallDenied{CallID: "c", Tool: "rm", Guard: "permission", Reason: "denied"}),
		auditInbox(t, "A", "k", noeta.SubtaskCompleted{SubtaskID: "x", Status: noeta.SubtaskStatusCancelled, Result: json.RawMessage(`"` + auditMarker + `"`)}),
	)
	auditClose(t, a)
	if strings.Count(buf.String(), "\n") != 3 || strings.Contains(buf.String(), auditMarker) {
		t.Fatalf("stdout sink wrote\n%s", buf.String())
	}
	rep, err := VerifyAudit(bytes.NewReader(buf.Bytes()))
	if err != nil || !rep.OK() || rep.Records != 3 {
		t.Errorf("VerifyAudit = %v, %v", rep, err)
	}
}

// auditPublished records what an AuditPublishSink published: a sink of its
// own, in memory, not a stand-in for a server.
type auditPublished struct {
	mu       sync.Mutex
	subjects []string
	data     [][]byte
	flushes  int
}

func (p *auditPublished) Publish(subject string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subjects = append(p.subjects, subject)
	p.data = append(p.data, slices.Clone(data))
	return nil
}

func (p *auditPublished) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushes++
	return nil
}

func TestAuditPublishSink(t *testing.T) {
	for _, perTask := range []bool{false, true} {
		t.Run(fmt.Sprintf("perTask=%v", perTask), func(t *testing.T) {
			pub := &auditPublished{}
			sink, err := NewAuditPublishSink(pub, "noeta.audit", perTask)
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewAudit(AuditConfig{Sink: sink, Now: auditNow})
			if err != nil {
				t.Fatal(err)
			}
			auditObserve(t, a,
				auditEnv(t, "A", 1, noeta.TaskCreated{TaskID: "A", Agent: "x", RootTaskID: "A"}),
				auditEnv(t, "B", 1, noeta.TaskCreated{TaskID: "B", Agent: "x", RootTaskID: "B"}),
				auditEnv(t, "A", 2, noeta.TaskCompleted{Answer: json.RawMessage(`"` + auditMarker + `"`)}),
				auditEnv(t, "A", 2, noeta.TaskCompleted{}),
			)
			bad := auditEnv(t, "A", 3, noeta.TurnStarted{})
			bad.Task = "not a token"
			bad.Seq = 1
			err = a.Observe(t.Context(), bad)
			if perTask && err == nil {
				t.Error("a task id that is not a subject token was published")
			}
			auditClose(t, a)

			want := []string{"noeta.audit", "noeta.audit", "noeta.audit"}
			if perTask {
				want = []string{"noeta.audit.A", "noeta.audit.B", "noeta.audit.A"}
			} else {
				want = append(want, "noeta.audit")
			}
			if !slices.Equal(pub.subjects, want) {
				t.Errorf("subjects %v, want %v", pub.subjects, want)
			}
			if pub.flushes != 1 {
				t.Errorf("%d flushes on Close, want 1", pub.flushes)
			}
			var all bytes.Buffer
			for _, d := range pub.data {
				if bytes.Contains(d, []byte(auditMarker)) {
					t.Errorf("a body was published: %s", d)
				}
				if rec := auditDecode(t, string(d)); rec["task"] != "not a token" {
					all.Write(d)
					all.WriteByte('\n')
				}
			}
			rep, err := VerifyAudit(&all)
			if err != nil || !rep.OK() || rep.Records != 3 {
				t.Errorf("VerifyAudit(published) = %v, %v", rep, err)
			}
		})
	}
	for _, subject := range []string{"", "noeta.*", "noeta.>", "noeta..audit", "no eta"} {
		if _, err := NewAuditPublishSink(&auditPublished{}, subject, false); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewAuditPublishSink(%q) = %v, want ErrInvalidConfig", subject, err)
		}
	}
}

func TestAuditMalformedPayload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, logs := openAuditFile(t, path, 0)
	wrongType := auditEnv(t, "A", 1, noeta.TurnStarted{})
	wrongType.Type = noeta.TypeToolCallStarted
	wrongType.Payload = json.RawMessage(`{"call_id":7,"args":"` + auditMarker + `","turn":"` + auditMarker + `"}`)
	notObject := auditEnv(t, "A", 2, noeta.TurnStarted{})
	notObject.Type = noeta.TypeTaskCompleted
	notObject.Payload = json.RawMessage(`"` + auditMarker + `"`)
	notJSON := auditEnv(t, "A", 3, noeta.TurnStarted{})
	notJSON.Type = noeta.TypeTaskCreated
	notJSON.Payload = json.RawMessage(`{"goal":`)
	auditObserve(t, a, wrongType, notObject, notJSON)
	if st := a.Stats(); st.Malformed != 3 || st.Written != 3 {
		t.Errorf("stats %+v, want 3 malformed of 3 written", st)
	}
	auditClose(t, a)
	for i, line := range auditLines(t, path) {
		rec := auditDecode(t, line)
		if rec["malformed"] != true || !strings.Contains(fmt.Sprint(rec["decode_error"]), "decode") {
			t.Errorf("line %d: %s: want malformed and the decode error", i+1, line)
		}
		if _, ok := rec["call_id"]; ok {
			t.Errorf("line %d: %s: a malformed record has the fields of its type", i+1, line)
		}
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(auditMarker)) {
		t.Errorf("a body reached the audit file:\n%s", b)
	}
	if !strings.Contains(logs.String(), "does not decode") {
		t.Errorf("no warning logged:\n%s", logs)
	}
	auditVerifyOK(t, path)
}

func TestAuditRefusesAnEnvelopeWithoutPosition(t *testing.T) {
	var buf bytes.Buffer
	a, err := NewAudit(AuditConfig{Sink: NewAuditWriterSink(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	noTask := auditEnv(t, "A", 1, noeta.TurnStarted{})
	noTask.Task = ""
	neither := auditEnv(t, "A", 1, noeta.TurnStarted{})
	neither.Seq = 0
	both := auditEnv(t, "A", 1, noeta.TurnStarted{})
	both.Key = "k"
	for _, env := range []eventlog.Envelope{noTask, neither, both} {
		if err := a.Observe(t.Context(), env); !errors.Is(err, eventlog.ErrInvalidArgument) {
			t.Errorf("Observe(task %q seq %d key %q) = %v, want ErrInvalidArgument", env.Task, env.Seq, env.Key, err)
		}
	}
	if st := a.Stats(); st.Invalid != 3 || buf.Len() != 0 {
		t.Errorf("stats %+v, wrote %q: want 3 invalid and nothing written", st, buf.String())
	}
	if _, err := NewAudit(AuditConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewAudit without a sink = %v, want ErrInvalidConfig", err)
	}
}

// TestAuditManyTasksConcurrently feeds 500 tasks from 10 goroutines, each
// task's records in order, as a feed's partitions would.
func TestAuditManyTasksConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 5*time.Millisecond)
	const workers, perWorker = 10, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				task := fmt.Sprintf("T%d-%d", w, i)
				envs := []eventlog.Envelope{
					auditEnv(t, task, 1, noeta.TaskCreated{TaskID: task, Agent: "x", Goal: auditMarker, RootTaskID: task}),
					auditEnv(t, task, 2, noeta.LeaseGranted{LeaseID: "L", Generation: 1, Worker: "w"}),
					auditEnv(t, task, 3, noeta.ToolCallStarted{CallID: "c", Tool: "echo", Args: json.RawMessage(`"` + auditMarker + `"`)}),
					auditInbox(t, task, "k", noeta.SubtaskCompleted{SubtaskID: "s", Status: noeta.SubtaskStatusCompleted}),
					auditEnv(t, task, 4, noeta.ToolCallFinished{CallID: "c", Tool: "echo", OK: true, Output: json.RawMessage(`"` + auditMarker + `"`)}),
					auditEnv(t, task, 4, noeta.ToolCallFinished{CallID: "c", Tool: "echo", OK: true}), // a redelivery
					auditEnv(t, task, 5, noeta.TaskCompleted{Answer: json.RawMessage(`"` + auditMarker + `"`)}),
				}
				for _, env := range envs {
					if err := a.Observe(context.Background(), env); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := a.Stats(); st.Written != workers*perWorker*6 || st.Duplicates != workers*perWorker || st.Tasks != workers*perWorker {
		t.Errorf("stats %+v", st)
	}
	auditClose(t, a)
	rep := auditVerifyOK(t, path)
	if rep.Records != workers*perWorker*6 || rep.Tasks != workers*perWorker {
		t.Errorf("report %v", rep)
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(auditMarker)) {
		t.Error("a body reached the audit file")
	}
}

// TestAuditOverMemlog audits what the real in-memory backend commits, fed
// by its Subscriber, and checks the trail against the logs and inboxes.
func TestAuditOverMemlog(t *testing.T) {
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	sub := s.Subscribe(a.Observe)

	ctx := t.Context()
	secret := json.RawMessage(`{"x":"` + auditMarker + `"}`)
	run := func(task string) error {
		env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "x", Goal: auditMarker, RootTaskID: task})
		if err != nil {
			return err
		}
		if _, err := s.Create(ctx, env); err != nil {
			return err
		}
		if err := s.Enqueue(ctx, task, eventlog.EnqueueOptions{}); err != nil {
			return err
		}
		l, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w-" + task, Task: task})
		if err != nil {
			return err
		}
		for _, p := range []noeta.Payload{
			noeta.TurnStarted{Turn: 1},
			noeta.ToolCallStarted{CallID: "c", Tool: "echo", Args: secret, Turn: 1},
			noeta.ToolCallFinished{CallID: "c", Tool: "echo", OK: true, Output: secret, DurationMS: 1},
		} {
			env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", p)
			if err != nil {
				return err
			}
			if _, err := s.Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
				return err
			}
		}
		in, err := eventlog.NewEnvelope(task, eventlog.OriginObserver, "test", noeta.SubtaskCompleted{SubtaskID: "s", Status: noeta.SubtaskStatusCompleted, Result: secret})
		if err != nil {
			return err
		}
		if _, err := s.SystemEmit(ctx, task, "subtask-s", in); err != nil {
			return err
		}
		env, err = eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCompleted{Answer: secret})
		if err != nil {
			return err
		}
		_, err = s.Emit(ctx, l, env, eventlog.EmitOptions{})
		return err
	}
	tasks := make([]string, 20)
	var wg sync.WaitGroup
	for i := range tasks {
		tasks[i] = noeta.NewTaskID()
		wg.Go(func() {
			if err := run(tasks[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	sub.Cancel()
	if st := sub.Stats(); st.Failed != 0 || st.Panicked != 0 {
		t.Errorf("subscription stats %+v", st)
	}
	auditClose(t, a)

	perTask := map[string][]map[string]any{}
	for _, line := range auditLines(t, path) {
		rec := auditDecode(t, line)
		perTask[rec["task"].(string)] = append(perTask[rec["task"].(string)], rec)
	}
	for _, task := range tasks {
		logRecs, err := s.Read(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		inbox, err := s.Inbox(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		got := perTask[task]
		if len(got) != len(logRecs)+len(inbox) {
			t.Fatalf("task %s: %d audit records, want %d log and %d inbox records", task, len(got), len(logRecs), len(inbox))
		}
		seqs := 0
		for _, rec := range got {
			if _, ok := rec["seq"]; ok {
				env := logRecs[seqs]
				seqs++
				if rec["envelope_id"] != env.ID || rec["type"] != env.Type || rec["seq"] != json.Number(fmt.Sprint(env.Seq)) {
					t.Errorf("task %s: audit record %v for log record %s seq %d %s", task, rec, env.ID, env.Seq, env.Type)
				}
			} else if rec["key"] != "subtask-s" || rec["envelope_id"] != inbox[0].ID {
				t.Errorf("task %s: audit record %v for inbox record %s", task, rec, inbox[0].ID)
			}
		}
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(auditMarker)) {
		t.Error("a body reached the audit file")
	}
	auditVerifyOK(t, path)
}

// BenchmarkAuditFile measures records per second into a file sink: each
// record is one write(2); fsync every 100ms, or after every record.
func BenchmarkAuditFile(b *testing.B) {
	for _, every := range []time.Duration{100 * time.Millisecond, 0} {
		b.Run("SyncEvery="+every.String(), func(b *testing.B) {
			sink, err := NewAuditFileSink(AuditFileConfig{Path: filepath.Join(b.TempDir(), "audit.jsonl"), SyncEvery: every})
			if err != nil {
				b.Fatal(err)
			}
			a, err := NewAudit(AuditConfig{Sink: sink})
			if err != nil {
				b.Fatal(err)
			}
			const tasks = 1000
			names := make([]string, tasks)
			for i := range names {
				names[i] = noeta.NewTaskID()
			}
			env := auditEnv(b, names[0], 1, noeta.ToolCallFinished{CallID: noeta.NewID(), Tool: "shell", OK: true,
				Output: json.RawMessage(`{"stdout":"` + strings.Repeat("x", 512) + `"}`), DurationMS: 12, CostUSD: 0.002})
			env.ID = noeta.NewID()
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			for i := 0; b.Loop(); i++ {
				env.Task = names[i%tasks]
				env.Seq = uint64(i/tasks) + 1
				if err := a.Observe(ctx, env); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
			if err := a.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestAuditSharedFileNamesABadLine: a line another writer appended that is
// not an audit record stops this writer with the byte offset of the line.
func TestAuditSharedFileNamesABadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, _ := openAuditFile(t, path, 0)
	auditObserve(t, a, auditEnv(t, "T", 1, noeta.TurnStarted{Turn: 1}))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("not a record\n")
	_ = f.Close()
	err = a.Observe(t.Context(), auditEnv(t, "T", 2, noeta.TurnStarted{Turn: 2}))
	if want := fmt.Sprintf("byte %d", fi.Size()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Observe after a bad line = %v, want an error naming %s", err, want)
	}
	auditClose(t, a)
}

// TestAuditFillsGapsFromTheLog: given the log, a record that arrives ahead
// of its predecessors (they were dropped on the way) has them read from the
// log and audited first; the chain stays whole.
func TestAuditFillsGapsFromTheLog(t *testing.T) {
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var envs []eventlog.Envelope
	sub := s.Subscribe(func(_ context.Context, env eventlog.Envelope) error {
		envs = append(envs, env)
		return nil
	})
	defer sub.Cancel()
	ctx := context.Background()
	task := noeta.NewTaskID()
	created, _ := eventlog.NewEnvelope(task, eventlog.OriginSystem, "t", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if _, err := s.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	_ = s.Enqueue(ctx, task, eventlog.EnqueueOptions{})
	l, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		env, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "w", noeta.TurnStarted{Turn: i + 1})
		if _, err := s.Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := NewAuditFileSink(AuditFileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAudit(AuditConfig{Sink: sink, Log: s})
	if err != nil {
		t.Fatal(err)
	}
	// Records 1 and 6 arrive; 2 to 5 were lost on the way.
	for _, env := range []eventlog.Envelope{envs[0], envs[5]} {
		if err := a.Observe(ctx, env); err != nil {
			t.Fatalf("seq %d: %v", env.Seq, err)
		}
	}
	if st := a.Stats(); st.Written != 6 || st.GapsFilled != 4 || st.Gaps != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyAuditFile(path)
	if err != nil || !rep.OK() || rep.Records != 6 {
		t.Errorf("verify: %v %v", rep, err)
	}
}
