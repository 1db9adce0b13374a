// Package conformance runs the MCP project's conformance suite
// (@modelcontextprotocol/conformance) and its inspector's CLI for the
// tests of the gateway and of package mcp's client, and reads the suite's
// results. Both are npm packages that tools/mcp/testdata/install-conformance.sh
// installs, with the Node 22 they need, next to server-everything; a test
// that cannot find them fails, naming the script.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Install is the command that installs what this package runs.
const Install = "tools/mcp/testdata/install-conformance.sh"

// Tools are the programs of an installation.
type Tools struct {
	// Node is Node.js 22, from npm.
	Node string
	// Suite is the conformance suite's entry point, Inspector the
	// inspector's.
	Suite, Inspector string
}

// Find returns the installed tools, or fails t saying how to install them.
func Find(t testing.TB) Tools {
	t.Helper()
	dir := os.Getenv("NOETA_NPM_PREFIX")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatalf("go env GOCACHE: %v", err)
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "noeta-npm")
	}
	m := filepath.Join(dir, "node_modules")
	tl := Tools{
		Node:      filepath.Join(m, "node", "bin", "node"),
		Suite:     filepath.Join(m, "@modelcontextprotocol", "conformance", "dist", "index.js"),
		Inspector: filepath.Join(m, "@modelcontextprotocol", "inspector", "cli", "build", "cli.js"),
	}
	for _, p := range []string{tl.Node, tl.Suite, tl.Inspector} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the MCP conformance suite, the inspector or Node 22 is not installed (%v): run %s", err, Install)
		}
	}
	return tl
}

// Command is a command running a script of the installation with its
// Node, first on PATH (the inspector starts Node processes of its own).
func (tl Tools) Command(ctx context.Context, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, tl.Node, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(tl.Node)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// Result is one scenario's outcome: its checks that passed, failed or
// warned, and the first failure's message.
type Result struct {
	Passed, Failed, Warnings int
	Why                      string
}

// OK is the suite's own verdict: no check failed.
func (r Result) OK() bool { return r.Failed == 0 }

// stamp is the timestamp the suite appends to a scenario's directory.
var stamp = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T[0-9-]+Z$`)

// Results reads the checks.json of every scenario under dir (the suite's
// -o): by scenario name, without the mode prefix the server runs add.
func Results(dir string) (map[string]Result, error) {
	out := map[string]Result{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(stamp.ReplaceAllString(filepath.ToSlash(rel), ""), "server-")
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var r Result
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				r.Passed++
			case "FAILURE":
				r.Failed++
				if r.Why == "" {
					r.Why = c.ID + ": " + c.ErrorMessage
				}
			case "WARNING":
				r.Warnings++
				if r.Why == "" {
					r.Why = c.ID + ": " + c.ErrorMessage
				}
			}
		}
		out[name] = r
		return nil
	})
	return out, err
}

// Compare checks results against want (scenario → "" when it must pass,
// else why it fails) and returns what differs: a scenario that failed but
// must pass, one that passed though it is said to fail (the table is out
// of date), one run but not in want, one in want but not run.
func Compare(results map[string]Result, want map[string]string) []string {
	var diffs []string
	for name, r := range results {
		why, ok := want[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s ran (%d passed, %d failed: %s) and is not in the table", name, r.Passed, r.Failed, r.Why))
		case why == "" && !r.OK():
			diffs = append(diffs, fmt.Sprintf("%s failed (%d passed, %d failed): %s", name, r.Passed, r.Failed, r.Why))
		case why != "" && r.OK():
			diffs = append(diffs, fmt.Sprintf("%s passed (%d checks); the table says it fails (%s): update it and the docs", name, r.Passed, why))
		}
	}
	for name := range want {
		if _, ok := results[name]; !ok {
			diffs = append(diffs, name+" is in the table and did not run")
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Table is the results as the docs show them, a Markdown table in the
// order of names.
func Table(names []string, results map[string]Result, want map[string]string) string {
	var b bytes.Buffer
	b.WriteString("| scenario | result | checks | why |\n|---|---|---|---|\n")
	for _, n := range names {
		r := results[n]
		verdict := "pass"
		if !r.OK() {
			verdict = "fail"
		}
		why := want[n]
		if why == "" && r.Warnings > 0 {
			why = "warned: " + r.Why
		}
		fmt.Fprintf(&b, "| %s | %s | %d passed, %d failed, %d warnings | %s |\n", n, verdict, r.Passed, r.Failed, r.Warnings, why)
	}
	return b.String()
}
