package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "noeta-peers-phases-")
	if err != nil {
		return fmt.Errorf("noeta-phases: %w", err)
	}
	defer os.RemoveAll(dir)
	s, err := openNoeta(ctx, dir, 1, *steps, true)
	if err != nil {
		return err
	}
	defer s.close()
	spans := make([][]time.Duration, len(phaseNames))
	var leases, records []float64
	for i := range *n + 3 {
		script, err := loadgen.Script(i, *steps, loadgen.Mix{})
		if err != nil {
			return fmt.Errorf("script: %w", err)
		}
		t0 := time.Now()
		id, err := s.h.Submit(ctx, host.Submission{Agent: loadgen.Agent, Goal: "peers", Script: script})
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		if _, err := s.h.Wait(ctx, id); err != nil {
			return fmt.Errorf("wait for %s: %w", id, err)
		}
		t1 := time.Now()
		log, err := s.h.Events(ctx, id, 0)
		if err != nil {
			return fmt.Errorf("events of %s: %w", id, err)
		}
		if i < 3 {
			continue // warm-up
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
	fmt.Fprintf(stdout, "noeta, %d runs of %d calls one at a time, medians (records per run %.0f, leases per run %.0f):\n",
		*n, *steps, median(records), median(leases))
	for k, name := range phaseNames {
		slices.Sort(spans[k])
		fmt.Fprintf(stdout, "  %-58s %8.2f ms\n", name, quantile(spans[k], 0.5))
	}
	return nil
}
