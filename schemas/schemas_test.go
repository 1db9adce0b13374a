package schemas_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/schemas"
)

// Fixtures: realistic values, as the engine would write them.
var (
	task    = "01JQ8Z6V3N4XK2M7R5T9W0YBCD"
	child   = "01JQ8Z7A1B2C3D4E5F6G7H8J9K"
	child2  = "01JQ8Z7A1B2C3D4E5F6G7H8J9M"
	callID  = "01JQ8Z7Q0000000000000000AA"
	leaseID = "01JQ8Z7R0000000000000000BB"
	bigRef  = noeta.RefFor([]byte(strings.Repeat("a long body ", 400)), "text/plain; charset=utf-8")
	jsonRef = noeta.RefFor([]byte(`{"rows":[1,2,3]}`), "application/json")
	fireAt  = time.Date(2025, 3, 14, 9, 26, 53, 589793000, time.UTC)
)

func groupWake() noeta.Wake {
	ids := []string{child, child2}
	return noeta.GroupCompletedWake(noeta.DeriveGroupID(ids), ids)
}

// validPayloads holds, per type, payloads that must validate: the minimal one
// (optional fields absent) and fuller ones.
func validPayloads() map[string][]noeta.Payload {
	human := noeta.HumanResponseWake("approval-" + callID)
	human.Decision, human.Text, human.Approver = "approve", "looks fine", "alice@example.com"
	ext := noeta.ExternalWake("github.push")
	ext.Data = json.RawMessage(`{"ref":"refs/heads/main","commits":3}`)
	return map[string][]noeta.Payload{
		noeta.TypeTaskCreated: {
			noeta.TaskCreated{TaskID: task, Agent: "researcher", Goal: "Summarise the Q3 report", RootTaskID: task},
			noeta.TaskCreated{TaskID: child, Agent: "researcher", Goal: "", GoalRef: &bigRef, ParentTaskID: task, RootTaskID: task, SubtaskDepth: 1, GroupID: "g-0123456789abcdef"},
		},
		noeta.TypeLeaseGranted: {
			noeta.LeaseGranted{LeaseID: leaseID, Generation: 1, Worker: "worker-7f3a"},
			noeta.LeaseGranted{LeaseID: leaseID, Generation: 1 << 40, Worker: "w"},
		},
		noeta.TypeTurnStarted: {
			noeta.TurnStarted{Turn: 0}, // the contract suite counts from 0
			noeta.TurnStarted{Turn: 12},
		},
		noeta.TypePolicyDecided: {
			noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls},
			noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionFinish, CostUSD: 0.00342, InputTokens: 1834, OutputTokens: 212},
			noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionSpawn},
			noeta.PolicyDecided{Turn: 5, Decision: noeta.DecisionYieldForHuman},
			noeta.PolicyDecided{Turn: 6, Decision: noeta.DecisionWaitTimer},
			noeta.PolicyDecided{Turn: 7, Decision: noeta.DecisionWaitExternal},
			noeta.PolicyDecided{Turn: 8, Decision: noeta.DecisionStatePatch},
			noeta.PolicyDecided{Turn: 9, Decision: noeta.DecisionFail},
			// Version 2: the decision itself.
			noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionToolCalls, Version: 2, ToolCalls: []noeta.RecordedCall{
				{CallID: "call-1-0", Tool: "read_file", Args: json.RawMessage(`{"path":"a"}`)},
				{CallID: "call-1-1", Tool: "write_file", ArgsRef: &bigRef},
				{CallID: "call-1-2", Tool: "nope", Args: json.RawMessage(`{}`), Invalid: "unknown tool"},
				{CallID: "call-1-3", Invalid: "args are not JSON"},
			}, Model: "gpt-4.1-mini", Provider: "openai", LatencyMS: 812, ResponseRef: &jsonRef, Notes: []string{"retry 1 after 429"}, CostUSD: 0.001, InputTokens: 10, OutputTokens: 3},
			noeta.PolicyDecided{Turn: 2, Decision: noeta.DecisionSpawn, Version: 2, Spawn: []noeta.RecordedSpawn{{Agent: "a", Goal: "g"}, {Agent: "b", GoalRef: &bigRef, ScriptRef: &jsonRef}}},
			noeta.PolicyDecided{Turn: 3, Decision: noeta.DecisionYieldForHuman, Version: 2, Question: "Which one?"},
			noeta.PolicyDecided{Turn: 4, Decision: noeta.DecisionWaitTimer, Version: 2, WaitSeconds: 1.5},
			noeta.PolicyDecided{Turn: 5, Decision: noeta.DecisionWaitExternal, Version: 2, EventKind: "github.push"},
			noeta.PolicyDecided{Turn: 6, Decision: noeta.DecisionStatePatch, Version: 2, Patch: json.RawMessage(`{"k":1}`)},
			noeta.PolicyDecided{Turn: 6, Decision: noeta.DecisionStatePatch, Version: 2, PatchRef: &jsonRef},
			noeta.PolicyDecided{Turn: 7, Decision: noeta.DecisionFinish, Version: 2, Answer: json.RawMessage(`"done"`)},
			noeta.PolicyDecided{Turn: 7, Decision: noeta.DecisionFinish, Version: 2, AnswerRef: &bigRef},
			noeta.PolicyDecided{Turn: 8, Decision: noeta.DecisionFail, Version: 2, Error: "cannot"},
			noeta.PolicyDecided{Turn: 9, Decision: noeta.DecisionToolCalls, Version: 2, DecisionRef: &jsonRef},
			noeta.PolicyDecided{Turn: 10, Decision: noeta.DecisionToolCalls, Version: 2, Text: "Let me check the file first.\n", ToolCalls: []noeta.RecordedCall{{CallID: "call-10-0", Tool: "read_file", Args: json.RawMessage(`{"path":"README.md"}`)}}},
			noeta.PolicyDecided{Turn: 11, Decision: noeta.DecisionYieldForHuman, Version: 2, TextRef: &jsonRef, Question: "Which one?"},
			noeta.PolicyDecided{Turn: 12, Decision: noeta.DecisionToolCalls, Version: 2, TextRef: &jsonRef, DecisionRef: &jsonRef},
		},
		noeta.TypeToolCallStarted: {
			noeta.ToolCallStarted{CallID: callID, Tool: "web_search", Args: json.RawMessage(`{"query":"noeta event sourcing","limit":5}`), Turn: 1},
			noeta.ToolCallStarted{CallID: callID, Tool: "noop", Args: json.RawMessage(`{}`), Turn: 0},
			noeta.ToolCallStarted{CallID: callID, Tool: "write_file", ArgsRef: &bigRef, Turn: 2},
		},
		noeta.TypeToolCallFinished: {
			noeta.ToolCallFinished{CallID: callID, Tool: "web_search", OK: true, Output: json.RawMessage(`{"hits":["a","b"]}`), DurationMS: 412},
			noeta.ToolCallFinished{CallID: callID, Tool: "web_search", OK: true, Output: json.RawMessage(`null`), DurationMS: 0, CostUSD: 0.001},
			noeta.ToolCallFinished{CallID: callID, Tool: "read_file", OK: true, OutputRef: &jsonRef, DurationMS: 9},
			noeta.ToolCallFinished{CallID: callID, Tool: "mcp__docs__fetch", OK: true, OutputRef: &jsonRef, Preview: "The page says:\n\"hello\"\n[image image/png, 6400 bytes of data]", DurationMS: 9},
			noeta.ToolCallFinished{CallID: callID, Tool: "shell", OK: true, OutputRef: &jsonRef, Preview: strings.Repeat("é", 2046), DurationMS: 9},
			noeta.ToolCallFinished{CallID: callID, Tool: "web_search", OK: false, Error: "timeout after 30s", DurationMS: 30000},
			noeta.ToolCallFinished{CallID: callID, Tool: "shell", OK: false, Output: json.RawMessage(`"exit status 2"`), Error: "exit status 2", DurationMS: 88},
		},
		noeta.TypeToolCallDenied: {
			noeta.ToolCallDenied{CallID: callID, Tool: "shell", Guard: "tool_allowlist", Reason: "shell is not allowed for agent researcher"},
		},
		noeta.TypeSubtaskSpawned: {
			noeta.SubtaskSpawned{SubtaskID: child, Agent: "summariser", Goal: "Summarise section 2"},
			noeta.SubtaskSpawned{SubtaskID: child, Agent: "summariser", GoalRef: &bigRef, GroupID: "g-0123456789abcdef", CallID: callID},
		},
		noeta.TypeSubtaskDenied: {
			noeta.SubtaskDenied{Agent: "summariser", Guard: "max_subtask_depth", Reason: "depth 4 exceeds 3"},
			noeta.SubtaskDenied{Agent: "summariser", Guard: "max_fanout", Reason: "too many", GroupID: "g-0123456789abcdef"},
		},
		noeta.TypeFinishDenied: {
			noeta.FinishDenied{Guard: "answer_format", Reason: "answer is not JSON"},
		},
		noeta.TypeGuardShadowed: {
			noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: callID, Tool: "shell", Guard: "rules", Rule: "rules[2]",
				Verdict: noeta.VerdictDeny, Reason: "new shell ban", Decided: noeta.VerdictAllow},
			noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: callID, Tool: "shell", Guard: "trial", Rule: "guards[0].rules[1]",
				Verdict: noeta.VerdictAllow, Reason: `hook rule on "*" allows`, Decided: noeta.VerdictDeny, DecidedBy: "permission"},
			noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: callID, Tool: "shell", Guard: "trial",
				Verdict: noeta.VerdictDeny, Reason: "panicked", Failed: true, Decided: noeta.VerdictRequireApproval, DecidedBy: "rules"},
			noeta.GuardShadowed{Action: noeta.ApprovalSpawnSubtask, Agent: "trader", Guard: "trial", Rule: "rules[0]",
				Verdict: noeta.VerdictRequireApproval, Reason: "ask", Decided: noeta.VerdictAllow},
			noeta.GuardShadowed{Action: noeta.ApprovalFinish, Guard: "trial", Rule: "rules[0]", Verdict: noeta.VerdictDeny, Reason: "", Decided: noeta.VerdictAllow},
		},
		noeta.TypeApprovalRequested: {
			noeta.ApprovalRequested{Handle: "approval-1", Action: noeta.ApprovalFinish, Guard: "human_gate", Reason: "final answers need review"},
			noeta.ApprovalRequested{Handle: "approval-2", Action: noeta.ApprovalToolCall, CallID: callID, Tool: "send_email", Args: json.RawMessage(`{"to":"cfo@example.com"}`), Guard: "human_gate", Reason: "outbound email"},
			noeta.ApprovalRequested{Handle: "approval-3", Action: noeta.ApprovalToolCall, CallID: callID, Tool: "send_email", ArgsRef: &jsonRef, Guard: "human_gate", Reason: "outbound email"},
			noeta.ApprovalRequested{Handle: "approval-4", Action: noeta.ApprovalSpawnSubtask, Agent: "trader", Guard: "human_gate", Reason: "spawning a trader"},
		},
		noeta.TypeApprovalResolved: {
			noeta.ApprovalResolved{Handle: "approval-1", Decision: noeta.ApprovalApprove, Approver: "alice@example.com"},
			noeta.ApprovalResolved{Handle: "approval-2", Decision: noeta.ApprovalDeny, Approver: "bob", Reason: "not during a quiet period"},
			noeta.ApprovalResolved{Handle: "approval-3", Decision: noeta.ApprovalApprove, Approver: "carol", Auth: noeta.AuthNATS, Approvers: []string{"bob", "carol"}},
			noeta.ApprovalResolved{Handle: "approval-4", Decision: noeta.ApprovalDeny, Approver: noeta.ApproverTimeout, Auth: noeta.AuthTimer, Reason: "no answer within 30m0s"},
		},
		noeta.TypeApprovalCounted: {
			noeta.ApprovalCounted{Handle: "approval-3", Approver: "bob", Auth: noeta.AuthToken, Approvals: 1, Quorum: 2},
		},
		noeta.TypeApprovalRefused: {
			noeta.ApprovalRefused{Handle: "approval-3", Decision: noeta.ApprovalApprove, Approver: "mallory", Auth: noeta.AuthNone, Reason: "an approval on a plain wake proves nothing about who gave it"},
		},
		noeta.TypeSubtaskCompleted: {
			noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted},
			noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`"42"`), GroupID: "g-0123456789abcdef"},
			noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusFailed, Error: "budget exhausted"},
			noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCancelled},
		},
		noeta.TypeSubtaskResultRecorded: {
			noeta.SubtaskResultRecorded{SubtaskID: child, Status: noeta.SubtaskStatusCompleted, Result: json.RawMessage(`{"summary":"ok","pages":[1,2]}`)},
			noeta.SubtaskResultRecorded{SubtaskID: child, Status: noeta.SubtaskStatusFailed, Error: "tool failed", GroupID: "g-0123456789abcdef"},
		},
		noeta.TypeTaskStatePatched: {
			noeta.TaskStatePatched{Patch: json.RawMessage(`{"step":"draft","notes":["a","b"],"done":false}`)},
			noeta.TaskStatePatched{Patch: json.RawMessage(`{}`)},
		},
		noeta.TypeTaskSuspended: {
			noeta.TaskSuspended{Reason: "waiting_subtask", WakeOn: noeta.SubtaskCompletedWake(child)},
			noeta.TaskSuspended{Reason: "waiting_group", WakeOn: groupWake()},
			noeta.TaskSuspended{Reason: "waiting_group", WakeOn: noeta.GroupCompletedWake("g-0123456789abcdef", nil)},
			noeta.TaskSuspended{Reason: "waiting_human", WakeOn: noeta.HumanResponseWake("approval-1")},
			noeta.TaskSuspended{Reason: "waiting_timer", WakeOn: noeta.TimerWake(fireAt.In(time.FixedZone("CET", 3600)))},
			noeta.TaskSuspended{Reason: "waiting_timer", WakeOn: noeta.TimerWake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))},
			noeta.TaskSuspended{Reason: "waiting_external", WakeOn: noeta.ExternalWake("github.push")},
			noeta.TaskSuspended{Reason: "", WakeOn: noeta.SubtaskCompletedWake(child)},
		},
		noeta.TypeTaskWoken: {
			noeta.TaskWoken{WakeEvent: noeta.SubtaskCompletedWake(child)},
			noeta.TaskWoken{WakeEvent: groupWake()},
			noeta.TaskWoken{WakeEvent: human},
			noeta.TaskWoken{WakeEvent: noeta.TimerWake(fireAt)},
			noeta.TaskWoken{WakeEvent: ext},
		},
		noeta.TypeTaskSnapshot: {
			noeta.TaskSnapshot{StateRef: jsonRef, UptoSeq: 2},
			noeta.TaskSnapshot{StateRef: noeta.RefFor(nil, "application/json"), UptoSeq: 0},
		},
		noeta.TypeStepAttemptAbandoned: {
			noeta.StepAttemptAbandoned{BaselineSeq: 3, Action: noeta.AbandonRedrive, Reason: "worker crashed mid-step"},
			noeta.StepAttemptAbandoned{BaselineSeq: 0, Action: noeta.AbandonPark, Reason: "poison step"},
		},
		noeta.TypeTaskCompleted: {
			noeta.TaskCompleted{Answer: json.RawMessage(`"42"`)},
			noeta.TaskCompleted{Answer: json.RawMessage(`{"summary":"Revenue grew 12%","confidence":0.8}`)},
			noeta.TaskCompleted{Answer: json.RawMessage(`null`)},
			noeta.TaskCompleted{AnswerRef: &bigRef},
		},
		noeta.TypeTaskFailed: {
			noeta.TaskFailed{Error: "budget exhausted: max_iterations 20"},
			noeta.TaskFailed{Error: "finish denied", Guard: "answer_format"},
		},
		noeta.TypeTaskCancelled: {
			noeta.TaskCancelled{Reason: "cancelled by operator"},
			noeta.TaskCancelled{Reason: ""},
		},
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%T): %v", v, err)
	}
	return b
}

