package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// newSandbox returns a Sandbox; a kernel that cannot give one fails the
// test: these machines (and CI's) have every part, and a sandbox that is
// silently missing is the defect these tests are here to catch.
func newSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

type ran struct {
	stdout, stderr string
	err            error
	rep            sandbox.Report
}

// starter runs command with /bin/sh -c in the sandbox, in ws, under p.
type starter func(t *testing.T, sb *sandbox.Sandbox, p sandbox.Policy, ws, command string) ran

// bothStarts runs test with each way a process is started: Command (a
// helper started for the call, as MCP servers are) and Start (a helper
// started ahead, as the shell's calls are; the second call on takes one).
func bothStarts(t *testing.T, test func(t *testing.T, run starter)) {
	t.Run("command", func(t *testing.T) { test(t, runCommand) })
	t.Run("started", func(t *testing.T) { test(t, runStarted) })
}

// runCommand runs command through Command.
func runCommand(t *testing.T, sb *sandbox.Sandbox, p sandbox.Policy, ws, command string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sb.Command(ctx, p, sandbox.Spec{Argv: []string{"/bin/sh", "-c", command},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws, "LANG=C"}, Dir: ws})
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err = c.Run()
	return ran{stdout: clip(out.String()), stderr: clip(errb.String()), err: err, rep: c.Finish()}
}

// runStarted runs command through Start, on a helper started ahead when
// sb has one ready.
func runStarted(t *testing.T, sb *sandbox.Sandbox, p sandbox.Policy, ws, command string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	defer errR.Close()
	pr, err := sb.Start(ctx, p, sandbox.Spec{Argv: []string{"/bin/sh", "-c", command},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws, "LANG=C"}, Dir: ws}, sandbox.Stdio{Stdout: outW, Stderr: errW})
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(&out, outR) })
	wg.Go(func() { _, _ = io.Copy(&errb, errR) })
	ps, err := pr.Wait()
	wg.Wait()
	if err == nil && !ps.Success() {
		err = errors.New(ps.String())
	}
	return ran{stdout: clip(out.String()), stderr: clip(errb.String()), err: err, rep: pr.Finish()}
}

