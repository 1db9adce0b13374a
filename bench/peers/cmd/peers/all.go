package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// allOpts are the flags of a whole sitting.
type allOpts struct {
	rounds  int
	seconds float64
	warmup  float64
	steps   int
	workers int
	conc    []int
	systems []string
	dir     string
	keep    bool
	out     string
	// temporalSet are key=value settings added to Temporal's dynamic
	// config; none by default.
	temporalSet    []string
	temporalConfig string
	// maxOther, if above 0, is the most CPU (in cores) other work may use
	// during a measurement: one beside more is taken again after a pause,
	// up to retries times, and kept as it is after that.
	maxOther float64
	retries  int
}

func parseAll(args []string, stderr io.Writer) (allOpts, error) {
	var (
		o             allOpts
		conc, systems string
	)
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each measures every system at every concurrency, the systems' order turning each round")
	fs.Float64Var(&o.seconds, "seconds", 10, "measured seconds of each measurement")
	fs.Float64Var(&o.warmup, "warmup", 2, "unmeasured seconds before each measurement")
	fs.IntVar(&o.steps, "steps", 20, "steps (tool calls, activities) per run")
	fs.IntVar(&o.workers, "noeta-workers", 0, "noeta's engine workers (0: as many as concurrent runs, at least engine serve's default of 4)")
	fs.StringVar(&conc, "conc", "1,64", "concurrent runs, comma-separated")
	fs.StringVar(&systems, "systems", strings.Join(systemNames, ","), "systems, comma-separated (noeta-wait: noeta's run ends when Host.Wait returns; noeta-r3: noeta on a 3-node cluster in the process, R3; jetstream, jetstream-grouped, jetstream-grouped-fenced: floors, a run's writes alone on noeta's embedded server, one by one, in atomic batches across runs, and those each after the fence's two reads)")
	fs.StringVar(&o.dir, "dir", "", "working directory for the servers' data (default: a new one under $TMPDIR)")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory")
	fs.StringVar(&o.temporalConfig, "temporal-config", "development-sqlite-file.yaml", "the Temporal server's own config file to start it on (development-sqlite.yaml: SQLite in memory)")
	fs.Func("temporal-set", "add key=value to Temporal's dynamic config (repeatable; default: the server's own, unchanged)", func(v string) error {
		o.temporalSet = append(o.temporalSet, v)
		return nil
	})
	fs.Float64Var(&o.maxOther, "max-other", 0, "retake a measurement during which other work used more than this many cores (0: never)")
	fs.IntVar(&o.retries, "retries", 3, "with -max-other, how many times to retake one measurement")
	fs.StringVar(&o.out, "json", "", "also write every measurement to this file as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, c := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-conc %q: want whole numbers ≥ 1", conc)
		}
		o.conc = append(o.conc, n)
	}
	for _, s := range strings.Split(systems, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(systemNames, s) {
			return o, fmt.Errorf("-systems: unknown %q (%s)", s, strings.Join(systemNames, ", "))
		}
		o.systems = append(o.systems, s)
	}
	if o.rounds < 1 || o.seconds <= 0 || o.steps < 1 {
		return o, errors.New("want -rounds ≥ 1, -seconds > 0, -steps ≥ 1")
	}
	return o, nil
}

// Report is a sitting: the disk's floor and every measurement.
type Report struct {
	Start   time.Time `json:"start"`
	Load1   float64   `json:"load1_at_start"`
	Floor   Floor     `json:"fsync_floor"`
	Results []Result  `json:"results"`
}

