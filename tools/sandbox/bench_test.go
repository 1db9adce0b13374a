package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// BenchmarkShellEcho is what the sandbox adds to a shell call: `sh -c
// "echo hi"` started, run and waited for, confined and not. It reports
// the median and the 99th percentile of one call besides the mean. With
// NOETA_SANDBOX_HELPER set to a built noeta-sandbox it also measures the
// path the engine takes when the helper is installed beside it.
//
//	go test -run '^$' -bench ShellEcho -count 6 ./tools/sandbox/
func BenchmarkShellEcho(b *testing.B) {
	ws := b.TempDir()
	spec := sandbox.Spec{Argv: []string{"/bin/sh", "-c", "echo hi"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: ws}
	b.Run("plain", func(b *testing.B) {
		percentiles(b, 0, func() error {
			cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
			cmd.Dir, cmd.Env = ws, spec.Env
			_, err := cmd.Output()
			return err
		})
	})
	confined := func(opts sandbox.Options, p sandbox.Policy) func(b *testing.B) {
		return func(b *testing.B) {
			sb, err := sandbox.New(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			percentiles(b, 0, func() error {
				c, err := sb.Command(context.Background(), p, spec)
				if err != nil {
					return err
				}
				_, err = c.Output()
				c.Finish()
				return err
			})
		}
	}
	started := func(opts sandbox.Options, p sandbox.Policy, pace time.Duration) func(b *testing.B) {
		return func(b *testing.B) {
			sb, err := sandbox.New(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			percentiles(b, pace, func() error {
				r, w, err := os.Pipe()
				if err != nil {
					return err
				}
				defer r.Close()
				pr, err := sb.Start(context.Background(), p, spec, sandbox.Stdio{Stdout: w})
				w.Close()
				if err != nil {
					return err
				}
				out, _ := io.ReadAll(r)
				ps, err := pr.Wait()
				pr.Finish()
				if err != nil {
					return err
				}
				if !ps.Success() || string(out) != "hi\n" {
					return fmt.Errorf("%v, output %q", ps, out)
				}
				return nil
			})
		}
	}
	b.Run("sandboxed", confined(sandbox.Options{}, sandbox.Policy{}))
	b.Run("started", started(sandbox.Options{}, sandbox.Policy{}, 0))
	if helper := os.Getenv("NOETA_SANDBOX_HELPER"); helper != "" {
		b.Run("sandboxed-helper", confined(sandbox.Options{Executable: helper}, sandbox.Policy{}))
		b.Run("started-helper", started(sandbox.Options{Executable: helper}, sandbox.Policy{}, 0))
		b.Run("started-helper-paced", started(sandbox.Options{Executable: helper}, sandbox.Policy{}, 20*time.Millisecond))
	}
	b.Run("sandboxed-egress", confined(sandbox.Options{}, sandbox.Policy{Allow: []string{"example.com:443"}}))
}

// percentiles runs f b.N times and reports p50 and p99 of one run. Paced,
// it pauses before each run (untimed), as an agent's calls come a model's
// turn apart: then a helper started ahead is ready when the call comes.
func percentiles(b *testing.B, pace time.Duration, f func() error) {
	b.Helper()
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		if pace > 0 {
			b.StopTimer()
			time.Sleep(pace)
			b.StartTimer()
		}
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
}