// clip keeps a failure message readable when a command printed a lot.
func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// probeCopy copies the test binary where the sandbox may read it (and, for
// the unprivileged run, where another user may execute it).
func probeCopy(t *testing.T) (dir, bin string) {
	t.Helper()
	dir = t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // TempDir's are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(dir, "probe")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// TestEscapes tries, from inside the sandbox, every way out the issue
// lists: the engine's secrets and process, its data directory and the
// operator's files, writes outside the workspace, the network, other
// processes, and the kernel's own interfaces. Each must be refused.
func TestEscapes(t *testing.T) { bothStarts(t, testEscapes) }

func testEscapes(t *testing.T, run starter) {
	sb := newSandbox(t)
	const secret = "sk-noeta-test-0123456789abcdef"
	t.Setenv("NOETA_TEST_API_KEY", secret) // the engine's environment

	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	data := filepath.Join(root, "data")
	home := filepath.Join(root, "home")
	conf := filepath.Join(root, "conf")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{ws, data, filepath.Join(home, ".ssh"), conf, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(data, "credentials.json"):   `{"password":"` + secret + `"}`,
		filepath.Join(data, "engine.lock"):        "1234",
		filepath.Join(home, ".ssh", "id_ed25519"): secret,
		filepath.Join(conf, "noeta.yaml"):         "# " + secret,
		filepath.Join(outside, "victim"):          "untouched",
	}
	for f, body := range files {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The embedded server's data directory under the default workspace,
	// the working directory.
	inner := filepath.Join(ws, ".noeta")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "credentials.json"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	probeDir, probe := probeCopy(t)
	policy := sandbox.Policy{Read: []string{probeDir}, Hide: []string{inner}}

	// The embedded NATS of the engine, and any other port of the host's
	// loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	engine := fmt.Sprint(os.Getpid())
	// A Unix socket of a host service (docker.sock, systemd's, D-Bus'),
	// which neither the network namespace nor Landlock ABI 7 governs.
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "host.sock")
	unixLn, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()
	go func() {
		for {
			c, err := unixLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	victim := filepath.Join(outside, "victim")

	cases := []struct {
		name    string
		command string
		// fail: the command must fail; the rest hold whatever it did.
		fail    bool
		notOut  string // must not be in stdout
		noFile  string // must not exist afterwards
		want    string // must be in stdout
		victims bool   // files outside are unchanged
	}{
		{name: "environ of every process", command: `cat /proc/*/environ /proc/$PPID/environ /proc/1/environ; true`, notOut: secret},
		{name: "the engine's process is invisible", command: `cat /proc/*/cmdline | tr '\0' ' '; ls /proc`, notOut: "-test."},
		{name: "the engine's pid", command: `cat /proc/` + engine + `/environ`, fail: true, notOut: secret},
		{name: "credentials.json", command: `cat ` + filepath.Join(data, "credentials.json"), fail: true, notOut: secret},
		{name: "engine.lock", command: `cat ` + filepath.Join(data, "engine.lock"), fail: true},
		{name: "the data directory", command: `ls ` + data, fail: true},
		{name: "HOME/.ssh", command: `cat ` + filepath.Join(home, ".ssh", "id_ed25519"), fail: true, notOut: secret},
		{name: "the real HOME", command: `ls -a /root`, fail: true},
		{name: "the config beside", command: `cat ` + filepath.Join(conf, "noeta.yaml"), fail: true, notOut: secret},
		{name: "shadow", command: `cat /etc/shadow`, fail: true},
		{name: "the data directory inside the workspace", command: `cat .noeta/credentials.json`, fail: true, notOut: secret},
		{name: "the data directory inside the workspace, written", command: `echo x > .noeta/x`, fail: true, noFile: filepath.Join(inner, "x")},
		{name: "the data directory inside the workspace, unmounted", command: `umount .noeta; cat .noeta/credentials.json`, fail: true, notOut: secret},
		{name: "write /tmp", command: `echo x > /tmp/noeta-escape-` + engine, fail: true, noFile: "/tmp/noeta-escape-" + engine},
		{name: "write /etc", command: `echo x > /etc/noeta-escape-` + engine, fail: true, noFile: "/etc/noeta-escape-" + engine},
		{name: "write the parent", command: `echo x > ../escape`, fail: true, noFile: filepath.Join(root, "escape")},
		{name: "write through ..", command: `echo x > ` + ws + `/../outside/escape`, fail: true, noFile: filepath.Join(outside, "escape")},
		{name: "write through a symlink", command: `ln -s ` + outside + ` link && echo x > link/escape`, fail: true, noFile: filepath.Join(outside, "escape")},
		{name: "hard link out", command: `ln ` + filepath.Join(outside, "victim") + ` hl && echo x >> hl`, fail: true, victims: true},
		{name: "hard link to a secret", command: `ln ` + filepath.Join(data, "credentials.json") + ` hl2 && cat hl2`, fail: true, notOut: secret},
		{name: "rename out", command: `echo x > mine && mv mine ` + outside + `/mine`, fail: true, noFile: filepath.Join(outside, "mine")},
		{name: "the embedded NATS port", command: probe + ` probe connect ` + ln.Addr().String(), fail: true},
		{name: "an outside address", command: probe + ` probe connect 192.0.2.1:80`, fail: true},
		{name: "ptrace the first process", command: probe + ` probe ptrace 1`, fail: true},
		{name: "read another process's memory", command: probe + ` probe vmread 1`, fail: true},
		{name: "signal the first process", command: probe + ` probe kill 1; sleep 0.3; echo alive`, want: "alive"},
		// Every signal but SIGKILL and SIGSTOP, the ones the Go runtime
		// would crash or stop on among them.
		{name: "every signal to the first process", command: `for s in $(seq 1 31) $(seq 34 64); do [ $s = 9 ] || [ $s = 19 ] || kill -$s 1; done; sleep 0.3; echo alive`, want: "alive"},
		{name: "signal the engine", command: probe + ` probe kill ` + engine, fail: true},
		{name: "a new user namespace", command: probe + ` probe unshare x`, fail: true},
		{name: "mount", command: probe + ` probe mount ` + ws, fail: true},
		{name: "a host Unix socket", command: probe + ` probe unix ` + sock, fail: true},
		{name: "chmod outside", command: `chmod 4777 ` + victim + ` || touch -d 2001-01-01 ` + victim, fail: true, victims: true},
		{name: "the status pipe", command: probe + ` probe status '{"error":"forged"}'`, fail: true},
		{name: "an anonymous memory file", command: probe + ` probe memfd x`, fail: true},
		{name: "a host sysctl", command: `echo 10 > /proc/sys/kernel/printk_ratelimit`, fail: true},
		{name: "a set-uid bit in the workspace", command: `cp /bin/sh mysh && chmod u+s mysh && ./mysh -c 'grep CapEff /proc/self/status'`, want: "CapEff:\t0000000000000000"},
		{name: "no capability", command: `grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status`, want: "CapEff:\t0000000000000000"},
		{name: "the workspace is writable", command: `echo ok > f && cat f && mkdir -p d/e && mv f d/e/g && cat d/e/g`, want: "ok\nok"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, sb, policy, ws, c.command)
			if r.rep.SetupError != "" {
				t.Fatalf("set-up failed: %s", r.rep.SetupError)
			}
			if c.fail && r.err == nil {
				t.Errorf("%q succeeded; stdout %q", c.command, r.stdout)
			}
			if !c.fail && c.want != "" && !strings.Contains(r.stdout, c.want) {
				t.Errorf("%q: stdout %q, want %q (stderr %q, %v)", c.command, r.stdout, c.want, r.stderr, r.err)
			}
			if c.notOut != "" && strings.Contains(r.stdout+r.stderr, c.notOut) {
				t.Errorf("%q printed %q:\n%s", c.command, c.notOut, r.stdout)
			}
			if c.noFile != "" {
				if _, err := os.Lstat(c.noFile); err == nil {
					t.Errorf("%q created %s", c.command, c.noFile)
					_ = os.Remove(c.noFile)
				}
			}
			if c.victims {
				if b, _ := os.ReadFile(victim); string(b) != "untouched" {
					t.Errorf("%q changed a file outside: %q", c.command, b)
				}
				if fi, err := os.Stat(victim); err != nil || fi.Mode() != 0o644 || fi.ModTime().Year() < 2020 {
					t.Errorf("%q changed the mode or time of a file outside: %v %v", c.command, fi.Mode(), fi.ModTime())
				}
			}
		})
	}
}

// TestLimits: a fork bomb, a memory bomb, a disk fill, a CPU spin, a
// command that outlives its wall time and one that double-forks to outlive
// the call, each ended by its limit or at the end of the call, and named.
func TestLimits(t *testing.T) { bothStarts(t, testLimits) }

func testLimits(t *testing.T, run starter) {
	sb := newSandbox(t)
	ws := t.TempDir()
	cases := []struct {
		name    string
		limits  sandbox.Limits
		command string
		limit   string
	}{
		// The shell starts its sleep before the bomb and then only waits,
		// a builtin: a fork of its failing as the bomb fills the
		// namespace (or the host runs short) would end it before a look.
		// Past the wait it says so: the tree must be ended while it runs,
		// not named only once the shell is done.
		{"fork bomb", sandbox.Limits{Processes: 32, Wall: 30 * time.Second}, `sleep 20 & b(){ b | b & }; b; wait; echo the bomb outlived the call`, "processes"},
		// The shell ends at once, its tree past the limit: named all the same.
		{"processes left at exit", sandbox.Limits{Processes: 32, Wall: 30 * time.Second}, `for i in $(seq 40); do sleep 20 & done; exit 3`, "processes"},
		{"memory bomb", sandbox.Limits{Memory: 64 << 20, Wall: 30 * time.Second}, `head -c 2000000000 /dev/zero | tail`, "memory"},
		{"disk fill", sandbox.Limits{FileSize: 4 << 20, Wall: 30 * time.Second}, `dd if=/dev/zero of=big bs=1M count=64`, "file_size"},
		{"cpu spin", sandbox.Limits{CPU: time.Second, Wall: 30 * time.Second}, `while :; do :; done`, "cpu"},
		{"wall", sandbox.Limits{Wall: 500 * time.Millisecond}, `sleep 20`, "wall"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, sb, sandbox.Policy{Limits: c.limits}, ws, c.command)
			if r.err == nil {
				t.Errorf("%q succeeded", c.command)
			}
			if r.rep.Limit != c.limit {
				t.Errorf("%q: limit %q, want %q (%v; stderr %q)", c.command, r.rep.Limit, c.limit, r.err, r.stderr)
			}
			if strings.Contains(r.stdout, "outlived the call") {
				t.Errorf("%q ran to its end: its tree was not ended at its limit", c.command)
			}
		})
	}
	_ = os.Remove(filepath.Join(ws, "big"))

	// Nothing outlives the call: a double fork into a new session is gone
	// once the call has returned.
	marker := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano()%100000)
	r := run(t, sb, sandbox.Policy{}, ws, `(setsid sleep `+marker+` &) ; (sleep `+marker+` &) ; echo started`)
	if r.err != nil || !strings.Contains(r.stdout, "started") {
		t.Fatalf("the double fork did not start: %v %q %q", r.err, r.stdout, r.stderr)
	}
	if pids := processesWith("sleep\x00" + marker); len(pids) > 0 {
		t.Errorf("processes outlived the call: %v", pids)
	}
}

