package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// TestServeTwoHostsShareAndTakeOver: two serve processes split 300 tasks
// submitted by the test; one is killed with SIGKILL while it holds leases;
// the other finishes every task once the dead one's leases expire. Every log
// is dense, folds, and ends terminal; both processes ran tasks; the tasks the
// dead one held were taken over.
func TestServeTwoHostsShareAndTakeOver(t *testing.T) {
	t.Parallel()
	const tasks = 300
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the deployment's stack is closed
	d := newDeployment(t, srv.ClientURL(), "svkill", 1, 15*time.Second)

	a := startEngine(t, d.serveArgs("--workers", "4")...)
	b := startEngine(t, d.serveArgs("--workers", "4")...)
	a.waitLog(t, "serving", time.Minute)
	b.waitLog(t, "serving", time.Minute)

	script := `[{"tool_calls":[{"tool":"sleep","args":{"seconds":0.2}}]},{"tool_calls":[{"tool":"echo","args":{"text":"x"}}]},{"finish":{"answer":"ok"}}]`
	ids := d.submit(t, tasks, script)

	// Kill A once a third of the tasks are done: its workers are in the
	// middle of tasks, which stay leased to it until the leases expire.
	waitFor(t, 3*time.Minute, "a third of the tasks done", func() bool {
		return countStatus(d.rows(t, ids), eventlog.DispatchTerminal) >= tasks/3
	})
	// What A held is read once it is dead: its leases stay A's until they
	// expire (the TTL is long enough for the read on a loaded machine: at
	// 6s, a read of 300 rows under a load of 20 could come after them).
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	a.wait(t, 30*time.Second)
	killed := a.exited
	var held []string
	for id, ds := range d.rows(t, ids) {
		if ds.Status == eventlog.DispatchLeased && a.ownedBy(ds.Worker) {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		t.Fatalf("A held no lease when it was killed")
	}

	// A's leases expire and its tasks are requeued (behind the tasks that
	// were waiting already); B takes them over and finishes every task.
	requeued, takenOver := map[string]time.Time{}, map[string]time.Time{}
	waitFor(t, 3*time.Minute, "every task terminal", func() bool {
		rows := d.rows(t, ids)
		now := time.Now()
		for _, id := range held {
			stillA := rows[id].Status == eventlog.DispatchLeased && a.ownedBy(rows[id].Worker)
			if _, ok := requeued[id]; !ok && !stillA {
				requeued[id] = now
			}
			if _, ok := takenOver[id]; !ok && b.ownedBy(rows[id].Worker) {
				takenOver[id] = now
			}
		}
		return countStatus(rows, eventlog.DispatchTerminal) == tasks
	})
	allDone := time.Since(killed)
	var expiry, takeover time.Duration
	for _, id := range held {
		expiry = max(expiry, requeued[id].Sub(killed))
		takeover = max(takeover, takenOver[id].Sub(killed))
	}

	byA, byB := 0, 0
	for _, id := range ids {
		workers, st := checkLog(t, d, id)
		if st.Status != noeta.StatusTerminal || st.Answer == nil {
			t.Errorf("task %s: %s %s, want terminal with an answer", id, st.Status, st.Reason)
		}
		var sawA, sawB bool
		for _, w := range workers {
			switch {
			case a.ownedBy(w):
				sawA = true
			case b.ownedBy(w):
				sawB = true
			default:
				t.Errorf("task %s: leased by %q, neither A (%d) nor B (%d)", id, w, a.cmd.Process.Pid, b.cmd.Process.Pid)
			}
		}
		if sawA {
			byA++
		}
		if sawB {
			byB++
		}
	}
	if byA == 0 || byB == 0 {
		t.Errorf("A ran %d tasks and B %d: both should have run some", byA, byB)
	}
	// A task A held ends in B's hands: B fenced it and finished it (A's
	// lease is in the log before B's, or not at all if A died before
	// writing it), or found it finished (A died after its last record,
	// before releasing it) and released it.
	finishedByA := 0
	rows := d.rows(t, ids)
	for _, id := range held {
		workers, _ := checkLog(t, d, id)
		switch {
		case !b.ownedBy(rows[id].Worker):
			t.Errorf("task %s, held by A when it was killed, was last leased by %s, not B", id, rows[id].Worker)
		case len(workers) > 0 && b.ownedBy(workers[len(workers)-1]):
		case len(workers) > 0 && a.ownedBy(workers[len(workers)-1]):
			finishedByA++
		default:
			t.Errorf("task %s, held by A when it was killed, has leases %v in its log", id, workers)
		}
	}
	t.Logf("A (pid %d) ran %d tasks, B (pid %d) %d; A held %d when it was killed (%d already finished in the log, not released); "+
		"lease TTL 15s: all of them requeued %v after the kill, in B's hands %v after it (behind the tasks already ready); every task done %v after it",
		a.cmd.Process.Pid, byA, b.cmd.Process.Pid, byB, len(held), finishedByA,
		expiry.Round(time.Millisecond), takeover.Round(time.Millisecond), allDone.Round(time.Millisecond))

	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, time.Minute); code != 0 {
		t.Errorf("B exited %d after SIGTERM", code)
	}
}

