package noeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func FuzzCanonicalizeJSON(f *testing.F) {
	for _, tt := range canonicalGoldenTests {
		f.Add([]byte(tt.in))
	}
	for _, tt := range canonicalErrorTests {
		if len(tt.in) < 1000 {
			f.Add([]byte(tt.in))
		}
	}
	f.Add([]byte(canonicalSample))
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := string(in)
		isCanonical := IsCanonicalJSON(in)
		out, err := CanonicalizeJSON(in)
		if string(in) != orig {
			t.Fatalf("CanonicalizeJSON modified its input")
		}
		app, appErr := AppendCanonicalJSON([]byte("x"), in)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), " offset ") {
				t.Fatalf("CanonicalizeJSON(%q): got error %q, want ErrInvalidJSON with an offset", in, err)
			}
			if isCanonical {
				t.Fatalf("IsCanonicalJSON(%q): got true for input that fails with %v", in, err)
			}
			if appErr == nil || appErr.Error() != err.Error() || string(app) != "x" {
				t.Fatalf("AppendCanonicalJSON(%q): got %q, %v, want %q, %v", in, app, appErr, "x", err)
			}
			// Only the rules stricter than encoding/json may reject what it accepts.
			if json.Valid(in) {
				msg := err.Error()
				if !strings.Contains(msg, "duplicate") && !strings.Contains(msg, "UTF-8") &&
					!strings.Contains(msg, "surrogate") && !strings.Contains(msg, "overflows") {
					t.Fatalf("CanonicalizeJSON(%q): got error %q for JSON that encoding/json accepts", in, err)
				}
			}
			return
		}
		if isCanonical != bytes.Equal(out, in) {
			t.Fatalf("IsCanonicalJSON(%q): got %v, but CanonicalizeJSON gives %q", in, isCanonical, out)
		}
		if appErr != nil || string(app) != "x"+string(out) {
			t.Fatalf("AppendCanonicalJSON(%q): got %q, %v, want %q, nil", in, app, appErr, "x"+string(out))
		}
		if !json.Valid(in) {
			t.Fatalf("CanonicalizeJSON(%q): accepted input that encoding/json rejects", in)
		}
		if !json.Valid(out) {
			t.Fatalf("CanonicalizeJSON(%q): got invalid JSON %q", in, out)
		}
		for i, c := range out {
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("CanonicalizeJSON(%q): got %q, with byte %#x at %d, want printable ASCII", in, out, c, i)
			}
		}
		again, err := CanonicalizeJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("CanonicalizeJSON(%q): got %q, %v, want it unchanged", out, again, err)
		}
		if &again[0] != &out[0] {
			t.Fatalf("CanonicalizeJSON(%q): got a copy of canonical input, want the input itself", out)
		}
		if !IsCanonicalJSON(out) {
			t.Fatalf("IsCanonicalJSON(%q): got false for canonical output", out)
		}
		vin, vout := canonicalFuzzDecode(t, in), canonicalFuzzDecode(t, out)
		if !canonicalFuzzEqual(vin, vout) {
			t.Fatalf("CanonicalizeJSON(%q) = %q: decoded values differ: got %#v, want %#v", in, out, vout, vin)
		}
	})
}

func canonicalFuzzDecode(t *testing.T, b []byte) any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return v
}

// canonicalFuzzEqual compares decoded JSON values, numbers by the float64
// they round to: integer literals are kept verbatim and other numbers are
// rewritten from their float64 value, so either way that value is unchanged.
func canonicalFuzzEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !canonicalFuzzEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !canonicalFuzzEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		fa, errA := strconv.ParseFloat(string(a), 64)
		fb, errB := strconv.ParseFloat(string(b), 64)
		return errA == nil && errB == nil && fa == fb
	default:
		return a == b
	}
}
