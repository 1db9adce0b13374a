package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

// runMerge prints the table of medians over the measurements of several
// reports (the -json files of sittings), optionally of only those beside
// at most -max-other cores of other work.
func runMerge(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxOther := fs.Float64("max-other", 0, "keep only measurements beside at most this many cores of other work (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("peers merge: name the report files (-json of a sitting)")
	}
	var (
		all Report
		o   = allOpts{rounds: 0}
	)
	for _, name := range fs.Args() {
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("peers merge: %w", err)
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("peers merge: %s: %w", name, err)
		}
		if all.Start.IsZero() || rep.Start.Before(all.Start) {
			all.Start, all.Load1, all.Floor = rep.Start, rep.Load1, rep.Floor
		}
		for _, r := range rep.Results {
			if *maxOther > 0 && r.OtherCores > *maxOther {
				continue
			}
			all.Results = append(all.Results, r)
			o.steps, o.seconds = r.Steps, 0
			if !slices.Contains(o.conc, r.Concurrency) {
				o.conc = append(o.conc, r.Concurrency)
			}
			if !slices.Contains(o.systems, r.System) {
				o.systems = append(o.systems, r.System)
			}
		}
	}
	slices.Sort(o.conc)
	slices.SortFunc(o.systems, func(a, b string) int { return slices.Index(systemNames, a) - slices.Index(systemNames, b) })
	fmt.Fprintf(stdout, "%d measurements from %d reports (the first report's start, load and floor below)\n", len(all.Results), fs.NArg())
	return writeTable(stdout, all, o)
}
