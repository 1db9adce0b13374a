package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseAllSystems(t *testing.T) {
	for _, tc := range []struct {
		arg, err string
		want     []string
	}{
		{"", "", []string{"noeta", "noeta-wait", "noeta-r3", "dbos", "temporal", "jetstream", "jetstream-grouped", "jetstream-grouped-fenced"}},
		{"-systems=noeta-r3", "", []string{"noeta-r3"}},
		{"-systems=noeta,noeta-r3", "", []string{"noeta", "noeta-r3"}},
		{"-systems=noeta-r5", `unknown "noeta-r5"`, nil},
	} {
		var args []string
		if tc.arg != "" {
			args = []string{tc.arg}
		}
		o, err := parseAll(args, io.Discard)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %s", tc.arg, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.arg, err)
		}
		if strings.Join(o.systems, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: systems %v, want %v", tc.arg, o.systems, tc.want)
		}
	}
}

// The table shows noeta's durable writes per run, a dash for the peers,
// the replicated row against the embedded default, and the floor against
// noeta and each peer.
func TestWriteTableWritesAndReplication(t *testing.T) {
	rep := Report{Results: []Result{
		{System: "noeta", Concurrency: 1, RunsPerSec: 100, P50ms: 10, WritesPerRun: 22},
		{System: "noeta-r3", Concurrency: 1, RunsPerSec: 40, P50ms: 25, WritesPerRun: 22},
		{System: "dbos", Concurrency: 1, RunsPerSec: 80, P50ms: 12},
		{System: "jetstream", Concurrency: 1, RunsPerSec: 200, P50ms: 5, WritesPerRun: 22},
		{System: "jetstream-grouped", Concurrency: 1, RunsPerSec: 220, P50ms: 4.5, WritesPerRun: 22},
	}}
	var b strings.Builder
	if err := writeTable(&b, rep, allOpts{rounds: 1, seconds: 1, steps: 20, conc: []int{1}, systems: []string{"noeta", "noeta-r3", "dbos", "jetstream", "jetstream-grouped"}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| noeta-r3 | 1 | 40.0 | 25.0 |",
		"| noeta-r3 | 1 | 40.0 | 25.0 | 0.0 | 0.0000 + 0.0000 | 0 + 0 | 22.00 |",
		"| dbos | 1 | 80.0 | 12.0 | 0.0 | 0.0000 + 0.0000 | 0 + 0 | – |",
		"noeta-r3 at 1 vs noeta: 0.40× runs/s, 2.50× p50",
		"noeta-r3 at 1 vs dbos: 0.50× runs/s",
		"the floors against noeta and each peer",
		"jetstream (a floor) at 1 vs noeta: 2.00× runs/s, 0.50× p50",
		"jetstream (a floor) at 1 vs dbos: 2.50× runs/s",
		"jetstream-grouped (a floor) at 1 vs noeta: 2.20× runs/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The floor is not a peer: noeta's ratios are to the peers alone.
	if strings.Contains(out, "noeta at 1 vs jetstream") || strings.Contains(out, "jetstream (a floor) at 1 vs jetstream-grouped") ||
		strings.Contains(out, "(a floor) at 1 vs noeta-r3") {
		t.Errorf("the floor is listed as a peer:\n%s", out)
	}
}

// TestNoetaWorkers: a noeta row's pool is as told, else one worker per
// concurrent run and never fewer than engine serve's default.
func TestNoetaWorkers(t *testing.T) {
	for _, c := range []struct{ conc, workers, want int }{
		{1, 0, 4},
		{4, 0, 4},
		{64, 0, 64},
		{1, 2, 2},
		{64, 8, 8},
	} {
		if got := noetaWorkers(oneOpts{conc: c.conc, workers: c.workers}); got != c.want {
			t.Errorf("conc %d, -noeta-workers %d: %d workers, want %d", c.conc, c.workers, got, c.want)
		}
	}
}
