package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Floor is the disk's latency of a small write followed by an fsync: no
// durable step can commit faster.
type Floor struct {
	Dir   string  `json:"dir"`
	N     int     `json:"n"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
}

// fsyncFloor appends 128 bytes to a file in dir and fsyncs it, n times.
func fsyncFloor(ctx context.Context, dir string, n int) (Floor, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return Floor{}, fmt.Errorf("fsync floor: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 128)
	lat := make([]time.Duration, 0, n)
	for range n {
		if ctx.Err() != nil {
			return Floor{}, ctx.Err()
		}
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return Floor{}, fmt.Errorf("fsync floor: %w", err)
		}
		if err := f.Sync(); err != nil {
			return Floor{}, fmt.Errorf("fsync floor: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return Floor{Dir: dir, N: n, P50us: quantile(lat, 0.5) * 1000, P99us: quantile(lat, 0.99) * 1000}, nil
}

func runFsync(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers fsync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", os.TempDir(), "directory on the disk to measure")
	n := fs.Int("n", 1000, "write+fsync rounds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return fmt.Errorf("fsync floor: %w", err)
	}
	fl, err := fsyncFloor(ctx, abs, *n)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "write+fsync of 128 bytes in %s, %d rounds: p50 %.0f µs, p99 %.0f µs\n", fl.Dir, fl.N, fl.P50us, fl.P99us)
	return err
}
