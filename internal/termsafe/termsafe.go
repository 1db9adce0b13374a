// Package termsafe makes text that did not come from the operator safe to
// print on a terminal: a model's question, a tool's error, an approver's
// name or an MCP server's description may carry escape sequences that
// redraw the screen, bidi overrides that reorder what is read, or invisible
// characters that make two names look alike.
//
// Every such character is shown, never dropped, so the person reading sees
// that something was there: a rune as a JSON-style \uXXXX escape (\n, \r and
// \t as themselves), a byte that is not UTF-8 as \xNN. The rune escapes are
// valid inside a JSON string and mean the same rune there, so a JSON
// document passed through stays a JSON document that decodes to the same
// values. A backslash is left as it is, so escaping twice changes nothing.
//
// IsTerminal tells whether a file is a terminal: whether a command may ask
// a person on it, or redraw a line.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Line is s made safe for one line of output: every unsafe rune escaped,
// the newline included, so a field cannot start a line of its own.
func Line(s string) string { return escape(s, false) }

// Text is s made safe as lines of output: Line's escapes but for the
// newline and the tab, which are kept (a tab only moves on to the next
// stop: it cannot take the cursor back over what was printed, as \r can).
func Text(s string) string { return escape(s, true) }

// Unsafe reports whether r is escaped: C0 and C1 controls and DEL, bidi
// embeddings, overrides, isolates and marks, zero-width and other
// invisible format characters (Unicode Cf), the line and paragraph
// separators, invisible fillers and variation selectors. (A byte that is
// not UTF-8 is no rune; Line and Text escape it too.)
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r < 0x7f:
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) ||
		// Invisible fillers that are letters to Unicode but show nothing.
		r == 0x115F || r == 0x1160 || r == 0x3164 || r == 0xFFA0 || r == 0x2800 ||
		// Variation selectors change the look of what precedes them.
		(r >= 0xFE00 && r <= 0xFE0F) || (r >= 0xE0100 && r <= 0xE01EF)
}

func escape(s string, keepNewline bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (Unsafe(r) && !(keepNewline && (r == '\n' || r == '\t'))) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case (r == '\n' || r == '\t') && keepNewline:
			b.WriteByte(byte(r))
		case Unsafe(r):
			writeRune(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func writeRune(b *strings.Builder, r rune) {
	switch r {
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	default:
		if r > 0xFFFF {
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			return
		}
		fmt.Fprintf(b, `\u%04x`, r)
	}
}

// Writer writes through to another writer with Text's escapes: what it
// is given may be whole lines of a report whose fields were not all
// escaped, and nothing unsafe gets past it. A rune cut between two writes
// is held until the next one (or Flush), so it is not taken for bytes
// that are not UTF-8. Safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	pending []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports all of p written when the
// escaped text was.
func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf := p
	if len(t.pending) > 0 {
		buf = append(t.pending, p...)
		t.pending = nil
	}
	// Hold back the start of a rune the next write completes.
	cut := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-3; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	if cut < len(buf) {
		t.pending = append([]byte(nil), buf[cut:]...)
	}
	if _, err := io.WriteString(t.w, Text(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back of a rune no write completed, escaped.
func (t *Writer) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return nil
	}
	s := Text(string(t.pending))
	t.pending = nil
	_, err := io.WriteString(t.w, s)
	return err
}

// Check says what is unsafe in s, the newline aside ("" when nothing is):
// for tests that assert nothing raw reached an output.
func Check(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("byte %#x that is not UTF-8 at %d in %q", s[i], i, s)
		}
		if r != '\n' && Unsafe(r) {
			return fmt.Sprintf("raw %U at %d in %q", r, i, s)
		}
		i += n
	}
	return ""
}
