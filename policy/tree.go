package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/fieldpath"
)

// A task file is read in two passes: the YAML (or, for a child's script, the
// JSON) is first turned into a small tree of JSON-shaped values that remember
// their line, and the step schema is then checked on that tree. One checker
// for both inputs means a script is held to exactly the same rules whether it
// comes from a file or from a parent's spawn decision, with the same paths in
// the errors; and it is why YAML's extra features (non-string keys, tags,
// infinities) are refused in one place, before anything reads the values.

type valueKind uint8

const (
	kNull valueKind = iota
	kBool
	kNumber
	kString
	kList
	kMap
	// kBad stands in for a value that could not be read; its mistake is
	// already reported, so the schema checks say nothing more about it.
	kBad
)

// value is a JSON value with the line it came from (0 when unknown, as for
// JSON input, where the path alone locates it).
type value struct {
	kind valueKind
	line int
	// text is the string of a kString, the JSON literal of a kNumber
	// (integers as written, digit for digit) and "true"/"false" of a kBool.
	text  string
	items []*value // kList
	keys  []member // kMap, in document order
}

type member struct {
	key  string
	line int
	val  *value
}

func (v *value) kindName() string {
	switch v.kind {
	case kNull:
		return "null"
	case kBool:
		return "a boolean"
	case kNumber:
		if isIntLiteral(v.text) {
			return "an integer"
		}
		return "a number"
	case kString:
		return "a string"
	case kList:
		return "a list"
	case kBad:
		return "an unreadable value"
	}
	return "a mapping"
}

// toAny converts v to the encoding/json value of the same JSON: numbers stay
// json.Number, so an integer keeps every digit.
func (v *value) toAny() any {
	switch v.kind {
	case kBool:
		return v.text == "true"
	case kNumber:
		return json.Number(v.text)
	case kString:
		return v.text
	case kList:
		out := make([]any, len(v.items))
		for i, it := range v.items {
			out[i] = it.toAny()
		}
		return out
	case kMap:
		out := make(map[string]any, len(v.keys))
		for _, m := range v.keys {
			out[m.key] = m.val.toAny()
		}
		return out
	}
	return nil
}

// canonicalJSON returns v as canonical JSON ([noeta.CanonicalizeJSON]).
func (v *value) canonicalJSON() (json.RawMessage, error) {
	return noeta.Canonical(v.toAny())
}

// Limits on the tree a document may expand to: aliases can make a small YAML
// document a very large tree, or a cycle (an alias to an anchor that
// encloses it), and each nested child script adds four levels.
const (
	maxNodes = 200_000
	maxDepth = 128
)

// treeBuilder converts a parsed document to a value tree, collecting errors.
type treeBuilder struct {
	errs      *errorList
	nodes     int
	exhausted bool
}

func (b *treeBuilder) budget(line, depth int, path string) bool {
	b.nodes++
	if b.nodes <= maxNodes && depth <= maxDepth {
		return true
	}
	if !b.exhausted {
		b.exhausted = true
		if depth > maxDepth {
			b.errs.addf(line, path, "nested more than %d levels deep (an alias to an enclosing value?)", maxDepth)
		} else {
			b.errs.addf(line, path, "the document expands to more than %d values (through aliases?)", maxNodes)
		}
	}
	return false
}

var digitsOnly = regexp.MustCompile(`^[-+]?[0-9]+$`)

