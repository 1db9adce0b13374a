package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/loadgen"
)

// phase names a span of a noeta run, from its records' append times and
// the caller's clock.
var phaseNames = []string{
	"Submit → TaskCreated",
	"TaskCreated → first LeaseGranted",
	"LeaseGranted → first ToolCallStarted",
	"first ToolCallStarted → last ToolCallFinished, per call",
	"last ToolCallFinished → TaskCompleted",
	"TaskCompleted → Wait returns",
	"whole run",
}

// runPhases runs -n noeta tasks one at a time on a fresh embedded default
// and prints the median of each phase of a run, to show where a run's time
// goes.
func runPhases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers noeta-phases", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 50, "runs")
	steps := fs.Int("steps", 20, "tool calls per run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured runs to this file")
	traceFile := fs.String("trace", "", "write an execution trace of the measured runs to this file")
	printRecords := fs.Bool("records", false, "print the last run's records, each with its time from Submit")
	tap := fs.Bool("tap", false, "end a run when its terminal record is committed, as the peers noeta row does, not when Host.Wait returns")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "noeta-peers-phases-")
	if err != nil {
		return fmt.Errorf("noeta-phases: %w", err)
	}
	defer os.RemoveAll(dir)
	s, err := openNoeta(ctx, dir, 1, *steps, !*tap)
	if err != nil {
		return err
	}
	defer s.close()
	spans := make([][]time.Duration, len(phaseNames))
	var msgs0 uint64
	var leases, records []float64
	for i := range *n + 3 {
		script, err := loadgen.Script(i, *steps, loadgen.Mix{})
		if err != nil {
			return fmt.Errorf("script: %w", err)
		}
		t0 := time.Now()
		id, err := s.submitAndWait(ctx, i, script)
		if err != nil {
			return err
		}
		t1 := time.Now()
		log, err := s.h.Events(ctx, id, 0)
		if err != nil {
			return fmt.Errorf("events of %s: %w", id, err)
		}
		if i < 3 {
			if i == 2 {
				// The warm-up is over: profile the measured runs only.
				stopProfiles, err := startProfiles(*cpuProfile, *traceFile)
				if err != nil {
					return err
				}
				defer stopProfiles()
				msgs0 = s.h.Conn().Stats().OutMsgs
			}
			continue // warm-up
		}
		if *printRecords && i == *n+2 {
			prev := t0
			for _, env := range log {
				fmt.Fprintf(stdout, "%4d %-28s %8.3f ms  +%6.3f\n", env.Seq, env.Type, float64(env.Time.Sub(t0).Microseconds())/1000, float64(env.Time.Sub(prev).Microseconds())/1000)
				prev = env.Time
			}
		}
		var created, lease, firstCall, lastDone, done time.Time
		nLease := 0
		for _, env := range log {
			switch env.Type {
			case noeta.TypeTaskCreated:
				created = env.Time
			case noeta.TypeLeaseGranted:
				nLease++
				if lease.IsZero() {
					lease = env.Time
				}
			case noeta.TypeToolCallStarted:
				if firstCall.IsZero() {
					firstCall = env.Time
				}
			case noeta.TypeToolCallFinished:
				lastDone = env.Time
			case noeta.TypeTaskCompleted:
				done = env.Time
			}
		}
		for k, d := range []time.Duration{
			created.Sub(t0), lease.Sub(created), firstCall.Sub(lease),
			lastDone.Sub(firstCall) / time.Duration(*steps), done.Sub(lastDone), t1.Sub(done), t1.Sub(t0),
		} {
			spans[k] = append(spans[k], d)
		}
		leases = append(leases, float64(nLease))
		records = append(records, float64(len(log)))
	}
	fmt.Fprintf(stdout, "messages the host's connection sent a run: %.1f; tasks handed to a waiting worker (ADR 0112): %d of %d\n",
		float64(s.h.Conn().Stats().OutMsgs-msgs0)/float64(*n), s.h.Dispatcher().Stats().HandOffs, *n+3)
	fmt.Fprintf(stdout, "noeta, %d runs of %d calls one at a time, medians (records per run %.0f, leases per run %.0f):\n",
		*n, *steps, median(records), median(leases))
	for k, name := range phaseNames {
		slices.Sort(spans[k])
		fmt.Fprintf(stdout, "  %-58s %8.2f ms\n", name, quantile(spans[k], 0.5))
	}
	return nil
}

// startProfiles starts a CPU profile and an execution trace to the files
// named ("": none) and returns what stops them.
func startProfiles(cpu, tr string) (func(), error) {
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if tr != "" {
		f, err := os.Create(tr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			stop()
			return nil, fmt.Errorf("trace: %w", err)
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}
