package refgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// TestPagesAreFresh regenerates the reference pages in memory and fails,
// naming each stale file and the command that rewrites it, when the
// committed page differs: a key added to a decoder, or a doc comment
// changed, without the page regenerated.
func TestPagesAreFresh(t *testing.T) {
	pages, err := Pages(root)
	if err != nil {
		t.Fatalf("generating the reference pages: %v", err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Errorf("%s: %v; run %s", name, err, Command)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: it differs from what the code generates (%s); run %s and commit the result",
				name, firstDiff(got, want), Command)
		}
	}
}

// firstDiff says where two pages first differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			// From a little before the first character that differs.
			j := 0
			for j < len(gl) && j < len(wl) && gl[j] == wl[j] {
				j++
			}
			j = max(0, j-30)
			return "line " + strconv.Itoa(i+1) + ", from column " + strconv.Itoa(j+1) + ": committed " + quote(gl[j:]) + ", generated " + quote(wl[j:])
		}
	}
	return "in its length"
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strconv.Quote(s)
}

// TestExploreFindsEveryKey checks the probing against keys the decoders
// are known to take, so a change in their messages that blinds the
// explorer fails here rather than emptying the pages.
func TestExploreFindsEveryKey(t *testing.T) {
	for _, c := range []struct {
		name    string
		decode  Decoder
		context map[string]map[string]any
		want    map[string]string // path → type
	}{
		{"noeta.yaml", configDecoder, noetaContext, map[string]string{
			"agents":                                 "a mapping of names to mappings",
			"agents.<name>.budget.max_cost_usd":      "a number",
			"rules[].action":                         "a string",
			"guards[].rules[].match_shell.program":   "a string, or a list of them",
			"models.<name>.price":                    "free or a mapping",
			"mcp_servers.<name>.env":                 "a mapping of names to strings",
			"mcp_servers.<name>.args":                "a list of strings",
			"mcp_servers.<name>.tools.<name>.risk":   "a string",
			"sandbox.limits.memory_mb":               "an integer",
			"hooks.notification[].headers":           "a mapping of names to strings",
			"http.trusted_proxy.from":                "a list of strings",
			"observers.audit.stdout":                 "true or false",
			"approvals.rules[].quorum":               "an integer",
			"mcp_servers.<name>.sandbox.network":     "none or {allow: [host:port, ...]}",
			"agents.<name>.permissions.denied_tools": "a list of strings",
		}},
		{"task file", taskFileDecoder, taskFileContext, map[string]string{
			"agent":                       "a string",
			"script[].tool_calls[].args":  "a mapping of any keys",
			"script[].spawn[].script":     "a list of steps",
			"script[].wait_timer.seconds": "a number",
			"script[].finish.answer":      "any value",
			"script[].cost_usd":           "a number",
			"script[].output_tokens":      "an integer",
		}},
	} {
		keys, err := Explore(c.decode, c.context)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := map[string]string{}
		for _, k := range keys {
			got[k.Path] = k.Type
		}
		for p, typ := range c.want {
			if got[p] != typ {
				t.Errorf("%s: %s: type %q, want %q", c.name, p, got[p], typ)
			}
		}
	}
}

// TestSandboxDefaultsAsStated: the defaults the reference states for the
// sandbox's limits (from config's doc comments) are the sandbox's own, so
// the page cannot say one thing while the sandbox does another.
func TestSandboxDefaultsAsStated(t *testing.T) {
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	page := string(pages[filepath.Join("docs", "reference", "noeta-yaml.md")])
	for key, want := range map[string]int64{
		"cpu_seconds":  int64(sandbox.DefaultCPU / time.Second),
		"memory_mb":    sandbox.DefaultMemory >> 20,
		"processes":    sandbox.DefaultProcesses,
		"file_size_mb": sandbox.DefaultFileSize >> 20,
		"open_files":   sandbox.DefaultOpenFiles,
		"wall_seconds": int64(sandbox.DefaultWall / time.Second),
	} {
		row := "| `agents.<name>.sandbox.limits." + key + "` | an integer | `" + strconv.FormatInt(want, 10) + "` |"
		if !strings.Contains(page, row) {
			t.Errorf("the reference does not state %s's default as the sandbox's, %d (config/sandbox.go's doc comment)", key, want)
		}
	}
}
