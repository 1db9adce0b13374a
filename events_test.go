package noeta

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The JSON field names of every payload, as DESIGN.md §3 lists them. They are a
// public contract: other languages read these logs.
var catalogue = map[string]string{
	TypeTaskCreated:           "task_id agent goal goal_ref parent_task_id root_task_id subtask_depth group_id script_ref submitted_by budget",
	TypeLeaseGranted:          "lease_id generation worker",
	TypeTurnStarted:           "turn",
	TypePolicyDecided:         "turn decision cost_usd input_tokens output_tokens version tool_calls spawn question wait_seconds event_kind patch patch_ref answer answer_ref error text text_ref decision_ref model provider latency_ms response_ref notes",
	TypeToolCallStarted:       "call_id tool args args_ref turn",
	TypeToolCallFinished:      "call_id tool ok output output_ref preview error duration_ms cost_usd egress",
	TypeToolCallDenied:        "call_id tool guard reason",
	TypeSubtaskSpawned:        "subtask_id agent goal goal_ref group_id call_id budget",
	TypeSubtaskDenied:         "agent guard reason group_id",
	TypeFinishDenied:          "guard reason",
	TypeGuardShadowed:         "action call_id tool agent guard rule verdict reason failed decided decided_by",
	TypeApprovalRequested:     "handle action call_id tool args args_ref agent guard reason quorum rules expires_at",
	TypeApprovalResolved:      "handle decision approver reason auth approvers",
	TypeApprovalCounted:       "handle approver auth reason approvals quorum",
	TypeApprovalRefused:       "handle decision approver auth reason text",
	TypeSubtaskCompleted:      "subtask_id status result result_ref error group_id",
	TypeSubtaskResultRecorded: "subtask_id status result result_ref error group_id spend",
	TypeTaskStatePatched:      "patch",
	TypeTaskSuspended:         "reason wake_on",
	TypeTaskWoken:             "wake_event",
	TypeTaskSnapshot:          "state_ref upto_seq",
	TypeStepAttemptAbandoned:  "baseline_seq action reason",
	TypeTaskCompleted:         "answer answer_ref",
	TypeTaskFailed:            "error guard",
	TypeTaskCancelled:         "reason",
}

func TestPayloadFieldNames(t *testing.T) {
	if len(catalogue) != len(EventTypes()) {
		t.Fatalf("catalogue has %d types, EventTypes %d", len(catalogue), len(EventTypes()))
	}
	for _, typ := range EventTypes() {
		p, _ := NewPayload(typ)
		got := jsonNames(reflect.TypeOf(p).Elem())
		want := strings.Fields(catalogue[typ])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s fields = %v, want %v", typ, got, want)
		}
	}
}

func jsonNames(rt reflect.Type) []string {
	var names []string
	for i := range rt.NumField() {
		tag := rt.Field(i).Tag.Get("json")
		names = append(names, strings.Split(tag, ",")[0])
	}
	return names
}

func TestPayloadEncodingOmitsOptionalFields(t *testing.T) {
	b, err := Canonical(TaskCreated{TaskID: "t", Agent: "a", Goal: "g", RootTaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"agent":"a","goal":"g","root_task_id":"t","subtask_depth":0,"task_id":"t"}`; string(b) != want {
		t.Errorf("TaskCreated = %s, want %s", b, want)
	}
	b, err = Canonical(TaskSuspended{Reason: "waiting_human", WakeOn: HumanResponseWake("h")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"reason":"waiting_human","wake_on":{"handle":"h","kind":"human_response"}}`; string(b) != want {
		t.Errorf("TaskSuspended = %s, want %s", b, want)
	}
	var back TaskSuspended
	if err := json.Unmarshal(b, &back); err != nil || !back.WakeOn.Equal(HumanResponseWake("h")) {
		t.Errorf("round trip = %+v, %v", back, err)
	}
}