// TestServeSIGTERMFinishesInFlight: on a 3-node cluster, a serve process
// gets SIGTERM while its workers are in the middle of tasks whose tool calls
// sleep 1s each. It finishes them within its grace period, exits 0 and
// leaves no task leased; the tasks it never started are still ready, with
// nothing but their creation in their logs.
func TestServeSIGTERMFinishesInFlight(t *testing.T) {
	t.Parallel()
	c, err := embedded.StartCluster(t.Context(), embedded.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	d := newDeployment(t, c.ClientURL(), "svterm", 3, 0)

	const grace = 20 * time.Second
	p := startEngine(t, d.serveArgs("--workers", "4", "--grace", grace.String())...)
	p.waitLog(t, "serving", time.Minute)
	script := `[{"tool_calls":[{"tool":"sleep","args":{"seconds":1}}]},{"tool_calls":[{"tool":"sleep","args":{"seconds":1}}]},{"finish":{"answer":"slept"}}]`
	ids := d.submit(t, 12, script)

	// SIGTERM once four tasks are in their first sleep.
	waitFor(t, time.Minute, "four tasks leased", func() bool {
		return countStatus(d.rows(t, ids), eventlog.DispatchLeased) == 4
	})
	time.Sleep(300 * time.Millisecond)
	inFlight := []string{}
	for id, ds := range d.rows(t, ids) {
		if ds.Status == eventlog.DispatchLeased {
			inFlight = append(inFlight, id)
		}
	}
	sent := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.wait(t, grace+30*time.Second)
	took := p.exited.Sub(sent)
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	if took > grace {
		t.Errorf("it took %v to stop, more than its grace %v", took, grace)
	}
	rows := d.rows(t, ids)
	terminal := 0
	for _, id := range ids {
		ds := rows[id]
		switch ds.Status {
		case eventlog.DispatchLeased:
			t.Errorf("task %s is still leased (by %s)", id, ds.Worker)
		case eventlog.DispatchTerminal:
			terminal++
			if _, st := checkLog(t, d, id); st.Status != noeta.StatusTerminal || string(st.Answer) != `"slept"` {
				t.Errorf("task %s: %s %s %s", id, st.Status, st.Reason, st.Answer)
			}
		case eventlog.DispatchReady:
			if _, st := checkLog(t, d, id); st.LastSeq != 1 {
				t.Errorf("task %s is ready again with %d records: a segment was cut", id, st.LastSeq)
			}
		default:
			t.Errorf("task %s is %s", id, ds.Status)
		}
	}
	for _, id := range inFlight {
		if rows[id].Status != eventlog.DispatchTerminal {
			t.Errorf("task %s was in flight at SIGTERM and is %s, not finished", id, rows[id].Status)
		}
	}
	if !strings.Contains(p.stderr.String(), `"msg":"stopped"`) || strings.Contains(p.stderr.String(), "grace period over") {
		t.Errorf("log:\n%s", p.stderr)
	}
	t.Logf("SIGTERM with %d segments in flight (each ~2s, ~1.3s done): exited 0 after %v (grace %v); %d tasks finished, %d still ready, none leased",
		len(inFlight), took.Round(time.Millisecond), grace, terminal, countStatus(rows, eventlog.DispatchReady))
}

// TestServeGraceRunsOut: when the segments in hand cannot finish within the
// grace period, serve stops them and exits 0 without releasing anything;
// their leases expire and another process resumes them to the end.
func TestServeGraceRunsOut(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the deployment's stack is closed
	d := newDeployment(t, srv.ClientURL(), "svgrace", 1, 2*time.Second)
	p := startEngine(t, d.serveArgs("--workers", "2", "--grace", "1s")...)
	p.waitLog(t, "serving", time.Minute)
	ids := d.submit(t, 2, `[{"tool_calls":[{"tool":"sleep","args":{"seconds":5}}]},{"finish":{"answer":"late"}}]`)
	waitFor(t, time.Minute, "both tasks in their sleep", func() bool {
		for _, id := range ids {
			envs, err := d.st.Events(t.Context(), id, 0)
			if err != nil || len(envs) == 0 || envs[len(envs)-1].Type != noeta.TypeToolCallStarted {
				return false
			}
		}
		return true
	})
	sent := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	took := p.exited.Sub(sent)
	if took > 10*time.Second {
		t.Errorf("stopping took %v with a grace of 1s", took)
	}
	for id, ds := range d.rows(t, ids) {
		if ds.Status == eventlog.DispatchTerminal {
			t.Errorf("task %s was released terminal although its segment did not finish", id)
		}
		if _, st := checkLog(t, d, id); st.Status == noeta.StatusTerminal {
			t.Errorf("task %s ended although its segment was cut", id)
		}
	}
	if !strings.Contains(p.stderr.String(), "grace period over") {
		t.Errorf("no grace warning in the log:\n%s", p.stderr)
	}
	// The leases expire; another process resumes the tasks.
	q := startEngine(t, d.serveArgs("--workers", "2")...)
	waitFor(t, 2*time.Minute, "both tasks finished by the next process", func() bool {
		return countStatus(d.rows(t, ids), eventlog.DispatchTerminal) == 2
	})
	for _, id := range ids {
		workers, st := checkLog(t, d, id)
		if string(st.Answer) != `"late"` || len(workers) < 2 || !q.ownedBy(workers[len(workers)-1]) {
			t.Errorf("task %s: %s %s, leases %v", id, st.Status, st.Answer, workers)
		}
	}
	t.Logf("SIGTERM with two 5s sleeps in hand and a 1s grace: exited 0 after %v, leaving both leased to expire", took.Round(time.Millisecond))
	_ = q.cmd.Process.Signal(syscall.SIGTERM)
	q.wait(t, time.Minute)
}

// TestServeHTTP runs serve in process against a server the test owns:
// /healthz answers 200, then 503 while NATS is down, then 200 again after it
// is back; /metrics counts the records the process committed and the
// process's own figures.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	d := newDeployment(t, srv.ClientURL(), "svhttp", 1, 0)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		args := d.serveArgs("--workers", "3", "--http", "127.0.0.1:0")
		done <- runEnv(ctx, args, &out, &errb, noEnv)
	}()
	addrRe := regexp.MustCompile(`"msg":"http listening","addr":"([^"]+)"`)
	var base string
	waitFor(t, time.Minute, "serving", func() bool {
		if m := addrRe.FindStringSubmatch(errb.String()); m != nil && strings.Contains(errb.String(), `"msg":"serving"`) {
			base = "http://" + m[1]
			return true
		}
		return false
	})
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	ids := d.submit(t, 2, `[{"tool_calls":[{"tool":"echo","args":{"text":"hi"}}]},{"finish":{"answer":"ok"}}]`)
	waitFor(t, time.Minute, "both tasks done", func() bool {
		return countStatus(d.rows(t, ids), eventlog.DispatchTerminal) == 2
	})
	// The segment counters move after the release that ended each task,
	// a moment after the metrics observer has counted the TaskCompleted:
	// wait for every figure, not for the first one (reading them at the
	// first failed under load).
	wants := []string{
		`noeta_tasks_total{status="completed"} 2`,
		`noeta_events_total{origin="engine",type="LeaseGranted"} 2`,
		`noeta_tool_calls_total{outcome="ok",tool="echo"} 2`,
		`noeta_engine_segments_total{outcome="terminal"} 2`,
		`noeta_engine_leases_taken_total 2`,
		`noeta_engine_workers 3`,
		`noeta_engine_pool_running 1`,
		`noeta_engine_nats_connected 1`,
		`noeta_engine_segments_in_flight 0`,
		`go_goroutines `,
	}
	var metrics string
	missing := func() []string {
		var m []string
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				m = append(m, want)
			}
		}
		return m
	}
	ok := false
	deadline := time.Now().Add(time.Minute)
	for !ok && time.Now().Before(deadline) {
		_, metrics = get("/metrics")
		if ok = len(missing()) == 0; !ok {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, want := range missing() {
		t.Errorf("/metrics lacks %q", want)
	}

	// NATS goes away: 503; it comes back on the same port: 200.
	port := strings.TrimPrefix(srv.ClientURL(), "nats://127.0.0.1:")
	srv.Shutdown()
	waitFor(t, 30*time.Second, "/healthz 503 with NATS down", func() bool {
		code, body := get("/healthz")
		return code == 503 && strings.HasPrefix(body, "nats: ")
	})
	p, _ := strconv.Atoi(port)
	srv, err = embedded.Start(t.Context(), embedded.Config{Dir: dir, Port: p})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "/healthz 200 after the reconnection", func() bool {
		code, _ := get("/healthz")
		return code == 200
	})
	if !strings.Contains(errb.String(), "reconnected to NATS") {
		t.Errorf("no reconnection in the log")
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d\n%s", code, &errb)
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not stop\n%s", &errb)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("/healthz still answers after serve returned")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("stderr:\n%s", &errb)
	}
}

