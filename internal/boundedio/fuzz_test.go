package boundedio

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzCheckYAMLBound: the bound CheckYAML computes is never below the nodes
// go.yaml.in/yaml/v3 builds, for any input it parses; otherwise the check
// would let a larger tree through than it promises.
func FuzzCheckYAMLBound(f *testing.F) {
	for _, s := range []string{
		"", "a", "a: b", "- a\n- b\n", "[a, b, {c: d}]", "a:\n  - \n  -\n", "? a\n: b\n",
		"{a, b: , : c}", "[? a, b: c, : d]", "&x a\nb: *x", "--- a\n--- b\n", "|\n  text\n",
		"a: !!str 1\nb: !t {}\n", "[[[[]]]]", "a\nb\nc\n", "'a: b'\n", "\"a\\\n b\"",
		"- - - a\n", "a: b: c", "{a: [b, {c: d}], e: f}", "[a, , b]", "- ? a\n  : b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		nodes := 0
		for docs := 0; docs < 100; docs++ {
			var doc yaml.Node
			err := func() (err error) {
				defer func() {
					if recover() != nil {
						err = io.ErrUnexpectedEOF
					}
				}()
				return dec.Decode(&doc)
			}()
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return // not YAML: the parser stops, no tree to bound
			}
			nodes += count(&doc)
		}
		k := 0
		for _, c := range data {
			switch c {
			case ':', '?', '-', ',', '[', ']', '{', '}', '*':
				k++
			}
		}
		if bound := 5*k + 8; nodes > bound {
			t.Fatalf("%q: %d nodes, bound %d", data, nodes, bound)
		}
	})
}

// count is the nodes of the tree at n, aliases not followed.
func count(n *yaml.Node) int {
	c := 1
	for _, ch := range n.Content {
		c += count(ch)
	}
	return c
}
