package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/internal/memtest"
)

// TestCheckTools: every tool name and match_tool pattern of a config is
// checked against the registry's tools, each mistake with its path and line.
//
// Reproduction (before): `agents: {a: {tools: [shel]}}` parsed; the mistake
// surfaced only when a task of agent a first ran (AgentStack), and a
// misspelt denied_tools entry or deny rule (`match_tool: shel`) never
// surfaced at all: it silently denied nothing.
func TestCheckTools(t *testing.T) {
	t.Parallel()
	known := []string{"echo", "read_file", "shell", "sleep", "write_file"}
	for _, tt := range []struct {
		name string
		yaml string
		want []string // each a line of the joined error; none: no error
	}{
		{"all known", designConfig, nil},
		{"glob matching some", "rules:\n  - {match_tool: \"*_file\", action: deny}\n", nil},
		{"unknown in tools", "agents:\n  a:\n    tools: [echo, shel]\n",
			[]string{`agents.a.tools[1]: unknown tool "shel" (the tools: echo, read_file, shell, sleep, write_file) (line 3)`}},
		{"unknown in each permission list", "agents:\n  a:\n    permissions:\n      allowed_tools: [ech]\n      denied_tools:\n        - shel\n      require_approval_tools: [write]\n",
			[]string{
				`agents.a.permissions.allowed_tools[0]: unknown tool "ech"`,
				`agents.a.permissions.denied_tools[0]: unknown tool "shel"`,
				`agents.a.permissions.require_approval_tools[0]: unknown tool "write"`,
			}},
		{"a rule matching no tool", "rules:\n  - match_tool: shel\n    action: deny\n",
			[]string{`rules[0].match_tool: "shel" matches no tool`}},
		{"a glob matching no tool", "rules:\n  - {match_tool: \"sh*x\", action: deny}\n",
			[]string{`rules[0].match_tool: "sh*x" matches no tool (the tools: echo, read_file, shell, sleep, write_file) (line 2)`}},
		{"a named rule set's rule", "guards:\n  - name: freeze\n    priority: 150\n    rules:\n      - {match_tool: bash, action: deny}\n",
			[]string{`guards[0].rules[0].match_tool: "bash" matches no tool`}},
		{"a hook matching no tool", "hooks:\n  post_tool_use:\n    - {match_tool: shel, command: [\"true\"]}\n",
			[]string{`hooks.post_tool_use[0].match_tool: "shel" matches no tool`}},
		{"a hook's class matching some", "hooks:\n  post_tool_use:\n    - {match_tool: \"[rw]*_file\", command: [\"true\"]}\n", nil},
		{"a hook's class matching no tool", "hooks:\n  post_tool_use:\n    - {match_tool: \"[xyz]*\", command: [\"true\"]}\n",
			[]string{`hooks.post_tool_use[0].match_tool: "[xyz]*" matches no tool (the tools: echo, read_file, shell, sleep, write_file) (line 3)`}},
		// A glob in an agent's lists is a pattern over tool names, as in
		// match_tool: it must match a tool.
		{"a glob in tools matching tools", "agents:\n  a:\n    tools: [\"*_file\"]\n", nil},
		{"a glob in tools matching nothing", "agents:\n  a:\n    tools: [\"frob*\"]\n    permissions: {denied_tools: [\"x?\"]}\n",
			[]string{`agents.a.tools[0]: "frob*" matches no tool`, `agents.a.permissions.denied_tools[0]: "x?" matches no tool`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse("", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = f.CheckTools(known)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Fatalf("%v: want a *Error with a line", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d errors %q; want %d", len(lines), lines, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("error %d: %q; want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}

// TestParseBoundsInput: the parser's memory is bounded before it
// builds the node tree.
//
// Reproduction (before): a 10 MB flow list (rules: [a,a,a,…]) cost 1.1 GB of
// memory and 30 MB cost 3 GB, the node limits applying only once the whole
// tree was built.
func TestParseBoundsInput(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, yaml, want string }{
		{"over the size limit", "# " + strings.Repeat("x", MaxSize), "over the limit of 1 MiB"},
		{"a long flow list", "rules: [" + strings.Repeat("a,", 30_000) + "a]", "too many YAML nodes"},
		{"deep nesting", strings.Repeat("[", 30_000) + strings.Repeat("]", 30_000), "too many YAML nodes"},
		{"an alias bomb", "rules:\n  - match_tool: echo\n    action: deny\n    match_arg:\n      path: x\n      equals:\n" +
			"        a: &a [x,x,x,x,x,x,x,x,x,x]\n        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n        c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
			"        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n        e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n        f: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
			"too large or too deeply nested"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse("", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzConfigMemory holds the config parser to a memory ceiling: what it
// allocates for any input is at most memtest.Ceiling(len(input)) (64 MiB
// plus 256 bytes per input byte), aliases and all.
func FuzzConfigMemory(f *testing.F) {
	for _, seed := range []string{
		designConfig,
		"rules: [" + strings.Repeat("a,", 2000) + "a]",
		"rules:\n  - match_tool: echo\n    action: deny\n    match_arg: {path: x, equals: {a: &a [x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b], d: [*c,*c,*c,*c,*c,*c,*c,*c]}}\n",
		strings.Repeat("- ", 3000),
		strings.Repeat("[", 5000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got := memtest.Allocated(func() { Parse("", data) }); got > memtest.Ceiling(len(data)) {
			t.Fatalf("%d bytes allocated for %d bytes of input, over the ceiling of %d", got, len(data), memtest.Ceiling(len(data)))
		}
	})
}