func TestSchemaFilesMatchCatalogue(t *testing.T) {
	for _, typ := range noeta.EventTypes() {
		if _, err := os.Stat(typ + ".json"); err != nil {
			t.Errorf("%s: no schema file: %v", typ, err)
		}
		if err := schemas.Validate(typ, []byte(`{}`)); errors.Is(err, schemas.ErrUnknownType) {
			t.Errorf("%s: Validate: %v, want the type known", typ, err)
		}
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || name == "defs" {
			continue
		}
		n++
		if !noeta.IsKnownEventType(name) {
			t.Errorf("%s: schema file for a type outside noeta.EventTypes()", e.Name())
		}
	}
	if want := len(noeta.EventTypes()); n != want {
		t.Errorf("%d event schema files, want %d", n, want)
	}
}

// TestSchemaFilesAreWellFormed checks what the compiler does not: the header of
// every file, and that every object with declared properties is closed.
func TestSchemaFilesAreWellFormed(t *testing.T) {
	for _, name := range append(noeta.EventTypes(), "defs") {
		doc := readSchema(t, name)
		wantID := schemas.ID(name)
		if name == "defs" {
			wantID = "urn:noeta:schema:defs:1"
		} else if got, _ := doc["title"].(string); got != name {
			t.Errorf("%s: title = %q, want %q", name, got, name)
		}
		if got := doc["$id"]; got != wantID {
			t.Errorf("%s: $id = %v, want %s", name, got, wantID)
		}
		if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %v", name, got)
		}
		if d, _ := doc["description"].(string); d == "" {
			t.Errorf("%s: no description", name)
		}
		walkSchema(doc, "#", func(loc string, node map[string]any) {
			if node["type"] == "object" && node["properties"] != nil && node["additionalProperties"] != false {
				t.Errorf("%s: %s: an object with properties must say additionalProperties: false", name, loc)
			}
		})
	}
}

