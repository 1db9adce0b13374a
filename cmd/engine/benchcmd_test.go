package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/loadgen"
	"golang.org/x/sys/unix"
)

// TestBenchJSON runs engine bench small, every kind of call in the mix, and
// checks that its JSON holds figures that were measured: every task at rest
// and completed, records counted, probe appends and wakes timed.
func TestBenchJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "bench", "--tasks", "20", "--calls", "3",
		"--mix", "deny=0.2,approve=0.2,spawn=0.2,wait=0.2", "--json", "--data", t.TempDir())
	if code != exitDone {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	var r loadgen.Result
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not one bench JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", out)
	}
	if r.Tasks != 20 || r.Calls != 3 || r.Completed != 20 || r.Failed != 0 {
		t.Errorf("tasks %d calls %d completed %d failed %d; want 20, 3, 20, 0", r.Tasks, r.Calls, r.Completed, r.Failed)
	}
	// A task writes at least TaskCreated, LeaseGranted, a turn per call
	// and TaskCompleted.
	if r.Records < 20*6 {
		t.Errorf("records %d; want at least %d", r.Records, 20*6)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"tasks_per_sec > 0", r.TasksPerSec > 0},
		{"records_per_sec > 0", r.RecordsPerSec > 0},
		{"appends > 0", r.Appends > 0},
		{"0 < append_p50_us <= append_p99_us", r.AppendP50us > 0 && r.AppendP50us <= r.AppendP99us},
		{"wakes > 0", r.Wakes > 0},
		{"0 < wake_to_lease_p50_us <= p99", r.WakeLeaseP50us > 0 && r.WakeLeaseP50us <= r.WakeLeaseP99us},
		{"commit_to_observer_p99_us > 0", r.ObserverP99us > 0},
		{"cpu_seconds > 0", r.CPUSeconds > 0},
		{"rss_mib > 0", r.RSSMiB > 0 && r.MaxRSSMiB >= r.RSSMiB},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s does not hold: %+v", c.name, r)
		}
	}
}

// TestBenchScaleJSON runs the scale mode at two small levels with a restart
// and checks each level and the restart were measured.
func TestBenchScaleJSON(t *testing.T) {
	code, out, errOut := runCmd(t, "bench", "--idle", "5,10", "--probes", "5", "--restart", "--json", "--data", t.TempDir())
	if code != exitDone {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	var r loadgen.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not the bench JSON: %v\n%s", err, out)
	}
	if len(r.Levels) != 2 || r.Levels[0].Suspended != 5 || r.Levels[1].Suspended != 10 {
		t.Fatalf("levels %+v; want 5 and 10", r.Levels)
	}
	for _, l := range r.Levels {
		if l.AppendP50us <= 0 || l.WakeLeaseP50us <= 0 || l.RSSMiB <= 0 || l.RSSReturnedMiB <= 0 || l.DiskPerTask <= 0 {
			t.Errorf("level %d not measured: %+v", l.Suspended, l)
		}
	}
	if r.Restart == nil || r.Restart.OpenSeconds <= 0 || r.Restart.ResumeMs <= 0 {
		t.Errorf("restart not measured: %+v", r.Restart)
	}
}

// TestBenchScaleNATS runs the scale mode against a server of its own over
// --nats, naming that server's process and store: each level must carry the
// server's RSS and store size, and --restart (the engine alone) must be
// timed. The server runs in the test's process, so its pid is the test's.
func TestBenchScaleNATS(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	code, out, errOut := runCmd(t, "bench", "--nats", srv.ClientURL(), "--prefix", "scalenats",
		"--idle", "5,10", "--probes", "5", "--restart", "--json",
		"--server-pid", strconv.Itoa(os.Getpid()), "--server-dir", dir)
	if code != exitDone {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	var r loadgen.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not the bench JSON: %v\n%s", err, out)
	}
	if len(r.Levels) != 2 {
		t.Fatalf("levels %+v; want 5 and 10", r.Levels)
	}
	for _, l := range r.Levels {
		if l.ServerRSSMiB <= 0 || l.DiskBytes <= 0 || l.DiskPerTask <= 0 || l.AppendP50us <= 0 || l.WakeLeaseP50us <= 0 {
			t.Errorf("level %d: the server's figures are missing: %+v", l.Suspended, l)
		}
	}
	if r.Restart == nil || r.Restart.OpenSeconds <= 0 || r.Restart.ResumeMs <= 0 {
		t.Errorf("restart of the engine not measured: %+v", r.Restart)
	}
}

// TestBenchBadFlags: a bad mix or level list is bad usage, naming what is
// wrong, before anything starts.
func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mix", "deny=2"}, "from 0 to 1"},
		{[]string{"--mix", "deny=0.6,approve=0.6"}, "over 1"},
		{[]string{"--mix", "sleep=0.1"}, `unknown kind "sleep"`},
		{[]string{"--mix", "deny"}, "not kind=share"},
		{[]string{"--mix", "deny=NaN"}, "from 0 to 1"},
		{[]string{"--idle", "10,5"}, "rising"},
		{[]string{"--idle", "5", "--server-pid", "1"}, "the server of --nats"},
		{[]string{"--idle", "5", "--server-dir", "/tmp"}, "the server of --nats"},
		{[]string{"--tasks", "-1"}, "at least 0"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := runCmd(t, append([]string{"bench", "--data", t.TempDir()}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 naming %q", code, errOut, tc.want)
			}
		})
	}
}

// openPTY opens a pseudo-terminal: the side the command writes to, and
// the side a terminal would read.
func openPTY(t *testing.T) (tty, reader *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, m
}

// TestBenchBarOnATerminal: on a terminal bench draws its bar, \r and all;
// before, the check asked the escaping writer in front of stderr, which is
// no terminal, and the bar never showed.
func TestBenchBarOnATerminal(t *testing.T) {
	tty, term := openPTY(t)
	var got bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&got, term) // ends when the test's cleanup closes it
	}()
	var out syncBuffer
	code := run(t.Context(), []string{"bench", "--tasks", "10", "--calls", "2", "--data", t.TempDir()}, &out, tty)
	if code != exitDone {
		t.Fatalf("exit %d", code)
	}
	_ = tty.Close()
	_ = term.SetReadDeadline(time.Now().Add(5 * time.Second))
	<-read
	if !regexp.MustCompile(`\r\[=+ *\] 10/10 tasks`).Match(got.Bytes()) {
		t.Errorf("no bar on the terminal:\n%q", got.String())
	}
}
