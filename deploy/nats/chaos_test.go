package nats_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// chaosGovernance lets the chaos tasks run shell commands without asking.
const chaosGovernance = `
agents:
  boss:
    tools: [echo, shell]
    permission_mode: bypassPermissions
    budget: {max_spawned_subtasks: 20}
    permissions: {allowed_subtask_agents: [helper]}
  helper:
    tools: [echo, shell]
    permission_mode: bypassPermissions
`

// Sizes of the chaos run.
const (
	chaosRoots    = 200              // root tasks, submitted while the faults run
	chaosChildren = 3                // children of every other root
	chaosServes   = 3                // engine serve processes at a time
	chaosKills    = 20               // serve processes killed with SIGKILL
	chaosLeaseTTL = 3 * time.Second  // every process's lease TTL
	chaosCalm     = 45 * time.Second // once the faults stop, the longest wait for the next task to end
	// chaosTimerSlop is how late a timer may fire once the calm returned. A
	// timer whose broker schedule survived the faults fires within a
	// second or two; one whose schedule a leader change lost is fired by
	// the next reconcile pass of some serve, up to one sweep interval
	// (jittered by +25%) later. Under load this run has seen the second
	// kind 18 s late (a pass that found 18 overdue timers at once), within
	// the bound; a timer later than that would be one nothing repaired.
	chaosTimerSlop = jetstream.DefaultSweepInterval*5/4 + 5*time.Second
)

