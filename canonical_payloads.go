package noeta

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// The records of a tool-call turn are most of what an engine writes, and
// encoding one with encoding/json and then putting the result in canonical
// form (a second parse, members sorted) cost more than everything else the
// engine does for the record. These payloads write their canonical JSON
// directly, members in key order, by the rules of CanonicalizeJSON: the
// same bytes as Canonical's general path, which TestCanonicalPayloads checks
// field by field against it. A value the direct writer does not cover (a
// part it leaves to the general path, a float encoding/json refuses, raw
// JSON that is not valid) makes it give up, and the general path encodes it
// (and reports its error).

// canonicalAppender is a payload that can write its own canonical JSON; ok
// is false when it leaves the value to the general path.
type canonicalAppender interface {
	appendCanonical(dst []byte) (out []byte, ok bool)
}

// canonObject writes an object's members, which the caller gives in key
// order.
type canonObject struct {
	b  []byte
	n  int
	ok bool
}

func newCanonObject(dst []byte) canonObject {
	return canonObject{b: append(dst, '{'), ok: true}
}

func (o *canonObject) key(k string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(append(append(o.b, '"'), k...), '"', ':')
}

func (o *canonObject) str(k, v string) {
	o.key(k)
	o.b = appendCanonString(o.b, v)
}

func (o *canonObject) strOmitEmpty(k, v string) {
	if v != "" {
		o.str(k, v)
	}
}

func (o *canonObject) int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *canonObject) intOmitEmpty(k string, v int64) {
	if v != 0 {
		o.int(k, v)
	}
}

func (o *canonObject) uint(k string, v uint64) {
	o.key(k)
	o.b = strconv.AppendUint(o.b, v, 10)
}

func (o *canonObject) bool(k string, v bool) {
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
}

// floatOmitEmpty writes a float64 member with omitempty; encoding/json
// refuses NaN and the infinities, so they go to the general path.
func (o *canonObject) floatOmitEmpty(k string, v float64) {
	if v == 0 {
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		o.ok = false
		return
	}
	o.key(k)
	o.b = canonAppendFloat(o.b, v)
}

// rawOmitEmpty writes a json.RawMessage member with omitempty, in canonical
// form; text that is not valid JSON goes to the general path.
func (o *canonObject) rawOmitEmpty(k string, v json.RawMessage) {
	if len(v) == 0 {
		return
	}
	o.key(k)
	b, err := AppendCanonicalJSON(o.b, v)
	if err != nil {
		o.ok = false
		return
	}
	o.b = b
}

func (o *canonObject) refOmitEmpty(k string, r *ContentRef) {
	if r == nil {
		return
	}
	o.key(k)
	ro := newCanonObject(o.b)
	ro.str("hash", r.Hash)
	ro.str("media_type", r.MediaType)
	ro.int("size", r.Size)
	var ok bool
	o.b, ok = ro.end()
	o.ok = o.ok && ok
}

func (o *canonObject) end() ([]byte, bool) {
	return append(o.b, '}'), o.ok
}

// appendCanonString appends s as a canonical JSON string. Invalid UTF-8 is
// written as U+FFFD, byte by byte, as encoding/json writes it.
func appendCanonString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 0x20 <= c && c < 0x7f && c != '"' && c != '\\' {
				dst = append(dst, c)
			} else {
				dst = canonAppendRune(dst, rune(c))
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		dst = canonAppendRune(dst, r)
		i += size
	}
	return append(dst, '"')
}

func (p TurnStarted) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	o.int("turn", int64(p.Turn))
	return o.end()
}

func (p ToolCallStarted) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	o.rawOmitEmpty("args", p.Args)
	o.refOmitEmpty("args_ref", p.ArgsRef)
	o.str("call_id", p.CallID)
	o.str("tool", p.Tool)
	o.int("turn", int64(p.Turn))
	return o.end()
}