func noEnv(string) (string, bool) { return "", false }

// TestServeUsage: serve refuses bad settings before it starts anything.
func TestServeUsage(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "noeta.yaml", serveConfig)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "no governance config"},
		{[]string{"serve", "--config", cfg, "--workers", "0"}, "--workers is 0"},
		{[]string{"serve", "--config", cfg, "--grace", "-1s"}, "--grace is -1s"},
		{[]string{"serve", "--config", cfg, "--log-format", "xml"}, "--log-format"},
		{[]string{"serve", "--config", cfg, "--log-level", "loud"}, "--log-level"},
		{[]string{"serve", "--config", cfg, "--queue", "a.b"}, "--queue"},
		{[]string{"serve", "--config", cfg, "--user", "engine"}, "--user needs --nats"},
		{[]string{"serve", "--config", cfg, "--replicas", "3"}, "--replicas 3 needs a cluster"},
		{[]string{"serve", "--config", cfg, "--nats", "nats://127.0.0.1:1", "--creds", cfg, "--user", "u"}, "give one"},
		{[]string{"serve", "--config", cfg, "--nats", "nats://127.0.0.1:1", "--tls-cert", cfg}, "--tls-cert and --tls-key"},
		{[]string{"serve", "--config", cfg, "--nats", "nats://127.0.0.1:1", "--lease-ttl", "1500ms"}, "--lease-ttl is 1.5s"},
		{[]string{"serve", "--config", cfg, "--nats", "nats://127.0.0.1:1", "--creds", "/nonexistent/x.creds"}, "--creds"},
		{[]string{"serve", "extra"}, `unknown command "extra"`},
	} {
		data := t.TempDir()
		code, _, errOut := runCmd(t, append(tc.args, "--data", data)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
		if entries, _ := os.ReadDir(data); len(entries) != 0 {
			t.Errorf("%v: the data directory was used", tc.args)
		}
	}
	// An unreachable NATS is not a usage error: serve retries until it can
	// start (TestServeRetriesStartUp).
}