// TestSchemasMatchGoStructs keeps each schema's properties equal to the Go
// struct's JSON fields, and its required list equal to the fields encoded even
// when empty (no omitempty/omitzero): the structs are the source of truth.
func TestSchemasMatchGoStructs(t *testing.T) {
	check := func(what string, node map[string]any, rt reflect.Type) {
		t.Helper()
		var names, required []string
		for i := range rt.NumField() {
			name, opts, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			names = append(names, name)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
		props, _ := node["properties"].(map[string]any)
		var gotNames []string
		for k := range props {
			gotNames = append(gotNames, k)
		}
		var gotRequired []string
		if r, ok := node["required"].([]any); ok {
			for _, v := range r {
				gotRequired = append(gotRequired, v.(string))
			}
		}
		for _, s := range [][]string{names, required, gotNames, gotRequired} {
			slices.Sort(s)
		}
		if !slices.Equal(gotNames, names) {
			t.Errorf("%s: properties %v, Go fields %v", what, gotNames, names)
		}
		if !slices.Equal(gotRequired, required) {
			t.Errorf("%s: required %v, Go fields without omitempty %v", what, gotRequired, required)
		}
	}
	for _, typ := range noeta.EventTypes() {
		p, _ := noeta.NewPayload(typ)
		check(typ, readSchema(t, typ), reflect.TypeOf(p).Elem())
	}
	defs := readSchema(t, "defs")["$defs"].(map[string]any)
	check("defs wake", defs["wake"].(map[string]any), reflect.TypeFor[noeta.Wake]())
	check("defs content_ref", defs["content_ref"].(map[string]any), reflect.TypeFor[noeta.ContentRef]())
}

func readSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return doc
}

