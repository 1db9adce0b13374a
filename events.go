package noeta

import (
	"encoding/json"
	"time"
)

// Event type names, as recorded in the envelope (and as noeta.<Type> in the
// CloudEvents type). Each has a payload struct of the same name and a JSON Schema
// in schemas/.
const (
	TypeTaskCreated           = "TaskCreated"
	TypeLeaseGranted          = "LeaseGranted"
	TypeTurnStarted           = "TurnStarted"
	TypePolicyDecided         = "PolicyDecided"
	TypeToolCallStarted       = "ToolCallStarted"
	TypeToolCallFinished      = "ToolCallFinished"
	TypeToolCallDenied        = "ToolCallDenied"
	TypeSubtaskSpawned        = "SubtaskSpawned"
	TypeSubtaskDenied         = "SubtaskDenied"
	TypeFinishDenied          = "FinishDenied"
	TypeGuardShadowed         = "GuardShadowed"
	TypeApprovalRequested     = "ApprovalRequested"
	TypeApprovalResolved      = "ApprovalResolved"
	TypeApprovalCounted       = "ApprovalCounted"
	TypeApprovalRefused       = "ApprovalRefused"
	TypeSubtaskCompleted      = "SubtaskCompleted"
	TypeSubtaskResultRecorded = "SubtaskResultRecorded"
	TypeTaskStatePatched      = "TaskStatePatched"
	TypeTaskSuspended         = "TaskSuspended"
	TypeTaskWoken             = "TaskWoken"
	TypeTaskSnapshot          = "TaskSnapshot"
	TypeStepAttemptAbandoned  = "StepAttemptAbandoned"
	TypeTaskCompleted         = "TaskCompleted"
	TypeTaskFailed            = "TaskFailed"
	TypeTaskCancelled         = "TaskCancelled"
)

var knownTypes = []string{
	TypeTaskCreated, TypeLeaseGranted, TypeTurnStarted, TypePolicyDecided,
	TypeToolCallStarted, TypeToolCallFinished, TypeToolCallDenied,
	TypeSubtaskSpawned, TypeSubtaskDenied, TypeFinishDenied, TypeGuardShadowed,
	TypeApprovalRequested, TypeApprovalResolved, TypeApprovalCounted, TypeApprovalRefused,
	TypeSubtaskCompleted, TypeSubtaskResultRecorded, TypeTaskStatePatched,
	TypeTaskSuspended, TypeTaskWoken, TypeTaskSnapshot, TypeStepAttemptAbandoned,
	TypeTaskCompleted, TypeTaskFailed, TypeTaskCancelled,
}

// EventTypes returns every event type this version records, in catalogue order.
// Readers skip types outside this list instead of failing, so an older reader
// folds a newer writer's log.
func EventTypes() []string { return append([]string(nil), knownTypes...) }

// IsKnownEventType reports whether t is in the catalogue.
func IsKnownEventType(t string) bool {
	for _, k := range knownTypes {
		if k == t {
			return true
		}
	}
	return false
}

// IsBaselineType reports whether records of type t point at a complete state a
// fold can start from: only TaskSnapshot. (A StepAttemptAbandoned seal does not
// rebase the state: the resumed attempt continues from the log, see
// docs/adr/0011-resume-a-turn-instead-of-rebasing.md.)
func IsBaselineType(t string) bool { return t == TypeTaskSnapshot }

// IsTerminalType reports whether t ends a task.
func IsTerminalType(t string) bool {
	return t == TypeTaskCompleted || t == TypeTaskFailed || t == TypeTaskCancelled
}

// Payload is implemented by every payload struct; EventType names its record
// type.
type Payload interface{ EventType() string }

