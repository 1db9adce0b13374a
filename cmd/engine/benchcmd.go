package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// benchOpts are engine bench's own flags.
type benchOpts struct {
	tasks, calls int
	mix          string
	json         bool
	// idle lists the suspended-task populations to measure at (scale mode).
	idle    string
	probes  int
	restart bool
	// serverPID and serverDir name the nats-server of --nats, whose RSS and
	// store size the scale mode reads at each level.
	serverPID int
	serverDir string
	// profile is where the scale mode writes its profiles.
	profile string
}

// benchMix is the share of the tool calls of each kind; the rest are plain
// echo calls.
type benchMix struct{ deny, approve, spawn, wait float64 }

func parseMix(s string) (benchMix, error) {
	var m benchMix
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return m, fmt.Errorf("--mix %q: %q is not kind=share", s, part)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) { // NaN fails both comparisons: refuse it
			return m, fmt.Errorf("--mix %q: the share of %s is %q, want a number from 0 to 1", s, k, v)
		}
		switch k {
		case "deny":
			m.deny = f
		case "approve":
			m.approve = f
		case "spawn":
			m.spawn = f
		case "wait":
			m.wait = f
		default:
			return m, fmt.Errorf("--mix %q: unknown kind %q (deny, approve, spawn or wait)", s, k)
		}
	}
	if sum := m.deny + m.approve + m.spawn + m.wait; sum > 1 {
		return m, fmt.Errorf("--mix %q: the shares add up to %.2f, over 1", s, sum)
	}
	return m, nil
}

// benchConfig is the governance of the bench agents: a rule denies an echo
// of "deny …", another asks a person for an echo of "approve …".
func benchConfig(calls int) (*config.File, error) {
	return config.Parse("bench.yaml", fmt.Appendf(nil, `
agents:
  bench:
    tools: [echo]
    budget: {max_iterations: %[1]d, max_tool_calls: %[1]d, max_spawned_subtasks: %[1]d, max_subtask_depth: 2}
    permissions: {allowed_subtask_agents: [bench-child]}
  bench-child:
    tools: [echo]
rules:
  - match_tool: echo
    match_arg: {path: text, regex: "^deny"}
    action: deny
    reason: bench denial
  - match_tool: echo
    match_arg: {path: text, regex: "^approve"}
    action: require_approval
    reason: bench approval
`, calls+10))
}

// benchScript is task i's script: calls steps drawn from mix, then a finish.
func benchScript(i, calls int, mix benchMix) ([]byte, error) {
	r := rand.New(rand.NewPCG(uint64(i), 17))
	steps := make([]map[string]any, 0, calls+1)
	echo := func(text string) map[string]any {
		return map[string]any{"tool_calls": []any{map[string]any{"tool": "echo", "args": map[string]any{"text": text}}}}
	}
	for j := range calls {
		x := r.Float64()
		switch {
		case x < mix.deny:
			steps = append(steps, echo(fmt.Sprintf("deny %d", j)))
		case x < mix.deny+mix.approve:
			steps = append(steps, echo(fmt.Sprintf("approve %d", j)))
		case x < mix.deny+mix.approve+mix.spawn:
			steps = append(steps, map[string]any{"spawn": []any{map[string]any{
				"agent": "bench-child", "goal": fmt.Sprintf("child %d", j),
				"script": []any{map[string]any{"finish": map[string]any{"answer": j}}}}}})
		case x < mix.deny+mix.approve+mix.spawn+mix.wait:
			steps = append(steps, map[string]any{"wait_external": map[string]any{"event_kind": benchEventKind}})
		default:
			steps = append(steps, echo(fmt.Sprintf("call %d", j)))
		}
	}
	steps = append(steps, map[string]any{"finish": map[string]any{"answer": "done"}})
	return json.Marshal(steps)
}

// benchEventKind is the external event the bench's waiting tasks wait for,
// and sends them.
const benchEventKind = "bench_go_on"

