package eventlog

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/noeta-go/noeta"
)

// Origin is the role that appended a record. It is provenance, never a control
// input: nothing decides on it.
type Origin string

// The origins, a closed set.
const (
	OriginEngine   Origin = "engine"
	OriginLLM      Origin = "llm"
	OriginTool     Origin = "tool"
	OriginObserver Origin = "observer"
	OriginSystem   Origin = "system"
	// OriginClient marks a decision that came from outside the engine: a
	// tool call an MCP client sent through the gateway (docs/adr/0090).
	OriginClient Origin = "client"
)

// Validate refuses anything outside the closed set.
func (o Origin) Validate() error {
	switch o {
	case OriginEngine, OriginLLM, OriginTool, OriginObserver, OriginSystem, OriginClient:
		return nil
	case "":
		return fmt.Errorf("%w: origin is empty (want engine, llm, tool, observer, system or client)", ErrInvalidArgument)
	}
	return fmt.Errorf("%w: origin %q is not one of engine, llm, tool, observer, system, client", ErrInvalidArgument, string(o))
}

// Envelope is one record of a task: the payload and everything known about its
// append. Backends stamp ID, Seq (log records), Key (inbox records), Time and
// LeaseGen; callers fill the rest.
type Envelope struct {
	ID   string // ULID, minted by the backend, unique forever
	Task string // the task id
	// Seq is the record's position in the task's log: 1 for TaskCreated, then
	// dense. Inbox records have Seq 0 and carry Key instead.
	Seq uint64
	Key string // inbox key, for SystemEmit records only

	Type   string    // event type, see noeta.EventTypes; unknown types are stored and read back
	Time   time.Time // append time, from the backend's clock
	Actor  string    // free-form identity of the writer instance; required
	Origin Origin    // required

	TraceParent   string // W3C traceparent of the step that wrote it, if any
	CausationID   string // id of the record or request that caused this one, if any
	CorrelationID string // the root task id; defaults to Task

	// LeaseGen is the lease generation a log record was written under (0 for
	// TaskCreated and inbox records).
	LeaseGen uint64

	// Payload is the record's JSON object. Backends store its canonical form
	// (noeta.CanonicalizeJSON), and the cap applies to that form.
	//
	// Envelopes go in and out of a backend by copy: changing the Payload of an
	// envelope after Emit took it, or of one that Read, Emit or a Handler got,
	// changes nothing stored and nothing another reader sees.
	Payload json.RawMessage

	// typed vouches that NewEnvelope built Payload from a typed value of
	// Type; see FromTyped. Backends drop it in PrepareRecord, so no stored,
	// returned or delivered envelope carries it.
	typed typedMark
}

// typedMark is what NewEnvelope saw: the type and a hash of the exact
// payload bytes it produced. A payload changed afterwards — replaced, or
// edited in place — no longer matches and is validated like any other.
type typedMark struct {
	typ string
	sum uint64
}

// typedSeed keys the payload hashes; it is per process, so a hash cannot
// be computed ahead to match a payload other than the one NewEnvelope made.
var typedSeed = maphash.MakeSeed()

// FromTyped reports whether env's payload is still exactly what
// NewEnvelope produced from a typed Go value of env.Type: its schema check
// may be skipped, because the engine's own structs are what the schemas
// describe (ADR 0037). Anything built by hand, decoded from outside (task
// files, tools' outputs, observers' reads), or changed after NewEnvelope is
// not, and a backend validates it. Call it before PrepareRecord.
func FromTyped(env Envelope) bool {
	return env.typed.typ != "" && env.typed.typ == env.Type &&
		env.typed.sum == maphash.Bytes(typedSeed, env.Payload)
}

// NewEnvelope builds an envelope for a typed payload: Type from the payload,
// Payload its canonical JSON.
func NewEnvelope(task string, origin Origin, actor string, p noeta.Payload) (Envelope, error) {
	b, err := noeta.Canonical(p)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: payload of %s: %v", ErrInvalidArgument, p.EventType(), err)
	}
	t := p.EventType()
	return Envelope{Task: task, Type: t, Origin: origin, Actor: actor, Payload: b,
		typed: typedMark{typ: t, sum: maphash.Bytes(typedSeed, b)}}, nil
}