// TestChaos is the liveness scenario of a node restart under load. Three
// nats-server processes from the cluster files; three `engine serve`
// processes (lease TTL 3s, 4 workers each) share 200 root tasks submitted
// over 30 seconds, every other one fanning out to 3 children, with shell
// calls that each append one line to a file, 1-2s timers and spawns. While
// they run, a serve is killed with SIGKILL every 1-3 seconds (20 times,
// each replaced by a fresh one), and once the node leading NOETA_TASKS is
// killed with SIGKILL and started again 4 seconds later. Then the faults
// stop and 30 more timer tasks are submitted; then:
//
//   - every task ends, and the wait never goes 45 seconds without one
//     ending (no stall: before the reconciler, 4-7 tasks of such a run
//     never moved again, a ready row with its signal lost or a lease of a
//     killed serve never reclaimed, and their parents with them);
//   - no tool call is lost (a call the log records as done has its line)
//     and none is duplicated (no line appears twice);
//   - timers due after the calm returned fire within a few seconds of their
//     time (they fired up to 30-35s late, the ingress consumer's ack wait
//     for wakes a killed process had fetched).
//
// The counts are logged (docs/benchmarks.md keeps a run's).
func TestChaos(t *testing.T) {
	began := time.Now()
	dir := t.TempDir()
	nodes := materializeCluster(t, dir)
	for _, n := range nodes {
		n.start(t)
	}
	for _, n := range nodes {
		n.waitHealthy(t, time.Minute)
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url())
	}
	all := strings.Join(urls, ",")
	// The test's own dispatcher submits and inspects; it does not
	// reconcile, so every repair is the serve processes' own.
	e := startEngineWith(t, all, jetstream.DispatcherConfig{Replicas: clusterReplicas, LeaseTTL: chaosLeaseTTL,
		RequestTimeout: 10 * time.Second, SweepInterval: -1}, 0)
	// The shell calls append to a file in the workspace: the sandbox lets
	// them write nowhere else.
	ws := t.TempDir()
	effects := filepath.Join(ws, "effects.log")
	cfg := filepath.Join(dir, "chaos.yaml")
	if err := os.WriteFile(cfg, []byte(chaosGovernance), 0o600); err != nil {
		t.Fatal(err)
	}
	serveArgs := []string{"serve", "--nats", all, "--user", "engine", "--password", passwords["engine"],
		"--replicas", "3", "--lease-ttl", chaosLeaseTTL.String(), "--config", cfg, "--workers", "4",
		"--http", "", "--workspace", ws, "--log-format", "json", "--grace", "1s"}
	var serves []*serveProc
	for range chaosServes {
		serves = append(serves, startServe(t, serveArgs...))
	}
	var killed []*serveProc
	dump := func() {
		for i, p := range append(slices.Clone(killed), serves...) {
			out := p.out.String()
			if len(out) > 6000 {
				out = "…" + out[len(out)-6000:]
			}
			t.Logf("serve %d (pid %d):\n%s", i, p.cmd.Process.Pid, out)
		}
	}

	// The run is bounded by the test binary's deadline: how long the
	// backlog takes to drain is the machine's (see the wait below).
	runFor := 15 * time.Minute
	if d, ok := t.Deadline(); ok {
		runFor = time.Until(d) - 2*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	shell := func(tag string) string {
		return fmt.Sprintf(`{"tool_calls":[{"tool":"shell","args":{"command":"echo %s >> %s"}}]}`, tag, effects)
	}
	script := func(i int) string {
		r := fmt.Sprintf("r%03d", i)
		timer := fmt.Sprintf(`{"wait_timer":{"seconds":%d}}`, 1+i%2)
		if i%2 == 1 {
			var kids []string
			for k := range chaosChildren {
				kids = append(kids, fmt.Sprintf(`{"agent":"helper","goal":"child %d","script":[%s,{"tool_calls":[{"tool":"echo","args":{"k":%d}}]},{"finish":{"answer":"%d"}}]}`,
					k, shell(fmt.Sprintf("%s-k%d-c0", r, k)), k, k))
			}
			return fmt.Sprintf(`[%s,{"spawn":[%s]},%s,{"finish":{"answer":"done"}}]`, shell(r+"-c0"), strings.Join(kids, ","), shell(r+"-c1"))
		}
		return fmt.Sprintf(`[%s,%s,{"tool_calls":[{"tool":"echo","args":{"i":%d}}]},%s,{"finish":{"answer":"done"}}]`, shell(r+"-c0"), timer, i, shell(r+"-c1"))
	}
	// A submission that failed may have created its task all the same (a
	// leader killed after storing the genesis, before answering): it is
	// retried under the id it chose, which makes the retry the same task
	// rather than a second one running the same shell calls.
	submit := func(goal, s string) (string, error) {
		var err error
		sub := engine.Submission{ID: noeta.NewTaskID(), Agent: "boss", Goal: goal, Script: json.RawMessage(s)}
		for range 40 {
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			var id string
			id, err = e.eng.Submit(sctx, sub)
			scancel()
			if err == nil {
				return id, nil
			}
			time.Sleep(250 * time.Millisecond)
		}
		return "", err
	}

	// Roots are submitted over 30 seconds while the faults run.
	roots := make(chan string, chaosRoots)
	submitted := make(chan error, 1)
	go func() {
		defer close(roots)
		for i := range chaosRoots {
			id, err := submit(fmt.Sprintf("root %d", i), script(i))
			if err != nil {
				submitted <- fmt.Errorf("submit root %d: %w", i, err)
				return
			}
			roots <- id
			time.Sleep(150 * time.Millisecond)
		}
		submitted <- nil
	}()

	js, err := natsjs.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	var (
		victim            *node
		victimDown        time.Time
		serveKills        int
		leaderKilledAfter int
	)
	time.Sleep(2 * time.Second)
	for serveKills < chaosKills || victim != nil && !victim.running() {
		time.Sleep(time.Second + rand.N(2*time.Second))
		if serveKills < chaosKills {
			i := rand.N(len(serves))
			p := serves[i]
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			killed = append(killed, p)
			serves[i] = startServe(t, serveArgs...)
			serveKills++
		}
		if serveKills == 6 && victim == nil {
			for attempt := 0; victim == nil && attempt < 10; attempt++ {
				sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
				if s, err := js.Stream(sctx, "NOETA_TASKS"); err == nil {
					if info, err := s.Info(sctx); err == nil && info.Cluster != nil {
						for _, n := range nodes {
							if n.name == info.Cluster.Leader {
								victim = n
							}
						}
					}
				}
				scancel()
			}
			if victim == nil {
				t.Fatalf("no leader of NOETA_TASKS found")
			}
			victim.kill()
			victimDown = time.Now()
			leaderKilledAfter = serveKills
		}
		if victim != nil && !victim.running() && time.Since(victimDown) >= 4*time.Second {
			victim.restarts++
			victim.start(t)
		}
	}
	victim.waitHealthy(t, time.Minute)
	if err := <-submitted; err != nil {
		dump()
		t.Fatal(err)
	}
	calm := time.Now()
	t.Logf("faults over %v after the start: %d serves killed, %s (leader of NOETA_TASKS) killed after the %dth and restarted %v later",
		calm.Sub(began).Round(time.Millisecond), serveKills, victim.name, leaderKilledAfter, time.Duration(4*time.Second))

	// Timers that begin once the calm returned: they must fire on time.
	// They are submitted while the wait below runs, so it sees them fire.
	calmIDs := make(chan string, 30) // a burst, not paced by the wait's looks
	calmErr := make(chan error, 1)
	go func() {
		defer close(calmIDs)
		for i := range 30 {
			id, err := submit(fmt.Sprintf("calm %d", i), fmt.Sprintf(`[{"wait_timer":{"seconds":%d}},{"finish":{"answer":"done"}}]`, 1+i%2))
			if err != nil {
				calmErr <- fmt.Errorf("submit calm task %d: %w", i, err)
				return
			}
			calmIDs <- id
		}
	}()
	var ids []string
	for id := range roots {
		ids = append(ids, id)
	}

	// Every task ends, and the wait never goes a calm window without a
	// task ending: the roots (each waits for its children, so their end
	// covers the children's) and the calm ones. A stalled task is one that
	// stays while the others drain and then alone for a whole window. The
	// backlog left when the faults stop is the machine's, not the
	// system's: on two cores shared with the rest of the test run it has
	// been 150 tasks draining at under two a second, which a fixed window
	// counted as stalls.
	//
	// The wait also notes when it first sees a task's timer fired (its row
	// holding the matched timer wake). The log's TaskWoken says when a
	// worker took the woken task, which behind such a backlog is many
	// seconds after the timer fired: the queue's wait, not the timer's.
	pending := slices.Clone(ids)
	timerSeen := map[string]time.Time{} // timerKey -> first seen fired
	lastEnd := calm
	var longestWait time.Duration
	submitting := true
	for (submitting || len(pending) > 0) && time.Since(lastEnd) <= chaosCalm && ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
	take:
		for submitting {
			select {
			case id, ok := <-calmIDs:
				if !ok {
					submitting = false
					break take
				}
				ids = append(ids, id)
				pending = append(pending, id)
			default:
				break take
			}
		}
		before := len(pending)
		pending = slices.DeleteFunc(pending, func(id string) bool {
			ds, err := e.disp.Inspect(ctx, id)
			if err != nil {
				return false
			}
			if w := ds.MatchedWake; w != nil && w.Kind == noeta.WakeTimerFired {
				if _, ok := timerSeen[timerKey(id, w.FireAt)]; !ok {
					timerSeen[timerKey(id, w.FireAt)] = time.Now()
				}
			}
			return ds.Status == eventlog.DispatchTerminal
		})
		if len(pending) < before {
			longestWait = max(longestWait, time.Since(lastEnd))
			lastEnd = time.Now()
		}
	}
	// The submitter ends by itself (each submission is bounded).
	for id := range calmIDs {
		ids = append(ids, id)
		pending = append(pending, id)
	}
	select {
	case err := <-calmErr:
		// Named, then the stall's diagnosis if there is one.
		t.Error(err)
	default:
	}
	endedIn := time.Since(calm)
	if len(pending) > 0 {
		runErr := ctx.Err()
		for i, id := range pending {
			if i == 10 {
				break
			}
			// Each task's diagnosis has its own time: the run's may be
			// what ran out.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ds, err := e.disp.Inspect(ctx, id)
			st, _, ferr := engine.FoldTask(ctx, e.log, e.log, id)
			t.Errorf("task %s did not end: %v after the last task to end (%v into the calm): row %+v (%v); log %+v (%v)",
				id, time.Since(lastEnd).Round(time.Millisecond), lastEnd.Sub(calm).Round(time.Millisecond), ds, err, st, ferr)
			if st == nil {
				continue
			}
			inbox, _ := e.log.Inbox(ctx, id)
			t.Logf("  its inbox: %d records", len(inbox))
			chaosReadyState(ctx, t, js, id)
			for _, c := range st.Turn.Spawned {
				cds, cerr := e.disp.Inspect(ctx, c)
				cenvs, _ := e.log.Read(ctx, c, 0)
				var last []string
				for _, env := range cenvs[max(0, len(cenvs)-4):] {
					last = append(last, fmt.Sprintf("%d:%s@%s", env.Seq, env.Type, env.Time.Format("15:04:05.000")))
				}
				t.Logf("  child %s: row %s %s gen %d worker %s (%v); log tail %v", c, cds.Status, cds.Reason, cds.Generation, cds.Worker, cerr, last)
			}
		}
		dump()
		t.Fatalf("%d of %d tasks stalled (the run's context: %v)", len(pending), len(ids), runErr)
	}

	// Account for every task, children included, from the logs.
	lines := map[string]int{}
	f, err := os.Open(effects)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines[strings.TrimSpace(sc.Text())]++
	}
	_ = f.Close()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var (
		tasks, completed, calls, interrupted, lost, duplicated int
		timerLate, calmTimerLate, groupLate, queued            time.Duration
		timers, calmTimers, groups                             int
		recorded                                               = map[string]bool{}
		calmLate                                               []time.Duration
		failed                                                 []string
		wrongReads                                             int
	)
	queue := slices.Clone(ids)
	parentOf := map[string]string{}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		tasks++
		envs, err := e.log.Read(ctx, id, 0)
		// Once in runs beside other packages' tests, a child whose parent
		// had its result read "not found" here. Its parent's group wake
		// needs the child's handoff, so the child had ended; the read was
		// wrong, not the log. Not seen again in five runs under more load
		// (docs/reliability.md). A read that heals is named and counted;
		// one that does not fails the test.
		for try := 0; errors.Is(err, eventlog.ErrNotFound) && try < 10; try++ {
			time.Sleep(time.Second)
			if envs, err = e.log.Read(ctx, id, 0); err == nil {
				wrongReads++
				t.Logf("ANOMALY: the log of %s (child of %q) read \"not found\", then read whole %d s later", id, parentOf[id], try+1)
			}
		}
		if err != nil {
			ds, derr := e.disp.Inspect(ctx, id)
			t.Errorf("read %s (child of %q): %v; its row %+v (%v)", id, parentOf[id], err, ds, derr)
			if p := parentOf[id]; p != "" {
				penvs, _ := e.log.Read(ctx, p, 0)
				for _, env := range penvs {
					t.Logf("  parent %d %s %s by %s: %.300s", env.Seq, env.Time.Format("15:04:05.000"), env.Type, env.Actor, env.Payload)
				}
			}
			for i, sp := range append(slices.Clone(killed), serves...) {
				for _, l := range strings.Split(sp.out.String(), "\n") {
					if strings.Contains(l, id) || parentOf[id] != "" && strings.Contains(l, parentOf[id]) {
						t.Logf("  serve %d: %.500s", i, l)
					}
				}
			}
			continue
		}
		st, err := checkDense(envs)
		if err != nil {
			t.Errorf("task %s: %v", id, err)
			continue
		}
		if st.Status != noeta.StatusTerminal {
			t.Errorf("task %s is %s in its log", id, st.Status)
		}
		if len(st.Answer) > 0 {
			completed++
		}
		started := map[string]string{} // call id -> tag
		finished := map[string]bool{}  // call id
		var fireAt time.Time
		var children []string
		var groupWait bool
		for _, env := range envs {
			p, _, err := env.Decode()
			if err != nil {
				t.Fatalf("task %s seq %d: %v", id, env.Seq, err)
			}
			switch r := p.(type) {
			case *noeta.ToolCallStarted:
				if r.Tool != "shell" {
					continue
				}
				var a struct{ Command string }
				_ = json.Unmarshal(r.Args, &a)
				tag, _, _ := strings.Cut(strings.TrimPrefix(a.Command, "echo "), " ")
				started[r.CallID] = tag
				recorded[tag] = true
				if lines[tag] > 1 {
					duplicated++
					t.Errorf("task %s: call %s (%s) ran %d times", id, r.CallID, tag, lines[tag])
				}
			case *noeta.ToolCallFinished:
				tag, ok := started[r.CallID]
				if !ok {
					continue
				}
				calls++
				finished[r.CallID] = true
				switch {
				case lines[tag] > 1:
					// Counted at its start.
				case r.OK && lines[tag] == 0:
					lost++
					t.Errorf("task %s: call %s (%s) is recorded as done but never ran", id, r.CallID, tag)
				case !r.OK && strings.Contains(r.Error, "interrupted"):
					interrupted++ // the worker died during the call; it is not run again
				case !r.OK:
					t.Errorf("task %s: call %s (%s) failed: %s", id, r.CallID, tag, r.Error)
				}
			case *noeta.TaskFailed:
				// A task the dispatcher gave up on (stale reclaims in a
				// row under the kills): allowed, and named.
				var created struct{ Goal string }
				_ = json.Unmarshal(envs[0].Payload, &created)
				failed = append(failed, fmt.Sprintf("%s (%q): %s", id, created.Goal, r.Error))
			case *noeta.SubtaskSpawned:
				children = append(children, r.SubtaskID)
			case *noeta.TaskSuspended:
				fireAt = time.Time{}
				switch r.WakeOn.Kind {
				case noeta.WakeTimerFired:
					fireAt = r.WakeOn.FireAt
				case noeta.WakeSubtaskGroupCompleted:
					groupWait = true
				}
			case *noeta.TaskWoken:
				switch {
				case r.WakeEvent.Kind == noeta.WakeTimerFired && !fireAt.IsZero():
					late := env.Time.Sub(fireAt)
					if seen, ok := timerSeen[timerKey(id, fireAt)]; ok && seen.Before(env.Time) {
						queued = max(queued, env.Time.Sub(seen))
						late = seen.Sub(fireAt)
					}
					timers++
					timerLate = max(timerLate, late)
					if fireAt.After(calm) {
						calmLate = append(calmLate, late.Round(100*time.Millisecond))
						calmTimers++
						calmTimerLate = max(calmTimerLate, late)
					}
				case r.WakeEvent.Kind == noeta.WakeSubtaskGroupCompleted && groupWait:
					var lastChild time.Time
					for _, c := range children {
						cenvs, err := e.log.Read(ctx, c, 0)
						if err == nil && len(cenvs) > 0 {
							lastChild = later(lastChild, cenvs[len(cenvs)-1].Time)
						}
					}
					groups++
					groupLate = max(groupLate, env.Time.Sub(lastChild))
				}
			}
		}
		// A terminal log states what became of every call it started (a
		// call its worker was lost during is recorded as interrupted, by
		// the next holder or by the lease that records the task's end).
		for callID, tag := range started {
			if !finished[callID] {
				t.Errorf("task %s: call %s (%s, %d lines) started and its end was never recorded", id, callID, tag, lines[tag])
			}
		}
		for _, c := range children {
			parentOf[c] = id
		}
		queue = append(queue, children...)
	}
	// A line no log records as a started call would be a call run without
	// its ToolCallStarted (a worker that ran a call its lease no longer
	// allowed), or one the log lost.
	for tag, n := range lines {
		if !recorded[tag] {
			t.Errorf("side effect %s (%d lines) belongs to no recorded call", tag, n)
			duplicated++
		}
	}
	slices.Sort(failed)
	for _, f := range failed {
		t.Logf("task given up on: %s", f)
	}
	t.Logf("chaos: %d tasks (%d roots, %d calm, the rest children), %d completed, %d failed; %d serve kills, 1 leader kill; every task ended %v into the calm, at most %v apart; "+
		"%d shell calls recorded (%d interrupted by a kill and not run again), %d lost, %d duplicated; "+
		"%d timers, the latest %v late (%d due after the calm returned, the latest %v late; a woken task then waited up to %v for a worker); %d group wakes, the latest %v after the last child ended; run took %v",
		tasks, chaosRoots, 30, completed, len(failed), serveKills, endedIn.Round(time.Millisecond), longestWait.Round(time.Millisecond),
		calls, interrupted, lost, duplicated,
		timers, timerLate.Round(time.Millisecond), calmTimers, calmTimerLate.Round(time.Millisecond), queued.Round(time.Millisecond), groups, groupLate.Round(time.Millisecond),
		time.Since(began).Round(time.Second))
	repairs := map[string]int{}
	for _, p := range append(slices.Clone(killed), serves...) {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if _, rest, ok := strings.Cut(l, `"msg":"`); ok {
				msg, _, _ := strings.Cut(rest, `"`)
				if strings.HasPrefix(msg, "reconcile ") || strings.HasPrefix(msg, "fired a timer") {
					repairs[msg]++
				}
			}
		}
	}
	t.Logf("repairs: %v; calm timers' lateness: %v; logs that read \"not found\" at first: %d", repairs, calmLate, wrongReads)
	if calmTimers == 0 {
		t.Errorf("no timer was due after the calm returned")
	}
	if calmTimerLate > chaosTimerSlop {
		t.Errorf("a timer due after the calm returned fired %v late, want at most %v", calmTimerLate, chaosTimerSlop)
	}
	if t.Failed() {
		dump()
	}
}

