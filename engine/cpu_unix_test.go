//go:build unix

package engine

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's processor time so far, user and system, every
// thread's (the garbage collector's work too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the processor time per op since start as cpu-ns/op. On
// a shared machine it moves far less with the load from other work than the
// wall time of ns/op does (which counts the time the benchmark waited for a
// processor), so it is the figure to compare across runs.
func reportCPU(b *testing.B, start time.Duration) {
	if start > 0 && b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}
