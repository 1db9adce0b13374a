package jetstream

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/schemas"
)

// Headers repeat what consumers filter on, so they need not parse the body.
// NATS headers are case-sensitive; traceparent is lowercase as W3C spells it.
const (
	hdrType        = "Noeta-Type"
	hdrSeq         = "Noeta-Seq"
	hdrOrigin      = "Noeta-Origin"
	hdrLease       = "Noeta-Lease"
	hdrLeaseGen    = "Noeta-Lease-Gen"
	hdrBaseline    = "Noeta-Baseline" // "<seq>:<stream seq>" of the newest baseline before this record
	hdrIdempotency = "Noeta-Idempotency-Key"
	hdrTraceParent = "traceparent"

	contentTypeCE = "application/cloudevents+json"
)

// ErrCorrupt is wrapped by reads of a record that does not decode as one of
// ours; the message carries its stream sequence. It is eventlog.ErrCorrupt.
var ErrCorrupt = eventlog.ErrCorrupt

// CorruptRecordError reports one record that could not be read.
type CorruptRecordError struct {
	Subject   string
	StreamSeq uint64
	Err       error
}

func (e *CorruptRecordError) Error() string {
	at := fmt.Sprintf(" at stream sequence %d", e.StreamSeq)
	if e.StreamSeq == 0 { // a record the server could not load says none
		at = ""
	}
	if task := e.Task(); task != "" {
		return fmt.Sprintf("jetstream: corrupt record of task %s%s on %s: %v", task, at, e.Subject, e.Err)
	}
	return fmt.Sprintf("jetstream: corrupt record%s on %s: %v", at, e.Subject, e.Err)
}

// Task is the task whose log or inbox subject the record is on ("" if the
// subject is not a task's).
func (e *CorruptRecordError) Task() string {
	// <prefix>.t.<partition>.<task>.log or .in.<key>
	parts := strings.Split(e.Subject, ".")
	if len(parts) < 5 || parts[1] != "t" {
		return ""
	}
	return parts[3]
}

// Unwrap lets errors.Is(err, ErrCorrupt) hold.
func (e *CorruptRecordError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// meta is what the writer puts in headers beyond the envelope.
type meta struct {
	leaseID  string
	baseline baseline
	idemKey  string
}

// baseline locates the newest baseline record of a log.
type baseline struct{ seq, streamSeq uint64 }

func (b baseline) String() string {
	return strconv.FormatUint(b.seq, 10) + ":" + strconv.FormatUint(b.streamSeq, 10)
}

func parseBaseline(s string) (baseline, bool) {
	a, c, ok := strings.Cut(s, ":")
	if !ok {
		return baseline{}, false
	}
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(c, 10, 64)
	return baseline{x, y}, err1 == nil && err2 == nil
}

// encode builds the message of env: a CloudEvents structured-mode body and
// the headers.
func encode(subject string, env eventlog.Envelope, m meta) (*nats.Msg, error) {
	body, err := cloudEventBody(env)
	if err != nil {
		return nil, err
	}
	return encodeBody(subject, env, body, m), nil
}

// encodeBody is encode with env's body already written.
func encodeBody(subject string, env eventlog.Envelope, body []byte, m meta) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set("Content-Type", contentTypeCE)
	msg.Header.Set(hdrType, env.Type)
	msg.Header.Set(hdrOrigin, string(env.Origin))
	if env.Seq != 0 {
		msg.Header.Set(hdrSeq, strconv.FormatUint(env.Seq, 10))
	}
	if env.TraceParent != "" {
		msg.Header.Set(hdrTraceParent, env.TraceParent)
	}
	m.apply(msg.Header, env.LeaseGen, env.ID)
	return msg
}

// apply sets the writer's headers: the lease and its generation, the
// baseline, the idempotency key, and the message id.
func (m meta) apply(h nats.Header, leaseGen uint64, msgID string) {
	if m.leaseID != "" {
		h.Set(hdrLease, m.leaseID)
		h.Set(hdrLeaseGen, strconv.FormatUint(leaseGen, 10))
	}
	if m.baseline.seq != 0 {
		h.Set(hdrBaseline, m.baseline.String())
	}
	if m.idemKey != "" {
		h.Set(hdrIdempotency, m.idemKey)
	}
	h.Set(nats.MsgIdHdr, msgID)
}