// Spill limits. A goal or answer above GoalInlineLimit canonical bytes is stored
// in the content store and replaced by a ref, leaving room under
// PayloadMaxBytes for the rest of the payload.
const (
	PayloadMaxBytes   = 4096
	GoalInlineLimit   = PayloadMaxBytes - 1024
	AnswerInlineLimit = PayloadMaxBytes - 1024
	// ArgsInlineLimit bounds tool arguments (and tool outputs, subtask
	// results, approval arguments) kept inline; larger ones are spilled.
	ArgsInlineLimit = PayloadMaxBytes - 1024
	// TextInlineLimit bounds the model's text of a turn kept inline in
	// PolicyDecided (its canonical JSON string, quotes included): a
	// paragraph or two stays in the record, and in the transcript later
	// turns read, leaving half the payload for the decision's own parts.
	// Longer text is stored whole in the content store (text_ref), never
	// cut (docs/adr/0084).
	TextInlineLimit = PayloadMaxBytes / 2
	// PreviewLimit bounds ToolCallFinished's preview (its canonical JSON
	// string, quotes included): what a model reads of an output recorded
	// by ref, half the payload, leaving the rest for the record's other
	// members (docs/adr/0102).
	PreviewLimit = PayloadMaxBytes / 2
)

// TaskCreated is the genesis record of every task (seq 1).
type TaskCreated struct {
	TaskID       string      `json:"task_id"`
	Agent        string      `json:"agent"`
	Goal         string      `json:"goal"`
	GoalRef      *ContentRef `json:"goal_ref,omitempty"`
	ParentTaskID string      `json:"parent_task_id,omitempty"`
	RootTaskID   string      `json:"root_task_id"`
	SubtaskDepth int         `json:"subtask_depth"`
	GroupID      string      `json:"group_id,omitempty"`
	// ScriptRef is the task's script (canonical JSON in the content store) when
	// its policy is scripted: a task file's script, or the script a parent's
	// spawn step gave the child. Any worker on any host resolves the task's
	// policy from it. Absent: the agent's configured policy.
	ScriptRef *ContentRef `json:"script_ref,omitempty"`
	// SubmittedBy is who submitted the task, as the submitting process
	// knows them (the HTTP principal, cli:$USER); a child inherits its
	// root's. Approvals rules read it to refuse self-approval.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// Budget is a subtask's share of what its ancestors' budgets had left
	// when it was spawned (the parent's SubtaskSpawned records the same):
	// the task's whole tree may spend no more (docs/adr/0054). Absent on a
	// root, and on a child of a tree without a cost or tool-call cap.
	Budget *BudgetAllotment `json:"budget,omitempty"`
}

// BudgetAllotment is what a subtask's tree may spend: the part of its
// ancestors' cost and tool-call budgets the parent reserved for it at the
// spawn. A nil member is no cap from above (the child's own agent may still
// have one).
type BudgetAllotment struct {
	CostUSD   *float64 `json:"cost_usd,omitempty"`
	ToolCalls *int     `json:"tool_calls,omitempty"`
}

// Clone returns a copy that shares no memory with a.
func (a *BudgetAllotment) Clone() *BudgetAllotment {
	if a == nil {
		return nil
	}
	c := &BudgetAllotment{}
	if a.CostUSD != nil {
		v := *a.CostUSD
		c.CostUSD = &v
	}
	if a.ToolCalls != nil {
		v := *a.ToolCalls
		c.ToolCalls = &v
	}
	return c
}

// TreeSpend is what a task and every subtask under it spent: the parent
// reads it from the child's own log when it records the child's result.
type TreeSpend struct {
	CostUSD   float64 `json:"cost_usd"`
	ToolCalls int     `json:"tool_calls"`
}

// LeaseGranted is the fence: the first record of every lease generation. Its
// append moves the log's last sequence, so every write still in flight from the
// previous holder is refused.
type LeaseGranted struct {
	LeaseID    string `json:"lease_id"`
	Generation uint64 `json:"generation"`
	Worker     string `json:"worker"`
}

// TurnStarted counts iterations; the budget's max_iterations reads it.
type TurnStarted struct {
	Turn int `json:"turn"`
}

// DecisionKind is the kind of decision a policy made in a turn.
type DecisionKind string

