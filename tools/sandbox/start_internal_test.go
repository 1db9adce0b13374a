package sandbox

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// spareReady waits for sb's helper started ahead (after a call ended).
func spareReady(t *testing.T, sb *Sandbox) *spare {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb.mu.Lock()
		sp := sb.spare
		sb.mu.Unlock()
		if sp != nil {
			<-sp.ready
			if sp.err != nil {
				t.Fatalf("the helper started ahead failed: %v", sp.err)
			}
			return sp
		}
		if time.Now().After(deadline) {
			t.Fatal("no helper was started ahead after a call ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// shell runs command through Start and returns its output.
func shell(t *testing.T, sb *Sandbox, ws, command string) (string, State) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pr, err := sb.Start(context.Background(), Policy{}, Spec{Argv: []string{"/bin/sh", "-c", command}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: ws}, Stdio{Stdout: w, Stderr: w})
	w.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out, _ := io.ReadAll(r)
	st, err := pr.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if rep := pr.Finish(); rep.SetupError != "" {
		t.Fatalf("set-up: %s", rep.SetupError)
	}
	return string(out), st
}

// A helper started ahead copied the engine's mount table when it was
// started. A mount made after that (a volume a workspace lives on) must be
// seen by the next call: that helper is not used. Before the check, the
// call ran on the old copy and read the directory under the mount.
func TestStartSeesMountsMadeSince(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: making a mount in the engine's namespace needs root; CI runs as root")
	}
	sb, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ws := t.TempDir()
	if out, st := shell(t, sb, ws, "echo first"); !st.Success() || out != "first\n" {
		t.Fatalf("first call: %v %q", st, out)
	}
	spareReady(t, sb)
	sub := filepath.Join(ws, "volume")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(sub, "marker"), []byte("on the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, st := shell(t, sb, ws, "cat volume/marker")
	if !st.Success() || out != "on the volume" {
		t.Errorf("the call did not see the mount made before it: %v %q", st, out)
	}
}

// A system file the helper bound, replaced by a rename (how /etc/passwd
// and /etc/hosts are rewritten), is a new file the old bind does not
// show: a helper started before is not fit. Written in place, it is the
// same file and the helper is.
func TestSpareUnfitWhenASystemFileIsReplaced(t *testing.T) {
	sb, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	if err := os.WriteFile(file, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb.systemPaths = []string{file, filepath.Join(dir, "missing")}
	ws := t.TempDir()
	shell(t, sb, ws, "true")
	// fit is asked once of a helper: each question below is of a new one.
	if err := os.WriteFile(file, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !spareReady(t, sb).fit() {
		t.Fatal("a file written in place made the helper unfit")
	}
	shell(t, sb, ws, "true")
	sp := spareReady(t, sb)
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte("three"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	if sp.fit() {
		t.Error("a file replaced by a rename left the helper fit")
	}
	// And a call still runs, on a new helper.
	if out, st := shell(t, sb, ws, "echo ok"); !st.Success() || strings.TrimSpace(out) != "ok" {
		t.Errorf("the call after: %v %q", st, out)
	}
}

// A scope the operator left unconfined starts its process outside the
// sandbox through Start too, and a confined scope's does not: the engine
// is visible to the first, not to the second.
func TestScopedStart(t *testing.T) {
	sb, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	s := &Scoped{Sandbox: sb, Unconfined: map[string]bool{"loose": true}}
	ws := t.TempDir()
	see := "test -d /proc/" + strconv.Itoa(os.Getpid()) + " && echo sees-the-engine || echo blind"
	for scope, want := range map[string]string{"loose": "sees-the-engine", "tight": "blind"} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pr, err := s.Start(context.Background(), scope, Spec{Argv: []string{"sh", "-c", see}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: ws}, Stdio{Stdout: w})
		w.Close()
		if err != nil {
			t.Fatalf("%s: %v", scope, err)
		}
		out, _ := io.ReadAll(r)
		r.Close()
		st, err := pr.Wait()
		pr.Finish()
		if err != nil || !st.Success() || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s: %v %v %q, want %q", scope, st, err, out, want)
		}
	}
}
