package noeta

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// canonicalGoldenTests are shared with FuzzCanonicalizeJSON as seeds.
var canonicalGoldenTests = []struct {
	name, in, want string
}{
	// Whitespace and structure.
	{"padded", " \t\n{ \"a\" : [ 1 , 2 ] }\r\n ", `{"a":[1,2]}`},
	{"empty object", "{ }", `{}`},
	{"empty array", "[ ]", `[]`},
	{"literals", "[true, false, null]", `[true,false,null]`},
	{"top-level string", `"x"`, `"x"`},

	// Member order.
	{"sorted", `{"a":1,"b":2}`, `{"a":1,"b":2}`},
	{"unsorted", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
	{"nested", `{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":null}`, `{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}`},
	{"array of objects", `[{"b":1,"a":2},{"d":{"f":1,"e":2},"c":3}]`, `[{"a":2,"b":1},{"c":3,"d":{"e":2,"f":1}}]`},
	{"prefix key first", `{"ab":1,"a":2}`, `{"a":2,"ab":1}`},
	{"empty key first", `{"a":1,"":2}`, `{"":2,"a":1}`},
	{"upper before lower", `{"a":1,"B":2,"A":3}`, `{"A":3,"B":2,"a":1}`},
	{"non-ASCII after ASCII", `{"é":1,"z":2}`, `{"z":2,"\u00e9":1}`},
	// Code point order, not UTF-16 order: U+FFFF sorts before U+1F600 even
	// though its first UTF-16 unit is larger.
	{"code point order", `{"😀":1,"\uffff":2}`, `{"\uffff":2,"\ud83d\ude00":1}`},
	{"code point order escaped", `{"\ud800\udc00":1,"\ue000":2}`, `{"\ue000":2,"\ud800\udc00":1}`},
	{"escaped keys sort decoded", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
	{"escaped key vs literal", `{"\"":1,"!":2,"#":3}`, `{"!":2,"\"":1,"#":3}`},
	{"control key before space", `{" ":1,"\n":2}`, `{"\n":2," ":1}`},
	{"many members", `{"t":20,"s":19,"r":18,"q":17,"p":16,"o":15,"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20}`},
	{"unsorted inside sorted", `{"a":{"b":{"d":1,"c":2}},"c":[{"z":{"y":1,"x":0}}]}`, `{"a":{"b":{"c":2,"d":1}},"c":[{"z":{"x":0,"y":1}}]}`},
	{"unsorted inside sorted inside unsorted", `{"z":1,"a":{"m":{"q":1,"p":2},"n":0}}`, `{"a":{"m":{"p":2,"q":1},"n":0},"z":1}`},
	{"deep unsorted", `{"b":{"d":{"f":[{"h":1,"g":2}],"e":0},"c":"\u00e9"},"a":{"\u0079":1,"x":2}}`,
		`{"a":{"x":2,"y":1},"b":{"c":"\u00e9","d":{"e":0,"f":[{"g":2,"h":1}]}}}`},

	// Strings.
	{"non-ASCII", `"héllo ✓"`, `"h\u00e9llo \u2713"`},
	{"astral", `"😀"`, `"\ud83d\ude00"`},
	{"max code point", "\"\U0010ffff\"", `"\udbff\udfff"`},
	{"replacement char literal", "\"\ufffd\"", `"\ufffd"`},
	{"upper-case hex escapes", `"\uD83D\uDE00\u00E9"`, `"\ud83d\ude00\u00e9"`},
	{"needless escapes", `"\u0041\u0062\/"`, `"Ab/"`},
	{"quote and backslash", `"a\"b\\c"`, `"a\"b\\c"`},
	{"escaped quote and backslash", `"\u0022\u005c"`, `"\"\\"`},
	{"short escapes", `"\u0008\u000c\u000a\u000d\u0009"`, `"\b\f\n\r\t"`},
	{"short escapes kept", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
	{"other controls", `"\u0000\u001F\u0001"`, `"\u0000\u001f\u0001"`},
	{"DEL escaped", "\"\x7f\"", `"\u007f"`},
	{"DEL escape kept", `"\u007f"`, `"\u007f"`},
	{"C1 control", "\"\u0085\"", `"\u0085"`},
	{"HTML literal", `"<a href=\"/x\">&amp;</a>"`, `"<a href=\"/x\">&amp;</a>"`},
	{"HTML unescaped", `"\u003c\u003e\u0026"`, `"<>&"`},
	{"line separators", "\"\u2028\\u2029\"", `"\u2028\u2029"`},

	// Numbers.
	{"int", `42`, `42`},
	{"negative int", `-42`, `-42`},
	{"big int", `100000000000000000000`, `100000000000000000000`},
	{"huge int", `-123456789012345678901234567890`, `-123456789012345678901234567890`},
	{"minus zero", `-0`, `0`},
	{"zeros", `[-0,0,-1]`, `[0,0,-1]`},
	{"1.0", `1.0`, `1`},
	{"1e2", `1e2`, `100`},
	{"1E+2", `1E+2`, `100`},
	{"minus zero float", `-0.0`, `0`},
	{"zero float", `0.0`, `0`},
	{"zero exp", `0e10`, `0`},
	{"1e21", `1e21`, `1e+21`},
	{"1e20", `1e20`, `100000000000000000000`},
	{"float 1.2345678901234568e20", `1.2345678901234568e20`, `123456789012345680000`},
	{"just below 1e21", `999999999999999900000.0`, `999999999999999900000`},
	{"1e-7", `1e-7`, `1e-7`},
	{"0.0000001", `0.0000001`, `1e-7`},
	{"1e-6", `1e-6`, `0.000001`},
	{"0.1", `0.1`, `0.1`},
	{"1.5", `1.5`, `1.5`},
	{"trailing zero fraction", `-12.50`, `-12.5`},
	{"0.1+0.2", `0.30000000000000004`, `0.30000000000000004`},
	{"shortest digits", `123e-20`, `1.23e-18`},
	{"fraction and big exponent", `1.5e300`, `1.5e+300`},
	{"negative exponent form", `-1.5E-300`, `-1.5e-300`},
	{"max float", `1.7976931348623157e308`, `1.7976931348623157e+308`},
	{"min subnormal", `5e-324`, `5e-324`},
	{"underflow", `1e-400`, `0`},
	{"negative underflow", `-1e-400`, `0`},
	{"beyond 2^53", `9007199254740993.0`, `9007199254740992`},
	{"integral float with exponent", `1.234e3`, `1234`},
	{"fraction with exponent", `1.234e1`, `12.34`},
}

func TestCanonicalizeJSON(t *testing.T) {
	for _, tt := range canonicalGoldenTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalizeJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("CanonicalizeJSON(%q): got error %v, want %q", tt.in, err, tt.want)
			}
			if string(got) != tt.want {
				t.Errorf("CanonicalizeJSON(%q): got %q, want %q", tt.in, got, tt.want)
			}
			again, err := CanonicalizeJSON(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("CanonicalizeJSON(%q) (second pass): got %q, %v, want %q, nil", got, again, err, got)
			}
			if is, want := IsCanonicalJSON([]byte(tt.in)), tt.in == tt.want; is != want {
				t.Errorf("IsCanonicalJSON(%q): got %v, want %v", tt.in, is, want)
			}
			if !IsCanonicalJSON(got) {
				t.Errorf("IsCanonicalJSON(%q): got false, want true", got)
			}
			app, err := AppendCanonicalJSON([]byte("prefix:"), []byte(tt.in))
			if want := "prefix:" + tt.want; err != nil || string(app) != want {
				t.Errorf("AppendCanonicalJSON(%q): got %q, %v, want %q, nil", tt.in, app, err, want)
			}
		})
	}
}