// The decision kinds, one per script step kind.
const (
	DecisionToolCalls     DecisionKind = "tool_calls"
	DecisionSpawn         DecisionKind = "spawn"
	DecisionYieldForHuman DecisionKind = "yield_for_human"
	DecisionWaitTimer     DecisionKind = "wait_timer"
	DecisionWaitExternal  DecisionKind = "wait_external"
	DecisionStatePatch    DecisionKind = "state_patch"
	DecisionFinish        DecisionKind = "finish"
	DecisionFail          DecisionKind = "fail"
)

// PolicyDecidedVersion is the version of the PolicyDecided records this
// version writes. Version 1 records (no version member) carry only the kind
// and the cost; version 2 records carry the whole decision, and a turn whose
// version 2 record is in the log is carried out from it: the policy is never
// asked twice for one turn.
const PolicyDecidedVersion = 2

// PolicyDecided records what the policy decided and what deciding cost; the
// budget's max_cost_usd reads it. From version 2 it carries the decision
// itself: the part of its kind (large parts by content ref), who decided
// (model, provider), how long it took and a ref to the provider's raw
// response. When even with refs the parts would not fit the payload cap,
// they are stored whole under DecisionRef (see docs/adr/0027).
type PolicyDecided struct {
	Turn         int          `json:"turn"`
	Decision     DecisionKind `json:"decision"`
	CostUSD      float64      `json:"cost_usd,omitempty"`
	InputTokens  int64        `json:"input_tokens,omitempty"`
	OutputTokens int64        `json:"output_tokens,omitempty"`

	// Version is 2 for a record that carries the decision; absent (0) for a
	// version 1 record.
	Version int `json:"version,omitempty"`

	ToolCalls   []RecordedCall  `json:"tool_calls,omitempty"`
	Spawn       []RecordedSpawn `json:"spawn,omitempty"`
	Question    string          `json:"question,omitempty"`
	WaitSeconds float64         `json:"wait_seconds,omitempty"`
	EventKind   string          `json:"event_kind,omitempty"`
	Patch       json.RawMessage `json:"patch,omitempty"`
	PatchRef    *ContentRef     `json:"patch_ref,omitempty"`
	Answer      json.RawMessage `json:"answer,omitempty"`
	AnswerRef   *ContentRef     `json:"answer_ref,omitempty"`
	Error       string          `json:"error,omitempty"`
	// Text is what the model said beside its decision ("Let me check the
	// file first."), inline when its canonical JSON string fits in
	// TextInlineLimit bytes; TextRef holds it whole (a JSON string in the
	// content store) when it does not, or when the record needed the room.
	// At most one of them is set; neither for a decision made without
	// words (a script, a finish whose text is its answer). See
	// docs/adr/0084.
	Text    string      `json:"text,omitempty"`
	TextRef *ContentRef `json:"text_ref,omitempty"`
	// DecisionRef holds the decision's parts (a [RecordedParts], canonical
	// JSON) when they do not fit inline even with their large parts by ref;
	// the part fields above are then empty.
	DecisionRef *ContentRef `json:"decision_ref,omitempty"`

	Model       string      `json:"model,omitempty"`
	Provider    string      `json:"provider,omitempty"`
	LatencyMS   int64       `json:"latency_ms,omitempty"`
	ResponseRef *ContentRef `json:"response_ref,omitempty"`
	Notes       []string    `json:"notes,omitempty"`
}

