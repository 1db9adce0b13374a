package engine

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
)

// The records of a tool-call turn are most of a long task's log, and
// decoding them with encoding/json is most of the cost of folding it. Their
// payloads are canonical JSON (backends store nothing else), so the fold
// reads the few fields it needs straight from the bytes. Anything this
// reader does not expect (an escape in a string, a field of the wrong kind)
// makes it give up, and the record is decoded the ordinary way. So does a
// member it does not know: a field added to a record must be taught to this
// reader (TestFastReaderRefusesUnknownMembers) or it is decoded, never
// dropped.

// members calls fn with each top-level member of the JSON object obj, the
// key and the value as raw bytes (the key is not copied into a string: a
// switch on string(key) does not allocate). It returns false if obj is not
// an object it can walk: keys must be plain (no escapes).
func members(obj []byte, fn func(key, val []byte) bool) bool {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return false
	}
	i := 1
	if obj[i] == '}' {
		return i == len(obj)-1
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(obj) && obj[j] != '"' {
			if obj[j] == '\\' {
				return false
			}
			j++
		}
		if j+1 >= len(obj) || obj[j+1] != ':' {
			return false
		}
		key := obj[i+1 : j]
		start := j + 2
		end, ok := skipValue(obj, start)
		if !ok || !fn(key, obj[start:end]) {
			return false
		}
		switch {
		case end < len(obj) && obj[end] == ',':
			i = end + 1
		case end == len(obj)-1 && obj[end] == '}':
			return true
		default:
			return false
		}
	}
}

// skipValue returns the end of the JSON value at b[i:].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return 0, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		return j, j > i
	}
}

// elements calls fn with each element of the JSON array arr, as raw bytes.
// It returns false if arr is not an array it can walk.
func elements(arr []byte, fn func(val []byte) bool) bool {
	if len(arr) < 2 || arr[0] != '[' || arr[len(arr)-1] != ']' {
		return false
	}
	i := 1
	if arr[i] == ']' {
		return i == len(arr)-1
	}
	for {
		end, ok := skipValue(arr, i)
		if !ok || !fn(arr[i:end]) {
			return false
		}
		switch {
		case end < len(arr) && arr[end] == ',':
			i = end + 1
		case end == len(arr)-1 && arr[end] == ']':
			return true
		default:
			return false
		}
	}
}

// plainString returns the text of a JSON string without escapes, control
// characters or invalid UTF-8 (which encoding/json would refuse or
// replace): what it returns is what the decoder would.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	s := v[1 : len(v)-1]
	for _, c := range s {
		if c < 0x20 || c == '\\' || c == '"' {
			return "", false
		}
	}
	if !utf8.Valid(s) {
		return "", false
	}
	return string(s), true
}

// number reports whether v is a JSON number as canonical JSON writes one:
// strconv would take more ("+1", "01", "0x10", "Inf"), encoding/json would
// not.
func number(v []byte) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && v[i] >= '1' && v[i] <= '9':
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(v) && v[i] == '.' {
		i++
		if i == len(v) || v[i] < '0' || v[i] > '9' {
			return false
		}
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if i == len(v) || v[i] < '0' || v[i] > '9' {
			return false
		}
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	}
	return i == len(v)
}

