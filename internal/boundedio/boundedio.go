// Package boundedio reads the files a noeta command is handed (task files,
// governance configs, serve configs, audit trails) without letting the file
// decide how much memory or time the read costs.
//
// A path named on a command line can be anything: /dev/zero, a FIFO nobody
// writes to, a directory, a 30 GB file. Every reader here
//
//   - opens without blocking (O_NONBLOCK, so a FIFO with no writer does not
//     hang the open) and without following the file's identity after the
//     check: the checks are made on the opened descriptor (fstat), not on the
//     path;
//   - refuses anything that is not a regular file, naming what it is;
//   - refuses a regular file over the caller's limit before reading it, and
//     stops at the limit if the file grows while it is read;
//   - checks the context between chunks, so SIGINT or SIGTERM (a signal
//     context) ends a slow read.
//
// Reading standard input ("-" or /dev/stdin) is not supported: a pipe or a
// terminal is not a regular file, and is refused like any other.
package boundedio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a path that is not a regular file: a
// directory, a FIFO, a device, a socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned for a file over the reader's limit.
var ErrTooLarge = errors.New("file too large")

// chunk is how much is read between two looks at the context.
const chunk = 64 << 10

// Open opens path for reading if it is a regular file, and returns it with
// its size. The descriptor is checked, not the path, so a file swapped in
// after the check is not the one read.
func Open(path string) (*os.File, int64, error) {
	// O_NONBLOCK: opening a FIFO for reading blocks until a writer comes,
	// and the open cannot be interrupted. It changes nothing for a regular
	// file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))}
	}
	return f, fi.Size(), nil
}

// ReadFile reads the regular file at path, of at most limit bytes. The
// error names the path and, for a file too large, the limit.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, size, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, tooLarge(path, limit)
	}
	buf := make([]byte, 0, size+1)
	r := Reader(ctx, io.LimitReader(f, limit+1))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, tooLarge(path, limit) // it grew while we read it
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
	}
}

func tooLarge(path string, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: over the limit of %s", ErrTooLarge, Size(limit))}
}

// Reader returns r, whose reads fail with ctx's error once ctx is done and
// read at most 64 KiB at a time, so a long read looks at ctx often.
func Reader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx: ctx, r: r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) > chunk {
		p = p[:chunk]
	}
	return c.r.Read(p)
}

// Size words a byte count for a message: 1 MiB, 64 KiB, 512 bytes.
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}
