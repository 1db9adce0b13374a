package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat; it
// is 100 on every Linux this runs on.
const clockTicks = 100

// Result is one measurement: one system at one concurrency for one round.
type Result struct {
	System      string  `json:"system"`
	Concurrency int     `json:"concurrency"`
	Steps       int     `json:"steps"`
	Runs        int     `json:"runs"`
	Seconds     float64 `json:"seconds"`
	RunsPerSec  float64 `json:"runs_per_sec"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	// ClientCPU and ServerCPU are CPU seconds per run over the measured
	// window: the process that submits and waits for the runs (and hosts
	// the workers: noeta's engine and embedded server, the DBOS library,
	// the Temporal SDK worker), and the separate server (Temporal's, or
	// PostgreSQL's postmaster and its children); 0 where there is none.
	ClientCPU float64 `json:"client_cpu_s_per_run"`
	ServerCPU float64 `json:"server_cpu_s_per_run"`
	// ClientRSS is the peak resident set of the client process (VmHWM);
	// ServerRSS the server's at the end of the window (VmRSS, or the sum of
	// Pss over a process tree, so shared memory counts once).
	ClientRSS float64 `json:"client_rss_mib"`
	ServerRSS float64 `json:"server_rss_mib"`
	// WritesPerRun is noeta's durable writes per run: the writes to the
	// task stream whose acknowledgement the engine waited for
	// (jetstream.Log.DurableWaits) over the window, by runs; 0 for the
	// peers, which do not count theirs.
	WritesPerRun float64 `json:"durable_writes_per_run,omitempty"`
	// GroupedPerRun is how many of those writes went in a group commit
	// (jetstream.Log.GroupCommits, ADR 0107): written with other tasks'
	// in one atomic batch and one fsync.
	GroupedPerRun float64 `json:"grouped_writes_per_run,omitempty"`
	// HandedOffPerRun is the share of noeta's runs whose task was created
	// leased to a worker waiting for one (ADR 0112), not queued.
	HandedOffPerRun float64 `json:"handed_off_per_run,omitempty"`
	// GroupSize is the mean count of writes in one group commit.
	GroupSize float64 `json:"group_size,omitempty"`
	Load1     float64 `json:"load1"`
	// OtherCores is the CPU the rest of the machine used over the window
	// (all busy time in /proc/stat less the client's and the server's), in
	// cores: the load from other work the measurement ran beside.
	OtherCores float64 `json:"other_cores"`
}

// drive runs fn in a closed loop on conc goroutines until the deadline:
// each goroutine starts a run as soon as its last ended. It returns each
// run's latency and the wall time from the start to the last run's end.
// The first error stops every goroutine and is returned.
func drive(ctx context.Context, conc int, d time.Duration, fn func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		next     int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				t0 := time.Now()
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
				el := time.Since(t0)
				mu.Lock()
				lat = append(lat, el)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start), firstErr
}

// quantile is the q-quantile of sorted durations, in milliseconds (nearest
// rank).
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

// summarise fills r's throughput and latency from one drive.
func summarise(r *Result, lat []time.Duration, wall time.Duration) {
	slices.Sort(lat)
	r.Runs = len(lat)
	r.Seconds = wall.Seconds()
	if wall > 0 {
		r.RunsPerSec = float64(len(lat)) / wall.Seconds()
	}
	r.P50ms = quantile(lat, 0.50)
	r.P99ms = quantile(lat, 0.99)
}

// procStat is a process's CPU time in seconds: its own, and with cumulative
// its reaped children's too (utime, stime, cutime, cstime).
func procStat(pid int, cumulative bool) (float64, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	// The command name is in parentheses and may hold spaces.
	rest := b[bytes.LastIndexByte(b, ')')+2:]
	f := strings.Fields(string(rest))
	// f[0] is field 3 (state): field n is f[n-3].
	ppid, _ := strconv.Atoi(f[1])
	n := 2
	if cumulative {
		n = 4
	}
	var ticks float64
	for _, s := range f[11 : 11+n] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("stat of %d: %w", pid, err)
		}
		ticks += v
	}
	return ticks / clockTicks, ppid, nil
}

// treeCPU is the CPU seconds of pid, of its children it reaped, and of its
// live descendants: PostgreSQL's backends are children of the postmaster,
// which adds their time to its own children's when they exit.
func treeCPU(pid int) (float64, error) {
	total := 0.0
	for _, p := range tree(pid) {
		c, _, err := procStat(p, true)
		if err != nil {
			if p == pid {
				return 0, err
			}
			continue // a backend that exited meanwhile
		}
		total += c
	}
	return total, nil
}

// tree is pid and its live descendants.
func tree(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pp, err := procStat(p, false); err == nil {
			parent[p] = pp
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		for p, pp := range parent {
			if pp == out[i] {
				out = append(out, p)
			}
		}
	}
	return out
}

// statusField reads a "Name:   123 kB" line of /proc/<pid>/status or
// smaps_rollup, in MiB.
func statusField(path, name string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("%s %s: %w", path, name, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, name)
}

// treePss is the proportional set size of pid and its live descendants, in
// MiB: a tree's shared memory (PostgreSQL's shared buffers) counts once.
func treePss(pid int) float64 {
	total := 0.0
	for _, p := range tree(pid) {
		v, err := statusField(filepath.Join("/proc", strconv.Itoa(p), "smaps_rollup"), "Pss")
		if err == nil {
			total += v
		}
	}
	return total
}

// load1 is the one-minute load average.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return v
}

// machineBusy is the CPU seconds all cores spent busy since boot (user,
// nice, system, irq, softirq, steal of /proc/stat's cpu line).
func machineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected %q", line)
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += v
	}
	return ticks / clockTicks, nil
}