// processesWith lists the host's processes whose command line holds s.
func processesWith(s string) []string {
	var found []string
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, m)
		}
	}
	return found
}

// TestEscapesUnprivileged runs TestEscapes and TestLimits again in a
// process of an unprivileged user (nobody, when the tests run as root; the
// user itself otherwise): the sandbox must hold for an engine run either
// way.
func TestEscapesUnprivileged(t *testing.T) {
	_, bin := probeCopy(t)
	run := []string{"TestEscapes", "TestLimits", "TestUnreportedEnd", "TestManyProcessesInOneCall"}
	cmd := exec.Command(bin, "-test.run", "^("+strings.Join(run, "|")+")$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=/tmp"}
	cmd.Dir = "/"
	if os.Geteuid() == 0 {
		// Run as root: drop to nobody for the second run. Run as anyone
		// else, the second run is that unprivileged user again, in a
		// process of its own.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged: %v\n%s", err, out)
	}
	for _, name := range run {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Fatalf("unprivileged: %s did not pass\n%s", name, out)
		}
	}
}

// TestEgress: under an allow list the sandbox's one way out is the egress
// proxy; an allowed host:port works through it, any other is refused, a
// direct connection goes nowhere, and the report accounts for each.
func TestEgress(t *testing.T) { bothStarts(t, testEgress) }

