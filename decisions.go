package noeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// ErrInvalidDecision is wrapped by [Decision.Validate].
var ErrInvalidDecision = errors.New("noeta: invalid decision")

// MaxCallIDLen bounds a tool call id. Call ids are folded into approval handles
// (approval-<call_id>) and idempotency keys, which are subject tokens and key
// parts, so they follow the same rules as other tokens.
const MaxCallIDLen = 64

var decisionKinds = []DecisionKind{
	DecisionToolCalls, DecisionSpawn, DecisionYieldForHuman, DecisionWaitTimer,
	DecisionWaitExternal, DecisionStatePatch, DecisionFinish, DecisionFail,
}

// DecisionKinds returns every decision kind, in the order of the vocabulary.
func DecisionKinds() []DecisionKind { return append([]DecisionKind(nil), decisionKinds...) }

// Valid reports whether k is one of the decision kinds.
func (k DecisionKind) Valid() bool {
	for _, d := range decisionKinds {
		if d == k {
			return true
		}
	}
	return false
}

// Decision is what a policy returns for one turn: exactly one thing the task
// should do next, plus what deciding it cost. The engine routes it by Kind
// (tool calls continue the turn loop; a spawn, a yield for a human and the two
// waits suspend the task; a state patch continues; finish and fail end it) and
// records Kind and the cost in PolicyDecided.
//
// It is a plain value: one payload field per kind, and only the field of its
// Kind may be set ([Decision.Validate] checks this), so a decision cannot mean
// two things. The JSON tags are for logs and tests; the event log records a
// decision's parts in the events it causes, not the struct itself.
type Decision struct {
	Kind DecisionKind `json:"kind"`

	// tool_calls: the calls to run, in order. Each has a call id unique in the
	// decision; a policy must derive it deterministically from the turn, so a
	// re-driven step proposes the same ids and the engine can recognise a call
	// it already recorded.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// spawn: the children to start; two or more make a fan-out group.
	Spawn []SpawnSpec `json:"spawn,omitempty"`
	// yield_for_human: what to ask.
	Question string `json:"question,omitempty"`
	// wait_timer: how long to sleep, in seconds (>= 0).
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
	// wait_external: the event_kind of the external event to wait for.
	EventKind string `json:"event_kind,omitempty"`
	// state_patch: a JSON object merged into the task's free-form state.
	Patch json.RawMessage `json:"patch,omitempty"`
	// finish: the answer, any JSON value (a JSON string for plain text).
	Answer json.RawMessage `json:"answer,omitempty"`
	// fail: why the task fails.
	Error string `json:"error,omitempty"`

	// Text is what the model said in the turn beside its decision: the
	// text content of the reply that asked for tool calls, a subtask or a
	// human ("Let me check the file first."). Any kind may carry it; a
	// finish whose answer is the reply's text leaves it empty rather than
	// record the words twice. The engine records it whole in PolicyDecided
	// (inline or by ref) and shows it to the model again as its own words
	// in later turns (docs/adr/0084).
	Text string `json:"text,omitempty"`

	// What deciding cost, for any kind; the budget reads it from PolicyDecided.
	CostUSD      float64 `json:"cost_usd,omitempty"`
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`

	// Who decided and how long it took, for a model policy (a scripted
	// policy leaves them empty). Recorded in PolicyDecided.
	Model     string `json:"model,omitempty"`
	Provider  string `json:"provider,omitempty"`
	LatencyMS int64  `json:"latency_ms,omitempty"`
	// Response is the provider's raw response body, kept for audit and
	// debugging: the engine puts it in the content store and records its ref
	// (response_ref), never the body inline.
	Response []byte `json:"-"`
	// Notes say what happened on the way that is not the decision (a retry
	// after a 429, a transcript elided to its budget); recorded with it.
	Notes []string `json:"notes,omitempty"`
}

// PolicyInput is what the engine tells a policy when it asks for a turn's
// decision. It is a struct so that what a policy may read can grow without
// changing Decide's signature.
type PolicyInput struct {
	// Task is the id of the task deciding.
	Task string
	// Turn is 1-based: the turn being decided (TurnStarted.turn).
	Turn int
	// Agent is the task's agent.
	Agent string
	// Context is the task so far as a model reads it: the goal, every
	// earlier decision, tool result, denial, approval, subtask result and
	// human answer, composed from the log (deterministically: the same log
	// gives the same transcript).
	Context *Transcript
	// Tools are the tools the agent may call, with their input schemas: a
	// model is offered exactly these.
	Tools []ToolSpec
	// SpawnAgents are the agents the task may spawn as subtasks (none: it
	// may not spawn).
	SpawnAgents []string
}

// ToolSpec describes a tool to a model.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of the tool's arguments (an object).
	InputSchema json.RawMessage `json:"input_schema"`
	// Risk is the tool's risk level: low, medium or high.
	Risk string `json:"risk,omitempty"`
}

// MessageRole is who speaks a [Message].
type MessageRole string

const (
	// RoleUser: the task's goal, a human's answer, a wake, a subtask's
	// result, an approval's outcome — what the world says to the agent.
	RoleUser MessageRole = "user"
	// RoleAssistant: a decision the agent made (its text and tool calls).
	RoleAssistant MessageRole = "assistant"
	// RoleTool: the result of one tool call, or why it did not run.
	RoleTool MessageRole = "tool"
)

// Transcript is a task as a model reads it, composed from its log. The
// system prompt is the policy's own (it is the agent's configuration, not
// the task's history).
type Transcript struct {
	Messages []Message `json:"messages"`
	// Elided counts the tool outputs left out, oldest first, to keep the
	// transcript within a budget; each left a note in its place.
	Elided int `json:"elided,omitempty"`
}

// Message is one entry of a [Transcript].
type Message struct {
	Role MessageRole `json:"role"`
	Text string      `json:"text,omitempty"`
	// ToolCalls are the calls an assistant message asked for, with their
	// ids and arguments as recorded.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID and ToolName name the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	// IsError marks a tool message whose call failed, was denied by a
	// guard, refused by a human or could not run; Text says why (a denial
	// names the guard and its reason).
	IsError bool `json:"is_error,omitempty"`
}

// SpawnSpec is one child a spawn decision asks for. The engine turns it into a
// [SpawnSubtask] for the guards (adding the group and call ids it assigns) and
// into the child's TaskCreated.
type SpawnSpec struct {
	Agent string `json:"agent"`
	Goal  string `json:"goal"`
	// Script is the child's own script, as JSON. It is opaque to the engine,
	// which hands it to the child's policy; a policy that does not script its
	// children leaves it empty.
	Script json.RawMessage `json:"script,omitempty"`
}

// Validate reports a decision the engine cannot act on: an unknown kind, a
// missing or malformed field of its kind, a field of another kind that is set,
// or a negative or non-finite cost. The error wraps [ErrInvalidDecision] and
// names the field as its JSON tag does (tool_calls[1].args). Limits that are
// governance — how many children a fan-out may have, which tools exist — are
// not checked here: the engine records those refusals as events.
func (d Decision) Validate() error {
	fail := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidDecision, field, fmt.Sprintf(format, args...))
	}
	if !d.Kind.Valid() {
		if d.Kind == "" {
			return fail("kind", "is empty")
		}
		return fail("kind", "unknown kind %q", d.Kind)
	}
	// Exactly the fields of its kind: anything else set would be silently
	// ignored by the engine, which hides a policy bug.
	set := []struct {
		field string
		kind  DecisionKind
		isSet bool
	}{
		{"tool_calls", DecisionToolCalls, d.ToolCalls != nil},
		{"spawn", DecisionSpawn, d.Spawn != nil},
		{"question", DecisionYieldForHuman, d.Question != ""},
		{"wait_seconds", DecisionWaitTimer, d.WaitSeconds != 0},
		{"event_kind", DecisionWaitExternal, d.EventKind != ""},
		{"patch", DecisionStatePatch, d.Patch != nil},
		{"answer", DecisionFinish, d.Answer != nil},
		{"error", DecisionFail, d.Error != ""},
	}
	for _, s := range set {
		if s.isSet && s.kind != d.Kind {
			return fail(s.field, "is set in a %s decision; only a %s decision has it", d.Kind, s.kind)
		}
	}
	switch d.Kind {
	case DecisionToolCalls:
		if len(d.ToolCalls) == 0 {
			return fail("tool_calls", "needs at least one call")
		}
		seen := make(map[string]int, len(d.ToolCalls))
		for i, c := range d.ToolCalls {
			p := fmt.Sprintf("tool_calls[%d]", i)
			if err := ValidateToken("call id", c.CallID, MaxCallIDLen); err != nil {
				return fail(p+".call_id", "%v", err)
			}
			if j, dup := seen[c.CallID]; dup {
				return fail(p+".call_id", "%q is also the id of tool_calls[%d]", c.CallID, j)
			}
			seen[c.CallID] = i
			if c.Invalid != "" {
				// A call the model asked for that cannot run: recorded as a
				// failed call, whatever its tool and arguments were.
				continue
			}
			if c.Tool == "" {
				return fail(p+".tool", "is empty")
			}
			if !isJSONObject(c.Args) {
				return fail(p+".args", "must be a JSON object")
			}
		}
	case DecisionSpawn:
		if len(d.Spawn) == 0 {
			return fail("spawn", "needs at least one child")
		}
		for i, s := range d.Spawn {
			p := fmt.Sprintf("spawn[%d]", i)
			if s.Agent == "" {
				return fail(p+".agent", "is empty")
			}
			if s.Goal == "" {
				return fail(p+".goal", "is empty")
			}
			if len(s.Script) > 0 && !json.Valid(s.Script) {
				return fail(p+".script", "is not valid JSON")
			}
		}
	case DecisionYieldForHuman:
		if d.Question == "" {
			return fail("question", "is empty")
		}
	case DecisionWaitTimer:
		if !(d.WaitSeconds >= 0) || math.IsInf(d.WaitSeconds, 0) {
			return fail("wait_seconds", "must be a finite number >= 0, not %v", d.WaitSeconds)
		}
	case DecisionWaitExternal:
		if d.EventKind == "" {
			return fail("event_kind", "is empty")
		}
	case DecisionStatePatch:
		if !isJSONObject(d.Patch) {
			return fail("patch", "must be a JSON object")
		}
	case DecisionFinish:
		if len(d.Answer) == 0 {
			return fail("answer", "is missing (give any JSON value; a string for plain text)")
		}
		if !json.Valid(d.Answer) {
			return fail("answer", "is not valid JSON")
		}
	case DecisionFail:
		if d.Error == "" {
			return fail("error", "is empty")
		}
	}
	if !(d.CostUSD >= 0) || math.IsInf(d.CostUSD, 0) {
		return fail("cost_usd", "must be a finite number >= 0, not %v", d.CostUSD)
	}
	if d.InputTokens < 0 {
		return fail("input_tokens", "must be >= 0, not %d", d.InputTokens)
	}
	if d.OutputTokens < 0 {
		return fail("output_tokens", "must be >= 0, not %d", d.OutputTokens)
	}
	if d.LatencyMS < 0 {
		return fail("latency_ms", "must be >= 0, not %d", d.LatencyMS)
	}
	return nil
}

// isJSONObject reports whether b is one valid JSON value that is an object.
func isJSONObject(b json.RawMessage) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(b)
}

// Clone returns a deep copy: nothing in it shares memory with d, so a policy
// can hand out decisions without its caller being able to change the next one.
func (d Decision) Clone() Decision {
	c := d
	if d.ToolCalls != nil {
		c.ToolCalls = make([]ToolCall, len(d.ToolCalls))
		for i, tc := range d.ToolCalls {
			tc.Args = cloneRaw(tc.Args)
			c.ToolCalls[i] = tc
		}
	}
	if d.Spawn != nil {
		c.Spawn = make([]SpawnSpec, len(d.Spawn))
		for i, s := range d.Spawn {
			s.Script = cloneRaw(s.Script)
			c.Spawn[i] = s
		}
	}
	c.Patch = cloneRaw(d.Patch)
	c.Answer = cloneRaw(d.Answer)
	if d.Response != nil {
		c.Response = append([]byte(nil), d.Response...)
	}
	if d.Notes != nil {
		c.Notes = append([]string(nil), d.Notes...)
	}
	return c
}
