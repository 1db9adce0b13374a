package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/memtest"
)

// TestLoadTaskFileBounds: a task file must be a regular file of at most
// MaxTaskFileSize bytes whose YAML cannot build an unbounded tree.
//
// Reproduction (before): LoadTaskFile("/dev/zero") grew to ~24 GB until the
// kernel killed the process; a FIFO blocked in open(2); a 10 MB flow list
// (script: [a,a,a,…]) cost 1.1 GB of memory before any limit applied.
func TestLoadTaskFileBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	bomb := "agent: a\ngoal: g\nscript:\n- finish:\n    answer:\n" +
		"      a: &a [x,x,x,x,x,x,x,x,x,x]\n      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
		"      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n" +
		"      g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
	for _, tt := range []struct {
		name, path string
		is         error
		want       string
	}{
		{"/dev/zero", "/dev/zero", boundedio.ErrNotRegular, "a character device"},
		{"a FIFO", fifo, boundedio.ErrNotRegular, "a FIFO"},
		{"a directory", dir, boundedio.ErrNotRegular, "a directory"},
		{"over the size limit", write("big.yaml", "agent: a\ngoal: "+strings.Repeat("x", MaxTaskFileSize)), boundedio.ErrTooLarge, "over the limit of 1 MiB"},
		{"a long flow list", write("flow.yaml", "agent: a\ngoal: g\nscript: ["+strings.Repeat("{finish: {answer: 1}},", 20_000)+"]\n"), nil, "too many YAML nodes"},
		{"deep nesting", write("deep.yaml", strings.Repeat("[", 100_000)+strings.Repeat("]", 100_000)), nil, "too many YAML nodes"},
		{"an alias bomb", write("bomb.yaml", bomb), nil, "expands to more than 200000 values"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadTaskFile(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("got %v; want %q", err, tt.want)
			}
		})
	}
	if _, err := ParseTaskFile("x.yaml", make([]byte, MaxTaskFileSize+1)); !errors.Is(err, boundedio.ErrTooLarge) {
		t.Fatalf("ParseTaskFile over the limit: %v", err)
	}
}

// FuzzTaskFileMemory holds the task-file parser to a memory ceiling: what it
// allocates for any input is at most memtest.Ceiling(len(input)) (64 MiB
// plus 256 bytes per input byte), aliases and all.
func FuzzTaskFileMemory(f *testing.F) {
	for _, seed := range []string{
		designExample, scriptedFile, everyKindFile,
		"[" + strings.Repeat("a,", 2000) + "a]",
		"agent: a\ngoal: g\nscript:\n- finish:\n    answer: {a: &a [x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b], d: &d [*c,*c,*c,*c,*c,*c,*c,*c], e: [*d,*d,*d,*d,*d,*d,*d,*d]}\n",
		strings.Repeat("- ", 3000),
		strings.Repeat("{", 5000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got := memtest.Allocated(func() { ParseTaskFile("fuzz.yaml", data) }); got > memtest.Ceiling(len(data)) {
			t.Fatalf("%d bytes allocated for %d bytes of input, over the ceiling of %d", got, len(data), memtest.Ceiling(len(data)))
		}
	})
}