func testEgress(t *testing.T, run starter) {
	sb := newSandbox(t)
	ws := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from outside")
	}))
	defer srv.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	allowed := strings.TrimPrefix(srv.URL, "http://")
	p := sandbox.Policy{Allow: []string{allowed}}
	curl := `curl -sS --max-time 10 --noproxy '' -x "$HTTP_PROXY" `

	r := run(t, sb, p, ws, curl+srv.URL+`/`)
	if r.err != nil || r.stdout != "hello from outside" {
		t.Fatalf("the allowed host through the proxy: %v %q %q", r.err, r.stdout, r.stderr)
	}
	host, port, _ := net.SplitHostPort(allowed)
	if len(r.rep.Egress) != 1 || r.rep.Egress[0].Host != host || fmt.Sprint(r.rep.Egress[0].Port) != port ||
		!r.rep.Egress[0].Allowed || r.rep.Egress[0].Connections != 1 || r.rep.Egress[0].BytesIn == 0 || r.rep.Egress[0].BytesOut == 0 {
		t.Errorf("egress of the allowed call: %+v", r.rep.Egress)
	}

	r = run(t, sb, p, ws, curl+`-f http://`+other.Addr().String()+`/`)
	if r.err == nil {
		t.Errorf("a host:port not allowed was reached: %q", r.stdout)
	}
	if len(r.rep.Egress) != 1 || r.rep.Egress[0].Allowed || r.rep.Egress[0].Reason == "" {
		t.Errorf("egress of the refused call: %+v", r.rep.Egress)
	}

	r = run(t, sb, p, ws, `curl -sS --max-time 5 --noproxy '*' `+srv.URL+`/`)
	if r.err == nil {
		t.Errorf("a direct connection to the allowed host went out: %q", r.stdout)
	}
	if len(r.rep.Egress) != 0 {
		t.Errorf("a direct connection shows in the proxy's account: %+v", r.rep.Egress)
	}

	// Without an allow list there is no proxy at all.
	r = run(t, sb, sandbox.Policy{}, ws, `echo "[$HTTP_PROXY]"; `+curl+srv.URL+`/`)
	if r.err == nil || !strings.HasPrefix(r.stdout, "[]") {
		t.Errorf("network none reached out: %v %q", r.err, r.stdout)
	}
}