// TestServeEmbedded: serve without --nats runs the tasks of its data
// directory (submitted before it started) and stops on cancel.
func TestServeEmbedded(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	code, id, errOut := runCmd(t, "submit", example("08-fan-out.yaml"), "--config", exampleConfig, "--data", data)
	id = strings.TrimSpace(id)
	if code != 0 || noeta.ValidateTaskID(id) != nil {
		t.Fatalf("submit: exit %d, %q\n%s", code, id, errOut)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, []string{"serve", "--config", exampleConfig, "--data", data, "--workspace", workspace(t),
			"--http", "", "--log-level", "debug"}, &syncBuffer{}, &errb, noEnv)
	}()
	waitFor(t, time.Minute, "the fan-out to end (3 subtasks handed over by the in-process ChildLifecycle)", func() bool {
		return strings.Count(errb.String(), "outcome=terminal") >= 4
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d\n%s", code, &errb)
	}
	code, out, _ := runCmd(t, "inspect", id, "--data", data)
	if code != 0 || !strings.Contains(out, "status    terminal") || !strings.Contains(out, `answer    "1, 2 and 3"`) {
		t.Errorf("inspect: exit %d\n%s\nserve:\n%s", code, out, &errb)
	}
}

// TestServeRetriesStartUp reproduces a serve started while its NATS is down
// (a node restarting, a cluster electing leaders): it used to exit 1 at once
// ("open the dispatcher: … context deadline exceeded" during a failover, or
// no server to connect to), leaving the host without workers. It now
// retries with backoff, serves once NATS is there, and a SIGTERM during the
// retries stops it at once with exit 0.
func TestServeRetriesStartUp(t *testing.T) {
	t.Parallel()
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	cfg, ws := writeFile(t, "noeta.yaml", serveConfig), workspace(t)
	args := func(port int) []string {
		return []string{"serve", "--nats", "nats://127.0.0.1:" + strconv.Itoa(port), "--prefix", "svretry",
			"--config", cfg, "--workspace", ws, "--log-format", "json", "--http", "", "--lease-ttl", "2s"}
	}

	// Nothing ever listens on the second port: SIGTERM ends the retries.
	stopped := startEngine(t, args(ports[1])...)
	stopped.waitLog(t, "start-up failed; retrying", time.Minute)
	_ = stopped.cmd.Process.Signal(syscall.SIGTERM)
	if code := stopped.wait(t, 20*time.Second); code != 0 {
		t.Errorf("serve exited %d after SIGTERM during its start-up retries, want 0\n%s", code, stopped.stderr)
	}
	if !strings.Contains(stopped.stderr.String(), `"msg":"stopped while starting"`) {
		t.Errorf("serve did not say it stopped while starting:\n%s", stopped.stderr)
	}

	// The first port gets a server after serve has failed a few times.
	p := startEngine(t, args(ports[0])...)
	p.waitLog(t, "start-up failed; retrying", time.Minute)
	waitFor(t, time.Minute, "a few failed attempts", func() bool {
		return strings.Count(p.stderr.String(), "start-up failed; retrying") >= 3
	})
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), Port: ports[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	p.waitLog(t, "serving", time.Minute)
	d := newDeployment(t, srv.ClientURL(), "svretry", 1, 2*time.Second)
	ids := d.submit(t, 3, `[{"tool_calls":[{"tool":"echo","args":{"text":"x"}}]},{"finish":{"answer":"ok"}}]`)
	waitFor(t, time.Minute, "the tasks done by the serve that retried", func() bool {
		return countStatus(d.rows(t, ids), eventlog.DispatchTerminal) == len(ids)
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("serve exited %d after SIGTERM", code)
	}
}
