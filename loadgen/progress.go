package loadgen

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// report writes a progress line to w, if there is one.
func report(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}

// progress is the bar on a terminal, plain lines elsewhere; nothing when
// quiet.
type progress struct {
	w     io.Writer
	total int
	tty   bool
	off   bool
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer, total int, bar, quiet bool) *progress {
	return &progress{w: w, total: total, tty: bar, off: w == nil || quiet || total == 0, start: time.Now()}
}

func (p *progress) show(done int) {
	if p.off {
		return
	}
	if p.tty {
		const width = 40
		fill := width * done / p.total
		fmt.Fprintf(p.w, "\r[%s%s] %d/%d tasks %5.1fs", strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, p.total, time.Since(p.start).Seconds())
		return
	}
	if time.Since(p.last) >= 2*time.Second || done == p.total {
		p.last = time.Now()
		fmt.Fprintf(p.w, "bench: %d/%d tasks at rest after %.1fs\n", done, p.total, time.Since(p.start).Seconds())
	}
}

func (p *progress) end() {
	if !p.off && p.tty {
		fmt.Fprintln(p.w)
	}
}

// cpuSeconds is this process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// rssMiB is this process's resident set now and at its peak, from
// /proc/self/status (0 where there is none).
func rssMiB() (now, peak float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			now = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return now, peak
}