// Decode unmarshals the payload into the struct of its type. ok is false for a
// type outside the catalogue; readers skip those.
func (e Envelope) Decode() (p noeta.Payload, ok bool, err error) {
	p, ok = noeta.NewPayload(e.Type)
	if !ok {
		return nil, false, nil
	}
	if err := json.Unmarshal(e.Payload, p); err != nil {
		return nil, true, fmt.Errorf("eventlog: decode %s seq %d of task %s: %w", e.Type, e.Seq, e.Task, err)
	}
	return p, true, nil
}

// Clone returns a copy that shares no memory with e.
func (e Envelope) Clone() Envelope {
	e.Payload = append(json.RawMessage(nil), e.Payload...)
	return e
}

// MaxActorLen bounds Actor; it travels in headers and in CloudEvents source.
const MaxActorLen = 256

// MaxTypeLen bounds Type.
const MaxTypeLen = 128

// MaxInboxKeyLen bounds a SystemEmit key; keys are subject tokens.
const MaxInboxKeyLen = 128

// PrepareRecord validates the caller's part of env for an append to task and
// returns it with the payload in canonical form and CorrelationID defaulted.
// The payload may be the caller's own bytes (when they were canonical already):
// a backend that keeps it in memory copies it. It
// does not check the cap: the cap is reported after an idempotent hit, so
// callers check len(Payload) against noeta.PayloadMaxBytes themselves at the
// right point. Every backend calls it, so validation reads the same everywhere.
func PrepareRecord(task string, env Envelope) (Envelope, error) {
	if err := noeta.ValidateTaskID(task); err != nil {
		return env, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if env.Task != "" && env.Task != task {
		return env, fmt.Errorf("%w: envelope task %q differs from target task %q", ErrInvalidArgument, env.Task, task)
	}
	env.Task = task
	// A payload still as NewEnvelope encoded it is canonical JSON already:
	// the scan that would say so was a few percent of a short task's CPU.
	typed := FromTyped(env)
	env.typed = typedMark{}
	if err := validateType(env.Type); err != nil {
		return env, err
	}
	if err := env.Origin.Validate(); err != nil {
		return env, err
	}
	if env.Actor == "" {
		return env, fmt.Errorf("%w: actor is empty", ErrInvalidArgument)
	}
	if len(env.Actor) > MaxActorLen {
		return env, fmt.Errorf("%w: actor is %d bytes, the limit is %d", ErrInvalidArgument, len(env.Actor), MaxActorLen)
	}
	if len(env.Payload) == 0 {
		return env, fmt.Errorf("%w: payload of %s is empty (want a JSON object)", ErrInvalidArgument, env.Type)
	}
	canon := env.Payload
	if !typed {
		var err error
		if canon, err = noeta.CanonicalizeJSON(env.Payload); err != nil {
			return env, fmt.Errorf("%w: payload of %s: %v", ErrInvalidArgument, env.Type, err)
		}
	}
	if canon[0] != '{' {
		return env, fmt.Errorf("%w: payload of %s is not a JSON object", ErrInvalidArgument, env.Type)
	}
	env.Payload = canon
	if env.CorrelationID == "" {
		env.CorrelationID = task
	}
	return env, nil
}

// CheckCap returns ErrPayloadTooLarge when the canonical payload is over the cap.
func CheckCap(env Envelope) error {
	if len(env.Payload) > noeta.PayloadMaxBytes {
		return fmt.Errorf("%w: task_id=%s, type=%s, size=%d, cap=%d", ErrPayloadTooLarge, env.Task, env.Type, len(env.Payload), noeta.PayloadMaxBytes)
	}
	return nil
}

func validateType(t string) error {
	if t == "" {
		return fmt.Errorf("%w: type is empty", ErrInvalidArgument)
	}
	if len(t) > MaxTypeLen {
		return fmt.Errorf("%w: type is %d bytes, the limit is %d", ErrInvalidArgument, len(t), MaxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return fmt.Errorf("%w: type %q has %q at byte %d; a type is a letter followed by letters and digits", ErrInvalidArgument, t, c, i)
	}
	return nil
}