func (p ToolCallFinished) appendCanonical(dst []byte) ([]byte, bool) {
	if len(p.Egress) > 0 {
		return dst, false
	}
	o := newCanonObject(dst)
	o.str("call_id", p.CallID)
	o.floatOmitEmpty("cost_usd", p.CostUSD)
	o.int("duration_ms", p.DurationMS)
	o.strOmitEmpty("error", p.Error)
	o.bool("ok", p.OK)
	o.rawOmitEmpty("output", p.Output)
	o.refOmitEmpty("output_ref", p.OutputRef)
	o.strOmitEmpty("preview", p.Preview)
	o.str("tool", p.Tool)
	return o.end()
}

func (p ToolCallDenied) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	o.str("call_id", p.CallID)
	o.str("guard", p.Guard)
	o.str("reason", p.Reason)
	o.str("tool", p.Tool)
	return o.end()
}

func (p TaskSnapshot) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	o.refOmitEmpty("state_ref", &p.StateRef)
	o.uint("upto_seq", p.UptoSeq)
	return o.end()
}

func (p PolicyDecided) appendCanonical(dst []byte) ([]byte, bool) {
	if len(p.Spawn) > 0 {
		// A spawn's children are rare enough for the general path.
		return dst, false
	}
	o := newCanonObject(dst)
	o.rawOmitEmpty("answer", p.Answer)
	o.refOmitEmpty("answer_ref", p.AnswerRef)
	o.floatOmitEmpty("cost_usd", p.CostUSD)
	o.str("decision", string(p.Decision))
	o.refOmitEmpty("decision_ref", p.DecisionRef)
	o.strOmitEmpty("error", p.Error)
	o.strOmitEmpty("event_kind", p.EventKind)
	o.intOmitEmpty("input_tokens", p.InputTokens)
	o.intOmitEmpty("latency_ms", p.LatencyMS)
	o.strOmitEmpty("model", p.Model)
	if len(p.Notes) > 0 {
		o.key("notes")
		o.b = append(o.b, '[')
		for i, n := range p.Notes {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = appendCanonString(o.b, n)
		}
		o.b = append(o.b, ']')
	}
	o.intOmitEmpty("output_tokens", p.OutputTokens)
	o.rawOmitEmpty("patch", p.Patch)
	o.refOmitEmpty("patch_ref", p.PatchRef)
	o.strOmitEmpty("provider", p.Provider)
	o.strOmitEmpty("question", p.Question)
	o.refOmitEmpty("response_ref", p.ResponseRef)
	if len(p.ToolCalls) > 0 {
		o.key("tool_calls")
		o.b = append(o.b, '[')
		for i, c := range p.ToolCalls {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			co := newCanonObject(o.b)
			co.rawOmitEmpty("args", c.Args)
			co.refOmitEmpty("args_ref", c.ArgsRef)
			co.str("call_id", c.CallID)
			co.strOmitEmpty("invalid", c.Invalid)
			co.strOmitEmpty("tool", c.Tool)
			var ok bool
			o.b, ok = co.end()
			o.ok = o.ok && ok
		}
		o.b = append(o.b, ']')
	}
	o.strOmitEmpty("text", p.Text)
	o.refOmitEmpty("text_ref", p.TextRef)
	o.int("turn", int64(p.Turn))
	o.intOmitEmpty("version", int64(p.Version))
	o.floatOmitEmpty("wait_seconds", p.WaitSeconds)
	return o.end()
}

// A transcript's messages are most of a snapshot (the composer encodes each
// once, when the first snapshot after it is taken).
func (m Message) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	if m.IsError {
		o.bool("is_error", true)
	}
	o.str("role", string(m.Role))
	o.strOmitEmpty("text", m.Text)
	o.strOmitEmpty("tool_call_id", m.ToolCallID)
	if len(m.ToolCalls) > 0 {
		o.key("tool_calls")
		o.b = append(o.b, '[')
		for i, c := range m.ToolCalls {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			var ok bool
			o.b, ok = c.appendCanonical(o.b)
			o.ok = o.ok && ok
		}
		o.b = append(o.b, ']')
	}
	o.strOmitEmpty("tool_name", m.ToolName)
	return o.end()
}

func (c ToolCall) appendCanonical(dst []byte) ([]byte, bool) {
	o := newCanonObject(dst)
	o.rawOmitEmpty("args", c.Args)
	o.str("call_id", c.CallID)
	o.strOmitEmpty("invalid", c.Invalid)
	o.str("tool", c.Tool)
	return o.end()
}
