package boundedio

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFile: what a command line can name instead of a small regular
// file is refused before it is read, with the reason and the limit in the
// error.
//
// Reproduction (before): os.ReadFile("/dev/zero") grew without end (~24 GB
// until the kernel killed the process), and os.ReadFile of a FIFO with no
// writer blocked in open(2), where no signal context could end it.
func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, make([]byte, 1024), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 1025), 0o644); err != nil {
		t.Fatal(err)
	}
	// A sparse file far over the limit: refused by its size, not read.
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path string
		want       error  // nil: read
		msg        string // in the error
		size       int
	}{
		{"small", small, nil, "", 5},
		{"at the limit", exact, nil, "", 1024},
		{"a symlink to a regular file", link, nil, "", 5},
		{"over the limit", big, ErrTooLarge, "over the limit of 1 KiB", 0},
		{"sparse 1 TiB", huge, ErrTooLarge, "over the limit of 1 KiB", 0},
		{"/dev/zero", "/dev/zero", ErrNotRegular, "not a regular file (a character device)", 0},
		{"/dev/null", "/dev/null", ErrNotRegular, "a character device", 0},
		{"a FIFO without a writer", fifo, ErrNotRegular, "not a regular file (a FIFO)", 0},
		{"a directory", dir, ErrNotRegular, "not a regular file (a directory)", 0},
		{"missing", filepath.Join(dir, "nope"), fs.ErrNotExist, "no such file", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := ReadFile(t.Context(), tt.path, 1024)
			if tt.want == nil {
				if err != nil || len(data) != tt.size {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(data), err, tt.size)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("got %v; want %v naming %s and saying %q", err, tt.want, tt.path, tt.msg)
			}
		})
	}
}

// TestReadFileContext: a read stops once its context is done.
func TestReadFileContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 200<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ReadFile(ctx, path, 1<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestReaderStopsMidway: the context is looked at between chunks, so a
// long read ends at the first chunk after the cancel.
func TestReaderStopsMidway(t *testing.T) {
	t.Parallel()
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(t.Context())
	r := Reader(ctx, f)
	buf := make([]byte, 1<<20)
	n, err := r.Read(buf)
	if err != nil || n > chunk {
		t.Fatalf("first read: %d, %v; want at most %d bytes", n, err, chunk)
	}
	cancel()
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
}

// TestCheckYAML: the indicator count bounds the node tree before it is
// built; plain text of any length is one node and passes.
func TestCheckYAML(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		data string
		ok   bool
	}{
		{"empty", "", true},
		{"a long plain scalar", strings.Repeat("word ", 100_000), true},
		{"a small mapping", "agents:\n  a: {tools: [echo]}\n", true},
		{"a flow list", "[" + strings.Repeat("a,", 300) + "a]", false},
		{"a block list of nulls", strings.Repeat("-\n", 300), false},
		{"deep nesting", strings.Repeat("[", 150) + strings.Repeat("]", 150), false},
		{"aliases", strings.Repeat("*a,", 200), false},
		{"colons in quoted text count too", `"` + strings.Repeat(":", 300) + `"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckYAML([]byte(tt.data), 1000)
			if tt.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%v", err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrTooManyNodes) || !strings.Contains(err.Error(), "over the limit of 1000")) {
				t.Fatalf("error %q", err)
			}
		})
	}
}