// cloudEventBody is the CloudEvents structured-mode JSON body of env, as it is
// published and stored. The common envelope — plain ASCII ids and actor —
// is written directly around the canonical payload, byte for byte what the
// CloudEvents SDK writes (TestCloudEventBodyMatchesSDK); anything else goes
// through the SDK, which escapes and validates it.
func cloudEventBody(env eventlog.Envelope) ([]byte, error) {
	if b, ok := appendCloudEventFast(nil, env); ok {
		return b, nil
	}
	return cloudEventBodySDK(env)
}

// appendCloudEventFast appends env's body to dst in the SDK's order
// (specversion, id, source, type, subject, datacontenttype, dataschema,
// time, data, then the extensions sorted by name). ok is false, with dst
// unchanged in meaning, for an envelope it does not vouch to write as the
// SDK would: an empty id or task, a zero time, a string that would need
// escaping or URL normalisation, a payload that is not a JSON object.
func appendCloudEventFast(dst []byte, env eventlog.Envelope) ([]byte, bool) {
	if env.ID == "" || env.Task == "" || env.Time.IsZero() ||
		len(env.Payload) == 0 || env.Payload[0] != '{' ||
		!plainJSON(env.ID) || !plainJSON(env.Task) || !plainJSON(env.Type) ||
		!plainSource(string(env.Origin)) || !plainSource(env.Actor) ||
		!plainJSON(env.Key) || !plainJSON(env.CausationID) ||
		!plainJSON(env.CorrelationID) || !plainJSON(env.TraceParent) ||
		strings.TrimSpace(env.ID) != env.ID || strings.TrimSpace(env.Task) != env.Task {
		return dst, false
	}
	b := dst
	b = append(b, `{"specversion":"1.0","id":"`...)
	b = append(b, env.ID...)
	b = append(b, `","source":"/noeta/`...)
	b = append(b, env.Origin...)
	b = append(b, '/')
	b = append(b, env.Actor...)
	b = append(b, `","type":"noeta.`...)
	b = append(b, env.Type...)
	b = append(b, `","subject":"`...)
	b = append(b, env.Task...)
	b = append(b, `","datacontenttype":"application/json","dataschema":"`...)
	b = append(b, schemas.ID(env.Type)...)
	b = append(b, `","time":"`...)
	b = env.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	b = append(b, env.Payload...)
	b = appendExt(b, "actor", env.Actor)
	if env.CausationID != "" {
		b = appendExt(b, "causationid", env.CausationID)
	}
	b = appendExt(b, "correlationid", env.CorrelationID)
	if env.Key != "" {
		b = appendExt(b, "inboxkey", env.Key)
	}
	if env.LeaseGen != 0 {
		b = append(b, `,"leasegen":"`...)
		b = strconv.AppendUint(b, env.LeaseGen, 10)
		b = append(b, '"')
	}
	b = appendExt(b, "origin", string(env.Origin))
	if env.Seq != 0 {
		b = append(b, `,"sequence":"`...)
		b = strconv.AppendUint(b, env.Seq, 10)
		b = append(b, '"')
	}
	if env.TraceParent != "" {
		b = appendExt(b, "traceparent", env.TraceParent)
	}
	return append(b, '}'), true
}

func appendExt(b []byte, name, v string) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// plainJSON: s is written inside a JSON string as it is (printable ASCII,
// no quote, no backslash), by the SDK as by appendCloudEventFast.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// plainSource: s survives url.PathEscape, url.Parse and URL.String
// unchanged as a path segment of the source, so the SDK's source is the
// concatenation.
func plainSource(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		switch c {
		case '-', '.', '_', '~', '@', ':':
			continue
		}
		return false
	}
	return true
}