// runAll starts the servers, takes o.rounds rounds of measurements, each a
// child process of this program (so each client's CPU and memory are its
// own), stops the servers and prints the medians.
func runAll(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseAll(args, stderr)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "noeta-peers-"); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		if !o.keep {
			defer os.RemoveAll(o.dir)
		}
	}
	rep := Report{Start: time.Now().UTC(), Load1: load1()}
	fmt.Fprintf(stderr, "working directory %s; load average %.2f\n", o.dir, rep.Load1)

	servers := map[string]*server{}
	addr := map[string]string{"noeta": filepath.Join(o.dir, "noeta"), "noeta-wait": filepath.Join(o.dir, "noeta"), "noeta-r3": filepath.Join(o.dir, "noeta-r3"), "jetstream": filepath.Join(o.dir, "jetstream"), "jetstream-grouped": filepath.Join(o.dir, "jetstream-grouped"), "jetstream-grouped-fenced": filepath.Join(o.dir, "jetstream-grouped-fenced")}
	defer func() {
		for _, s := range servers {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if serr := s.stop(sctx); serr != nil {
				err = errors.Join(err, fmt.Errorf("stop %s: %w", s.name, serr))
			}
			cancel()
		}
	}()
	if slices.Contains(o.systems, "temporal") {
		bin, err := temporalBinary(ctx, stderr)
		if err != nil {
			return err
		}
		src, err := temporalSource(ctx)
		if err != nil {
			return err
		}
		dir := filepath.Join(o.dir, "temporal")
		fmt.Fprintf(stderr, "starting %s in %s\n", bin, dir)
		s, err := startTemporal(ctx, bin, src, dir, o.temporalConfig, o.temporalSet)
		if err != nil {
			return err
		}
		servers["temporal"], addr["temporal"] = s, temporalAddr
	}
	if slices.Contains(o.systems, "dbos") {
		bin, err := postgresBin()
		if err != nil {
			return err
		}
		dir := filepath.Join(o.dir, "postgres")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("postgres directory: %w", err)
		}
		fmt.Fprintf(stderr, "starting PostgreSQL from %s in %s\n", bin, dir)
		s, url, err := startPostgres(ctx, bin, dir)
		if err != nil {
			return err
		}
		servers["dbos"], addr["dbos"] = s, url
	}
	if rep.Floor, err = fsyncFloor(ctx, o.dir, 1000); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "fsync floor in %s: p50 %.0f µs, p99 %.0f µs\n", o.dir, rep.Floor.P50us, rep.Floor.P99us)

	for round := range o.rounds {
		for _, c := range o.conc {
			for k := range o.systems {
				sys := o.systems[(k+round)%len(o.systems)]
				r, err := measure(ctx, self, o, sys, c, addr[sys], servers[sys], stderr)
				for try := 0; err == nil && o.maxOther > 0 && r.OtherCores > o.maxOther && try < o.retries; try++ {
					fmt.Fprintf(stderr, "round %d  %-8s conc %-3d  other work used %.2f cores: again in 30 s\n", round+1, sys, c, r.OtherCores)
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(30 * time.Second):
					}
					r, err = measure(ctx, self, o, sys, c, addr[sys], servers[sys], stderr)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "round %d  %-10s conc %-3d  %7.1f runs/s  p50 %8.1f ms  p99 %8.1f ms  cpu/run %.4f + %.4f s  rss %.0f + %.0f MiB  writes/run %.2f (grouped %.2f, %.1f a group)  handed off %.2f  load %.2f  other work %.2f cores\n",
					round+1, sys, c, r.RunsPerSec, r.P50ms, r.P99ms, r.ClientCPU, r.ServerCPU, r.ClientRSS, r.ServerRSS, r.WritesPerRun, r.GroupedPerRun, r.GroupSize, r.HandedOffPerRun, r.Load1, r.OtherCores)
				rep.Results = append(rep.Results, r)
				if err := writeReport(o.out, rep); err != nil {
					return err
				}
			}
		}
	}
	return writeTable(stdout, rep, o)
}

// writeReport writes rep to path as JSON, if path is set: after each
// measurement, so an interrupted sitting keeps what it measured.
func writeReport(path string, rep Report) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// measure runs one measurement in a child process.
func measure(ctx context.Context, self string, o allOpts, sys string, conc int, addr string, srv *server, stderr io.Writer) (Result, error) {
	args := []string{"one", "-system", sys, "-conc", strconv.Itoa(conc), "-steps", strconv.Itoa(o.steps),
		"-seconds", strconv.FormatFloat(o.seconds, 'f', -1, 64), "-warmup", strconv.FormatFloat(o.warmup, 'f', -1, 64), "-addr", addr}
	if strings.HasPrefix(sys, "noeta") && o.workers > 0 {
		args = append(args, "-noeta-workers", strconv.Itoa(o.workers))
	}
	if srv != nil {
		args = append(args, "-server-pid", strconv.Itoa(srv.pid))
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("measure %s at %d: %w", sys, conc, err)
	}
	var r Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("measure %s at %d: %w: %q", sys, conc, err, out.String())
	}
	return r, nil
}

