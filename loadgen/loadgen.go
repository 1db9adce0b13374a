// Package loadgen generates load on a running host and measures it: scripted
// tasks of a mix of tool calls (plain, denied by a rule, approved, spawning a
// subtask, waiting for an external event), or, in the scale mode, a growing
// population of suspended tasks measured at each level. It drives the host
// through its client API and its seams, as an embedder's program would, and
// times what a person running a fleet asks about: tasks and records per
// second, the fenced append, a wake to its lease, commit to observer.
//
// `engine bench` is a thin verb over it; a Go program can run the same load
// against a host of its own.
package loadgen

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
	"text/tabwriter"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// Agent is the agent of the scripted tasks; its subtasks run ChildAgent.
const (
	Agent      = "bench"
	ChildAgent = "bench-child"
)

// EventKind is the external event the waiting tasks wait for, and that the
// load generator sends them.
const EventKind = "bench_go_on"

// Options say what load to generate and where to report progress.
type Options struct {
	// Tasks scripted tasks of Calls script steps each, drawn from Mix.
	Tasks, Calls int
	Mix          Mix
	// Levels are the suspended-task populations of the scale mode, rising;
	// none runs the scripted tasks instead.
	Levels []int
	// Probes is how many appends and wakes are timed at each level.
	Probes int
	// Restart, in the scale mode, closes the host after the last level and
	// opens it again through Reopen, timing the open and the first resumed
	// task.
	Restart bool
	// Reopen opens the host again on dataDir (the closed host's).
	Reopen func(ctx context.Context, dataDir string) (*hostconfig.Host, error)
	// ServerPID and ServerDir name a nats-server of its own, whose RSS and
	// store size the scale mode reads at each level; with an embedded
	// server, which is measured as part of this process, they stay unset.
	ServerPID int
	ServerDir string
	// Profile, if set, is the directory where the scale mode writes a CPU
	// profile of each level's appends and a heap profile after it.
	Profile string

	// Target and Workers describe the host in the Result.
	Target  string
	Workers int

	// Progress receives progress lines (nil: none); Bar draws the scripted
	// load's progress as a bar, for a terminal; Quiet shows none of it.
	Progress io.Writer
	Bar      bool
	Quiet    bool
}

// Check refuses options that cannot apply, before anything starts; embedded
// says whether the host will run on an embedded server. The messages name
// the flags of `engine bench`.
func (o Options) Check(embedded bool) error {
	if o.Tasks < 0 || o.Calls < 0 || o.Probes < 1 {
		return errors.New("--tasks, --calls must be at least 0 and --probes at least 1")
	}
	if (o.ServerPID != 0 || o.ServerDir != "") && embedded {
		return errors.New("--server-pid and --server-dir describe the server of --nats; the embedded one is measured as part of this process")
	}
	if o.ServerPID < 0 {
		return fmt.Errorf("--server-pid %d: want a process id", o.ServerPID)
	}
	if o.ServerPID > 0 {
		if _, err := procRSSMiB(o.ServerPID); err != nil {
			return fmt.Errorf("--server-pid %d: %v", o.ServerPID, err)
		}
	}
	if o.ServerDir != "" {
		if fi, err := os.Stat(o.ServerDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--server-dir %q is not a directory", o.ServerDir)
		}
	}
	if o.Profile != "" {
		if err := os.MkdirAll(o.Profile, 0o755); err != nil {
			return fmt.Errorf("--profile: %v", err)
		}
	}
	return nil
}

// Mix is the share of the tool calls of each kind; the rest are plain echo
// calls.
type Mix struct{ Deny, Approve, Spawn, Wait float64 }

// ParseMix reads a mix written deny=F,approve=F,spawn=F,wait=F, each share
// from 0 to 1 and their sum at most 1; kinds left out have none.
func ParseMix(s string) (Mix, error) {
	var m Mix
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
			m.Deny = f
		case "approve":
			m.Approve = f
		case "spawn":
			m.Spawn = f
		case "wait":
			m.Wait = f
		default:
			return m, fmt.Errorf("--mix %q: unknown kind %q (deny, approve, spawn or wait)", s, k)
		}
	}
	if sum := m.Deny + m.Approve + m.Spawn + m.Wait; sum > 1 {
		return m, fmt.Errorf("--mix %q: the shares add up to %.2f, over 1", s, sum)
	}
	return m, nil
}