func walkSchema(v any, loc string, f func(string, map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(loc, v)
		for k, c := range v {
			walkSchema(c, loc+"/"+k, f)
		}
	case []any:
		for i, c := range v {
			walkSchema(c, fmt.Sprintf("%s/%d", loc, i), f)
		}
	}
}

func TestValidPayloads(t *testing.T) {
	all := validPayloads()
	for _, typ := range noeta.EventTypes() {
		if len(all[typ]) == 0 {
			t.Errorf("%s: no valid payload in the table", typ)
		}
		for i, p := range all[typ] {
			if p.EventType() != typ {
				t.Fatalf("%s[%d] is a %s", typ, i, p.EventType())
			}
			b := mustMarshal(t, p)
			if err := schemas.Validate(typ, b); err != nil {
				t.Errorf("%s[%d] %s: %v", typ, i, b, err)
			}
			// Canonical bytes are what the log stores; they must validate too.
			c, err := noeta.Canonical(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate(typ, c); err != nil {
				t.Errorf("%s[%d] canonical %s: %v", typ, i, c, err)
			}
		}
	}
}

// mutation edits a decoded payload.
type mutation func(map[string]any)

// at walks to the object holding the last path element.
func at(m map[string]any, path []string) (map[string]any, string) {
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	return m, path[len(path)-1]
}

func del(path ...string) mutation {
	return func(m map[string]any) { o, k := at(m, path); delete(o, k) }
}

func set(v any, path ...string) mutation {
	return func(m map[string]any) { o, k := at(m, path); o[k] = v }
}

// raw is a JSON literal set verbatim (numbers that float64 would round).
type raw = json.RawMessage

func decode(t *testing.T, p noeta.Payload) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustMarshal(t, p), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func wantInvalid(t *testing.T, typ string, payload []byte, field string) {
	t.Helper()
	err := schemas.Validate(typ, payload)
	if err == nil {
		t.Errorf("Validate(%s, %s) = nil, want an error naming %s", typ, payload, field)
		return
	}
	if !errors.Is(err, schemas.ErrInvalid) || errors.Is(err, schemas.ErrUnknownType) {
		t.Errorf("Validate(%s, %s) = %v, want ErrInvalid", typ, payload, err)
	}
	if want := typ + ": " + field + ": "; !strings.Contains(err.Error(), want) {
		t.Errorf("Validate(%s, %s) = %q, want it to contain %q", typ, payload, err, want)
	}
}

func TestInvalidPayloads(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	ref := func(hash string, size any) map[string]any {
		return map[string]any{"hash": hash, "size": size, "media_type": "text/plain"}
	}
	timer := noeta.TaskSuspended{Reason: "waiting_timer", WakeOn: noeta.TimerWake(fireAt)}
	human := noeta.TaskSuspended{Reason: "waiting_human", WakeOn: noeta.HumanResponseWake("h-1")}
	created := noeta.TaskCreated{TaskID: task, Agent: "researcher", Goal: "g", RootTaskID: task}
	started := noeta.ToolCallStarted{CallID: callID, Tool: "web_search", Args: json.RawMessage(`{"q":"x"}`), Turn: 1}
	finished := noeta.ToolCallFinished{CallID: callID, Tool: "web_search", OK: true, Output: json.RawMessage(`1`), DurationMS: 3}
	approval := noeta.ApprovalRequested{Handle: "h-1", Action: noeta.ApprovalToolCall, Guard: "gate", Reason: "r"}
	snapshot := noeta.TaskSnapshot{StateRef: jsonRef, UptoSeq: 4}
	subtask := noeta.SubtaskCompleted{SubtaskID: child, Status: noeta.SubtaskStatusCompleted}
	shadowed := noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: callID, Tool: "shell", Guard: "rules", Rule: "rules[0]",
		Verdict: noeta.VerdictDeny, Reason: "r", Decided: noeta.VerdictAllow}

	cases := []struct {
		name  string
		base  noeta.Payload
		muts  []mutation
		field string // the JSON pointer the message must name
	}{
		// Enums.
		{"bad decision", noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionFinish}, []mutation{set("think", "decision")}, "/decision"},
		{"bad approval action", approval, []mutation{set("delete", "action")}, "/action"},
		{"bad approval decision", noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "a"}, []mutation{set("maybe", "decision")}, "/decision"},
		{"bad subtask status", subtask, []mutation{set("done", "status")}, "/status"},
		{"bad recorded status", noeta.SubtaskResultRecorded{SubtaskID: child, Status: noeta.SubtaskStatusFailed}, []mutation{set("Completed", "status")}, "/status"},
		{"bad shadow verdict", shadowed, []mutation{set("maybe", "verdict")}, "/verdict"},
		{"bad decided verdict", shadowed, []mutation{set("", "decided")}, "/decided"},
		{"bad shadow action", shadowed, []mutation{set("delete", "action")}, "/action"},
		{"shadowed tool call without its call", shadowed, []mutation{del("call_id")}, "/call_id"},
		{"shadowed tool call without its tool", shadowed, []mutation{del("tool")}, "/tool"},
		{"failed shadow that allows", shadowed, []mutation{set(true, "failed"), set("allow", "verdict")}, "/verdict"},
		{"failed false", shadowed, []mutation{set(false, "failed")}, "/failed"},
		{"empty shadow rule", shadowed, []mutation{set("", "rule")}, "/rule"},
		{"bad abandon action", noeta.StepAttemptAbandoned{BaselineSeq: 1, Action: noeta.AbandonPark, Reason: "r"}, []mutation{set("retry", "action")}, "/action"},
		{"bad wake kind", human, []mutation{set("email", "wake_on", "kind"), del("wake_on", "handle")}, "/wake_on/kind"},
		{"wake without kind", human, []mutation{del("wake_on", "kind")}, "/wake_on/kind"},

		// x | x_ref.
		{"args and args_ref", started, []mutation{set(ref(hex64, 10), "args_ref")}, "/args"},
		{"neither args nor args_ref", started, []mutation{del("args")}, "/args"},
		{"approval args and args_ref", approval, []mutation{set(map[string]any{}, "args"), set(ref(hex64, 10), "args_ref")}, "/args"},
		{"output and output_ref", finished, []mutation{set(ref(hex64, 10), "output_ref")}, "/output"},
		{"ok without output", finished, []mutation{del("output")}, "/output"},
		{"answer and answer_ref", noeta.TaskCompleted{Answer: json.RawMessage(`1`)}, []mutation{set(ref(hex64, 10), "answer_ref")}, "/answer"},
		{"neither answer nor answer_ref", noeta.TaskCompleted{}, nil, "/answer"},
		{"goal with goal_ref", created, []mutation{set(ref(hex64, 5000), "goal_ref")}, "/goal"},
		{"spawn goal with goal_ref", noeta.SubtaskSpawned{SubtaskID: child, Agent: "a", Goal: "g", GoalRef: &bigRef}, nil, "/goal"},
		{"goal absent with goal_ref", noeta.SubtaskSpawned{SubtaskID: child, Agent: "a", GoalRef: &bigRef}, []mutation{del("goal")}, "/goal"},

		// Task ids.
		{"task id with a space", created, []mutation{set("my task", "task_id")}, "/task_id"},
		{"task id too long", created, []mutation{set(strings.Repeat("a", 65), "root_task_id")}, "/root_task_id"},
		{"parent id with a dot", created, []mutation{set("a.b", "parent_task_id")}, "/parent_task_id"},
		{"empty subtask id", noeta.SubtaskSpawned{SubtaskID: child, Agent: "a", Goal: "g"}, []mutation{set("", "subtask_id")}, "/subtask_id"},
		{"subtask id with a slash", subtask, []mutation{set("a/b", "subtask_id")}, "/subtask_id"},
		{"wake subtask id", noeta.TaskWoken{WakeEvent: noeta.SubtaskCompletedWake(child)}, []mutation{set("x y", "wake_event", "subtask_id")}, "/wake_event/subtask_id"},
		{"wake subtask_ids member", noeta.TaskWoken{WakeEvent: groupWake()}, []mutation{set([]any{child, "no way"}, "wake_event", "subtask_ids")}, "/wake_event/subtask_ids/1"},

		// Content refs.
		{"uppercase hash", snapshot, []mutation{set(strings.ToUpper(hex64), "state_ref", "hash")}, "/state_ref/hash"},
		{"short hash", snapshot, []mutation{set("abc123", "state_ref", "hash")}, "/state_ref/hash"},
		{"negative size", snapshot, []mutation{set(-1, "state_ref", "size")}, "/state_ref/size"},
		{"fractional size", snapshot, []mutation{set(1.5, "state_ref", "size")}, "/state_ref/size"},
		{"ref without media type", snapshot, []mutation{del("state_ref", "media_type")}, "/state_ref/media_type"},
		{"ref with an extra field", snapshot, []mutation{set("s3", "state_ref", "bucket")}, "/state_ref/bucket"},
		{"bad goal_ref hash", created, []mutation{set("", "goal"), set(ref("zz", 1), "goal_ref")}, "/goal_ref/hash"},
		{"bad args_ref hash", started, []mutation{del("args"), set(ref(hex64[:63], 1), "args_ref")}, "/args_ref/hash"},
		{"bad answer_ref size", noeta.TaskCompleted{AnswerRef: &bigRef}, []mutation{set("12", "answer_ref", "size")}, "/answer_ref/size"},

		// Wakes: identity fields and fields of another kind.
		{"subtask wake without subtask_id", noeta.TaskSuspended{Reason: "r", WakeOn: noeta.SubtaskCompletedWake(child)}, []mutation{del("wake_on", "subtask_id")}, "/wake_on/subtask_id"},
		{"group wake without group_id", noeta.TaskSuspended{Reason: "r", WakeOn: groupWake()}, []mutation{del("wake_on", "group_id")}, "/wake_on/group_id"},
		{"human wake without handle", human, []mutation{del("wake_on", "handle")}, "/wake_on/handle"},
		{"human wake with empty handle", human, []mutation{set("", "wake_on", "handle")}, "/wake_on/handle"},
		{"timer wake without fire_at", timer, []mutation{del("wake_on", "fire_at")}, "/wake_on/fire_at"},
		{"external wake without event_kind", noeta.TaskWoken{WakeEvent: noeta.ExternalWake("x")}, []mutation{del("wake_event", "event_kind")}, "/wake_event/event_kind"},
		{"timer wake with a handle", timer, []mutation{set("h", "wake_on", "handle")}, "/wake_on/kind"},
		{"subtask wake with data", noeta.TaskWoken{WakeEvent: noeta.SubtaskCompletedWake(child)}, []mutation{set(1, "wake_event", "data")}, "/wake_event/kind"},
		{"wake with an unknown field", human, []mutation{set("x", "wake_on", "channel")}, "/wake_on/channel"},

		// fire_at.
		{"fire_at month 13", timer, []mutation{set("2025-13-01T00:00:00Z", "wake_on", "fire_at")}, "/wake_on/fire_at"},
		{"fire_at not UTC", timer, []mutation{set("2025-03-14T10:26:53+01:00", "wake_on", "fire_at")}, "/wake_on/fire_at"},
		{"fire_at a date", timer, []mutation{set("2025-03-14", "wake_on", "fire_at")}, "/wake_on/fire_at"},
		{"fire_at prose", timer, []mutation{set("tomorrow", "wake_on", "fire_at")}, "/wake_on/fire_at"},
		{"fire_at a number", timer, []mutation{set(1741944413, "wake_on", "fire_at")}, "/wake_on/fire_at"},

		// Counters and numbers.
		{"generation 0", noeta.LeaseGranted{LeaseID: leaseID, Generation: 1, Worker: "w"}, []mutation{set(0, "generation")}, "/generation"},
		{"generation over uint64", noeta.LeaseGranted{LeaseID: leaseID, Generation: 1, Worker: "w"}, []mutation{set(raw("18446744073709551616"), "generation")}, "/generation"},
		{"negative turn", noeta.TurnStarted{Turn: 1}, []mutation{set(-1, "turn")}, "/turn"},
		{"fractional turn", noeta.TurnStarted{Turn: 1}, []mutation{set(1.5, "turn")}, "/turn"},
		{"turn as a string", noeta.TurnStarted{Turn: 1}, []mutation{set("1", "turn")}, "/turn"},
		{"negative upto_seq", snapshot, []mutation{set(-4, "upto_seq")}, "/upto_seq"},
		{"negative baseline_seq", noeta.StepAttemptAbandoned{BaselineSeq: 1, Action: noeta.AbandonPark, Reason: "r"}, []mutation{set(-1, "baseline_seq")}, "/baseline_seq"},
		{"negative duration", finished, []mutation{set(-5, "duration_ms")}, "/duration_ms"},
		{"negative cost", noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionFinish}, []mutation{set(-0.01, "cost_usd")}, "/cost_usd"},
		{"tokens over int64", noeta.PolicyDecided{Turn: 1, Decision: noeta.DecisionFinish}, []mutation{set(raw("9223372036854775808"), "input_tokens")}, "/input_tokens"},
		{"negative depth", created, []mutation{set(-1, "subtask_depth")}, "/subtask_depth"},

		// Other types and shapes.
		{"ok as a string", finished, []mutation{set("true", "ok")}, "/ok"},
		{"args an array", started, []mutation{set([]any{1}, "args")}, "/args"},
		{"approval args a string", approval, []mutation{set("x", "args")}, "/args"},
		{"patch a string", noeta.TaskStatePatched{Patch: json.RawMessage(`{}`)}, []mutation{set("x", "patch")}, "/patch"},
		{"patch null", noeta.TaskStatePatched{Patch: json.RawMessage(`{}`)}, []mutation{set(nil, "patch")}, "/patch"},
		{"empty agent", created, []mutation{set("", "agent")}, "/agent"},
		{"empty worker", noeta.LeaseGranted{LeaseID: leaseID, Generation: 1, Worker: "w"}, []mutation{set("", "worker")}, "/worker"},
		{"empty guard", noeta.FinishDenied{Guard: "g", Reason: "r"}, []mutation{set("", "guard")}, "/guard"},
		{"reason a number", noeta.TaskCancelled{Reason: "r"}, []mutation{set(7, "reason")}, "/reason"},
		{"error null", noeta.TaskFailed{Error: "e"}, []mutation{set(nil, "error")}, "/error"},
		{"wake_on a string", human, []mutation{set("human_response", "wake_on")}, "/wake_on"},
		{"goal_ref null", created, []mutation{set(nil, "goal_ref")}, "/goal_ref"},
		{"extra field", noeta.TaskCancelled{Reason: "r"}, []mutation{set("x", "by")}, "/by"},
		{"extra field next to a valid wake", human, []mutation{set(true, "urgent")}, "/urgent"},
	}
	for _, c := range cases {
		t.Run(c.base.EventType()+"/"+c.name, func(t *testing.T) {
			m := decode(t, c.base)
			for _, f := range c.muts {
				f(m)
			}
			wantInvalid(t, c.base.EventType(), mustMarshal(t, m), c.field)
		})
	}
}

