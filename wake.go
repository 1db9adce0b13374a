package noeta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidWake is wrapped by [Wake.Validate].
var ErrInvalidWake = errors.New("noeta: invalid wake")

// WakeKind names one of the five things a suspended task can wait for.
type WakeKind string

// The wake kinds. A condition (what a suspended task waits for) and an event
// (what arrived) share one shape, so a matched event can be stored and
// re-delivered byte for byte.
const (
	WakeSubtaskCompleted      WakeKind = "subtask_completed"
	WakeSubtaskGroupCompleted WakeKind = "subtask_group_completed"
	WakeHumanResponse         WakeKind = "human_response"
	WakeTimerFired            WakeKind = "timer_fired"
	WakeExternalEvent         WakeKind = "external_event"
)

// Wake is a wake condition or a wake event: {kind, …}. Only the identity field of
// each kind takes part in matching (see [Matches]); the others carry what the
// waker had to say (a human's decision, the members of a group, event data).
type Wake struct {
	Kind WakeKind `json:"kind"`

	// subtask_completed: SubtaskID. subtask_group_completed: GroupID, SubtaskIDs.
	SubtaskID  string   `json:"subtask_id,omitempty"`
	GroupID    string   `json:"group_id,omitempty"`
	SubtaskIDs []string `json:"subtask_ids,omitempty"`

	// human_response: Handle, and what the human said.
	Handle   string `json:"handle,omitempty"`
	Decision string `json:"decision,omitempty"`
	Text     string `json:"text,omitempty"`
	Approver string `json:"approver,omitempty"`
	// Auth says how Approver was authenticated (one of the Auth*
	// constants). Whoever delivers the wake sets it, never the sender's
	// body: the dispatcher from the subject the answer arrived on, the HTTP
	// layer from its credentials, the embedded CLI as AuthLocal.
	Auth string `json:"auth,omitempty"`
	// ExpireAt, on a human_response condition: when the request expires.
	// The dispatcher arms a broker-fired timer for it; at the deadline the
	// task is woken with an answer from AuthTimer (a denial). Not part of
	// matching.
	ExpireAt time.Time `json:"expire_at,omitzero"`
	// ReceivedAt, on a human_response event: when the answer reached the
	// dispatcher's input, by the clock of whoever received it: the
	// broker's own timestamp of the message on the wake stream (an
	// approval subject, the plain wake subject), or the clock of the
	// dispatcher an in-process answer was handed to. Every dispatcher
	// overwrites it, never takes it from the sender, so an answerer
	// cannot date an answer before the request's expiry. The engine
	// judges an answer against ExpireAt by it, not by when the answer is
	// judged: an answer received before the deadline counts however late
	// the task is woken, one received after never does. Not part of
	// matching.
	ReceivedAt time.Time `json:"received_at,omitzero"`

	// timer_fired: the recorded deadline, in UTC. A fired timer carries the
	// deadline it was set for, not the time it fired, so a redelivery is
	// byte-identical.
	FireAt time.Time `json:"fire_at,omitzero"`

	// external_event: EventKind, and optional JSON data.
	EventKind string          `json:"event_kind,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// How an answer's approver was authenticated (Wake.Auth,
// ApprovalResolved.Auth, ApprovalRefused.Auth).
const (
	// AuthNATS: the broker vouches: the answer arrived on the approver's own
	// approval subject (<prefix>.approve.<approver>.<p>.<task>), which only
	// that approver's NATS user may publish to.
	AuthNATS = "nats"
	// AuthToken: an HTTP bearer token whose hash the serve config holds.
	AuthToken = "token"
	// AuthProxy: a header set by an authenticating reverse proxy the config
	// trusts explicitly.
	AuthProxy = "proxy"
	// AuthLocal: the local user on the embedded default (cli:$USER), who
	// can read the data directory and so could write the store anyway.
	AuthLocal = "local"
	// AuthTimer: no one answered before the request's expiry; the broker's
	// timer resolves it as denied.
	AuthTimer = "timer"
	// AuthElicitation: the gateway asked its MCP client's own user
	// (elicitation) and the session's principal answered; the session
	// was authenticated as the client's (a bearer token, a trusted proxy,
	// or the local user over stdio). Only for agents whose approval: is
	// elicitation (docs/adr/0100).
	AuthElicitation = "elicitation"
	// AuthClientPrompt: the gateway handed the approval of a Claude Code
	// hook session's call to Claude Code's own permission prompt, as an
	// approval by the session's principal (authenticated as the hook's
	// client: a bearer token, a trusted proxy, or the local user); the
	// call runs only if Claude Code's user allows it there, and its
	// ToolCallFinished says whether it ran. Only for agents whose
	// approval: names client_prompt (docs/adr/0106).
	AuthClientPrompt = "client_prompt"
	// AuthNone: a plain wake on the wake ingress, which any publisher of
	// wakes may send: it proves nothing about who answered. On a remote
	// NATS it may not resolve an approval.
	AuthNone = "none"
)

// ApproverTimeout is the approver recorded when a request expires.
const ApproverTimeout = "timeout"

// SubtaskCompletedWake is the condition (or event) for one subtask finishing.
func SubtaskCompletedWake(subtaskID string) Wake {
	return Wake{Kind: WakeSubtaskCompleted, SubtaskID: subtaskID}
}

// GroupCompletedWake is the condition (or event) for every member of a fan-out
// group finishing.
func GroupCompletedWake(groupID string, subtaskIDs []string) Wake {
	return Wake{Kind: WakeSubtaskGroupCompleted, GroupID: groupID, SubtaskIDs: append([]string(nil), subtaskIDs...)}
}

// HumanResponseWake is the condition for an answer on handle.
func HumanResponseWake(handle string) Wake { return Wake{Kind: WakeHumanResponse, Handle: handle} }

// TimerWake is the condition for a deadline. The instant is kept in UTC without
// a monotonic reading, so it encodes the same way everywhere.
func TimerWake(at time.Time) Wake { return Wake{Kind: WakeTimerFired, FireAt: at.UTC().Round(0)} }

// ExternalWake is the condition for an external event of eventKind.
func ExternalWake(eventKind string) Wake { return Wake{Kind: WakeExternalEvent, EventKind: eventKind} }

// DeriveGroupID names a fan-out group after its members: "g-" and the first 16
// hex digits of sha256 over the ids joined with ":". The same members always give
// the same group, so a re-run step derives the same id.
func DeriveGroupID(subtaskIDs []string) string {
	sum := sha256.Sum256([]byte(strings.Join(subtaskIDs, ":")))
	return "g-" + hex.EncodeToString(sum[:])[:16]
}

// Validate reports a wake whose kind is unknown or whose identity field is
// missing.
func (w Wake) Validate() error {
	switch w.Kind {
	case WakeSubtaskCompleted:
		if w.SubtaskID == "" {
			return fmt.Errorf("%w: subtask_completed needs subtask_id", ErrInvalidWake)
		}
	case WakeSubtaskGroupCompleted:
		if w.GroupID == "" {
			return fmt.Errorf("%w: subtask_group_completed needs group_id", ErrInvalidWake)
		}
	case WakeHumanResponse:
		if w.Handle == "" {
			return fmt.Errorf("%w: human_response needs handle", ErrInvalidWake)
		}
	case WakeTimerFired:
		if w.FireAt.IsZero() {
			return fmt.Errorf("%w: timer_fired needs fire_at", ErrInvalidWake)
		}
	case WakeExternalEvent:
		if w.EventKind == "" {
			return fmt.Errorf("%w: external_event needs event_kind", ErrInvalidWake)
		}
	case "":
		return fmt.Errorf("%w: kind is empty", ErrInvalidWake)
	default:
		return fmt.Errorf("%w: unknown kind %q (want subtask_completed, subtask_group_completed, human_response, timer_fired or external_event)", ErrInvalidWake, w.Kind)
	}
	if w.Kind != WakeHumanResponse && (w.Auth != "" || !w.ExpireAt.IsZero()) {
		return fmt.Errorf("%w: auth and expire_at belong to human_response, not %s", ErrInvalidWake, w.Kind)
	}
	if len(w.Data) > 0 && !json.Valid(w.Data) {
		return fmt.Errorf("%w: data is not valid JSON", ErrInvalidWake)
	}
	return nil
}

// WithoutExpiry returns w with ExpireAt cleared: the condition as matching
// and recording see it once its timer is armed.
func (w Wake) WithoutExpiry() Wake {
	w.ExpireAt = time.Time{}
	return w
}

// Matches reports whether event satisfies cond. It is the reference's truth
// table and every backend uses it:
//
//   - nil on either side never matches, nor do two different kinds;
//   - subtask_completed: same subtask_id;
//   - subtask_group_completed: same group_id (the member list is informational);
//   - human_response: same handle;
//   - external_event: same event_kind;
//   - timer_fired: event.fire_at >= cond.fire_at (inclusive: a timer that fires
//     exactly at its deadline is due).
func Matches(cond, event *Wake) bool {
	if cond == nil || event == nil || cond.Kind != event.Kind {
		return false
	}
	switch cond.Kind {
	case WakeSubtaskCompleted:
		return cond.SubtaskID == event.SubtaskID
	case WakeSubtaskGroupCompleted:
		return cond.GroupID == event.GroupID
	case WakeHumanResponse:
		return cond.Handle == event.Handle
	case WakeExternalEvent:
		return cond.EventKind == event.EventKind
	case WakeTimerFired:
		return !event.FireAt.Before(cond.FireAt)
	}
	return false
}

// Equal reports whether a and b have the same canonical bytes. A consuming
// release names the wake it consumed and the dispatcher compares with this, so
// equality is about what was recorded, not about pointer identity.
func (w Wake) Equal(o Wake) bool {
	a, errA := Canonical(w)
	b, errB := Canonical(o)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// Clone returns a deep copy.
func (w Wake) Clone() Wake {
	c := w
	c.SubtaskIDs = append([]string(nil), w.SubtaskIDs...)
	if w.SubtaskIDs == nil {
		c.SubtaskIDs = nil
	}
	c.Data = append(json.RawMessage(nil), w.Data...)
	if w.Data == nil {
		c.Data = nil
	}
	return c
}
