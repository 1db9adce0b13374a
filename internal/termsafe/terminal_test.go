package termsafe

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestIsTerminal: neither /dev/null (a character device) nor a pipe is a
// terminal, so a run fed from either does not wait for answers.
func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"null": null, "pipe": r} {
		if IsTerminal(f.Fd()) || IsTerminalWriter(f) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}

// TestIsTerminalWriterNeedsAFile: a writer that is not a file is no
// terminal, whatever it wraps.
func TestIsTerminalWriterNeedsAFile(t *testing.T) {
	for _, w := range []io.Writer{&strings.Builder{}, NewWriter(os.Stderr)} {
		if IsTerminalWriter(w) {
			t.Errorf("%T is taken for a terminal", w)
		}
	}
}