// TestInvalidPayloadsGenerated runs, for every type, the mistakes every payload
// can have: each required field missing, an unknown field, each field of the
// wrong JSON type.
func TestInvalidPayloadsGenerated(t *testing.T) {
	anyJSON := map[string]bool{"output": true, "result": true, "answer": true}
	for typ, ps := range validPayloads() {
		// The fullest fixture has the most fields to break.
		var full map[string]any
		for _, p := range ps {
			if m := decode(t, p); len(m) > len(full) {
				full = m
			}
		}
		clone := func() map[string]any {
			var m map[string]any
			if err := json.Unmarshal(mustMarshal(t, full), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		p, _ := noeta.NewPayload(typ)
		rt := reflect.TypeOf(p).Elem()
		for i := range rt.NumField() {
			name, opts, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if opts != "" {
				continue
			}
			m := clone()
			delete(m, name)
			wantInvalid(t, typ, mustMarshal(t, m), "/"+name)
		}
		m := clone()
		m["zz_unknown"] = 1
		wantInvalid(t, typ, mustMarshal(t, m), "/zz_unknown")
		for k, v := range full {
			if anyJSON[k] {
				continue
			}
			m := clone()
			switch v.(type) {
			case string:
				m[k] = 42
			case float64:
				m[k] = "42"
			case bool:
				m[k] = "true"
			case map[string]any:
				m[k] = []any{}
			case []any:
				m[k] = "x"
			default:
				t.Fatalf("%s.%s: no wrong type for %T", typ, k, v)
			}
			wantInvalid(t, typ, mustMarshal(t, m), "/"+k)
		}
		for _, doc := range []string{`[]`, `"x"`, `null`, `42`} {
			wantInvalid(t, typ, []byte(doc), "payload")
		}
	}
}

func TestNotJSON(t *testing.T) {
	for _, p := range []string{``, `{`, `{"reason":"r"} {}`, `{"reason":"r",}`} {
		err := schemas.Validate(noeta.TypeTaskCancelled, []byte(p))
		if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), "TaskCancelled: not JSON") {
			t.Errorf("Validate(%q) = %v, want ErrInvalid, not JSON", p, err)
		}
	}
}