// TestHiddenStaysHidden: a hidden path cannot be moved from under its
// cover by one call to be read by the next (before, renaming its parent
// directory did), and a call whose hidden path is gone is refused.
func TestHiddenStaysHidden(t *testing.T) { bothStarts(t, testHiddenStaysHidden) }

func testHiddenStaysHidden(t *testing.T, run starter) {
	sb := newSandbox(t)
	ws := t.TempDir()
	const secret = "NATS-CREDS-SECRET"
	for _, d := range []string{"secrets", "state/noeta", ".noeta"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"secrets/nats.creds", "state/noeta/credentials.json", ".noeta/credentials.json"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(ws, f), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := sandbox.Policy{Hide: []string{filepath.Join(ws, "secrets", "nats.creds"), filepath.Join(ws, "state", "noeta"), filepath.Join(ws, ".noeta")}}
	r := run(t, sb, p, ws, `cat `+strings.Join(files, " ")+`; mv secrets s2; mv state st2; mv .noeta n2; cat s2/nats.creds st2/noeta/credentials.json n2/credentials.json`)
	if strings.Contains(r.stdout, secret) {
		t.Fatalf("a hidden secret was read: %q", r.stdout)
	}
	r = run(t, sb, p, ws, `cat s2/nats.creds st2/noeta/credentials.json n2/credentials.json `+strings.Join(files, " "))
	if strings.Contains(r.stdout, secret) {
		t.Fatalf("a hidden secret was read by the next call: %q", r.stdout)
	}
	for _, f := range files {
		if b, err := os.ReadFile(filepath.Join(ws, f)); err != nil || string(b) != secret {
			t.Errorf("%s moved or changed: %q %v", f, b, err)
		}
	}
	missing := sandbox.Policy{Hide: []string{filepath.Join(ws, "gone")}}
	if r := run(t, sb, missing, ws, `echo ran`); r.rep.SetupError == "" || strings.Contains(r.stdout, "ran") {
		t.Errorf("a call whose hidden path is gone ran: %+v", r)
	}
}

// TestSandboxRefusesWhatUndoesIt: a workspace or write path that is the
// root or a system directory, or a read of the whole root, is refused
// before anything starts.
func TestSandboxRefusesWhatUndoesIt(t *testing.T) {
	sb := newSandbox(t)
	ws := t.TempDir()
	usrLink := filepath.Join(ws, "usr")
	if err := os.Symlink("/usr", usrLink); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    sandbox.Policy
		dir  string
	}{
		{"workspace /", sandbox.Policy{}, "/"},
		{"workspace /usr/local", sandbox.Policy{}, "/usr/local"},
		{"workspace /etc", sandbox.Policy{}, "/etc"},
		{"write /proc/sys", sandbox.Policy{Write: []string{"/proc/sys"}}, ws},
		{"write /", sandbox.Policy{Write: []string{"/"}}, ws},
		{"read /", sandbox.Policy{Read: []string{"/"}}, ws},
		{"a workspace that links to /usr", sandbox.Policy{}, usrLink},
	}
	for _, c := range cases {
		if _, err := sb.Command(context.Background(), c.p, sandbox.Spec{Argv: []string{"/bin/true"}, Dir: c.dir}); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// TestHiddenUnderALinkedWorkspace: a workspace named through a link still
// has the data directory inside it hidden (its real path is what the
// engine hides).
func TestHiddenUnderALinkedWorkspace(t *testing.T) { bothStarts(t, testHiddenUnderALinkedWorkspace) }

func testHiddenUnderALinkedWorkspace(t *testing.T, run starter) {
	sb := newSandbox(t)
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.MkdirAll(filepath.Join(real, "ws", ".noeta"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "ws", ".noeta", "credentials.json"), []byte("LINKED-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	// A link in the middle of the workspace's name, not at its end.
	ws := filepath.Join(link, "ws")
	r := run(t, sb, sandbox.Policy{Hide: []string{filepath.Join(real, "ws", ".noeta")}}, ws, `cat .noeta/credentials.json `+ws+`/.noeta/credentials.json`)
	if strings.Contains(r.stdout, "LINKED-SECRET") {
		t.Fatalf("the data directory was read through the linked workspace: %q", r.stdout)
	}
}

// TestUnreportedEnd: a helper that ends without saying how its tree ended
// (killed here, as a crash would end it) is reported Unreported, and a
// command that ran to its end, or to a limit, is not.
func TestUnreportedEnd(t *testing.T) {
	sb := newSandbox(t)
	ws := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := sandbox.Spec{Argv: []string{"/bin/sh", "-c", "echo up; exec sleep 30"},
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, Dir: ws}
	waitUp := func(t *testing.T, r io.Reader) {
		t.Helper()
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil || line != "up\n" {
			t.Errorf("the command did not start: %q %v", line, err)
		}
	}

	t.Run("killed/command", func(t *testing.T) {
		c, err := sb.Command(ctx, sandbox.Policy{}, spec)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			c.Finish()
			t.Fatal(err)
		}
		waitUp(t, out)
		_ = c.Process.Kill()
		_ = c.Wait()
		if rep := c.Finish(); !rep.Unreported {
			t.Errorf("a killed helper: %+v, want Unreported", rep)
		}
	})
	t.Run("killed/started", func(t *testing.T) {
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer outR.Close()
		pr, err := sb.Start(ctx, sandbox.Policy{}, spec, sandbox.Stdio{Stdout: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		waitUp(t, outR)
		_ = pr.Kill()
		_, _ = pr.Wait()
		if rep := pr.Finish(); !rep.Unreported {
			t.Errorf("a killed helper: %+v, want Unreported", rep)
		}
	})
	t.Run("reported", func(t *testing.T) {
		bothStarts(t, func(t *testing.T, run starter) {
			for _, c := range []struct {
				command string
				limits  sandbox.Limits
			}{
				{"exit 3", sandbox.Limits{}},
				// Ended at a limit, the tree is killed and the end reported:
				// a kill from another thread than the tool's was refused.
				{"sleep 20", sandbox.Limits{Wall: 200 * time.Millisecond}},
				{`b(){ b | b & }; b; sleep 20`, sandbox.Limits{Processes: 32, Wall: 30 * time.Second}},
			} {
				if r := run(t, sb, sandbox.Policy{Limits: c.limits}, ws, c.command); r.rep.Unreported {
					t.Errorf("%q: %+v, want reported", c.command, r.rep)
				}
			}
		})
	})
}

// TestManyProcessesInOneCall: a call that starts more short-lived
// processes than the kernel's reserved pids (300), one after another,
// still has its process limit's worth to run at once: the namespace's
// pids wrap past the reserved ones.
func TestManyProcessesInOneCall(t *testing.T) { bothStarts(t, testManyProcessesInOneCall) }

func testManyProcessesInOneCall(t *testing.T, run starter) {
	sb := newSandbox(t)
	r := run(t, sb, sandbox.Policy{Limits: sandbox.Limits{Processes: 32, Wall: time.Minute}}, t.TempDir(),
		`i=0; while [ $i -lt 400 ]; do /bin/true; i=$((i+1)); done; for j in 1 2 3 4 5 6 7 8; do sleep 0.2 & done; wait; echo done`)
	if r.err != nil || r.rep.Limit != "" || !strings.Contains(r.stdout, "done") {
		t.Errorf("400 processes one after another, then 8 at once: %v, limit %q, stdout %q, stderr %q", r.err, r.rep.Limit, r.stdout, r.stderr)
	}
}
