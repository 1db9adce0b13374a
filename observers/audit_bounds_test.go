package observers

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/memtest"
)

// TestVerifyAuditFileBounds: audit verify reads only regular files, and
// never holds more than MaxAuditLine bytes of a line.
//
// Reproduction (before): `engine audit verify /dev/zero` grew to ~24 GB (one
// endless line) until the kernel killed it; a FIFO with no writer blocked it
// in open(2), deaf to SIGINT and SIGTERM.
func TestVerifyAuditFileBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"/dev/zero", "/dev/zero", "a character device"},
		{"a FIFO", fifo, "a FIFO"},
		{"a directory", dir, "a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := VerifyAuditFile(tt.path)
			if !errors.Is(err, boundedio.ErrNotRegular) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}

	// A cancelled context ends the read.
	path := filepath.Join(dir, "trail.jsonl")
	if err := os.WriteFile(path, bytes.Repeat([]byte("{}\n"), 100_000), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := VerifyAuditFileContext(ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestVerifyAuditLongLines: a line over MaxAuditLine is a broken record,
// counted, and skipped without being held; the lines after it are read.
func TestVerifyAuditLongLines(t *testing.T) {
	t.Parallel()
	long := bytes.Repeat([]byte("x"), 3*MaxAuditLine)
	for _, tt := range []struct {
		name    string
		input   []byte
		records int
		line    int
		why     string
	}{
		{"one long line, no newline", long, 1, 1, "longer than the limit of 1024 KiB"},
		{"a long line then more", append(append(append(long, '\n'), " \n"...), "{}\n"...), 3, 1, "longer than the limit"},
		{"exactly at the limit", append(bytes.Repeat([]byte(" "), MaxAuditLine), '\n'), 1, 1, "empty line"},
		{"one over the limit", append(bytes.Repeat([]byte(" "), MaxAuditLine+1), '\n'), 1, 1, "longer than the limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := VerifyAudit(bytes.NewReader(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Records != tt.records || rep.FirstBroken == nil || rep.FirstBroken.Line != tt.line || !strings.Contains(rep.FirstBroken.Why, tt.why) {
				t.Fatalf("got %+v %+v; want %d records, broken at line %d: %q", rep, rep.FirstBroken, tt.records, tt.line, tt.why)
			}
		})
	}
}

// FuzzVerifyAudit: any input is read without a panic, every line counted,
// within the memory ceiling of memtest.Ceiling.
func FuzzVerifyAudit(f *testing.F) {
	for _, seed := range []string{
		"", "\n", "{}\n", "{\"v\":1}\n{\"v\":1}", "not json\n\n\n",
		`{"v":1,"task":"T","seq":1,"hash":"00","prev":""}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep AuditReport
		var err error
		if got := memtest.Allocated(func() { rep, err = VerifyAudit(bytes.NewReader(data)) }); got > memtest.Ceiling(len(data)) {
			t.Fatalf("%d bytes allocated for %d bytes of input", got, len(data))
		}
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		if rep.Records != lines {
			t.Fatalf("%d records for %d lines", rep.Records, lines)
		}
	})
}
