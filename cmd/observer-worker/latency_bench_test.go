package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// The knobs of BenchmarkCommitToObserver, after -args.
var (
	latRate    = flag.Int("obs.rate", 5000, "BenchmarkCommitToObserver: records per second the writers aim at")
	latFor     = flag.Duration("obs.for", 10*time.Second, "BenchmarkCommitToObserver: how long the writers write")
	latTasks   = flag.Int("obs.tasks", 64, "BenchmarkCommitToObserver: tasks, one writer each")
	latEnv     = flag.String("obs.worker-env", "", "BenchmarkCommitToObserver: more environment of the observer-worker, space-separated NAME=VALUE (GOMAXPROCS=1, GOGC=400, ...)")
	latSync    = flag.Duration("obs.sync", 2*time.Minute, "BenchmarkCommitToObserver: the server's sync interval (0: sync always)")
	latBatch   = flag.Int("obs.batch", 2, "BenchmarkCommitToObserver: records per append (EmitBatch), 2 as the engine writes a tool call (ADR 0038); 1: an Emit each")
	latReg     = flag.String("obs.registry", "dispatcher", "BenchmarkCommitToObserver: the log's lease registry: dispatcher (the JetStream one, as the engine runs) or memlog (in memory: the append without the registry's two reads)")
	latObsArgs = flag.String("obs.worker-args", "", "BenchmarkCommitToObserver: more observer-worker flags, space-separated")
)

// BenchmarkCommitToObserver measures what an out-of-process observer sees:
// writers append engine-shaped records (a turn's TurnStarted,
// PolicyDecided, ToolCallStarted and ToolCallFinished, over and over) to
// -obs.tasks tasks at a steady -obs.rate for -obs.for, through the fenced
// append path of an engine on its embedded server (default sync interval,
// in-process connection, the JetStream dispatcher as lease registry),
// while the observer-worker binary, a subprocess on TCP as it is deployed,
// audits every record to its stdout. A record is observed when its audit
// line comes out of the worker (read by a small stamper process, so this
// busy one's scheduling is not in the figure).
//
// Reported: commit-p50/p99/max-ms, from the moment the writer's Emit
// returned (the append acknowledged) to the record observed (0 if the
// observer had it first); record-p50/p99-ms, from the record's own time
// (stamped before its append); append-p50/p99-ms, one append's duration
// (-obs.batch records, 2 by default);
// records/s reached; behind, records the writers could not start on time
// (their schedule slipped past 1 ms); cpu-engine-% and cpu-worker-% of one
// core; load1 the load average when the writers stopped; other-cores the
// CPU, in cores, the rest of the machine used meanwhile. One run per op:
//
//	go test -c -o ow.test ./cmd/observer-worker
//	./ow.test -test.run '^$' -test.bench CommitToObserver -test.benchtime 1x
func BenchmarkCommitToObserver(b *testing.B) {
	for range b.N {
		runCommitToObserver(b)
	}
}

type latRecord struct {
	start, stamped, committed time.Time
}