// fromYAML converts a YAML node. Keys must be strings; merge keys and tags
// other than the core ones are refused; integers too large for 64 bits keep
// every digit; a float must be finite, since JSON has no infinity. A value it
// refuses becomes a kBad placeholder (and an entry with a refused key is
// dropped), so the schema is still checked and every mistake in the file is
// reported in one go. It returns nil only when the limits are exceeded.
func (b *treeBuilder) fromYAML(n *yaml.Node, path string, depth int) *value {
	for n != nil && n.Kind == yaml.AliasNode {
		if !b.budget(n.Line, depth, path) {
			return nil
		}
		n = n.Alias
	}
	if n == nil || n.Kind == 0 {
		// An empty document (no content, or comments only) parses to a
		// zero node.
		return &value{kind: kNull}
	}
	if !b.budget(n.Line, depth, path) {
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return &value{kind: kNull, line: n.Line}
		}
		return b.fromYAML(n.Content[0], path, depth)
	case yaml.SequenceNode:
		if t := n.ShortTag(); t != "!!seq" {
			return b.bad(n.Line, path, "unsupported YAML tag %s", t)
		}
		v := &value{kind: kList, line: n.Line, items: make([]*value, 0, len(n.Content))}
		for i, it := range n.Content {
			c := b.fromYAML(it, index(path, i), depth+1)
			if c == nil {
				return nil
			}
			v.items = append(v.items, c)
		}
		return v
	case yaml.MappingNode:
		if t := n.ShortTag(); t != "!!map" {
			return b.bad(n.Line, path, "unsupported YAML tag %s", t)
		}
		return b.mapping(n, path, depth)
	case yaml.ScalarNode:
		return b.scalar(n, path)
	}
	return b.bad(n.Line, path, "unsupported YAML node")
}

func (b *treeBuilder) mapping(n *yaml.Node, path string, depth int) *value {
	v := &value{kind: kMap, line: n.Line}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		for hops := 0; k != nil && k.Kind == yaml.AliasNode && hops <= maxDepth; hops++ {
			k = k.Alias
		}
		if k == nil || k.Kind != yaml.ScalarNode {
			line := n.Line
			if k != nil {
				line = k.Line
			}
			b.errs.add(line, path, "keys must be strings, not a collection")
			continue
		}
		switch t := k.ShortTag(); t {
		case "!!str", "!!timestamp":
			// A date key is text, as a date value is (see scalar).
		case "!!merge":
			b.errs.add(k.Line, path, "merge keys (<<) are not supported in task files; write the keys out")
			continue
		default:
			b.errs.addf(k.Line, path, "keys must be strings; %s is %s (quote it)", strconv.Quote(k.Value), tagName(t))
			continue
		}
		kp := join(path, k.Value)
		if l, dup := first[k.Value]; dup {
			b.errs.addf(k.Line, kp, "duplicate key (first at line %d)", l)
			continue
		}
		first[k.Value] = k.Line
		c := b.fromYAML(val, kp, depth+1)
		if c == nil {
			return nil
		}
		v.keys = append(v.keys, member{key: k.Value, line: k.Line, val: c})
	}
	return v
}

// bad reports a value that cannot be read and returns its placeholder.
func (b *treeBuilder) bad(line int, path, format string, args ...any) *value {
	b.errs.addf(line, path, format, args...)
	return &value{kind: kBad, line: line}
}

func (b *treeBuilder) scalar(n *yaml.Node, path string) *value {
	switch t := n.ShortTag(); t {
	case "!!null":
		return &value{kind: kNull, line: n.Line}
	case "!!bool":
		var x bool
		if n.Decode(&x) == nil {
			return &value{kind: kBool, line: n.Line, text: strconv.FormatBool(x)}
		}
	case "!!str", "!!timestamp", "!!binary":
		// A timestamp or base64 text stays the text written: JSON has no
		// such types, and the author wrote a string.
		return &value{kind: kString, line: n.Line, text: n.Value}
	case "!!int":
		var i int64
		var u uint64
		switch {
		case n.Decode(&i) == nil:
			return &value{kind: kNumber, line: n.Line, text: strconv.FormatInt(i, 10)}
		case n.Decode(&u) == nil:
			return &value{kind: kNumber, line: n.Line, text: strconv.FormatUint(u, 10)}
		case digitsOnly.MatchString(n.Value):
			return b.bigInt(n, path)
		}
	case "!!float":
		if digitsOnly.MatchString(n.Value) {
			// YAML calls an integer too large for 64 bits a float; JSON
			// keeps it exact.
			return b.bigInt(n, path)
		}
		var f float64
		if n.Decode(&f) != nil {
			break
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return b.bad(n.Line, path, "%s is not a finite number; JSON has no infinity or NaN", n.Value)
		}
		return &value{kind: kNumber, line: n.Line, text: strconv.FormatFloat(f, 'g', -1, 64)}
	default:
		return b.bad(n.Line, path, "unsupported YAML tag %s", t)
	}
	return b.bad(n.Line, path, "cannot read %q as %s", n.Value, tagName(n.ShortTag()))
}

