package boundedio

import (
	"errors"
	"fmt"
)

// ErrTooManyNodes is returned by [CheckYAML] for a document that may hold
// more nodes than allowed.
var ErrTooManyNodes = errors.New("too many YAML nodes")

// CheckYAML bounds, before any parsing, the number of nodes a YAML parser
// can build from data, and refuses data whose bound is over maxNodes.
//
// go.yaml.in/yaml/v3 builds the whole node tree of a document before the
// caller sees any of it, at a few hundred bytes per node: a 10 MB flow list
// ([a,a,a,…]) cost 1.1 GB. The bound comes from counting indicator bytes
// (: ? - , [ ] { } *), wherever they are, quoted text included: every node
// but the first needs one. A scalar is set apart from the one before it by
// an indicator (a line break alone continues a plain scalar), a collection
// opens on one ([ {) or hangs on a key or an entry (: ? -), an empty value
// is implied by a key or an entry, and an alias starts with *. So a document
// with k indicator bytes has at most 5k+8 nodes. Counting over-approximates
// (a colon in a string counts too), which can only refuse a file, never let
// a larger tree through.
func CheckYAML(data []byte, maxNodes int) error {
	k := 0
	for _, c := range data {
		switch c {
		case ':', '?', '-', ',', '[', ']', '{', '}', '*':
			k++
		}
	}
	if bound := 5*k + 8; bound > maxNodes {
		return fmt.Errorf("%w: %d YAML indicators (: ? - , [ ] { } *) may make up to %d nodes, over the limit of %d", ErrTooManyNodes, k, bound, maxNodes)
	}
	return nil
}