func runCommitToObserver(b *testing.B) {
	ctx := context.Background()
	rate, dur, ntasks := *latRate, *latFor, *latTasks
	if rate <= 0 || dur <= 0 || ntasks <= 0 {
		b.Fatalf("-obs.rate %d, -obs.for %v, -obs.tasks %d: want all positive", rate, dur, ntasks)
	}
	srv, err := embedded.Start(ctx, embedded.Config{Dir: b.TempDir(), ServerName: "obs-latency", SyncInterval: *latSync})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.ConnectInProcess()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	prefix := fmt.Sprintf("lat%d", time.Now().UnixNano()%1_000_000)
	quiet := slog.New(slog.DiscardHandler)
	disp, err := jetstream.OpenDispatcher(ctx, nc, jetstream.DispatcherConfig{Prefix: prefix, LeaseTTL: 5 * time.Minute, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer disp.Close()
	var reg eventlog.Dispatcher = disp
	switch *latReg {
	case "dispatcher":
	case "memlog":
		m, err := memlog.New(memlog.Options{LeaseTTL: 5 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		reg = m
	default:
		b.Fatalf("-obs.registry %q: want dispatcher or memlog", *latReg)
	}
	log, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: prefix, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()

	tasks := make([]string, ntasks)
	leases := make([]eventlog.Lease, ntasks)
	for i := range tasks {
		task := noeta.NewTaskID()
		tasks[i] = task
		env, err := eventlog.NewEnvelope(task, eventlog.OriginSystem, "bench", noeta.TaskCreated{TaskID: task, Agent: "bench", Goal: "measure the observer", RootTaskID: task})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := log.Create(ctx, env); err != nil {
			b.Fatal(err)
		}
		if err := reg.Enqueue(ctx, task, eventlog.EnqueueOptions{Reserved: true}); err != nil {
			b.Fatal(err)
		}
		if leases[i], err = reg.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: task}); err != nil {
			b.Fatal(err)
		}
		// The first record brings the lease's LeaseGranted with it.
		first, err := turnRecord(task, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := log.Emit(ctx, leases[i], first, eventlog.EmitOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	var (
		mu       sync.Mutex
		records  = map[string]*latRecord{} // by task/seq
		observed = map[string]time.Time{}  // seen by the observer before its writer returned
		commits  []time.Duration
		fromRec  []time.Duration
		appends  []time.Duration
		seen     int
		behind   int
	)
	observe := func(key string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		seen++
		r, ok := records[key]
		if !ok {
			observed[key] = at
			return
		}
		delete(records, key)
		commits = append(commits, max(at.Sub(r.committed), 0))
		fromRec = append(fromRec, at.Sub(r.stamped))
	}
	committed := func(key string, r *latRecord) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := observed[key]
		if !ok {
			records[key] = r
			return
		}
		delete(observed, key)
		commits = append(commits, 0)
		fromRec = append(fromRec, at.Sub(r.stamped))
	}

	// The observer-worker, as deployed: its own process, over TCP.
	args := []string{"--nats", srv.ClientURL(), "--prefix", prefix, "--observers", "audit", "--audit-stdout", "--http", "", "--log-level", "warn"}
	args = append(args, strings.Fields(*latObsArgs)...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = os.Environ()
	cmd.Env = append(cmd.Env, strings.Fields(*latEnv)...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	// The worker's audit lines go through a stamper, this test binary run
	// again, which notes each line's arrival time: a reader in this busy
	// process would add its own wait for the CPU to every figure.
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout = pw
	stamper := exec.Command(os.Args[0])
	stamper.Env = append(os.Environ(), stamperEnv+"=1")
	stamper.Stdin, stamper.Stderr = pr, stderr
	out, err := stamper.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := stamper.Start(); err != nil {
		b.Fatal(err)
	}
	stamperDone := false
	defer func() {
		if !stamperDone {
			_ = stamper.Wait()
		}
	}()
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		b.Fatal(err)
	}
	// The children hold the pipe's ends now; the stamper sees EOF when the
	// worker exits.
	_ = pw.Close()
	_ = pr.Close()
	readDone := make(chan error, 1)
	go func() { readDone <- readStampedLines(out, observe) }()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	waitSeen := func(want int, what string) {
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			n := seen
			mu.Unlock()
			if n >= want {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: the observer saw %d of %d records\n%s", what, n, want, stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSeen(3*ntasks, "setup") // TaskCreated, LeaseGranted, TurnStarted
	mu.Lock()
	seen, observed = 0, map[string]time.Time{}
	mu.Unlock()

	cpu0, wall0, busy0 := selfCPU(), time.Now(), machineBusy()
	batch := *latBatch
	if batch < 1 || batch > 4 {
		b.Fatalf("-obs.batch %d: want 1 to 4", batch)
	}
	bw, ok := any(log).(eventlog.BatchWriter)
	if batch > 1 && !ok {
		b.Fatal("the log has no EmitBatch")
	}
	// Each writer appends batch records per tick.
	interval := time.Duration(float64(time.Second) * float64(ntasks*batch) / float64(rate))
	start := time.Now()
	var wg sync.WaitGroup
	written := make([]int, ntasks)
	for w := range ntasks {
		wg.Go(func() {
			task, lease := tasks[w], leases[w]
			next := start.Add(interval * time.Duration(w) / time.Duration(ntasks))
			envs := make([]eventlog.Envelope, batch)
			for i := 1; ; i += batch {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				} else if d < -time.Millisecond {
					mu.Lock()
					behind++
					mu.Unlock()
				}
				if time.Since(start) >= dur {
					return
				}
				for j := range envs {
					var err error
					if envs[j], err = turnRecord(task, i+j); err != nil {
						b.Error(err)
						return
					}
				}
				callStart := time.Now()
				var stored []eventlog.Envelope
				var err error
				if batch == 1 {
					var one eventlog.Envelope
					one, err = log.Emit(ctx, lease, envs[0], eventlog.EmitOptions{})
					stored = []eventlog.Envelope{one}
				} else {
					stored, err = bw.EmitBatch(ctx, lease, envs, eventlog.EmitOptions{})
				}
				if err != nil {
					b.Errorf("append: %v", err)
					return
				}
				now := time.Now()
				mu.Lock()
				appends = append(appends, now.Sub(callStart))
				mu.Unlock()
				for _, st := range stored {
					committed(st.Task+"/"+strconv.FormatUint(st.Seq, 10), &latRecord{start: callStart, stamped: st.Time, committed: now})
				}
				written[w] += len(stored)
				next = next.Add(interval)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuEngine := selfCPU() - cpu0
	load := loadAverage()
	total := 0
	for _, n := range written {
		total += n
	}
	waitSeen(total, "after the writers stopped")
	wall := time.Since(wall0)
	busy := machineBusy() - busy0
	cpuEngineWall := selfCPU() - cpu0

	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-readDone; err != nil {
		b.Errorf("reading the audit lines: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		b.Errorf("observer-worker: %v\n%s", err, stderr)
	}
	exited = true
	_ = stamper.Wait()
	stamperDone = true
	var cpuWorker time.Duration
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpuWorker = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var cpuStamper time.Duration
	if ru, ok := stamper.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpuStamper = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// The CPU the rest of the machine used while the records flowed: all
	// cores' busy time less this process's, the worker's and the
	// stamper's (theirs over their whole lives, a little more than the
	// window, so this errs low). A run whose tail missed beside a core of
	// other work says something else than one that missed on a quiet
	// machine.
	other := max(0, busy-cpuEngineWall-cpuWorker-cpuStamper)

	mu.Lock()
	defer mu.Unlock()
	if len(commits) != total {
		b.Fatalf("matched %d of %d records", len(commits), total)
	}
	slices.Sort(commits)
	slices.Sort(fromRec)
	slices.Sort(appends)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(total)/elapsed.Seconds(), "records/s")
	b.ReportMetric(ms(pct(commits, 0.50)), "commit-p50-ms")
	b.ReportMetric(ms(pct(commits, 0.99)), "commit-p99-ms")
	b.ReportMetric(ms(commits[len(commits)-1]), "commit-max-ms")
	b.ReportMetric(ms(pct(fromRec, 0.50)), "record-p50-ms")
	b.ReportMetric(ms(pct(fromRec, 0.99)), "record-p99-ms")
	b.ReportMetric(ms(pct(appends, 0.50)), "append-p50-ms")
	b.ReportMetric(ms(pct(appends, 0.99)), "append-p99-ms")
	b.ReportMetric(float64(behind), "behind")
	b.ReportMetric(100*cpuEngine.Seconds()/elapsed.Seconds(), "cpu-engine-%")
	b.ReportMetric(100*cpuWorker.Seconds()/wall.Seconds(), "cpu-worker-%")
	b.ReportMetric(load, "load1")
	b.ReportMetric(other.Seconds()/wall.Seconds(), "other-cores")
}

// turnRecord is record i of a task's turns, after its TaskCreated and
// LeaseGranted: TurnStarted, PolicyDecided (one tool call),
// ToolCallStarted, ToolCallFinished, with the sizes an engine writes for a
// small tool. Appended two at a time from record 1 on, they pair as the
// engine commits them: PolicyDecided with ToolCallStarted, then
// ToolCallFinished with the next TurnStarted.
func turnRecord(task string, i int) (eventlog.Envelope, error) {
	turn := i/4 + 1
	call := fmt.Sprintf("call-%d", turn)
	args := json.RawMessage(`{"path":"src/main.go","pattern":"func main"}`)
	var p noeta.Payload
	switch i % 4 {
	case 0:
		p = noeta.TurnStarted{Turn: turn}
	case 1:
		p = noeta.PolicyDecided{Turn: turn, Decision: noeta.DecisionToolCalls, InputTokens: 1200, OutputTokens: 80,
			ToolCalls: []noeta.RecordedCall{{CallID: call, Tool: "grep", Args: args}}}
	case 2:
		p = noeta.ToolCallStarted{CallID: call, Tool: "grep", Args: args, Turn: turn}
	default:
		p = noeta.ToolCallFinished{CallID: call, Tool: "grep", OK: true, DurationMS: 3,
			Output: json.RawMessage(`{"matches":[{"line":12,"text":"func main() {"}]}`)}
	}
	return eventlog.NewEnvelope(task, eventlog.OriginEngine, "bench/worker", p)
}

// stamperEnv makes the test binary a stamper (TestMain).
const stamperEnv = "NOETA_BENCH_STAMPER"

// stampLines copies lines from r to w, each prefixed with the wall-clock
// time it was read, in nanoseconds since the epoch, and a space. It flushes
// whenever it has read all that was there, so a line waits in it only
// while more are arriving.
func stampLines(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<16)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && err == nil {
			bw.WriteString(strconv.FormatInt(time.Now().UnixNano(), 10))
			bw.WriteByte(' ')
			bw.Write(line)
		}
		if err == io.EOF {
			return bw.Flush()
		}
		if err != nil {
			return err
		}
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
}

// readStampedLines reads the stamper's lines, the worker's audit records
// behind their arrival times, and reports each record's task/seq.
func readStampedLines(r io.Reader, observe func(key string, at time.Time)) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var rec struct {
		Task string  `json:"task"`
		Seq  *uint64 `json:"seq"`
	}
	for {
		line, err := br.ReadSlice('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		stamp, body, ok := strings.Cut(string(line), " ")
		ns, perr := strconv.ParseInt(stamp, 10, 64)
		if !ok || perr != nil {
			return fmt.Errorf("stamped line %q", line)
		}
		rec.Task, rec.Seq = "", nil
		if err := json.Unmarshal([]byte(body), &rec); err != nil {
			return fmt.Errorf("audit line %q: %w", body, err)
		}
		if rec.Seq == nil {
			continue // an inbox record
		}
		observe(rec.Task+"/"+strconv.FormatUint(*rec.Seq, 10), time.Unix(0, ns))
	}
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// selfCPU is this process's CPU time so far, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy is the time all cores spent busy since boot (user, nice,
// system, irq, softirq and steal of /proc/stat's cpu line); 0 where /proc
// has none.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += v
	}
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(ticks) * (time.Second / 100)
}

// loadAverage is the one-minute load average (0 where /proc has none).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}