// cloudEventBodySDK is cloudEventBody through the CloudEvents SDK.
func cloudEventBodySDK(env eventlog.Envelope) ([]byte, error) {
	e := event.New()
	e.SetID(env.ID)
	e.SetSource("/noeta/" + string(env.Origin) + "/" + url.PathEscape(env.Actor))
	e.SetType("noeta." + env.Type)
	e.SetSubject(env.Task)
	e.SetTime(env.Time)
	e.SetDataSchema(schemas.ID(env.Type))
	e.SetDataContentType("application/json")
	e.DataEncoded = env.Payload
	e.DataBase64 = false
	if env.Seq != 0 {
		e.SetExtension("sequence", strconv.FormatUint(env.Seq, 10))
	}
	if env.Key != "" {
		e.SetExtension("inboxkey", env.Key)
	}
	e.SetExtension("origin", string(env.Origin))
	e.SetExtension("actor", env.Actor)
	if env.CausationID != "" {
		e.SetExtension("causationid", env.CausationID)
	}
	e.SetExtension("correlationid", env.CorrelationID)
	if env.TraceParent != "" {
		e.SetExtension("traceparent", env.TraceParent)
	}
	if env.LeaseGen != 0 {
		e.SetExtension("leasegen", strconv.FormatUint(env.LeaseGen, 10))
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("%w: not a valid CloudEvent: %v", eventlog.ErrInvalidArgument, err)
	}
	// Called directly, not through encoding/json: that would re-scan the
	// output to compact it and re-escape <, > and & inside data, changing the
	// canonical payload bytes.
	body, err := e.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("jetstream: encode %s: %w", env.Type, err)
	}
	return body, nil
}

// record is a decoded stored message.
type record struct {
	env       eventlog.Envelope
	streamSeq uint64
	leaseID   string
	baseline  baseline
}

// decode reads a stored message back. Anything that is not a valid record of
// ours is a *CorruptRecordError.
func decode(subject string, streamSeq uint64, hdr nats.Header, data []byte) (record, error) {
	corrupt := func(format string, args ...any) (record, error) {
		return record{}, &CorruptRecordError{Subject: subject, StreamSeq: streamSeq, Err: fmt.Errorf(format, args...)}
	}
	var e event.Event
	if err := e.UnmarshalJSON(data); err != nil {
		return corrupt("body is not a CloudEvent: %v", err)
	}
	if err := e.Validate(); err != nil {
		return corrupt("invalid CloudEvent: %v", err)
	}
	typ, ok := strings.CutPrefix(e.Type(), "noeta.")
	if !ok || typ == "" {
		return corrupt("type %q is not noeta.<Type>", e.Type())
	}
	ext := e.Extensions()
	str := func(name string) string {
		if v, ok := ext[name]; ok {
			if s, ok := v.(string); ok {
				return s
			}
			return fmt.Sprint(v)
		}
		return ""
	}
	num := func(name string) (uint64, error) {
		s := str(name)
		if s == "" {
			return 0, nil
		}
		return strconv.ParseUint(s, 10, 64)
	}
	seq, err := num("sequence")
	if err != nil {
		return corrupt("sequence: %v", err)
	}
	gen, err := num("leasegen")
	if err != nil {
		return corrupt("leasegen: %v", err)
	}
	env := eventlog.Envelope{
		ID:            e.ID(),
		Task:          e.Subject(),
		Seq:           seq,
		Key:           str("inboxkey"),
		Type:          typ,
		Time:          e.Time(),
		Actor:         str("actor"),
		Origin:        eventlog.Origin(str("origin")),
		TraceParent:   str("traceparent"),
		CausationID:   str("causationid"),
		CorrelationID: str("correlationid"),
		LeaseGen:      gen,
		Payload:       json.RawMessage(e.Data()),
	}
	if err := env.Origin.Validate(); err != nil {
		return corrupt("%v", err)
	}
	if len(env.Payload) == 0 || env.Payload[0] != '{' {
		return corrupt("data is not a JSON object")
	}
	// A schema we know is checked; a newer writer's schema version is not ours
	// to judge, and its type may be one we skip anyway.
	if t, ok := schemas.Known(e.DataSchema()); ok && t == typ {
		if err := schemas.Validate(typ, env.Payload); err != nil {
			return corrupt("%v", err)
		}
	}
	r := record{env: env, streamSeq: streamSeq}
	if hdr != nil {
		r.leaseID = hdr.Get(hdrLease)
		r.baseline, _ = parseBaseline(hdr.Get(hdrBaseline))
	}
	return r, nil
}
