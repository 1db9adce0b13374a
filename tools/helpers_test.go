package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// builtin returns the built-in tool called name, configured by cfg.
func builtin(t *testing.T, cfg BuiltinConfig, name string) Tool {
	t.Helper()
	all, err := Builtins(cfg)
	if err != nil {
		t.Fatalf("Builtins: %v", err)
	}
	reg, err := NewRegistry(all...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	tool, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("no built-in %q", name)
	}
	return tool
}

// run calls tool with args in ws.
func run(t *testing.T, ctx context.Context, tool Tool, ws, args string) (Result, error) {
	t.Helper()
	return tool.Run(ctx, Call{ID: "c1", Args: json.RawMessage(args), Workspace: ws})
}

// mustOK runs the call and wants an OK result; it decodes the output into out.
func mustOK(t *testing.T, tool Tool, ws, args string, out any) Result {
	t.Helper()
	res, err := run(t, t.Context(), tool, ws, args)
	if err != nil {
		t.Fatalf("%s %s: error %v", tool.Name(), args, err)
	}
	if !res.OK {
		t.Fatalf("%s %s: failed: %s", tool.Name(), args, res.Error)
	}
	if out != nil {
		if err := json.Unmarshal(res.Output, out); err != nil {
			t.Fatalf("%s %s: output %s: %v", tool.Name(), args, res.Output, err)
		}
	}
	return res
}

// mustFail runs the call and wants a failed result whose Error contains want.
func mustFail(t *testing.T, tool Tool, ws, args, want string) Result {
	t.Helper()
	res, err := run(t, t.Context(), tool, ws, args)
	if err != nil {
		t.Fatalf("%s %s: error %v, want a failed result", tool.Name(), args, err)
	}
	if res.OK {
		t.Fatalf("%s %s: OK with output %s, want failure %q", tool.Name(), args, res.Output, want)
	}
	if !strings.Contains(res.Error, want) {
		t.Fatalf("%s %s: error %q, want it to contain %q", tool.Name(), args, res.Error, want)
	}
	if !json.Valid(res.Output) {
		t.Fatalf("%s %s: failed result has invalid output %q", tool.Name(), args, res.Output)
	}
	return res
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// groupMembers lists the live (not zombie) processes of process group pgid,
// from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parens.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// wantGroupGone waits a little for process group pgid to have no live member.
func wantGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 1 {
		t.Fatalf("bad pgid %d", pgid)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := groupMembers(t, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v", pgid, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