// ParseLevels reads the scale mode's populations: rising whole numbers ≥ 1,
// comma-separated; "" is none.
func ParseLevels(s string) ([]int, error) {
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

// Config is the governance the load needs, for a task of calls script
// steps: a rule denies an echo of "deny …", another asks a person for an
// echo of "approve …", and the budget lets every step run.
func Config(calls int) (*config.File, error) {
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

// Script is task i's script: calls steps drawn from mix, then a finish. The
// draw is seeded by i, so a run is the same load every time.
func Script(i, calls int, mix Mix) ([]byte, error) {
	r := rand.New(rand.NewPCG(uint64(i), 17))
	steps := make([]map[string]any, 0, calls+1)
	echo := func(text string) map[string]any {
		return map[string]any{"tool_calls": []any{map[string]any{"tool": "echo", "args": map[string]any{"text": text}}}}
	}
	for j := range calls {
		x := r.Float64()
		switch {
		case x < mix.Deny:
			steps = append(steps, echo(fmt.Sprintf("deny %d", j)))
		case x < mix.Deny+mix.Approve:
			steps = append(steps, echo(fmt.Sprintf("approve %d", j)))
		case x < mix.Deny+mix.Approve+mix.Spawn:
			steps = append(steps, map[string]any{"spawn": []any{map[string]any{
				"agent": ChildAgent, "goal": fmt.Sprintf("child %d", j),
				"script": []any{map[string]any{"finish": map[string]any{"answer": j}}}}}})
		case x < mix.Deny+mix.Approve+mix.Spawn+mix.Wait:
			steps = append(steps, map[string]any{"wait_external": map[string]any{"event_kind": EventKind}})
		default:
			steps = append(steps, echo(fmt.Sprintf("call %d", j)))
		}
	}
	steps = append(steps, map[string]any{"finish": map[string]any{"answer": "done"}})
	return json.Marshal(steps)
}

// Result is what a run measured.
type Result struct {
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
	DurableWaits uint64  `json:"durable_waits"`
	ToolCalls    int64   `json:"tool_calls"`
	WaitsPerCall float64 `json:"durable_waits_per_call"`
	// GroupedWrites of those went in GroupCommits atomic batches with
	// other tasks' writes (group commit on the embedded server, ADR 0107;
	// the probe's included).
	GroupedWrites uint64   `json:"grouped_writes"`
	GroupCommits  uint64   `json:"group_commits"`
	CPUSeconds    float64  `json:"cpu_seconds"`
	RSSMiB        float64  `json:"rss_mib"`
	MaxRSSMiB     float64  `json:"max_rss_mib"`
	Levels        []Level  `json:"levels,omitempty"`
	Restart       *Restart `json:"restart,omitempty"`
}

// Run drives h with o's load: the scripted tasks, or with o.Levels the scale
// mode. It returns what it measured and the host open at its end: h, or,
// with o.Restart, the host o.Reopen opened in its place (h is closed then).
// An error of o.Reopen is returned as it is.
func Run(ctx context.Context, h *hostconfig.Host, o Options) (Result, *hostconfig.Host, error) {
	res := Result{Target: o.Target, Tasks: o.Tasks, Calls: o.Calls, Workers: o.Workers}
	if len(o.Levels) > 0 {
		res.Tasks, res.Calls = 0, 0 // the scale mode runs no scripted tasks
	}
	probe, err := newAppendProbe(ctx, h)
	if err != nil {
		return res, h, fmt.Errorf("start the append probe: %w", err)
	}
	if len(o.Levels) > 0 {
		idle, err := runLevels(ctx, h, probe, o, &res)
		if err != nil {
			return res, h, err
		}
		if o.Restart {
			r, h2, err := restartHost(ctx, h, idle, o)
			h = h2
			if err != nil {
				return res, h, err
			}
			res.Restart = r
		}
	} else if err := runLoad(ctx, h, probe, o, &res); err != nil {
		return res, h, err
	}
	res.RSSMiB, res.MaxRSSMiB = rssMiB()
	return res, h, nil
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

// runLoad runs the scripted tasks and fills res.
func runLoad(ctx context.Context, h *hostconfig.Host, probe *appendProbe, o Options, res *Result) error {
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
				// load's one-level subtasks is the root.
				woke(env.CorrelationID, env.Time)
				return nil
			}
			if env.Type == noeta.TypeTaskCompleted {
				completed.Add(1)
			} else {
				failed.Add(1)
			}
			if completed.Load()+failed.Load() == int64(o.Tasks) {
				close(done)
			}
		}
		return nil
	})
	defer untap()
	if o.Tasks == 0 {
		close(done)
	}
	waits0 := h.Log().DurableWaits()
	groups0, grouped0, _ := h.Log().GroupCommits()
	probeCtx, stopProbe := context.WithCancel(ctx)
	var probeWG sync.WaitGroup
	probeWG.Go(func() { probe.run(probeCtx, 5*time.Millisecond, 0) })
	start := time.Now()
	cpu0 := cpuSeconds()
	bar := newProgress(o.Progress, o.Tasks, o.Bar, o.Quiet)
	subErr := make(chan error, 1)
	go func() {
		for i := range o.Tasks {
			script, err := Script(i, o.Calls, o.Mix)
			if err == nil {
				_, err = h.Submit(ctx, host.Submission{Agent: Agent, Goal: fmt.Sprintf("bench %d", i), Script: script})
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
	if err := ctx.Err(); err != nil && completed.Load()+failed.Load() < int64(o.Tasks) {
		return fmt.Errorf("stopped with %d of %d tasks at rest: %w", completed.Load()+failed.Load(), o.Tasks, err)
	}
	res.Seconds = elapsed.Seconds()
	res.TasksPerSec = float64(o.Tasks) / elapsed.Seconds()
	res.Records = records.Load()
	res.RecordsPerSec = float64(res.Records) / elapsed.Seconds()
	res.Completed, res.Failed = completed.Load(), failed.Load()
	res.Appends, res.AppendP50us, res.AppendP99us = probe.lat.quantiles()
	res.Wakes, res.WakeLeaseP50us, res.WakeLeaseP99us = wakeLease.quantiles()
	_, _, res.ObserverP99us = obsLag.quantiles()
	// Each probe append and each of the probe's LeaseGranted is one wait.
	res.DurableWaits = h.Log().DurableWaits() - waits0 - uint64(res.Appends) - uint64(probeGrants.Load())
	groups1, grouped1, _ := h.Log().GroupCommits()
	res.GroupCommits, res.GroupedWrites = groups1-groups0, grouped1-grouped0
	res.ToolCalls = calls.Load()
	if res.ToolCalls > 0 {
		res.WaitsPerCall = float64(res.DurableWaits) / float64(res.ToolCalls)
	}
	return nil
}

// approveSoon approves handle once the dispatcher has the task suspended on
// it: the TaskSuspended record is committed just before the release.
func approveSoon(ctx context.Context, h *hostconfig.Host, task, handle string, woke func(string, time.Time)) error {
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
	h     *hostconfig.Host
	task  string
	lease eventlog.Lease
	env   eventlog.Envelope
	lat   samples
	// beat is when the lease was last renewed.
	beat time.Time
}

func newAppendProbe(ctx context.Context, h *hostconfig.Host) (*appendProbe, error) {
	id := noeta.NewTaskID()
	created, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "bench",
		noeta.TaskCreated{TaskID: id, Agent: Agent, Goal: "append probe", RootTaskID: id})
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

// Write writes r as a table, or with asJSON as one JSON object.
func (r Result) Write(w io.Writer, asJSON bool) error {
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
		if h := r.GroupCommits; h > 0 {
			row("group commits", "%d writes in %d atomic batches (%.1f a batch)", r.GroupedWrites, h, float64(r.GroupedWrites)/float64(h))
		}
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
