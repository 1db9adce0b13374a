package engine

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/noeta-go/noeta"
)

// The records of a tool-call turn are most of a long task's log, and
// decoding them with encoding/json is most of the cost of folding it. Their
// payloads are canonical JSON (backends store nothing else), so the fold
// reads the few fields it needs straight from the bytes. Anything this
// reader does not expect (an escape in a string, a field of the wrong kind)
// makes it give up, and the record is decoded the ordinary way.

// members calls fn with each top-level member of the JSON object obj, the
// value as its raw bytes. It returns false if obj is not an object it can
// walk: keys must be plain (no escapes).
func members(obj []byte, fn func(key string, val []byte) bool) bool {
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
		if !ok || !fn(string(key), obj[start:end]) {
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

// plainString returns the text of a JSON string without escapes.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

func intValue(v []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

func floatValue(v []byte) (float64, bool) {
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// fastPayload reads the payload of the hot record types; ok is false when
// the ordinary decoder must do it.
func fastPayload(typ string, b []byte) (p noeta.Payload, ok bool) {
	switch typ {
	case noeta.TypeLeaseGranted, noeta.TypeTaskSnapshot:
		// Their fold effect needs no field.
		return fieldless(typ), true
	case noeta.TypeTurnStarted:
		var t noeta.TurnStarted
		ok = members(b, func(k string, v []byte) bool {
			if k == "turn" {
				n, ok := intValue(v)
				t.Turn = int(n)
				return ok
			}
			return true
		})
		return &t, ok
	case noeta.TypePolicyDecided:
		var d noeta.PolicyDecided
		ok = members(b, func(k string, v []byte) bool {
			var ok bool
			switch k {
			case "turn":
				var n int64
				n, ok = intValue(v)
				d.Turn = int(n)
			case "decision":
				var s string
				s, ok = plainString(v)
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
					ok := members(e, func(k string, v []byte) bool {
						var ok bool
						switch k {
						case "call_id":
							c.CallID, ok = plainString(v)
						case "tool":
							c.Tool, ok = plainString(v)
						case "args":
							c.Args, ok = json.RawMessage(v), len(v) > 0
						case "args_ref":
							ok = json.Unmarshal(v, &c.ArgsRef) == nil
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
				d.Model, ok = plainString(v)
			case "provider":
				d.Provider, ok = plainString(v)
			case "latency_ms":
				d.LatencyMS, ok = intValue(v)
			case "response_ref":
				ok = json.Unmarshal(v, &d.ResponseRef) == nil
			}
			// Anything else (spawn, refs, notes…): the decoder reads it.
			return ok
		})
		return &d, ok
	case noeta.TypeToolCallStarted:
		var s noeta.ToolCallStarted
		ok = members(b, func(k string, v []byte) bool {
			var ok bool
			switch k {
			case "call_id":
				s.CallID, ok = plainString(v)
			case "tool":
				s.Tool, ok = plainString(v)
			case "args":
				s.Args, ok = json.RawMessage(v), len(v) > 0 && v[0] == '{'
			case "args_ref":
				ok = json.Unmarshal(v, &s.ArgsRef) == nil
			case "turn":
				var n int64
				n, ok = intValue(v)
				s.Turn = int(n)
			default:
				ok = true
			}
			return ok
		})
		return &s, ok
	case noeta.TypeToolCallFinished:
		// Every field: the composed context shows the result.
		var f noeta.ToolCallFinished
		ok = members(b, func(k string, v []byte) bool {
			var ok bool
			switch k {
			case "call_id":
				f.CallID, ok = plainString(v)
			case "tool":
				f.Tool, ok = plainString(v)
			case "ok":
				f.OK, ok = string(v) == "true", string(v) == "true" || string(v) == "false"
			case "output":
				f.Output, ok = json.RawMessage(v), len(v) > 0
			case "output_ref":
				ok = json.Unmarshal(v, &f.OutputRef) == nil
			case "error":
				f.Error, ok = plainString(v)
			case "duration_ms":
				f.DurationMS, ok = intValue(v)
			case "cost_usd":
				f.CostUSD, ok = floatValue(v)
			default:
				ok = true
			}
			return ok
		})
		return &f, ok
	}
	return nil, false
}

func fieldless(typ string) noeta.Payload {
	if typ == noeta.TypeLeaseGranted {
		return &noeta.LeaseGranted{}
	}
	return &noeta.TaskSnapshot{}
}