func intValue(v []byte) (int64, bool) {
	if !number(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

func floatValue(v []byte) (float64, bool) {
	if !number(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

func boolValue(v []byte) (b, ok bool) {
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// ref reads a content ref the decoder's way; refs are rare on the hot
// records, so it is not worth a reader of its own.
func ref(v []byte) (*noeta.ContentRef, bool) {
	var r *noeta.ContentRef
	return r, json.Unmarshal(v, &r) == nil
}

// fastPayload reads the payload of the hot record types; ok is false when
// the ordinary decoder must do it. What it returns is the whole payload,
// equal to what the decoder returns (TestFastReaderAgreesOnEveryField),
// except for LeaseGranted and TaskSnapshot, which the fold and the composer
// use for their type alone. Every member callback refuses a key it does not
// know, so a field the reader was not taught goes to the decoder instead of
// being lost.
//
// With sc, the structs come from sc and are reused by the next record of
// the same type (see foldScratch); without, each is new.
func fastPayload(typ string, b []byte, sc *foldScratch) (p noeta.Payload, ok bool) {
	switch typ {
	case noeta.TypeLeaseGranted:
		// The fold needs no field, but the keys must be the known ones.
		ok = members(b, func(k, _ []byte) bool {
			switch string(k) {
			case "lease_id", "generation", "worker":
				return true
			}
			return false
		})
		if sc == nil {
			return &noeta.LeaseGranted{}, ok
		}
		return &sc.lease, ok
	case noeta.TypeTaskSnapshot:
		ok = members(b, func(k, _ []byte) bool {
			switch string(k) {
			case "state_ref", "upto_seq":
				return true
			}
			return false
		})
		if sc == nil {
			return &noeta.TaskSnapshot{}, ok
		}
		return &sc.snapshot, ok
	case noeta.TypeTurnStarted:
		var t *noeta.TurnStarted
		if sc != nil {
			t = &sc.turn
			*t = noeta.TurnStarted{}
		} else {
			t = new(noeta.TurnStarted)
		}
		ok = members(b, func(k, v []byte) bool {
			if string(k) == "turn" {
				n, ok := intValue(v)
				t.Turn = int(n)
				return ok
			}
			return false
		})
		return t, ok
	case noeta.TypePolicyDecided:
		var d *noeta.PolicyDecided
		switch {
		case sc == nil:
			d = new(noeta.PolicyDecided)
		case sc.decided == nil:
			d = new(noeta.PolicyDecided)
			sc.decided = d
		default:
			d = sc.decided
			*d = noeta.PolicyDecided{}
		}
		ok = members(b, func(k, v []byte) bool {
			var ok bool
			switch string(k) {
			case "turn":
				var n int64
				n, ok = intValue(v)
				d.Turn = int(n)
			case "decision":
				var s string
				s, ok = sc.str(lastDecision, v)
				d.Decision = noeta.DecisionKind(s)
			case "cost_usd":
				d.CostUSD, ok = floatValue(v)
			case "input_tokens":
				d.InputTokens, ok = intValue(v)
			case "output_tokens":
				d.OutputTokens, ok = intValue(v)
			case "version":
				var n int64
				n, ok = intValue(v)
				d.Version = int(n)
			case "tool_calls":
				// The common part of a recorded decision, read here; the
				// other parts are rarer, and left to the decoder.
				ok = elements(v, func(e []byte) bool {
					var c noeta.RecordedCall
					ok := members(e, func(k, v []byte) bool {
						var ok bool
						switch string(k) {
						case "call_id":
							c.CallID, ok = sc.str(lastCallID, v)
						case "tool":
							c.Tool, ok = sc.str(lastTool, v)
						case "args":
							c.Args, ok = json.RawMessage(v), len(v) > 0
						case "args_ref":
							c.ArgsRef, ok = ref(v)
						case "invalid":
							c.Invalid, ok = plainString(v)
						}
						return ok
					})
					d.ToolCalls = append(d.ToolCalls, c)
					return ok
				}) && len(d.ToolCalls) > 0
			case "answer":
				d.Answer, ok = json.RawMessage(v), len(v) > 0
			case "model":
				d.Model, ok = sc.str(lastModel, v)
			case "provider":
				d.Provider, ok = sc.str(lastProvider, v)
			case "latency_ms":
				d.LatencyMS, ok = intValue(v)
			case "response_ref":
				d.ResponseRef, ok = ref(v)
			case "text":
				// The model's words: most have a newline or a quote, which
				// plainString refuses, so those are read the decoder's way
				// here rather than sending the record to the decoder.
				if d.Text, ok = plainString(v); !ok {
					ok = json.Unmarshal(v, &d.Text) == nil
				}
			case "text_ref":
				d.TextRef, ok = ref(v)
			}
			// Anything else (spawn, refs, notes…): the decoder reads it.
			return ok
		})
		return d, ok
	case noeta.TypeToolCallStarted:
		var s *noeta.ToolCallStarted
		if sc != nil {
			s = &sc.started
			*s = noeta.ToolCallStarted{}
		} else {
			s = new(noeta.ToolCallStarted)
		}
		ok = members(b, func(k, v []byte) bool {
			var ok bool
			switch string(k) {
			case "call_id":
				s.CallID, ok = sc.str(lastCallID, v)
			case "tool":
				s.Tool, ok = sc.str(lastTool, v)
			case "args":
				s.Args, ok = json.RawMessage(v), len(v) > 0 && v[0] == '{'
			case "args_ref":
				s.ArgsRef, ok = ref(v)
			case "turn":
				var n int64
				n, ok = intValue(v)
				s.Turn = int(n)
			}
			return ok
		})
		return s, ok
	case noeta.TypeToolCallFinished:
		// Every field: the composed context shows the result.
		var f *noeta.ToolCallFinished
		if sc != nil {
			f = &sc.finished
			*f = noeta.ToolCallFinished{}
		} else {
			f = new(noeta.ToolCallFinished)
		}
		ok = members(b, func(k, v []byte) bool {
			var ok bool
			switch string(k) {
			case "call_id":
				f.CallID, ok = sc.str(lastCallID, v)
			case "tool":
				f.Tool, ok = sc.str(lastTool, v)
			case "ok":
				f.OK, ok = boolValue(v)
			case "output":
				f.Output, ok = json.RawMessage(v), len(v) > 0
			case "output_ref":
				f.OutputRef, ok = ref(v)
			case "preview":
				// Text a model reads: most has a newline or a quote, read
				// the decoder's way here, as PolicyDecided's text is.
				if f.Preview, ok = plainString(v); !ok {
					ok = json.Unmarshal(v, &f.Preview) == nil
				}
			case "error":
				f.Error, ok = plainString(v)
			case "duration_ms":
				f.DurationMS, ok = intValue(v)
			case "cost_usd":
				f.CostUSD, ok = floatValue(v)
			case "egress":
				// Only sandboxed calls that reached the network have it.
				ok = json.Unmarshal(v, &f.Egress) == nil
			}
			return ok
		})
		return f, ok
	case noeta.TypeToolCallDenied:
		// A guard's denial: a tenth of a long task's calls, say.
		var d *noeta.ToolCallDenied
		if sc != nil {
			d = &sc.denied
			*d = noeta.ToolCallDenied{}
		} else {
			d = new(noeta.ToolCallDenied)
		}
		ok = members(b, func(k, v []byte) bool {
			var ok bool
			switch string(k) {
			case "call_id":
				d.CallID, ok = sc.str(lastCallID, v)
			case "tool":
				d.Tool, ok = sc.str(lastTool, v)
			case "guard":
				d.Guard, ok = sc.str(lastGuard, v)
			case "reason":
				d.Reason, ok = sc.str(lastReason, v)
			}
			return ok
		})
		return d, ok
	case noeta.TypeGuardShadowed:
		// A shadow rule's would-be verdict: one per shadow rule that
		// matched a call, as many as the calls in a log that rolls a
		// rule out in shadow.
		var d *noeta.GuardShadowed
		if sc != nil {
			d = &sc.shadowed
			*d = noeta.GuardShadowed{}
		} else {
			d = new(noeta.GuardShadowed)
		}
		verdict := func(v []byte, out *noeta.Verdict) bool {
			s, ok := plainString(v)
			return ok && out.UnmarshalText([]byte(s)) == nil
		}
		ok = members(b, func(k, v []byte) bool {
			var ok bool
			switch string(k) {
			case "action":
				var s string
				s, ok = plainString(v)
				d.Action = noeta.ApprovalAction(s)
			case "call_id":
				d.CallID, ok = sc.str(lastCallID, v)
			case "tool":
				d.Tool, ok = sc.str(lastTool, v)
			case "agent":
				d.Agent, ok = plainString(v)
			case "guard":
				d.Guard, ok = sc.str(lastGuard, v)
			case "rule":
				d.Rule, ok = plainString(v)
			case "verdict":
				ok = verdict(v, &d.Verdict)
			case "reason":
				d.Reason, ok = sc.str(lastReason, v)
			case "failed":
				d.Failed, ok = boolValue(v)
			case "decided":
				ok = verdict(v, &d.Decided)
			case "decided_by":
				d.DecidedBy, ok = plainString(v)
			}
			return ok
		})
		return d, ok
	}
	return nil, false
}

// foldScratch holds the payload structs a fold of many records reuses from
// one record to the next, instead of allocating one a record (a fifth of
// what folding a long log allocated). The fold and the composer read a
// payload while its record is applied and keep no pointer into it, with one
// exception: the fold keeps a version 2 PolicyDecided as the turn's
// decision, and takes it out of the scratch when it does, so the next
// decision gets a struct of its own.
//
// It also keeps the last string read for a few members (the tool, the call
// id, a denial's guard and reason, a decision's kind, model and provider):
// a turn's records name the same ones again and again, and a string equal
// to the last is not allocated again.
type foldScratch struct {
	last     [numLast]string
	lease    noeta.LeaseGranted
	snapshot noeta.TaskSnapshot
	turn     noeta.TurnStarted
	decided  *noeta.PolicyDecided
	started  noeta.ToolCallStarted
	finished noeta.ToolCallFinished
	denied   noeta.ToolCallDenied
	shadowed noeta.GuardShadowed
}

// The members whose last string a foldScratch keeps.
const (
	lastTool = iota
	lastCallID
	lastGuard
	lastReason
	lastDecision
	lastModel
	lastProvider
	numLast
)

// str reads a plain string (plainString), or returns the last one read for
// the member when v holds the same text (that string was read by
// plainString from the same bytes). Without a scratch (sc nil) it is
// plainString.
func (sc *foldScratch) str(member int, v []byte) (string, bool) {
	if sc == nil {
		return plainString(v)
	}
	last := &sc.last[member]
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && *last != "" && string(v[1:len(v)-1]) == *last {
		return *last, true
	}
	s, ok := plainString(v)
	if ok {
		*last = s
	}
	return s, ok
}