func TestUnknownType(t *testing.T) {
	for _, typ := range []string{"", "Bogus", "defs", "taskcreated", "noeta.TaskCreated"} {
		err := schemas.Validate(typ, []byte(`{}`))
		if !errors.Is(err, schemas.ErrUnknownType) || errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("Validate(%q) = %v, want ErrUnknownType", typ, err)
		}
	}
}

func TestMessage(t *testing.T) {
	b := []byte(`{"reason":"x","wake_on":{"kind":"human_response"},"extra":1}`)
	want := "schemas: invalid payload: TaskSuspended: /wake_on/handle: missing property (and 1 more error)"
	for range 20 { // the library walks maps in random order; the message must not
		if err := schemas.Validate(noeta.TypeTaskSuspended, b); err == nil || err.Error() != want {
			t.Fatalf("Validate = %v, want %s", err, want)
		}
	}
	if err := schemas.Validate(noeta.TypeToolCallStarted, mustMarshal(t, noeta.ToolCallStarted{CallID: "c", Tool: "t", Args: json.RawMessage(`{}`), ArgsRef: &jsonRef})); err == nil ||
		!strings.HasSuffix(err.Error(), "ToolCallStarted: /args: not allowed together with args_ref") {
		t.Errorf("both args: %v", err)
	}
}

