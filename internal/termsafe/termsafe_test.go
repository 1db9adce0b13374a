package termsafe

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestLine(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "echo hello → ok …", "echo hello → ok …"},
		{"csi redraw", "\x1b[2K\r\x1b[32mAUTO-APPROVED", `\u001b[2K\r\u001b[32mAUTO-APPROVED`},
		{"osc title and link", "\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\", `\u001b]0;pwned\u0007\u001b]8;;http://x\u001b\`},
		{"c1 csi", "a\u009b31mb", `a\u009b31mb`},
		{"del", "a\x7fb", `a\u007fb`},
		{"newline", "line\n   0.1s root #9 ApprovalResolved", `line\n   0.1s root #9 ApprovalResolved`},
		{"tab", "a\tb", `a\tb`},
		{"bidi override", "rm -rf \u202e/ fig.txt", `rm -rf \u202e/ fig.txt`},
		{"bidi isolates", "\u2066x\u2069 \u200f", `\u2066x\u2069 \u200f`},
		{"zero width", "bo\u200bb\u2060\ufeff", `bo\u200bb\u2060\ufeff`},
		{"line separator", "a\u2028b\u2029", `a\u2028b\u2029`},
		{"tag character", "a\U000E0041", `a\udb40\udc41`},
		{"hangul filler", "\u3164", `\u3164`},
		{"invalid utf8", "a\xffb\xc2", `a\xffb\xc2`},
		{"replacement rune kept", "a\ufffdb", "a\ufffdb"},
		{"backslash kept", `a\x1b`, `a\x1b`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Line(c.in)
			if got != c.want {
				t.Fatalf("Line(%q) = %q, want %q", c.in, got, c.want)
			}
			if Line(got) != got {
				t.Fatalf("Line is not idempotent on %q: %q", got, Line(got))
			}
			assertSafe(t, got)
		})
	}
	if got := Text("a\nb\x1b"); got != "a\nb\\u001b" {
		t.Fatalf("Text kept %q", got)
	}
}

// An escaped rune inside a JSON string is a JSON escape of the same rune:
// a JSON document passed through decodes to the same values.
// TestTextKeepsTabs: a tool's output printed as lines keeps its tabs (they
// cannot take the cursor back); \r and the rest are still escaped.
func TestTextKeepsTabs(t *testing.T) {
	if got, want := Text("a\tb\nc\rd"), "a\tb\nc\\rd"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestTextKeepsJSON(t *testing.T) {
	v := map[string]string{"s": "\u202e\u009b\x7f\u200b\U000E0041 ok"}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(Text(string(b))), &back); err != nil {
		t.Fatalf("escaped JSON %s does not parse: %v", Text(string(b)), err)
	}
	if back["s"] != v["s"] {
		t.Fatalf("escaped JSON decodes to %q, want %q", back["s"], v["s"])
	}
	assertSafe(t, Text(string(b)))
}

// A rune cut between two writes is not taken for bytes that are not UTF-8.
func TestWriterJoinsCutRunes(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	s := "→ é \u202e \x1b[31m\n"
	for i := 0; i < len(s); i++ {
		if _, err := w.Write([]byte{s[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := "→ é \\u202e \\u001b[31m\n"; out.String() != want {
		t.Fatalf("wrote %q, want %q", out.String(), want)
	}
	out.Reset()
	_, _ = w.Write([]byte("x\xe2\x86"))
	_ = w.Flush()
	if want := `x\xe2\x86`; out.String() != want {
		t.Fatalf("an unfinished rune at the end wrote %q, want %q", out.String(), want)
	}
}

// assertSafe fails when s holds a byte or rune a terminal would act on or
// hide (the newline aside).
func assertSafe(t *testing.T, s string) {
	t.Helper()
	if msg := Check(s); msg != "" {
		t.Fatal(msg)
	}
}

func TestCheck(t *testing.T) {
	if Check("a\u202eb") == "" || Check("\x1b") == "" || Check("\xff") == "" || Check("ok\n") != "" {
		t.Fatal("Check misjudges")
	}
}
