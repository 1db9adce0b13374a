package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/hostconfig"
)

const policyData = "testdata/policy"

// recordPolicyTasks runs the golden tasks under testdata/policy/recorded.yaml
// (an MCP server's tool among them: node and server-everything, as the MCP
// tests) into a fresh data directory, approving what is asked.
func recordPolicyTasks(t *testing.T) string {
	t.Helper()
	node, entry := everythingEntry(t)
	tmpl, err := os.ReadFile(filepath.Join(policyData, "recorded.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "recorded.yaml", strings.NewReplacer("@NODE@", node, "@ENTRY@", entry,
		"@SANDBOX@", everythingSandbox(node, entry)).Replace(string(tmpl)))
	data, ws := t.TempDir(), workspace(t)
	tasks, _ := filepath.Glob(filepath.Join(policyData, "tasks", "*.yaml"))
	for _, task := range tasks {
		if code, out, errb := runCmd(t, "run", task, "--config", cfg, "--data", data, "--workspace", ws, "--approvals", "approve"); code != 0 {
			t.Fatalf("run %s: exit %d\n%s\n%s", task, code, out, errb)
		}
	}
	return data
}

// TestPolicyGolden replays the recorded tasks under a set of config changes
// and compares each report with its golden file (go test -run
// TestPolicyGolden -update rewrites them); it reports the shadow rules and
// runs a policy test the same way. None of it writes to the log.
func TestPolicyGolden(t *testing.T) {
	t.Parallel()
	data := recordPolicyTasks(t)
	before := streamState(t, data)
	cfg := func(name string) string { return filepath.Join(policyData, name) }
	cases := []struct {
		golden string
		args   []string
		code   int
	}{
		{"replay-same.txt", []string{"policy", "replay", "--config", cfg("same.yaml")}, 0},
		{"replay-new-deny.txt", []string{"policy", "replay", "--config", cfg("new-deny.yaml")}, 1},
		{"replay-new-deny.json", []string{"policy", "replay", "--config", cfg("new-deny.yaml"), "--json"}, 1},
		{"replay-allow-to-ask.txt", []string{"policy", "replay", "--config", cfg("allow-to-ask.yaml")}, 1},
		{"replay-deny-to-allow.txt", []string{"policy", "replay", "--config", cfg("deny-to-allow.yaml")}, 1},
		{"replay-no-spawns.txt", []string{"policy", "replay", "--config", cfg("no-spawns.yaml")}, 1},
		{"replay-not-replayable.txt", []string{"policy", "replay", "--config", cfg("not-replayable.yaml")}, 0},
		{"replay-agent-helper.txt", []string{"policy", "replay", "--config", cfg("allow-to-ask.yaml"), "--agent", "helper", "--since", "1h"}, 1},
		{"shadow-report.txt", []string{"policy", "shadow-report"}, 0},
		{"shadow-report.json", []string{"policy", "shadow-report", "--json"}, 0},
		{"test.txt", []string{"policy", "test", cfg("same.yaml"), cfg("cases.yaml")}, 1},
		{"test.json", []string{"policy", "test", cfg("same.yaml"), cfg("cases.yaml"), "--json"}, 1},
	}
	ids := taskNames{}
	for _, c := range cases {
		code, out, errb := runCmd(t, append(c.args, "--data", data)...)
		if c.args[1] == "test" {
			code, out, errb = runCmd(t, c.args...)
		}
		if code != c.code || errb != "" {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, c.code, errb)
		}
		got := ids.normalise(out)
		path := filepath.Join(policyData, "golden", c.golden)
		if *updateGolden {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run TestPolicyGolden -update writes it)", err)
		}
		if got != string(want) {
			t.Errorf("%v: the report differs from %s:\n%s", c.args, path, got)
		}
	}
	// A task that is not there is said as the read verbs say it.
	for _, verb := range [][]string{{"replay", "--config", cfg("same.yaml")}, {"shadow-report"}} {
		args := append(append([]string{"policy"}, verb...), "--task", "NOPE", "--data", data)
		if code, out, errb := runCmd(t, args...); code != 1 || out != "" || errb != "engine: no task NOPE in this deployment\n" {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errb)
		}
	}
	if after := streamState(t, data); !slices.Equal(before, after) {
		t.Errorf("the streams before the policy verbs:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
}

// taskNames names the task ids of the reports T1, T2, … in the order they
// first appear, so that the golden files hold no ids of a run.
type taskNames map[string]string

var (
	taskIDRe = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	timeRe   = regexp.MustCompile(`"(time|since)": ?"[^"]+"`)
)

func (n taskNames) normalise(s string) string {
	s = taskIDRe.ReplaceAllStringFunc(s, func(id string) string {
		if _, ok := n[id]; !ok {
			n[id] = fmt.Sprintf("T%d", len(n)+1)
		}
		return n[id]
	})
	return timeRe.ReplaceAllString(s, `"$1":"<time>"`)
}

// streamState is every stream's message count and last sequence, and each
// task's last record, read through a read-only host on data.
func streamState(t *testing.T, data string) []string {
	t.Helper()
	h, err := hostconfig.Open(t.Context(), hostconfig.Options{DataDir: data, ReadOnly: true, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	js, err := jetstream.New(h.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := js.StreamNames(t.Context())
	for name := range names.Name() {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		out = append(out, fmt.Sprintf("stream %s: %d messages, last %d", name, st.Msgs, st.LastSeq))
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	tasks, err := h.Tasks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tasks {
		out = append(out, fmt.Sprintf("task %s: last %d", ti.Task, ti.LastSeq))
	}
	slices.Sort(out)
	return out
}

// TestPolicyUsage: what the policy verbs say of bad usage (exit 2, naming
// the file, line and field of a config mistake) and of a data directory
// that is not there (exit 1, and none is made).
func TestPolicyUsage(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "none")
	bad := writeFile(t, "bad.yaml", "agents:\n  a:\n    tools: [echo]\nrules:\n  - {match_tool: echo, action: maybe}\n")
	same := filepath.Join(policyData, "same.yaml")
	cases := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"policy", "replay", "--config", same, "--data", missing}, 1, "no data directory " + missing},
		{[]string{"policy", "shadow-report", "--data", missing}, 1, "no data directory"},
		{[]string{"policy", "replay", "--config", bad, "--data", missing}, 2, "bad.yaml:5: rules[0].action"},
		{[]string{"policy", "replay", "--config", same, "--since", "yesterday", "--data", missing}, 2, `--since "yesterday"`},
		{[]string{"policy", "shadow-report", "--task", "a.b", "--data", missing}, 2, "--task:"},
		{[]string{"policy", "test", bad, filepath.Join(policyData, "cases.yaml")}, 2, "bad.yaml:5: rules[0].action"},
		{[]string{"policy", "test", same, same}, 2, "same.yaml: yaml: unmarshal errors"},
		{[]string{"policy", "test", same}, 2, "accepts 2 arg(s)"},
		{[]string{"policy"}, 2, "name a verb: policy replay"},
	}
	for _, c := range cases {
		code, _, errb := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(errb, c.err) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", c.args, code, c.code, c.err, errb)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the data directory %s was made: %v", missing, err)
	}
}
