package noeta

import (
	"encoding/json"
	"fmt"
)

// Verdict is a guard's answer. The zero value is not a verdict at all, and
// everything that reads one treats it as a denial: a guard that forgets to
// answer cannot let an action through.
type Verdict uint8

// The verdicts; the wire strings are allow, deny and require_approval.
const (
	VerdictUnset Verdict = iota
	VerdictAllow
	VerdictDeny
	VerdictRequireApproval
)

func (v Verdict) String() string {
	switch v {
	case VerdictAllow:
		return "allow"
	case VerdictDeny:
		return "deny"
	case VerdictRequireApproval:
		return "require_approval"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// MarshalText writes the wire string; an unset verdict is refused rather than
// written as something a reader could take for a decision.
func (v Verdict) MarshalText() ([]byte, error) {
	switch v {
	case VerdictAllow, VerdictDeny, VerdictRequireApproval:
		return []byte(v.String()), nil
	}
	return nil, fmt.Errorf("noeta: cannot encode %s", v)
}

// UnmarshalText reads a wire string.
func (v *Verdict) UnmarshalText(b []byte) error {
	switch string(b) {
	case "allow":
		*v = VerdictAllow
	case "deny":
		*v = VerdictDeny
	case "require_approval":
		*v = VerdictRequireApproval
	default:
		return fmt.Errorf("noeta: unknown verdict %q (want allow, deny or require_approval)", b)
	}
	return nil
}

// VerdictResult is a verdict with its reason. A DENY or REQUIRE_APPROVAL always
// carries a reason; it is what the audit trail shows.
type VerdictResult struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason,omitempty"`
}

// Allow lets the action through.
func Allow() VerdictResult { return VerdictResult{Verdict: VerdictAllow} }

// Deny refuses the action for reason.
func Deny(reason string) VerdictResult { return VerdictResult{Verdict: VerdictDeny, Reason: reason} }

// RequireApproval suspends the action until a human decides.
func RequireApproval(reason string) VerdictResult {
	return VerdictResult{Verdict: VerdictRequireApproval, Reason: reason}
}

// IsAllow reports an explicit allow; the zero value is not one.
func (r VerdictResult) IsAllow() bool { return r.Verdict == VerdictAllow }

// ProposedAction is what the engine asks the guards about, at one of the three
// action points: [ProposedToolCall], [ProposedSpawnSubtask], [ProposedFinish].
// The set is closed.
type ProposedAction interface{ actionPoint() string }

// ToolCall is one call a policy proposed.
type ToolCall struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	// Invalid, set by a policy, says why a call the model asked for cannot
	// run (its arguments are not JSON, its tool is unknown): the engine
	// records it as a failed call, fed back to the model, and never runs it
	// or asks a guard about it. Args then hold what the model sent, if it
	// was JSON.
	Invalid string `json:"invalid,omitempty"`
}

// SpawnSubtask is one child a policy proposed; GroupID is set for members of a
// fan-out.
type SpawnSubtask struct {
	Agent   string `json:"agent"`
	Goal    string `json:"goal"`
	GroupID string `json:"group_id,omitempty"`
	CallID  string `json:"call_id,omitempty"`
}

// ProposedToolCall asks whether a tool call may run.
type ProposedToolCall struct{ Call ToolCall }

// ProposedSpawnSubtask asks whether a child task may be spawned.
type ProposedSpawnSubtask struct{ Spawn SpawnSubtask }

// ProposedFinish asks whether the task may finish with Answer.
type ProposedFinish struct{ Answer json.RawMessage }

func (ProposedToolCall) actionPoint() string     { return "tool_call" }
func (ProposedSpawnSubtask) actionPoint() string { return "spawn_subtask" }
func (ProposedFinish) actionPoint() string       { return "finish" }

// ActionPoint names the action point of a: tool_call, spawn_subtask or finish.
func ActionPoint(a ProposedAction) string {
	if a == nil {
		return ""
	}
	return a.actionPoint()
}