// RecordedCall is one tool call of a recorded decision. Exactly one of Args
// and ArgsRef is set, unless Invalid is: a call that cannot run keeps what
// the model sent, if it was JSON.
type RecordedCall struct {
	CallID  string          `json:"call_id"`
	Tool    string          `json:"tool,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsRef *ContentRef     `json:"args_ref,omitempty"`
	Invalid string          `json:"invalid,omitempty"`
}

// RecordedSpawn is one child of a recorded spawn decision.
type RecordedSpawn struct {
	Agent     string          `json:"agent"`
	Goal      string          `json:"goal,omitempty"`
	GoalRef   *ContentRef     `json:"goal_ref,omitempty"`
	Script    json.RawMessage `json:"script,omitempty"`
	ScriptRef *ContentRef     `json:"script_ref,omitempty"`
}

// RecordedParts is what DecisionRef points at: the parts of the decision,
// each inline.
type RecordedParts struct {
	ToolCalls   []RecordedCall  `json:"tool_calls,omitempty"`
	Spawn       []RecordedSpawn `json:"spawn,omitempty"`
	Question    string          `json:"question,omitempty"`
	WaitSeconds float64         `json:"wait_seconds,omitempty"`
	EventKind   string          `json:"event_kind,omitempty"`
	Patch       json.RawMessage `json:"patch,omitempty"`
	Answer      json.RawMessage `json:"answer,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// ToolCallStarted is written before a tool runs. Exactly one of Args and ArgsRef
// is set.
type ToolCallStarted struct {
	CallID  string          `json:"call_id"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsRef *ContentRef     `json:"args_ref,omitempty"`
	Turn    int             `json:"turn"`
}

// ToolCallFinished is the tool's result. Output over the cap is in OutputRef.
type ToolCallFinished struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	OK        bool            `json:"ok"`
	Output    json.RawMessage `json:"output,omitempty"`
	OutputRef *ContentRef     `json:"output_ref,omitempty"`
	// Preview is what a model reads of an output recorded by OutputRef:
	// the tool's own rendering for a model (an MCP result's text, a line
	// for each other block) or the output's JSON, cut to PreviewLimit.
	// Only beside OutputRef; absent from records written before it
	// existed, which a model reads as the ref alone (docs/adr/0102).
	Preview    string  `json:"preview,omitempty"`
	Error      string  `json:"error,omitempty"`
	DurationMS int64   `json:"duration_ms"`
	CostUSD    float64 `json:"cost_usd,omitempty"`
	// Egress is where the call's sandboxed processes asked to connect
	// through the egress proxy, one entry per destination and verdict:
	// the audit of where data went. Absent when nothing asked.
	Egress []Egress `json:"egress,omitempty"`
}

// Egress summarises the connections a sandboxed call asked the egress proxy
// for, to one host:port with one verdict.
type Egress struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	// Allowed says whether the proxy admitted them; Reason says why not.
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	// Connections is how many there were; BytesOut and BytesIn what crossed
	// them, from the sandbox and to it.
	Connections int   `json:"connections"`
	BytesOut    int64 `json:"bytes_out"`
	BytesIn     int64 `json:"bytes_in"`
}

// ToolCallDenied records a guard's DENY of a tool call, naming the guard.
type ToolCallDenied struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Guard  string `json:"guard"`
	Reason string `json:"reason"`
}

// SubtaskSpawned records a child task the guards allowed.
type SubtaskSpawned struct {
	SubtaskID string      `json:"subtask_id"`
	Agent     string      `json:"agent"`
	Goal      string      `json:"goal"`
	GoalRef   *ContentRef `json:"goal_ref,omitempty"`
	GroupID   string      `json:"group_id,omitempty"`
	CallID    string      `json:"call_id,omitempty"`
	// Budget is the child's allotment (TaskCreated.budget): reserved from
	// this task's remaining budget until its result is recorded.
	Budget *BudgetAllotment `json:"budget,omitempty"`
}

// SubtaskDenied records a guard's DENY of a spawn.
type SubtaskDenied struct {
	Agent   string `json:"agent"`
	Guard   string `json:"guard"`
	Reason  string `json:"reason"`
	GroupID string `json:"group_id,omitempty"`
}

// FinishDenied records a guard's DENY of a finish; TaskFailed follows it.
type FinishDenied struct {
	Guard  string `json:"guard"`
	Reason string `json:"reason"`
}

// GuardShadowed records what a shadow rule (one marked shadow: true) would
// have decided about a proposed action. It never decides: the action's own
// verdict record follows it, in the same batch, and the fold gives it no
// weight. One is written for each shadow rule that matched the action
// (docs/adr/0086-shadow-rules-are-judged-and-never-decide.md).
type GuardShadowed struct {
	// Action is the action point judged; CallID and Tool name a tool call,
	// Agent a spawn's child.
	Action ApprovalAction `json:"action"`
	CallID string         `json:"call_id,omitempty"`
	Tool   string         `json:"tool,omitempty"`
	Agent  string         `json:"agent,omitempty"`
	// Guard is the guard the shadow rule belongs to ("rules" or a rule
	// set's name); Rule is where the rule is in the config (rules[2],
	// guards[0].rules[1]), empty when the guard's shadow rules failed as a
	// whole.
	Guard string `json:"guard"`
	Rule  string `json:"rule,omitempty"`
	// Verdict and Reason are what the rule would have decided. Failed says
	// it could not judge (an error, a panic): its verdict is then the DENY
	// it would have failed closed to.
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	Failed  bool    `json:"failed,omitempty"`
	// Decided is the real verdict of the action, and DecidedBy the guard
	// that gave it (empty when every guard allowed).
	Decided   Verdict `json:"decided"`
	DecidedBy string  `json:"decided_by,omitempty"`
}

// Changed reports whether the shadow rule would have changed the decision.
func (g GuardShadowed) Changed() bool { return g.Verdict != g.Decided }

// ApprovalAction is the action point an approval was asked for.
type ApprovalAction string

// The approval action points.
const (
	ApprovalToolCall     ApprovalAction = "tool_call"
	ApprovalSpawnSubtask ApprovalAction = "spawn_subtask"
	ApprovalFinish       ApprovalAction = "finish"
)

// ApprovalRequested is the durable anchor of a REQUIRE_APPROVAL verdict, written
// before the task suspends on a human_response wake with Handle.
type ApprovalRequested struct {
	Handle  string          `json:"handle"`
	Action  ApprovalAction  `json:"action"`
	CallID  string          `json:"call_id,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsRef *ContentRef     `json:"args_ref,omitempty"`
	Agent   string          `json:"agent,omitempty"`
	Guard   string          `json:"guard"`
	Reason  string          `json:"reason"`
	// Quorum is how many distinct approvers must approve before the action
	// runs (absent: 1). Fixed when the request is made, by the approvals
	// rules that matched it.
	Quorum int `json:"quorum,omitempty"`
	// Rules names the approvals rules that matched the request; they say
	// who may answer it.
	Rules []string `json:"rules,omitempty"`
	// ExpiresAt is when the request resolves as denied by AuthTimer if no
	// answer resolved it (absent: never).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// ApprovalDecision is a human's answer to an approval request.
type ApprovalDecision string

// The approval decisions.
const (
	ApprovalApprove ApprovalDecision = "approve"
	ApprovalDeny    ApprovalDecision = "deny"
)

// ApprovalResolved records who decided an approval, and how.
type ApprovalResolved struct {
	Handle   string           `json:"handle"`
	Decision ApprovalDecision `json:"decision"`
	Approver string           `json:"approver"`
	Reason   string           `json:"reason,omitempty"`
	// Auth says how Approver was authenticated (AuthNATS, AuthToken,
	// AuthProxy, AuthLocal, AuthTimer, AuthElicitation, AuthClientPrompt).
	// Absent on records from before it was kept.
	Auth string `json:"auth,omitempty"`
	// Approvers lists every distinct approver of a quorum approval, in the
	// order they approved (Approver is the last of them).
	Approvers []string `json:"approvers,omitempty"`
}

// ApprovalCounted records one approval toward a request's quorum that does
// not yet meet it: the request stays open and the task waits on.
type ApprovalCounted struct {
	Handle   string `json:"handle"`
	Approver string `json:"approver"`
	Auth     string `json:"auth"`
	Reason   string `json:"reason,omitempty"`
	// Approvals is how many distinct approvers have approved so far
	// (this one included); Quorum how many the request needs.
	Approvals int `json:"approvals"`
	Quorum    int `json:"quorum"`
}

// ApprovalRefused records an answer that was not taken: its approver may
// not answer the request (the approvals rules, self-approval, a second
// approval by the same approver in a quorum) or was not authenticated. The
// request stays open.
type ApprovalRefused struct {
	Handle   string           `json:"handle"`
	Decision ApprovalDecision `json:"decision"`
	Approver string           `json:"approver"`
	Auth     string           `json:"auth"`
	// Reason says why the answer was refused; Text is what the answer said.
	Reason string `json:"reason"`
	Text   string `json:"text,omitempty"`
}

// SubtaskStatus is how a child task ended.
type SubtaskStatus string

// The subtask outcomes.
const (
	SubtaskStatusCompleted SubtaskStatus = "completed"
	SubtaskStatusFailed    SubtaskStatus = "failed"
	SubtaskStatusCancelled SubtaskStatus = "cancelled"
)

// SubtaskCompleted is written by the child-lifecycle observer into the parent's
// inbox (key subtask-<child>) when a child ends.
type SubtaskCompleted struct {
	SubtaskID string          `json:"subtask_id"`
	Status    SubtaskStatus   `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	ResultRef *ContentRef     `json:"result_ref,omitempty"`
	Error     string          `json:"error,omitempty"`
	GroupID   string          `json:"group_id,omitempty"`
}

// SubtaskResultRecorded is the parent's own record of what its inbox delivered;
// fold reads the log only, so results enter the parent's state through it.
type SubtaskResultRecorded struct {
	SubtaskID string          `json:"subtask_id"`
	Status    SubtaskStatus   `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	ResultRef *ContentRef     `json:"result_ref,omitempty"`
	Error     string          `json:"error,omitempty"`
	GroupID   string          `json:"group_id,omitempty"`
	// Spend is what the child's tree spent, read by the parent from the
	// child's log: it counts against the parent's budgets in place of the
	// child's allotment. Absent (a record written before budgets held for a
	// tree, or a child log that could not be read): the allotment counts
	// whole.
	Spend *TreeSpend `json:"spend,omitempty"`
}

// TaskStatePatched applies a patch to the task's free-form state.
type TaskStatePatched struct {
	Patch json.RawMessage `json:"patch"`
}

// TaskSuspended ends a segment: the task waits for WakeOn.
type TaskSuspended struct {
	Reason string `json:"reason"`
	WakeOn Wake   `json:"wake_on"`
}

// TaskWoken records the wake event a resumed segment consumed; exactly one per
// wake, which is how a redelivered wake is recognised as already consumed.
type TaskWoken struct {
	WakeEvent Wake `json:"wake_event"`
}

// TaskSnapshot points at a stored state covering records 1..UptoSeq.
type TaskSnapshot struct {
	StateRef ContentRef `json:"state_ref"`
	UptoSeq  uint64     `json:"upto_seq"`
}

// AbandonAction is what recovery does with an interrupted step attempt.
type AbandonAction string

// The recovery actions.
const (
	AbandonRedrive AbandonAction = "redrive"
	AbandonPark    AbandonAction = "park"
)

// StepAttemptAbandoned records that a worker found a turn another worker had
// left unfinished (it stopped or lost its lease mid-turn) and what it does
// about it: redrive (finish the turn; calls that were started and never
// finished are recorded as failed, never run again) or park (too many
// attempts at this turn in a row: the task suspends for a human). BaselineSeq
// is the seq of the TurnStarted that opened the interrupted turn.
type StepAttemptAbandoned struct {
	BaselineSeq uint64        `json:"baseline_seq"`
	Action      AbandonAction `json:"action"`
	Reason      string        `json:"reason"`
}

// TaskCompleted ends a task with its answer (or a ref to it).
type TaskCompleted struct {
	Answer    json.RawMessage `json:"answer,omitempty"`
	AnswerRef *ContentRef     `json:"answer_ref,omitempty"`
}

// TaskFailed ends a task with an error; Guard names the guard when one caused it.
type TaskFailed struct {
	Error string `json:"error"`
	Guard string `json:"guard,omitempty"`
}

// TaskCancelled ends a task on request.
type TaskCancelled struct {
	Reason string `json:"reason"`
}

func (TaskCreated) EventType() string           { return TypeTaskCreated }
func (LeaseGranted) EventType() string          { return TypeLeaseGranted }
func (TurnStarted) EventType() string           { return TypeTurnStarted }
func (PolicyDecided) EventType() string         { return TypePolicyDecided }
func (ToolCallStarted) EventType() string       { return TypeToolCallStarted }
func (ToolCallFinished) EventType() string      { return TypeToolCallFinished }
func (ToolCallDenied) EventType() string        { return TypeToolCallDenied }
func (SubtaskSpawned) EventType() string        { return TypeSubtaskSpawned }
func (SubtaskDenied) EventType() string         { return TypeSubtaskDenied }
func (FinishDenied) EventType() string          { return TypeFinishDenied }
func (GuardShadowed) EventType() string         { return TypeGuardShadowed }
func (ApprovalRequested) EventType() string     { return TypeApprovalRequested }
func (ApprovalResolved) EventType() string      { return TypeApprovalResolved }
func (ApprovalCounted) EventType() string       { return TypeApprovalCounted }
func (ApprovalRefused) EventType() string       { return TypeApprovalRefused }
func (SubtaskCompleted) EventType() string      { return TypeSubtaskCompleted }
func (SubtaskResultRecorded) EventType() string { return TypeSubtaskResultRecorded }
func (TaskStatePatched) EventType() string      { return TypeTaskStatePatched }
func (TaskSuspended) EventType() string         { return TypeTaskSuspended }
func (TaskWoken) EventType() string             { return TypeTaskWoken }
func (TaskSnapshot) EventType() string          { return TypeTaskSnapshot }
func (StepAttemptAbandoned) EventType() string  { return TypeStepAttemptAbandoned }
func (TaskCompleted) EventType() string         { return TypeTaskCompleted }
func (TaskFailed) EventType() string            { return TypeTaskFailed }
func (TaskCancelled) EventType() string         { return TypeTaskCancelled }

// NewPayload returns a pointer to a zero payload struct for a known type, for
// decoding; ok is false for a type outside the catalogue.
func NewPayload(eventType string) (p Payload, ok bool) {
	switch eventType {
	case TypeTaskCreated:
		return &TaskCreated{}, true
	case TypeLeaseGranted:
		return &LeaseGranted{}, true
	case TypeTurnStarted:
		return &TurnStarted{}, true
	case TypePolicyDecided:
		return &PolicyDecided{}, true
	case TypeToolCallStarted:
		return &ToolCallStarted{}, true
	case TypeToolCallFinished:
		return &ToolCallFinished{}, true
	case TypeToolCallDenied:
		return &ToolCallDenied{}, true
	case TypeSubtaskSpawned:
		return &SubtaskSpawned{}, true
	case TypeSubtaskDenied:
		return &SubtaskDenied{}, true
	case TypeFinishDenied:
		return &FinishDenied{}, true
	case TypeGuardShadowed:
		return &GuardShadowed{}, true
	case TypeApprovalRequested:
		return &ApprovalRequested{}, true
	case TypeApprovalResolved:
		return &ApprovalResolved{}, true
	case TypeApprovalCounted:
		return &ApprovalCounted{}, true
	case TypeApprovalRefused:
		return &ApprovalRefused{}, true
	case TypeSubtaskCompleted:
		return &SubtaskCompleted{}, true
	case TypeSubtaskResultRecorded:
		return &SubtaskResultRecorded{}, true
	case TypeTaskStatePatched:
		return &TaskStatePatched{}, true
	case TypeTaskSuspended:
		return &TaskSuspended{}, true
	case TypeTaskWoken:
		return &TaskWoken{}, true
	case TypeTaskSnapshot:
		return &TaskSnapshot{}, true
	case TypeStepAttemptAbandoned:
		return &StepAttemptAbandoned{}, true
	case TypeTaskCompleted:
		return &TaskCompleted{}, true
	case TypeTaskFailed:
		return &TaskFailed{}, true
	case TypeTaskCancelled:
		return &TaskCancelled{}, true
	}
	return nil, false
}