func newBenchCmd(g *globals) *cobra.Command {
	var o benchOpts
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate load: N scripted tasks of M tool calls each, and measure",
		Long: `bench runs --tasks scripted tasks of --calls tool calls each with a pool of
--workers, on the embedded server (a temporary data directory unless --data)
or on --nats, and measures: tasks/s and records/s; fenced-append latency
(a probe task appending under its own lease while the load runs); wake to
lease (an answered approval, a sent external event or a finished subtask to
the LeaseGranted of the task it woke); commit to in-process observer lag;
the durable waits (writes to the task stream the engine waited for) per
tool call; the CPU time and peak RSS of this process (with the embedded server, server
included).

--mix gives the share of the calls that are denied by a rule, that need an
approval (answered at once by the bench), that spawn a subtask, and that
wait for an external event (sent by the bench as soon as the task
suspends): deny=0.1,approve=0.1,spawn=0.05,wait=0.05.

--idle 1000,10000,100000 is the scale mode: it grows a population of
suspended tasks (each created, leased, suspended on an external event: three
records and a dispatcher row) to each level in turn and measures there, in
the same run: fenced-append and wake-to-lease latency over --probes samples,
RSS, and data-directory bytes per task; --restart then reopens the host and
times the restart and the first resumed task.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.tasks, "tasks", 100, "tasks to run")
	f.IntVar(&o.calls, "calls", 20, "tool calls (script steps) per task")
	f.StringVar(&o.mix, "mix", "", "shares of the calls: deny=F,approve=F,spawn=F,wait=F (the rest are plain calls)")
	f.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	f.StringVar(&o.idle, "idle", "", "scale mode: suspended-task populations to measure at, comma-separated and rising")
	f.IntVar(&o.probes, "probes", 200, "scale mode: appends and wakes timed at each level")
	f.BoolVar(&o.restart, "restart", false, "scale mode: restart the host after the last level (with --nats, the engine only) and time it")
	f.IntVar(&o.serverPID, "server-pid", 0, "scale mode with --nats: the nats-server's pid, to read its RSS at each level")
	f.StringVar(&o.serverDir, "server-dir", "", "scale mode with --nats: the nats-server's store directory, to read its size at each level")
	f.StringVar(&o.profile, "profile", "", "scale mode: write a CPU profile of each level's appends and a heap profile after it to this directory")
	return cmd
}

// benchResult is what engine bench prints.
type benchResult struct {
	Target         string  `json:"target"`
	Tasks          int     `json:"tasks"`
	Calls          int     `json:"calls"`
	Workers        int     `json:"workers"`
	Seconds        float64 `json:"seconds"`
	TasksPerSec    float64 `json:"tasks_per_sec"`
	Records        int64   `json:"records"`
	RecordsPerSec  float64 `json:"records_per_sec"`
	Completed      int64   `json:"completed"`
	Failed         int64   `json:"failed"`
	Appends        int     `json:"appends"`
	AppendP50us    float64 `json:"append_p50_us"`
	AppendP99us    float64 `json:"append_p99_us"`
	Wakes          int     `json:"wakes"`
	WakeLeaseP50us float64 `json:"wake_to_lease_p50_us"`
	WakeLeaseP99us float64 `json:"wake_to_lease_p99_us"`
	ObserverP99us  float64 `json:"commit_to_observer_p99_us"`
	// DurableWaits counts the writes to the task stream whose
	// acknowledgement the engine waited for (jetstream.Log.DurableWaits),
	// without the probe's; per call over the ToolCallStarted records.
	DurableWaits uint64        `json:"durable_waits"`
	ToolCalls    int64         `json:"tool_calls"`
	WaitsPerCall float64       `json:"durable_waits_per_call"`
	CPUSeconds   float64       `json:"cpu_seconds"`
	RSSMiB       float64       `json:"rss_mib"`
	MaxRSSMiB    float64       `json:"max_rss_mib"`
	Levels       []benchLevel  `json:"levels,omitempty"`
	Restart      *benchRestart `json:"restart,omitempty"`
}

// samples is a concurrency-safe list of durations.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// quantiles returns the count and the p50 and p99 in µs, nearest rank.
func (s *samples) quantiles() (n int, p50, p99 float64) {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	slices.Sort(d)
	q := func(f float64) float64 {
		if len(d) == 0 {
			return 0
		}
		i := min(max(int(f*float64(len(d))+0.5)-1, 0), len(d)-1)
		return float64(d[i]) / float64(time.Microsecond)
	}
	return len(d), q(0.5), q(0.99)
}

func runBench(ctx context.Context, g *globals, o benchOpts) error {
	mix, err := parseMix(o.mix)
	if err != nil {
		return usageErr("%v", err)
	}
	if o.tasks < 0 || o.calls < 0 || o.probes < 1 {
		return usageErr("--tasks, --calls must be at least 0 and --probes at least 1")
	}
	if err := checkScaleOpts(g, o); err != nil {
		return err
	}
	levels, err := parseLevels(o.idle)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg, err := benchConfig(o.calls)
	if err != nil {
		return failErr(err)
	}
	opts := host.Options{Config: cfg, Workers: g.workers, Name: "bench"}
	if g.conn.embedded() && g.data == "" {
		dir, err := os.MkdirTemp("", "noeta-bench-")
		if err != nil {
			return failErr(err)
		}
		defer os.RemoveAll(dir)
		opts.DataDir = dir
	}
	h, err := g.open(ctx, "bench", opts)
	if err != nil {
		return err
	}
	defer func() { h.Close() }()
	res := benchResult{Target: g.where(h), Tasks: o.tasks, Calls: o.calls, Workers: g.workers}
	if len(levels) > 0 {
		res.Tasks, res.Calls = 0, 0 // the scale mode runs no scripted tasks
	}
	probe, err := newAppendProbe(ctx, h)
	if err != nil {
		return failErr(fmt.Errorf("start the append probe: %w", err))
	}
	if len(levels) > 0 {
		idle, err := runLevels(ctx, g, h, probe, levels, o, &res)
		if err != nil {
			return failErr(err)
		}
		if o.restart {
			r, h2, err := restartHost(ctx, g, h, idle, opts)
			h = h2
			if err != nil {
				return failErr(err)
			}
			res.Restart = r
		}
	} else if err := runLoad(ctx, g, h, probe, o, mix, &res); err != nil {
		return failErr(err)
	}
	res.RSSMiB, res.MaxRSSMiB = rssMiB()
	return printBench(g.stdout, o.json, res)
}

func parseLevels(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("--idle %q: want rising whole numbers ≥ 1, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runLoad runs the scripted tasks and fills res.
func runLoad(ctx context.Context, g *globals, h *host.Host, probe *appendProbe, o benchOpts, mix benchMix, res *benchResult) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		records, completed, failed, calls, probeGrants atomic.Int64
		obsLag, wakeLease                              samples
		mu                                             sync.Mutex
		wakeAt                                         = map[string]time.Time{}
		wg                                             sync.WaitGroup
		done                                           = make(chan struct{})
		errOnce                                        sync.Once
		firstErr                                       error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	woke := func(task string, at time.Time) {
		mu.Lock()
		wakeAt[task] = at
		mu.Unlock()
	}
	untap := h.Tap(func(_ context.Context, env eventlog.Envelope) error {
		now := time.Now()
		if env.Task == probe.task {
			if env.Type == noeta.TypeLeaseGranted {
				probeGrants.Add(1)
			}
			return nil
		}
		records.Add(1)
		if env.Type == noeta.TypeToolCallStarted {
			calls.Add(1)
		}
		obsLag.add(now.Sub(env.Time))
		switch env.Type {
		case noeta.TypeLeaseGranted:
			mu.Lock()
			at, ok := wakeAt[env.Task]
			delete(wakeAt, env.Task)
			mu.Unlock()
			if ok {
				wakeLease.add(env.Time.Sub(at))
			}
		case noeta.TypeTaskSuspended:
			p, _, err := env.Decode()
			s, ok := p.(*noeta.TaskSuspended)
			if err != nil || !ok {
				return nil
			}
			task, w := env.Task, s.WakeOn
			switch w.Kind {
			case noeta.WakeHumanResponse:
				wg.Go(func() {
					if err := approveSoon(ctx, h, task, w.Handle, woke); err != nil && ctx.Err() == nil {
						fail(fmt.Errorf("approve %s %s: %w", task, w.Handle, err))
					}
				})
			case noeta.WakeExternalEvent:
				wg.Go(func() {
					woke(task, time.Now())
					if _, err := h.Dispatcher().Wake(ctx, task, noeta.ExternalWake(w.EventKind)); err != nil && ctx.Err() == nil {
						fail(fmt.Errorf("wake %s: %w", task, err))
					}
				})
			}
		case noeta.TypeTaskCompleted, noeta.TypeTaskFailed, noeta.TypeTaskCancelled:
			if env.CorrelationID != "" && env.CorrelationID != env.Task {
				// A subtask: its end wakes its parent, which for the
				// bench's one-level subtasks is the root.
				woke(env.CorrelationID, env.Time)
				return nil
			}
			if env.Type == noeta.TypeTaskCompleted {
				completed.Add(1)
			} else {
				failed.Add(1)
			}
			if completed.Load()+failed.Load() == int64(o.tasks) {
				close(done)
			}
		}
		return nil
	})
	defer untap()
	if o.tasks == 0 {
		close(done)
	}
	waits0 := h.Log().DurableWaits()
	probeCtx, stopProbe := context.WithCancel(ctx)
	var probeWG sync.WaitGroup
	probeWG.Go(func() { probe.run(probeCtx, 5*time.Millisecond, 0) })
	start := time.Now()
	cpu0 := cpuSeconds()
	bar := newProgress(g.stderr, o.tasks, o.json)
	subErr := make(chan error, 1)
	go func() {
		for i := range o.tasks {
			script, err := benchScript(i, o.calls, mix)
			if err == nil {
				_, err = h.Submit(ctx, host.Submission{Agent: "bench", Goal: fmt.Sprintf("bench %d", i), Script: script})
			}
			if err != nil {
				subErr <- err
				return
			}
		}
		subErr <- nil
	}()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case err := <-subErr:
			if err != nil {
				fail(fmt.Errorf("submit: %w", err))
			}
		case <-ctx.Done():
			break loop
		case <-tick.C:
			bar.show(int(completed.Load() + failed.Load()))
		}
	}
	elapsed := time.Since(start)
	res.CPUSeconds = cpuSeconds() - cpu0
	// A task's last segment releases its lease after its terminal record:
	// let the segments finish before the host closes.
	for deadline := time.Now().Add(10 * time.Second); h.InFlight() > 0 && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
	}
	bar.show(int(completed.Load() + failed.Load()))
	bar.end()
	stopProbe()
	probeWG.Wait()
	cancel()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil && completed.Load()+failed.Load() < int64(o.tasks) {
		return fmt.Errorf("stopped with %d of %d tasks at rest: %w", completed.Load()+failed.Load(), o.tasks, err)
	}
	res.Seconds = elapsed.Seconds()
	res.TasksPerSec = float64(o.tasks) / elapsed.Seconds()
	res.Records = records.Load()
	res.RecordsPerSec = float64(res.Records) / elapsed.Seconds()
	res.Completed, res.Failed = completed.Load(), failed.Load()
	res.Appends, res.AppendP50us, res.AppendP99us = probe.lat.quantiles()
	res.Wakes, res.WakeLeaseP50us, res.WakeLeaseP99us = wakeLease.quantiles()
	_, _, res.ObserverP99us = obsLag.quantiles()
	// Each probe append and each of the probe's LeaseGranted is one wait.
	res.DurableWaits = h.Log().DurableWaits() - waits0 - uint64(res.Appends) - uint64(probeGrants.Load())
	res.ToolCalls = calls.Load()
	if res.ToolCalls > 0 {
		res.WaitsPerCall = float64(res.DurableWaits) / float64(res.ToolCalls)
	}
	return nil
}

// approveSoon approves handle once the dispatcher has the task suspended on
// it: the TaskSuspended record is committed just before the release.
func approveSoon(ctx context.Context, h *host.Host, task, handle string, woke func(string, time.Time)) error {
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		// Noted before the call: an answer on the embedded server may be
		// applied, and the task leased, before Approve returns.
		woke(task, time.Now())
		err := h.Approve(ctx, task, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "bench", Reason: "bench"})
		if err == nil {
			return nil
		}
		if !errors.Is(err, eventlog.ErrNotWaiting) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// appendProbe appends ToolCallStarted records to a task of its own under
// its own lease, timing each fenced append.
type appendProbe struct {
	h     *host.Host
	task  string
	lease eventlog.Lease
	env   eventlog.Envelope
	lat   samples
	// beat is when the lease was last renewed.
	beat time.Time
}

func newAppendProbe(ctx context.Context, h *host.Host) (*appendProbe, error) {
	id := noeta.NewTaskID()
	created, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.TaskCreated{TaskID: id, Agent: "bench", Goal: "append probe", RootTaskID: id})
	if err != nil {
		return nil, err
	}
	if _, err := h.Log().Create(ctx, created); err != nil {
		return nil, err
	}
	if err := h.Dispatcher().Enqueue(ctx, id, eventlog.EnqueueOptions{Queue: "bench-probe", Reserved: true}); err != nil {
		return nil, err
	}
	lease, err := h.Dispatcher().Lease(ctx, eventlog.LeaseRequest{Worker: "bench-probe", Task: id})
	if err != nil {
		return nil, err
	}
	env, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.ToolCallStarted{CallID: noeta.NewID(), Tool: "echo", Args: json.RawMessage(`{"text":"probe"}`), Turn: 1})
	if err != nil {
		return nil, err
	}
	return &appendProbe{h: h, task: id, lease: lease, env: env, beat: time.Now()}, nil
}

// run appends every interval until ctx ends or, if n > 0, n appends are
// timed.
func (p *appendProbe) run(ctx context.Context, every time.Duration, n int) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; n == 0 || i < n; i++ {
		if time.Since(p.beat) > 5*time.Second {
			if err := p.renew(ctx); err != nil {
				return err
			}
		}
		start := time.Now()
		if _, err := p.h.Log().Emit(ctx, p.lease, p.env, eventlog.EmitOptions{}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		p.lat.add(time.Since(start))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return nil
}

// renew extends the probe's lease, or, when it expired while the probe was
// idle (the scale mode grows its population for minutes between probes),
// takes a new one: the task is the probe's own, nobody else leases it.
func (p *appendProbe) renew(ctx context.Context) error {
	d := p.h.Dispatcher()
	if _, err := d.Heartbeat(ctx, p.lease); err == nil {
		p.beat = time.Now()
		return nil
	}
	lease, err := d.Lease(ctx, eventlog.LeaseRequest{Worker: "bench-probe", Task: p.task})
	if err != nil {
		return fmt.Errorf("lease the probe task again: %w", err)
	}
	p.lease, p.beat = lease, time.Now()
	return nil
}

// progress is the bar on a terminal, plain lines elsewhere; nothing with
// --json.
type progress struct {
	w     io.Writer
	total int
	tty   bool
	off   bool
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer, total int, quiet bool) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isTerminal(f.Fd())
	}
	return &progress{w: w, total: total, tty: tty, off: quiet || total == 0, start: time.Now()}
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

func printBench(w io.Writer, asJSON bool, r benchResult) error {
	if asJSON {
		enc := json.NewEncoder(w)
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("target", "%s", r.Target)
	if len(r.Levels) == 0 {
		row("tasks × calls", "%d × %d, %d workers", r.Tasks, r.Calls, r.Workers)
		row("time", "%.2fs (%d completed, %d failed)", r.Seconds, r.Completed, r.Failed)
		row("tasks/s", "%.1f", r.TasksPerSec)
		row("records/s", "%.0f (%d records)", r.RecordsPerSec, r.Records)
		row("fenced append p50/p99", "%.0f / %.0f µs (%d probe appends)", r.AppendP50us, r.AppendP99us, r.Appends)
		row("wake→lease p50/p99", "%.0f / %.0f µs (%d wakes)", r.WakeLeaseP50us, r.WakeLeaseP99us, r.Wakes)
		row("commit→observer p99", "%.0f µs", r.ObserverP99us)
		row("durable waits", "%.2f per tool call (%d waits, %d calls)", r.WaitsPerCall, r.DurableWaits, r.ToolCalls)
		row("CPU", "%.2fs (%.0f%% of one core)", r.CPUSeconds, 100*r.CPUSeconds/max(r.Seconds, 1e-9))
	}
	for _, l := range r.Levels {
		row(fmt.Sprintf("%d suspended", l.Suspended), "append p50/p99 %.0f/%.0f µs, wake→lease p50/p99 %.0f/%.0f µs, RSS %.0f MiB, %.0f B/task on disk, grown in %.1fs",
			l.AppendP50us, l.AppendP99us, l.WakeLeaseP50us, l.WakeLeaseP99us, l.RSSMiB, l.DiskPerTask, l.GrowSeconds)
	}
	if r.Restart != nil {
		row("restart", "open %.2fs, first resumed task leased %.0f ms after its wake", r.Restart.OpenSeconds, r.Restart.ResumeMs)
	}
	row("RSS", "%.0f MiB now, %.0f MiB peak", r.RSSMiB, r.MaxRSSMiB)
	return tw.Flush()
}