var canonicalErrorTests = []struct {
	name, in string
	off      int
	msg      string // a substring of the error message
}{
	{"empty", "", 0, "end of input"},
	{"only space", "   ", 3, "end of input"},
	{"truncated object", `{"a":1`, 6, "end of input"},
	{"truncated key", `{"a`, 3, "end of input"},
	{"truncated after colon", `{"a":`, 5, "end of input"},
	{"truncated string", `"abc`, 4, "end of input"},
	{"truncated escape", `"\`, 2, "end of input"},
	{"truncated array", `[1,2`, 4, "end of input"},
	{"trailing garbage", `{"a":1}x`, 7, "after top-level value"},
	{"two values", `{"a":1} {}`, 8, "after top-level value"},
	{"leading zero", `01`, 1, "after top-level value"},
	{"trailing comma in array", `[1,]`, 3, "looking for beginning of value"},
	{"trailing comma in object", `{"a":1,}`, 7, "object key"},
	{"missing comma in array", `[1 2]`, 3, "after array element"},
	{"missing comma in object", `{"a":1 "b":2}`, 7, "after object member"},
	{"missing colon", `{"a" 1}`, 5, "after object key"},
	{"non-string key", `{1:2}`, 1, "object key"},
	{"bare comma", `{,}`, 1, "object key"},
	{"bad escape", `"\x"`, 1, "invalid escape"},
	{"short unicode escape", `"\u12"`, 1, `\u escape`},
	{"bad hex", `"\u12G4"`, 1, `\u escape`},
	{"lone high surrogate", `"\ud800"`, 1, "surrogate"},
	{"high surrogate then BMP", `"\ud800\u0041"`, 1, "surrogate"},
	{"high surrogate then high", `"\ud800\ud800"`, 1, "surrogate"},
	{"lone low surrogate", `"ab\udc00"`, 3, "surrogate"},
	{"swapped surrogates", `"\udc00\ud800"`, 1, "surrogate"},
	{"high surrogate at end", `"a\ud83d"`, 2, "surrogate"},
	{"invalid UTF-8", "\"\xff\"", 1, "UTF-8"},
	{"truncated UTF-8", "\"a\xc3\"", 2, "UTF-8"},
	{"overlong UTF-8", "\"\xc0\xaf\"", 1, "UTF-8"},
	{"UTF-8 surrogate", "\"\xed\xa0\x80\"", 1, "UTF-8"},
	{"invalid UTF-8 in key", "{\"\xff\":1}", 2, "UTF-8"},
	{"raw tab in string", "\"a\tb\"", 2, "control character"},
	{"raw newline in string", "\"\n\"", 1, "control character"},
	{"overflow", `1e400`, 0, "overflows"},
	{"negative overflow", `-1e400`, 0, "overflows"},
	{"overflow in array", `[1, 1.8e308]`, 4, "overflows"},
	{"lone minus", `-`, 1, "end of input"},
	{"minus letter", `-a`, 1, "in number"},
	{"dot without digits", `1.`, 2, "end of input"},
	{"dot then exponent", `1.e5`, 2, "in number"},
	{"leading dot", `.5`, 0, "beginning of value"},
	{"leading plus", `+1`, 0, "beginning of value"},
	{"empty exponent", `1e`, 2, "end of input"},
	{"exponent sign only", `[1e+]`, 4, "in number"},
	{"NaN", `NaN`, 0, "beginning of value"},
	{"Infinity", `-Infinity`, 1, "in number"},
	{"truncated literal", `tru`, 3, "end of input"},
	{"bad literal", `nul1`, 3, "literal null"},
	{"capitalized literal", `True`, 0, "beginning of value"},
	{"BOM", "\xef\xbb\xbf{}", 0, "byte 0xef"},
	{"duplicate after escape", `{"a":1,"\u0061":2}`, 7, `duplicate object key "a"`},
	{"duplicate", `{"a":1,"b":2,"a":3}`, 13, `duplicate object key "a"`},
	{"duplicate of earlier", `{"b":1,"a":2,"b":3}`, 13, `duplicate object key "b"`},
	{"first duplicate reported", `{"b":0,"a":1,"b":2,"a":3}`, 13, `duplicate object key "b"`},
	{"nested duplicate", `{"x":{"k":1,"k":2}}`, 12, `duplicate object key "k"`},
	{"duplicate astral", `{"😀":1,"\ud83d\ude00":2}`, 10, "duplicate object key"},
	{"too deep", strings.Repeat("[", maxCanonicalDepth+1) + strings.Repeat("]", maxCanonicalDepth+1), maxCanonicalDepth, "nesting"},
	{"too deep objects", strings.Repeat(`{"a":`, maxCanonicalDepth+1), 5 * maxCanonicalDepth, "nesting"},
}

func TestCanonicalizeJSONErrors(t *testing.T) {
	for _, tt := range canonicalErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalizeJSON([]byte(tt.in))
			if err == nil {
				t.Fatalf("CanonicalizeJSON(%.40q): got %q, nil, want error", tt.in, got)
			}
			if !errors.Is(err, ErrInvalidJSON) {
				t.Errorf("CanonicalizeJSON(%.40q): got error %v, want one wrapping ErrInvalidJSON", tt.in, err)
			}
			if want := fmt.Sprintf("offset %d:", tt.off); !strings.Contains(err.Error(), want) {
				t.Errorf("CanonicalizeJSON(%.40q): got error %q, want it to contain %q", tt.in, err, want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("CanonicalizeJSON(%.40q): got error %q, want it to contain %q", tt.in, err, tt.msg)
			}
			if got != nil {
				t.Errorf("CanonicalizeJSON(%.40q): got %q with the error, want nil", tt.in, got)
			}
			if IsCanonicalJSON([]byte(tt.in)) {
				t.Errorf("IsCanonicalJSON(%.40q): got true, want false", tt.in)
			}
			dst := []byte("prefix")
			app, err2 := AppendCanonicalJSON(dst, []byte(tt.in))
			if err2 == nil || err2.Error() != err.Error() || string(app) != "prefix" {
				t.Errorf("AppendCanonicalJSON(%.40q): got %q, %v, want %q, %v", tt.in, app, err2, "prefix", err)
			}
		})
	}
}

func TestCanonicalizeJSONMaxDepth(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("[", maxCanonicalDepth) + strings.Repeat("]", maxCanonicalDepth),
		strings.Repeat(`{"a":`, maxCanonicalDepth-1) + "[]" + strings.Repeat("}", maxCanonicalDepth-1),
	} {
		got, err := CanonicalizeJSON([]byte(in))
		if err != nil {
			t.Errorf("CanonicalizeJSON(depth %d): got error %v, want nil", maxCanonicalDepth, err)
		} else if string(got) != in {
			t.Errorf("CanonicalizeJSON(depth %d): output differs from its canonical input", maxCanonicalDepth)
		}
		if !IsCanonicalJSON([]byte(in)) {
			t.Errorf("IsCanonicalJSON(depth %d): got false, want true", maxCanonicalDepth)
		}
	}
}

func TestIsCanonicalJSON(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{`{"a":1,"b":[1,2,{"c":null}]}`, true},
		{`{"b":1,"a":2}`, false},
		{`{"a":1,"a":1}`, false},
		{` {}`, false},
		{`{} `, false},
		{`"\u00e9"`, true},
		{`"\u00E9"`, false},
		{`"é"`, false},
		{`"\u0061"`, false},
		{`"\/"`, false},
		{`"\u000a"`, false},
		{`"\u001f"`, true},
		{`"\u007f"`, true},
		{"\"\x7f\"", false},
		{`"\ud83d\ude00"`, true},
		{`"\ud83d"`, false},
		{`"\ude00"`, false},
		{`{"\ue000":1,"\ud800\udc00":2}`, true},
		{`{"\ud800\udc00":1,"\ue000":2}`, false},
		{`{"\n":1," ":2}`, true},
		{`{"a":1,"a\u0000":2}`, true},
		{`1.0`, false},
		{`1.5`, true},
		{`1e+21`, true},
		{`1e21`, false},
		{`1e-7`, true},
		{`1e-07`, false},
		{`0.000001`, true},
		{`-0`, false},
		{`0`, true},
		{`100000000000000000000000`, true},
		{`1e+400`, false},
		{``, false},
	} {
		if got := IsCanonicalJSON([]byte(tt.in)); got != tt.want {
			t.Errorf("IsCanonicalJSON(%q): got %v, want %v", tt.in, got, tt.want)
		}
		out, err := CanonicalizeJSON([]byte(tt.in))
		if want := err == nil && bytes.Equal(out, []byte(tt.in)); want != tt.want {
			t.Errorf("CanonicalizeJSON(%q) = %q, %v: is canonical %v, want %v", tt.in, out, err, want, tt.want)
		}
	}
}

const canonicalSample = `{"actor":"user:42","data":{"amount":1999,"currency":"EUR","note":"caf\u00e9 <b>","sku":"A-1"},"id":"01HZX3J7K9Q2W5E8R1T4Y6U0P3","kind":"order.created","seq":12345,"ts":1717171717123}`

func TestCanonicalizeJSONReturnsInput(t *testing.T) {
	in := []byte(canonicalSample)
	out, err := CanonicalizeJSON(in)
	if err != nil {
		t.Fatalf("CanonicalizeJSON(%q): got error %v", in, err)
	}
	if &out[0] != &in[0] || len(out) != len(in) {
		t.Errorf("CanonicalizeJSON(canonical input): got a new array, want the input itself")
	}
	if allocs := testing.AllocsPerRun(100, func() { out, err = CanonicalizeJSON(in) }); allocs != 0 {
		t.Errorf("CanonicalizeJSON(canonical input): got %v allocs, want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = IsCanonicalJSON(in) }); allocs != 0 {
		t.Errorf("IsCanonicalJSON: got %v allocs, want 0", allocs)
	}
}

func TestCanonicalizeJSONDoesNotModifyInput(t *testing.T) {
	in := []byte(`{"b":{"d":1,"c":2},"a":"\u00e9"}`)
	orig := string(in)
	if _, err := CanonicalizeJSON(in); err != nil {
		t.Fatal(err)
	}
	if string(in) != orig {
		t.Errorf("CanonicalizeJSON modified its input: got %q, want %q", in, orig)
	}
}

func TestCanonical(t *testing.T) {
	type inner struct {
		Z int    `json:"z"`
		Y string `json:"y"`
	}
	type event struct {
		Kind   string         `json:"kind"`
		Amount float64        `json:"amount"`
		Tags   []string       `json:"tags,omitempty"`
		Inner  inner          `json:"inner"`
		Meta   map[string]any `json:"meta"`
		Skip   string         `json:"-"`
		Empty  string         `json:"empty,omitempty"`
	}
	v := event{
		Kind:   "a<b>&c",
		Amount: 1e21,
		Tags:   []string{"x", "é"},
		Inner:  inner{Z: 1, Y: "y"},
		Meta:   map[string]any{"b": 0.1, "a": []any{1.0, nil}},
		Skip:   "skipped",
	}
	got, err := Canonical(v)
	if err != nil {
		t.Fatalf("Canonical(%+v): got error %v", v, err)
	}
	want := `{"amount":1e+21,"inner":{"y":"y","z":1},"kind":"a<b>&c","meta":{"a":[1,null],"b":0.1},"tags":["x","\u00e9"]}`
	if string(got) != want {
		t.Errorf("Canonical(%+v): got %s, want %s", v, got, want)
	}
	if _, err := Canonical(func() {}); err == nil || errors.Is(err, ErrInvalidJSON) {
		t.Errorf("Canonical(func): got error %v, want a marshal error", err)
	}
}

func TestAppendCanonicalJSONReusesCapacity(t *testing.T) {
	buf := make([]byte, 0, 256)
	out, err := AppendCanonicalJSON(buf, []byte(`{"b":1,"a":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"a":2,"b":1}` {
		t.Errorf("AppendCanonicalJSON: got %q, want %q", out, `{"a":2,"b":1}`)
	}
	if &out[:1][0] != &buf[:1][0] {
		t.Errorf("AppendCanonicalJSON: got a new array, want dst's")
	}
}

func TestCanonicalizeJSONLargeObject(t *testing.T) {
	// Past the small-object sort path.
	const n = 100
	var in, want strings.Builder
	in.WriteString("{")
	want.WriteString("{")
	for i := range n {
		if i > 0 {
			in.WriteString(",")
			want.WriteString(",")
		}
		j := n - 1 - i
		fmt.Fprintf(&in, `"k0\u003%d%d":%d`, j/10, j%10, j)
		fmt.Fprintf(&want, `"k%03d":%d`, i, i)
	}
	in.WriteString("}")
	want.WriteString("}")
	got, err := CanonicalizeJSON([]byte(in.String()))
	if err != nil {
		t.Fatalf("CanonicalizeJSON(%d members): got error %v", n, err)
	}
	if got := string(got); got != want.String() {
		t.Errorf("CanonicalizeJSON(%d members): got %s, want %s", n, got, want.String())
	}

	dup := strings.TrimSuffix(in.String(), "}") + `,"k000":0}`
	_, err = CanonicalizeJSON([]byte(dup))
	if wantErr := fmt.Sprintf(`offset %d: duplicate object key "k000"`, len(dup)-len(`"k000":0}`)); err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Errorf("CanonicalizeJSON(%d members with a duplicate): got error %v, want one containing %q", n+1, err, wantErr)
	}
}

func TestCanonicalizeJSONDeepUnsorted(t *testing.T) {
	// Each level must be reordered around everything it contains; moving the
	// contents once per level would take time quadratic in the depth.
	const d = maxCanonicalDepth
	blob := strings.Repeat("x", 1<<20)
	in := strings.Repeat(`{"b":`, d) + `"` + blob + `"` + strings.Repeat(`,"a":0}`, d)
	want := strings.Repeat(`{"a":0,"b":`, d) + `"` + blob + `"` + strings.Repeat(`}`, d)
	got, err := CanonicalizeJSON([]byte(in))
	if err != nil || string(got) != want {
		t.Errorf("CanonicalizeJSON(%d unsorted levels): got %.40q..., %v, want %.40q..., nil", d, got, err, want)
	}
	got, err = AppendCanonicalJSON([]byte("x"), []byte(in))
	if err != nil || string(got) != "x"+want {
		t.Errorf("AppendCanonicalJSON(%d unsorted levels): got %.40q..., %v, want %.40q..., nil", d, got, err, "x"+want)
	}
}
