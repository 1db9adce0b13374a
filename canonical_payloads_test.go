package noeta

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var (
	trickyStrings = []string{"", "plain", "q\"b\\s/<>&", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "é", "😀", "\u2028\u2029",
		"\xff\xfe invalid", "\xed\xa0\x80", "a\x80b", strings.Repeat("x", 300)}
	trickyFloats = []float64{0.1, 1, -2.5, 1e20, 1e21, 5e-7, 1e-6, 123456.789, math.MaxFloat64, math.SmallestNonzeroFloat64,
		-0.0, math.NaN(), math.Inf(1)}
	trickyRaw = []string{`{"b":1,"a":[1.0,2e3,"x\u00e9",-0]}`, ` {"a" : 1} `, `null`, `"str"`, `12`, `[1,2]`,
		`{"a":1,"a":2}`, `{bad`, `"\ud800"`, `{}`, `123456789012345678901234567890`}
)

// fillPayload sets every field of v (recursively, one element in every
// slice) with the values of pick for each kind.
func fillPayload(v reflect.Value, str string, f float64, raw string, depth int) {
	if depth > 5 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(str)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(-7)
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(f)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillPayload(p.Elem(), str, f, raw, depth+1)
		v.Set(p)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(raw))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fillPayload(s.Index(0), str, f, raw, depth+1)
		fillPayload(s.Index(1), "second", f, raw, depth+1)
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			fillPayload(v.Field(i), str, f, raw, depth+1)
		}
	}
}

// TestCanonicalPayloads holds the values that write their canonical JSON
// directly to the general path's bytes (encoding/json, then
// CanonicalizeJSON), and to its errors: every field set and each field set
// alone, with strings that need escapes or are not UTF-8, floats of every
// form and raw JSON that is not canonical or not valid.
func TestCanonicalPayloads(t *testing.T) {
	direct := []any{TurnStarted{}, ToolCallStarted{}, ToolCallFinished{}, ToolCallDenied{}, TaskSnapshot{}, PolicyDecided{},
		Message{}, ToolCall{}}
	checked, took := 0, 0
	check := func(p any) {
		t.Helper()
		want, werr := canonicalGeneral(p)
		got, gerr := Canonical(p)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("%T %+v:\ndirect  %s (%v)\ngeneral %s (%v)", p, p, got, gerr, want, werr)
		}
		if _, ok := p.(canonicalAppender).appendCanonical(nil); ok {
			took++
			if gerr != nil {
				t.Fatalf("%T %+v: written directly, and the general path refuses it: %v", p, p, werr)
			}
		}
		checked++
	}
	for _, zero := range direct {
		rt := reflect.TypeOf(zero)
		for _, str := range trickyStrings {
			for _, f := range trickyFloats {
				for _, raw := range trickyRaw {
					all := reflect.New(rt).Elem()
					fillPayload(all, str, f, raw, 0)
					check(all.Interface())
					for i := range rt.NumField() {
						one := reflect.New(rt).Elem()
						fillPayload(one.Field(i), str, f, raw, 1)
						check(one.Interface())
						// And as a pointer, as callers also pass them.
						check(one.Addr().Interface())
					}
				}
			}
		}
	}
	if took < checked/2 {
		t.Errorf("the direct writer took %d of %d payloads; it should take most", took, checked)
	}
	var nilTurn *TurnStarted
	if b, err := Canonical(nilTurn); err != nil || string(b) != "null" {
		t.Errorf("a nil payload pointer: %s %v", b, err)
	}
}

func FuzzAppendCanonicalString(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// encoding/json never refuses a string (invalid UTF-8 becomes
		// U+FFFD), so a refusal here is a fault of the general path.
		want, err := canonicalGeneral(s)
		if err != nil {
			t.Fatalf("%q: the general path refused it: %v", s, err)
		}
		if got := appendCanonString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: direct %s, general %s", s, got, want)
		}
	})
}

// TestCanonicalPrefix: the prefix's canonical JSON string fits the limit,
// is cut between runes, and is the longest that does: one rune more would
// not fit.
func TestCanonicalPrefix(t *testing.T) {
	strs := append([]string{strings.Repeat("é😀\n\"a", 50), "\xff\xff\xff"}, trickyStrings...)
	for _, s := range strs {
		for limit := -1; limit <= 400; limit++ {
			p := CanonicalPrefix(s, limit)
			if !strings.HasPrefix(s, p) {
				t.Fatalf("CanonicalPrefix(%q, %d) = %q: not a prefix", s, limit, p)
			}
			enc, err := Canonical(p)
			if err != nil {
				t.Fatal(err)
			}
			if limit < 2 {
				if p != "" {
					t.Errorf("CanonicalPrefix(%q, %d) = %q, want empty", s, limit, p)
				}
				continue
			}
			if len(enc) > limit {
				t.Fatalf("CanonicalPrefix(%q, %d) = %q: %d bytes encoded", s, limit, p, len(enc))
			}
			if p == s {
				continue
			}
			rest := s[len(p):]
			_, size := utf8.DecodeRuneInString(rest)
			if longer, _ := Canonical(s[:len(p)+size]); len(longer) <= limit {
				t.Errorf("CanonicalPrefix(%q, %d) = %q: %q fits too (%d bytes)", s, limit, p, s[:len(p)+size], len(longer))
			}
		}
	}
}
