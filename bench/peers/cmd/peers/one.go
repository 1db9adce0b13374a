package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// systemNames are the systems the harness measures.
var systemNames = []string{"noeta", "noeta-wait", "noeta-r3", "dbos", "temporal", "jetstream", "jetstream-grouped", "jetstream-grouped-fenced"}

// system is one of the three, open and ready to run.
type system interface {
	// run does one durable run of the steps and waits for its end.
	run(ctx context.Context, i int) error
	close()
}

// writeCounter is a system that counts its durable writes (noeta's).
type writeCounter interface {
	durableWrites() uint64
	groupedWrites() (groups, writes uint64)
	// handOffs counts the tasks handed to a waiting worker (ADR 0112).
	handOffs() uint64
}

// oneOpts are the flags of one measurement.
type oneOpts struct {
	system    string
	conc      int
	steps     int
	seconds   float64
	warmup    float64
	serverPID int
	// workers is noeta's engine workers; 0: as many as concurrent runs.
	workers int
	addr    string // Temporal's frontend, DBOS's database URL, noeta's or jetstream's data directory, noeta-r3's cluster directory
	// cpuProfile, if set, is where a CPU profile of this process over the
	// measured seconds goes (noeta runs in it; the peers' servers do not).
	cpuProfile string
}

func parseOne(args []string, stderr io.Writer) (oneOpts, error) {
	var o oneOpts
	fs := flag.NewFlagSet("peers one", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.system, "system", "", "noeta, noeta-wait, noeta-r3, dbos, temporal, or a floor: jetstream (a run's writes alone on noeta's embedded server), jetstream-grouped (in atomic batches across runs) or jetstream-grouped-fenced (each also after the fence's two reads)")
	fs.IntVar(&o.conc, "conc", 1, "concurrent runs (closed loop)")
	fs.IntVar(&o.steps, "steps", 20, "steps (tool calls, activities) per run")
	fs.Float64Var(&o.seconds, "seconds", 10, "measured seconds")
	fs.Float64Var(&o.warmup, "warmup", 2, "unmeasured seconds first")
	fs.IntVar(&o.workers, "noeta-workers", 0, "noeta's engine workers (0: as many as -conc, at least engine serve's default of 4)")
	fs.IntVar(&o.serverPID, "server-pid", 0, "the server's pid, whose process tree's CPU and memory are read (0: none)")
	fs.StringVar(&o.addr, "addr", "", "Temporal's frontend, DBOS's PostgreSQL URL, noeta's and jetstream's data directory or noeta-r3's cluster directory")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process over the measured seconds to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.conc < 1 || o.steps < 1 || o.seconds <= 0 || o.addr == "" {
		return o, errors.New("peers one: want -conc ≥ 1, -steps ≥ 1, -seconds > 0 and -addr")
	}
	return o, nil
}

// defaultWorkers is `engine serve`'s pool (its --workers default).
const defaultWorkers = 4

// noetaWorkers is the engine workers of a noeta row: as told, else as many
// as concurrent runs, since the peers run every started run at once
// (Temporal's worker takes up to 1,000 at a time, DBOS a goroutine each),
// and never fewer than `engine serve`'s default pool.
func noetaWorkers(o oneOpts) int {
	if o.workers > 0 {
		return o.workers
	}
	return max(o.conc, defaultWorkers)
}

func openSystem(ctx context.Context, o oneOpts) (system, error) {
	switch o.system {
	case "noeta", "noeta-wait":
		return openNoeta(ctx, o.addr, noetaWorkers(o), o.steps, o.system == "noeta-wait")
	case "noeta-r3":
		return openNoetaR3(ctx, o.addr, noetaWorkers(o), o.steps)
	case "dbos":
		return openDBOS(ctx, o.addr, o.steps)
	case "temporal":
		return openTemporal(ctx, o.addr, o.steps)
	case "jetstream":
		return openSubstrate(ctx, o.addr, o.steps, false)
	case "jetstream-grouped", "jetstream-grouped-fenced":
		return openGroupedSubstrate(ctx, o.addr, o.steps, o.system == "jetstream-grouped-fenced")
	}
	return nil, fmt.Errorf("peers one: unknown system %q (%s)", o.system, strings.Join(systemNames, ", "))
}

// runOne opens one system, warms it up, measures o.seconds of closed-loop
// runs at o.conc and prints the Result as JSON.
func runOne(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOne(args, stderr)
	if err != nil {
		return err
	}
	s, err := openSystem(ctx, o)
	if err != nil {
		return err
	}
	defer s.close()
	// A first run, retried while a just-started server gets ready (a
	// namespace Temporal registered answers NotFound for some seconds).
	first, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		err := s.run(first, -1)
		if err == nil {
			break
		}
		select {
		case <-first.Done():
			return fmt.Errorf("%s: no first run: %w", o.system, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	if _, _, err := drive(ctx, o.conc, time.Duration(o.warmup*float64(time.Second)), s.run); err != nil {
		return fmt.Errorf("%s warm-up: %w", o.system, err)
	}
	r := Result{System: o.system, Concurrency: o.conc, Steps: o.steps, Load1: load1()}
	m0, err := machineBusy()
	if err != nil {
		return err
	}
	c0, _, err := procStat(os.Getpid(), false)
	if err != nil {
		return err
	}
	wc, counts := s.(writeCounter)
	var w0, b0, g0, h0 uint64
	if counts {
		w0 = wc.durableWrites()
		b0, g0 = wc.groupedWrites()
		h0 = wc.handOffs()
	}
	var s0 float64
	if o.serverPID > 0 {
		if s0, err = treeCPU(o.serverPID); err != nil {
			return err
		}
	}
	stopProfile, err := startProfiles(o.cpuProfile, "")
	if err != nil {
		return err
	}
	lat, wall, err := drive(ctx, o.conc, time.Duration(o.seconds*float64(time.Second)), s.run)
	stopProfile()
	if err != nil {
		return fmt.Errorf("%s: %w", o.system, err)
	}
	c1, _, err := procStat(os.Getpid(), false)
	if err != nil {
		return err
	}
	m1, err := machineBusy()
	if err != nil {
		return err
	}
	summarise(&r, lat, wall)
	if counts && r.Runs > 0 {
		r.WritesPerRun = float64(wc.durableWrites()-w0) / float64(r.Runs)
		b1, g1 := wc.groupedWrites()
		r.GroupedPerRun = float64(g1-g0) / float64(r.Runs)
		r.HandedOffPerRun = float64(wc.handOffs()-h0) / float64(r.Runs)
		if b1 > b0 {
			r.GroupSize = float64(g1-g0) / float64(b1-b0)
		}
	}
	ours := c1 - c0
	if r.Runs > 0 {
		r.ClientCPU = (c1 - c0) / float64(r.Runs)
	}
	if o.serverPID > 0 {
		s1, err := treeCPU(o.serverPID)
		if err != nil {
			return err
		}
		if r.Runs > 0 {
			r.ServerCPU = (s1 - s0) / float64(r.Runs)
		}
		ours += s1 - s0
		r.ServerRSS = treePss(o.serverPID)
	}
	r.OtherCores = max(0, m1-m0-ours) / wall.Seconds()
	if r.ClientRSS, err = statusField("/proc/self/status", "VmHWM"); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}