func TestIDKnownRoundTrip(t *testing.T) {
	if got, want := schemas.ID("TaskFailed"), "urn:noeta:schema:TaskFailed:1"; got != want {
		t.Errorf("ID = %q, want %q", got, want)
	}
	for _, typ := range noeta.EventTypes() {
		if got, ok := schemas.Known(schemas.ID(typ)); !ok || got != typ {
			t.Errorf("Known(ID(%s)) = %q, %v", typ, got, ok)
		}
	}
	for _, id := range []string{
		"", "urn:noeta:schema:defs:1", schemas.ID("defs"), schemas.ID("Bogus"),
		"urn:noeta:schema:TaskCreated:4", "urn:noeta:schema:TaskCreated:01",
		"urn:noeta:schema:TaskCreated", "https://example.com/TaskCreated.json",
		"URN:NOETA:SCHEMA:TaskCreated:1",
		"urn:noeta:schema:PolicyDecided:4",
	} {
		if got, ok := schemas.Known(id); ok {
			t.Errorf("Known(%q) = %q, true; want not known", id, got)
		}
	}
}

// TestPolicyDecidedVersions: PolicyDecided's schema is at version 3 (the
// model's text); records of versions 1 and 2 (written before) are still
// known and validate against it, and the exclusive members are refused
// together.
func TestPolicyDecidedVersions(t *testing.T) {
	if got, want := schemas.ID(noeta.TypePolicyDecided), "urn:noeta:schema:PolicyDecided:3"; got != want {
		t.Fatalf("ID = %q, want %q", got, want)
	}
	for _, id := range []string{"urn:noeta:schema:PolicyDecided:1", "urn:noeta:schema:PolicyDecided:2"} {
		if typ, ok := schemas.Known(id); !ok || typ != noeta.TypePolicyDecided {
			t.Fatalf("the older id %s is not known: %q %v", id, typ, ok)
		}
	}
	if err := schemas.Validate(noeta.TypePolicyDecided, []byte(`{"decision":"tool_calls","tool_calls":[{"args":{},"call_id":"c","tool":"t"}],"turn":1,"version":2}`)); err != nil {
		t.Fatalf("a schema 2 record (no text): %v", err)
	}
	if err := schemas.Validate(noeta.TypePolicyDecided, []byte(`{"cost_usd":0.5,"decision":"finish","input_tokens":3,"turn":2}`)); err != nil {
		t.Fatalf("a version 1 record: %v", err)
	}
	for _, tt := range []struct{ name, payload, want string }{
		{"answer and answer_ref", `{"answer":"a","answer_ref":` + string(mustMarshal(t, jsonRef)) + `,"decision":"finish","turn":1,"version":2}`, "/answer: not allowed together with answer_ref"},
		{"parts and decision_ref", `{"decision":"tool_calls","decision_ref":` + string(mustMarshal(t, jsonRef)) + `,"tool_calls":[{"call_id":"c"}],"turn":1,"version":2}`, "/tool_calls: not allowed together with decision_ref"},
		{"version 3", `{"decision":"finish","turn":1,"version":3}`, "/version"},
		{"text and text_ref", `{"decision":"finish","text":"t","text_ref":` + string(mustMarshal(t, jsonRef)) + `,"turn":1,"version":2}`, "/text: not allowed together with text_ref"},
		{"text not a string", `{"decision":"finish","text":["t"],"turn":1,"version":2}`, "/text"},
		{"call without id", `{"decision":"tool_calls","tool_calls":[{"tool":"t"}],"turn":1,"version":2}`, "/tool_calls/0/call_id: missing property"},
		{"unknown member", `{"decision":"finish","turn":1,"thoughts":"x"}`, "/thoughts: unknown property"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := schemas.Validate(noeta.TypePolicyDecided, []byte(tt.payload))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestToolCallFinishedVersions: ToolCallFinished's schema is at version 3
// (the preview of an output recorded by ref, docs/adr/0102); records of
// versions 1 and 2 are still known and validate against it; a preview
// without output_ref, or over its bound, is refused.
func TestToolCallFinishedVersions(t *testing.T) {
	if got, want := schemas.ID(noeta.TypeToolCallFinished), "urn:noeta:schema:ToolCallFinished:3"; got != want {
		t.Fatalf("ID = %q, want %q", got, want)
	}
	for _, id := range []string{"urn:noeta:schema:ToolCallFinished:1", "urn:noeta:schema:ToolCallFinished:2"} {
		if typ, ok := schemas.Known(id); !ok || typ != noeta.TypeToolCallFinished {
			t.Fatalf("the older id %s is not known: %q %v", id, typ, ok)
		}
	}
	if _, ok := schemas.Known("urn:noeta:schema:ToolCallFinished:4"); ok {
		t.Fatal("version 4 is known")
	}
	ref := string(mustMarshal(t, jsonRef))
	for _, old := range []string{
		`{"call_id":"c","duration_ms":3,"ok":true,"output_ref":` + ref + `,"tool":"t"}`,
		`{"call_id":"c","duration_ms":3,"egress":[{"allowed":true,"bytes_in":1,"bytes_out":1,"connections":1,"host":"h","port":443}],"ok":true,"output":1,"tool":"t"}`,
	} {
		if err := schemas.Validate(noeta.TypeToolCallFinished, []byte(old)); err != nil {
			t.Errorf("a record written before previews: %v\n%s", err, old)
		}
	}
	for _, tt := range []struct{ name, payload, want string }{
		{"preview without output_ref", `{"call_id":"c","duration_ms":3,"ok":true,"output":1,"preview":"p","tool":"t"}`, "/output_ref: missing property when preview is present"},
		{"preview alone on a failed call", `{"call_id":"c","duration_ms":3,"error":"e","ok":false,"preview":"p","tool":"t"}`, "/output_ref: missing property when preview is present"},
		{"preview over its bound", `{"call_id":"c","duration_ms":3,"ok":true,"output_ref":` + ref + `,"preview":"` + strings.Repeat("x", 2047) + `","tool":"t"}`, "/preview"},
		{"preview not a string", `{"call_id":"c","duration_ms":3,"ok":true,"output_ref":` + ref + `,"preview":{"text":"p"},"tool":"t"}`, "/preview"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := schemas.Validate(noeta.TypeToolCallFinished, []byte(tt.payload))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestConcurrentValidate is for -race: Validate runs on every publish, from
// many goroutines, including the first call that compiles.
func TestConcurrentValidate(t *testing.T) {
	type job struct {
		typ   string
		b     []byte
		valid bool
	}
	var jobs []job
	for typ, ps := range validPayloads() {
		for _, p := range ps {
			jobs = append(jobs, job{typ, mustMarshal(t, p), true})
		}
		// Invalid ones too: describing an error must be as safe as passing.
		jobs = append(jobs, job{typ, []byte(`{"zz_unknown":1}`), false}, job{typ, []byte(`[]`), false})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				j := jobs[(g*7+i)%len(jobs)]
				err := schemas.Validate(j.typ, j.b)
				if (err == nil) != j.valid {
					select {
					case errs <- fmt.Errorf("%s %s: %v", j.typ, j.b, err):
					default:
					}
					return
				}
				if _, ok := schemas.Known(schemas.ID(j.typ)); !ok {
					errs <- fmt.Errorf("%s not known", j.typ)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkValidate(b *testing.B) {
	cases := []struct {
		name string
		typ  string
		p    noeta.Payload
	}{
		{"ToolCallStarted", noeta.TypeToolCallStarted, noeta.ToolCallStarted{
			CallID: callID, Tool: "web_search", Turn: 3,
			Args: json.RawMessage(`{"query":"quarterly revenue growth by region and segment","limit":10,"page":2,"lang":"en","safe":true,"site":"example.com"}`),
		}},
		{"TaskSuspended", noeta.TypeTaskSuspended, noeta.TaskSuspended{Reason: "waiting_timer", WakeOn: noeta.TimerWake(fireAt)}},
	}
	for _, c := range cases {
		p := mustMarshal(b, c.p)
		if err := schemas.Validate(c.typ, p); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/%dB", c.name, len(p)), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if err := schemas.Validate(c.typ, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