// isFloor says whether a system is one of the floors (the server's writes
// alone), not a peer.
func isFloor(system string) bool { return strings.HasPrefix(system, "jetstream") }

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// writeTable prints the medians over the rounds per system and
// concurrency, and noeta's ratios to each peer.
func writeTable(w io.Writer, rep Report, o allOpts) error {
	type key struct {
		sys  string
		conc int
	}
	by := map[key][]Result{}
	for _, r := range rep.Results {
		k := key{r.System, r.Concurrency}
		by[k] = append(by[k], r)
	}
	med := func(rs []Result, f func(Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "started %s, load average %.2f; write+fsync floor p50 %.0f µs, p99 %.0f µs\n",
		rep.Start.Format(time.RFC3339), rep.Load1, rep.Floor.P50us, rep.Floor.P99us)
	if o.rounds > 0 {
		fmt.Fprintf(&b, "medians of %d rounds of %g s, %d steps per run\n", o.rounds, o.seconds, o.steps)
	} else {
		fmt.Fprintf(&b, "medians, %d steps per run\n", o.steps)
	}
	if o.temporalConfig != "" && o.temporalConfig != "development-sqlite-file.yaml" && slices.Contains(o.systems, "temporal") {
		fmt.Fprintf(&b, "Temporal on its %s (not the default of this harness)\n", o.temporalConfig)
	}
	if len(o.temporalSet) > 0 {
		fmt.Fprintf(&b, "Temporal's dynamic config with %s added (not its default)\n", strings.Join(o.temporalSet, ", "))
	}
	if o.workers > 0 {
		fmt.Fprintf(&b, "noeta with %d engine workers\n", o.workers)
	} else if slices.ContainsFunc(o.systems, func(s string) bool { return strings.HasPrefix(s, "noeta") }) {
		fmt.Fprintf(&b, "noeta with one engine worker per concurrent run, at least %d (engine serve's default)\n", defaultWorkers)
	}
	b.WriteString("\n")
	b.WriteString("| system | conc | runs/s | p50 ms | p99 ms | CPU s/run client + server | RSS MiB client + server | durable writes/run (grouped) | other work, cores | runs/s of the rounds |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range o.conc {
		for _, s := range o.systems {
			rs := by[key{s, c}]
			var each []string
			for _, r := range rs {
				each = append(each, fmt.Sprintf("%.1f", r.RunsPerSec))
			}
			writes := "–" // the peers do not count theirs
			if w := med(rs, func(r Result) float64 { return r.WritesPerRun }); w > 0 {
				writes = fmt.Sprintf("%.2f", w)
				if g := med(rs, func(r Result) float64 { return r.GroupedPerRun }); g > 0 {
					writes += fmt.Sprintf(" (%.2f in groups of %.1f)", g, med(rs, func(r Result) float64 { return r.GroupSize }))
				}
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %.4f + %.4f | %.0f + %.0f | %s | %.2f | %s |\n", s, c,
				med(rs, func(r Result) float64 { return r.RunsPerSec }),
				med(rs, func(r Result) float64 { return r.P50ms }),
				med(rs, func(r Result) float64 { return r.P99ms }),
				med(rs, func(r Result) float64 { return r.ClientCPU }),
				med(rs, func(r Result) float64 { return r.ServerCPU }),
				med(rs, func(r Result) float64 { return r.ClientRSS }),
				med(rs, func(r Result) float64 { return r.ServerRSS }),
				writes,
				med(rs, func(r Result) float64 { return r.OtherCores }),
				strings.Join(each, ", "))
		}
	}
	b.WriteString("\nnoeta against each peer (medians): runs/s ratio (goal ≥ 2), p50 ratio (goal ≤ 0.5)\n")
	for _, ns := range o.systems {
		if !strings.HasPrefix(ns, "noeta") {
			continue
		}
		for _, c := range o.conc {
			n := by[key{ns, c}]
			for _, s := range o.systems {
				if strings.HasPrefix(s, "noeta") || isFloor(s) || len(n) == 0 || len(by[key{s, c}]) == 0 {
					continue
				}
				p := by[key{s, c}]
				fmt.Fprintf(&b, "  %s at %d vs %s: %.2f× runs/s, %.2f× p50\n", ns, c, s,
					med(n, func(r Result) float64 { return r.RunsPerSec })/med(p, func(r Result) float64 { return r.RunsPerSec }),
					med(n, func(r Result) float64 { return r.P50ms })/med(p, func(r Result) float64 { return r.P50ms }))
			}
		}
	}
	// The floors: a run's writes alone on the embedded server, against
	// noeta and against each peer (not noeta-r3, which runs on another
	// server). At each concurrency the better of the two unfenced floors
	// is about the least this server takes for those writes from one
	// connection.
	floorHeading := false
	for _, fs := range o.systems {
		if !isFloor(fs) {
			continue
		}
		for _, c := range o.conc {
			fl := by[key{fs, c}]
			if len(fl) == 0 {
				continue
			}
			for _, s := range o.systems {
				p := by[key{s, c}]
				if isFloor(s) || s == "noeta-r3" || len(p) == 0 {
					continue
				}
				if !floorHeading {
					b.WriteString("\nthe floors against noeta and each peer (medians): runs/s ratio, p50 ratio\n")
					floorHeading = true
				}
				fmt.Fprintf(&b, "  %s (a floor) at %d vs %s: %.2f× runs/s, %.2f× p50\n", fs, c, s,
					med(fl, func(r Result) float64 { return r.RunsPerSec })/med(p, func(r Result) float64 { return r.RunsPerSec }),
					med(fl, func(r Result) float64 { return r.P50ms })/med(p, func(r Result) float64 { return r.P50ms }))
			}
		}
	}
	// What replication costs: the 3-node cluster against the embedded
	// default, same task, same sitting.
	for _, c := range o.conc {
		one, r3 := by[key{"noeta", c}], by[key{"noeta-r3", c}]
		if len(one) == 0 || len(r3) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  noeta-r3 at %d vs noeta: %.2f× runs/s, %.2f× p50\n", c,
			med(r3, func(r Result) float64 { return r.RunsPerSec })/med(one, func(r Result) float64 { return r.RunsPerSec }),
			med(r3, func(r Result) float64 { return r.P50ms })/med(one, func(r Result) float64 { return r.P50ms }))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