func (b *treeBuilder) bigInt(n *yaml.Node, path string) *value {
	var z big.Int
	if _, ok := z.SetString(n.Value, 10); !ok {
		return b.bad(n.Line, path, "cannot read the integer %q", n.Value)
	}
	return &value{kind: kNumber, line: n.Line, text: z.String()}
}

// parseYAML parses one YAML document into a value tree. A syntax error is
// reported at the line the parser names.
func parseYAML(data []byte, errs *errorList) *value {
	// Bound the node tree before the parser builds it (maxNodes as well:
	// the tree is what expands).
	if err := boundedio.CheckYAML(data, maxNodes); err != nil {
		errs.add(0, "", err.Error())
		return nil
	}
	var doc yaml.Node
	if err := safeYAML(data, &doc); err != nil {
		line, msg := yamlErrorLine(err)
		errs.add(line, "", msg)
		return nil
	}
	b := &treeBuilder{errs: errs}
	return b.fromYAML(&doc, "", 0)
}

// safeYAML decodes exactly one YAML document, turning a parser panic on
// hostile input into an error. A second document is refused rather than
// ignored: a task file is one task.
func safeYAML(data []byte, doc *yaml.Node) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("yaml: %v", v)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(doc); err != nil {
		if errors.Is(err, io.EOF) {
			*doc = yaml.Node{}
			return nil
		}
		return err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("yaml: line %d: a task file holds one YAML document; found another", extra.Line)
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// yamlErrorLine splits "yaml: line 7: did not find expected key" into 7 and
// "did not find expected key".
func yamlErrorLine(err error) (int, string) {
	msg := err.Error()
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, msg
	}
	line, _ := strconv.Atoi(m[1])
	return line, "invalid YAML: " + msg[len(m[0]):]
}

// parseJSON parses one JSON value into a value tree. The text is first
// checked by [noeta.CanonicalizeJSON], which refuses duplicate keys and
// invalid UTF-8 that encoding/json would let through, and trailing data.
func parseJSON(data []byte, path string, errs *errorList) *value {
	if _, err := noeta.CanonicalizeJSON(data); err != nil {
		errs.addf(0, path, "%v", err)
		return nil
	}
	// The text as written, not its canonical form, so that keys keep their
	// order and errors list them as the author wrote them.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	b := &treeBuilder{errs: errs}
	v, err := b.fromJSON(dec, path, 0)
	if err != nil && !b.exhausted {
		errs.addf(0, path, "%v", err)
	}
	return v
}

func (b *treeBuilder) fromJSON(dec *json.Decoder, path string, depth int) (*value, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if !b.budget(0, depth, path) {
		return nil, errExhausted
	}
	switch t := tok.(type) {
	case nil:
		return &value{kind: kNull}, nil
	case bool:
		return &value{kind: kBool, text: strconv.FormatBool(t)}, nil
	case json.Number:
		return &value{kind: kNumber, text: t.String()}, nil
	case string:
		return &value{kind: kString, text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &value{kind: kList}
			for i := 0; dec.More(); i++ {
				c, err := b.fromJSON(dec, index(path, i), depth+1)
				if err != nil {
					return nil, err
				}
				v.items = append(v.items, c)
			}
			_, err := dec.Token()
			return v, err
		case '{':
			v := &value{kind: kMap}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				c, err := b.fromJSON(dec, join(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, member{key: k, val: c})
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

var errExhausted = errors.New("document too large")

// tagName names a scalar's type for an error.
func tagName(tag string) string {
	switch tag {
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return "tagged " + tag
}

func isIntLiteral(s string) bool { return digitsOnly.MatchString(s) }

// join and index spell field paths as noeta.yaml's errors do.
func join(path, key string) string    { return fieldpath.Join(path, key) }
func index(path string, i int) string { return fieldpath.Index(path, i) }