// timerKey names a task's timer by its deadline.
func timerKey(task string, fireAt time.Time) string {
	return task + "@" + fireAt.UTC().Format(time.RFC3339Nano)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// chaosReadyState logs what the ready stream holds for a stalled task (its
// signals, back and front, with their epochs and ages) and the state of the
// ready queue's consumers: what a stall's cause is read from.
func chaosReadyState(ctx context.Context, t *testing.T, js natsjs.JetStream, task string) {
	t.Helper()
	// A request the caller's role may not make (the engine's may not list
	// consumers) is never answered: it would wait out the caller's whole
	// deadline.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "NOETA_READY")
	if err != nil {
		t.Logf("  ready stream: %v", err)
		return
	}
	back := fmt.Sprintf("noeta.ready.default.%d.%s", noeta.Partition(task), task)
	for _, subj := range []string{back, back + ".front"} {
		m, err := stream.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Logf("  signal %s: %v", subj, err)
			continue
		}
		t.Logf("  signal %s: seq %d epoch %s, %v old", subj, m.Sequence, m.Data, time.Since(m.Time).Round(time.Millisecond))
	}
	info, err := stream.Info(ctx, natsjs.WithSubjectFilter("noeta.ready.>"))
	if err == nil {
		for subj, n := range info.State.Subjects {
			if strings.Contains(subj, task) {
				t.Logf("  ready subject %s: %d messages", subj, n)
			}
		}
	}
	lister := stream.ListConsumers(ctx)
	for name := range lister.Info() {
		leader := ""
		if name.Cluster != nil {
			leader = name.Cluster.Leader
		}
		t.Logf("  consumer %s (leader %q): pending %d, ack pending %d, redelivered %d, waiting %d, delivered stream seq %d, ack floor stream seq %d",
			name.Name, leader, name.NumPending, name.NumAckPending, name.NumRedelivered, name.NumWaiting, name.Delivered.Stream, name.AckFloor.Stream)
	}
	if err := lister.Err(); err != nil {
		t.Logf("  ready consumers: %v", err)
	}
	if info, err := stream.Info(ctx); err == nil {
		t.Logf("  ready stream: %d messages, seqs %d..%d, leader %v", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.Cluster)
	}
}
