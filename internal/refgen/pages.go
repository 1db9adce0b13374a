package refgen

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// NoetaYAML is docs/reference/noeta-yaml.md: every key config.Parse
// accepts, described from the doc comments of config, guards, approvals
// and internal/hookspec under root.
func NoetaYAML(root string) ([]byte, error) {
	keys, err := Explore(configDecoder, noetaContext)
	if err != nil {
		return nil, err
	}
	src, err := loadSources(root, "config", "guards", "approvals", "internal/hookspec")
	if err != nil {
		return nil, err
	}
	entries, err := resolve(keys, src, noetaBindings, nil)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	header(&b, "noeta.yaml reference", "the decoder (config.Parse) and the doc comments of config, guards, approvals and internal/hookspec")
	b.WriteString(`Every key noeta.yaml may hold, as the decoder reads it. A path writes
` + "`<name>`" + ` for a key you choose (an agent's, a model's, a server's name) and ` + "`[]`" + `
for an item of a list. The type is the decoder's own word for what it takes;
a key given a value of another kind, or a key not listed here, is an error
naming the file, the line and the path. **default** is what the code does
when the key is absent: a value, "required" (leaving it out is an error), or
"unset" (the key is simply not set; its description says what that means).
The example is from the doc comments of package config where they show one.
A key given as null counts as absent.

The package's own overview, with every section in one file: ` + "`go doc ./config`" + `.
What the sections do: [concepts](../concepts.md), [security](../security.md).

`)
	names, by := sections(entries)
	b.WriteString("Sections: ")
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[`%s`](#%s)", n, anchor(n))
	}
	b.WriteString(".\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\n## %s\n\n", n)
		table(&b, by[n])
	}
	return b.Bytes(), nil
}

func anchor(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "_", "_")
}

// taskFileContext gives a step's cost keys the step kind they are read
// beside.
var taskFileContext = map[string]map[string]any{
	"script[].cost_usd":      {"finish": map[string]any{"answer": "done"}},
	"script[].input_tokens":  {"finish": map[string]any{"answer": "done"}},
	"script[].output_tokens": {"finish": map[string]any{"answer": "done"}},
}

var taskFileBindings = map[string]binding{
	"": {types: []string{"policy.TaskFile"}},
}

// grammarLine is a line of ParseTaskFile's grammar: a step's kind, the shape
// of its value, and a note.
var grammarLine = regexp.MustCompile(`^(\w+): (\S(?:\S| \S)*)(?:\s{2,}(.*))?$`)

// TaskFile is docs/reference/taskfile.md: every key policy.ParseTaskFile
// accepts, described from the doc comments of package policy under root.
func TaskFile(root string) ([]byte, error) {
	keys, err := Explore(taskFileDecoder, taskFileContext)
	if err != nil {
		return nil, err
	}
	src, err := loadSources(root, "policy")
	if err != nil {
		return nil, err
	}
	// The grammar in ParseTaskFile's doc comment: one line per step kind,
	// continued by indented lines.
	grammar := map[string]string{}
	var order []string
	for i, blk := range codeBlocks(src.funcs["policy.ParseTaskFile"]) {
		last := ""
		for _, line := range strings.Split(blk, "\n") {
			if m := grammarLine.FindStringSubmatch(line); m != nil {
				last = m[1]
				if i == 0 {
					order = append(order, last)
				}
				grammar[last] = "`" + m[1] + ": " + m[2] + "`" + note(m[3])
				continue
			}
			if t := strings.TrimSpace(line); t != "" && last != "" {
				grammar[last] += " " + t
			}
		}
	}
	if len(grammar) == 0 {
		return nil, fmt.Errorf("policy.ParseTaskFile's doc comment has no grammar block")
	}
	extra := func(k Key) string {
		parent, name := splitPath(k.Path)
		if parent == "script[]" {
			return grammar[name]
		}
		// A key inside a step kind's value: the kind's line.
		for p := parent; p != ""; p, _ = splitPath(p) {
			if pp, n := splitPath(strings.TrimSuffix(p, "[]")); pp == "script[]" {
				return "Part of " + grammar[n]
			}
		}
		return ""
	}
	entries, err := resolve(keys, src, taskFileBindings, extra)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	header(&b, "Task file reference", "the decoder (policy.ParseTaskFile) and the doc comments of package policy")
	b.WriteString(`A task file names an agent of noeta.yaml, gives its goal and, for a
scripted agent, the decisions it will propose, turn by turn (` + "`script`" + `);
without ` + "`script`" + ` the agent's model decides. ` + "`engine run TASKFILE`" + ` runs one.
A path writes ` + "`[]`" + ` for an item of a list. Each item of ` + "`script`" + ` is one
step, a mapping with exactly one of the step kinds below, and optionally
what deciding it cost. Reading is strict: an unknown key, a step with no
kind or two, a value of the wrong type, an empty required string or a
negative number is an error naming the file, the line and the path.

`)
	b.WriteString("```yaml\n" + src.typeBlock() + "```\n\n")
	table(&b, entries)
	b.WriteString("\nThe step kinds, as the grammar in `policy.ParseTaskFile`'s doc comment gives them: ")
	for i, n := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("`" + n + "`")
	}
	b.WriteString(".\n")
	return b.Bytes(), nil
}

func note(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "."
	}
	return ": " + s
}
