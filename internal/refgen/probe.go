package refgen

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A Problem is one mistake a decoder reported: the path of the field, as the
// decoder writes it (agents.a.budget.max_cost_usd, rules[0].action), and its
// message.
type Problem struct {
	Path string
	Msg  string
}

// A Decoder reads a whole document and reports every mistake in it: the
// decoder whose keys the reference lists (config.Parse, policy.ParseTaskFile).
type Decoder func(doc []byte) []Problem

// A Key is one key the decoder accepts, found by [Explore].
type Key struct {
	// Path is the key's place, written with <name> for an entry of a
	// mapping whose keys the file chooses and [] for an item of a list:
	// agents.<name>.budget.max_cost_usd, rules[].action.
	Path string
	// Type is what the decoder says the value must be, in its own words
	// ("a string", "a list of strings", "a mapping").
	Type string
	// Required is the decoder's message when the key is left out of its
	// mapping ("required: allow, deny or require_approval"); "" when it may
	// be.
	Required string
	// Same names the key whose shape this one repeats (a child's script is
	// a script): its keys are listed there, not again here.
	Same string
}

// seg is one step of a path: a key, an entry of a mapping of names, or an
// item of a list.
type seg struct {
	key  string
	name bool
	item bool
}

const (
	probeKey  = "zz_probe"
	probeName = "probe1"
)

func (s seg) pattern() string {
	switch {
	case s.name:
		return ".<name>"
	case s.item:
		return "[]"
	}
	return "." + s.key
}

func (s seg) concrete() string {
	switch {
	case s.name:
		return "." + probeName
	case s.item:
		return "[0]"
	}
	return "." + s.key
}

func render(path []seg, f func(seg) string) string {
	var b strings.Builder
	for _, s := range path {
		b.WriteString(f(s))
	}
	return strings.TrimPrefix(b.String(), ".")
}

func pattern(path []seg) string  { return render(path, seg.pattern) }
func concrete(path []seg) string { return render(path, seg.concrete) }

// document is a document holding v at path, every mapping above it holding
// only the key that leads there and the siblings context gives that key.
func document(path []seg, v any, context map[string]map[string]any) []byte {
	for i := len(path) - 1; i >= 0; i-- {
		switch s := path[i]; {
		case s.name:
			v = map[string]any{probeName: v}
		case s.item:
			v = []any{v}
		default:
			m := map[string]any{}
			for k, sv := range context[pattern(path[:i+1])] {
				m[k] = sv
			}
			m[s.key] = v
			v = m
		}
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		panic(err) // maps, lists and scalars always encode
	}
	return out
}

// explorer walks what a decoder accepts by handing it small wrong documents
// and reading its answers: an unknown key names the keys it knows, a value
// of the wrong kind says what it must be.
type explorer struct {
	decode  Decoder
	context map[string]map[string]any
	keys    []Key
	seen    map[string]bool
	err     error
}

// Explore lists every key decode accepts, in the order it names them, by
// probing it. A decoder whose answers it cannot read is an error naming
// the key and what was said. context gives, by the pattern of a key, the
// siblings it is only checked beside (a step's cost_usd is read only in a
// step that has a kind).
func Explore(decode Decoder, context map[string]map[string]any) ([]Key, error) {
	e := &explorer{decode: decode, context: context, seen: map[string]bool{}}
	e.mapping(nil, nil)
	return e.keys, e.err
}

func (e *explorer) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf(format, args...)
	}
}

// at returns the messages the decoder gave for exactly path.
func (e *explorer) at(problems []Problem, path string) []string {
	var out []string
	for _, p := range problems {
		if p.Path == path {
			out = append(out, p.Msg)
		}
	}
	return out
}

const unknownKey = "unknown key (known: "

// mapping explores a mapping of fixed keys at path, whose keys the decoder
// names when handed one it does not know; ancestors are the keys above, for
// recursion.
func (e *explorer) mapping(path []seg, ancestors []string) bool {
	c := concrete(path)
	probs := e.probe(path, map[string]any{probeKey: 1})
	var known []string
	for _, m := range e.at(probs, join(c, probeKey)) {
		if rest, ok := strings.CutPrefix(m, unknownKey); ok {
			known = strings.Split(strings.TrimSuffix(rest, ")"), ", ")
		}
	}
	if known == nil {
		return false
	}
	for _, k := range known {
		kp := append(slices.Clip(path), seg{key: k})
		key := Key{Path: pattern(kp)}
		for _, m := range e.at(probs, join(c, k)) {
			if strings.HasPrefix(m, "required") {
				key.Required = m
			}
		}
		e.value(kp, &key, append(slices.Clip(ancestors), k))
	}
	return true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value finds what the key at path holds and explores below it.
func (e *explorer) value(path []seg, key *Key, ancestors []string) {
	if e.seen[key.Path] {
		return
	}
	e.seen[key.Path] = true
	idx := len(e.keys)
	e.keys = append(e.keys, *key)
	defer func() { e.keys[idx] = *key }()

	// The same key further up (a spawned child's script): its shape is
	// the ancestor's, listed once.
	last := ancestors[len(ancestors)-1]
	for i, a := range ancestors[:len(ancestors)-1] {
		if a == last {
			key.Same = e.ancestorPath(path, len(ancestors)-1-i)
			key.Type = e.typeOf(path, map[string]any{probeKey: 1})
			return
		}
	}

	c := concrete(path)
	probs := e.probe(path, map[string]any{probeKey: 1})
	inner := e.at(probs, join(c, probeKey))
	here := e.at(probs, c)
	switch {
	case hasPrefix(inner, unknownKey):
		key.Type = "a mapping"
		if t := e.typeOf(path, probeKey); t != "" && t != "a mapping" {
			key.Type = t
		}
		e.mapping(path, ancestors)
	case hasPrefix(inner, "must be a mapping"):
		key.Type = "a mapping of names to mappings"
		np := append(slices.Clip(path), seg{name: true})
		if !e.mapping(np, ancestors) {
			e.fail("%s.<name>: no keys found", key.Path)
		}
	case hasPrefix(inner, "must be a string"):
		key.Type = "a mapping of names to strings"
	case hasPrefix(here, "must be a list"):
		key.Type = strip(first(here, "must be a list"))
		ip := append(slices.Clip(path), seg{item: true})
		ic := concrete(ip)
		iprobs := e.probe(ip, map[string]any{probeKey: 1})
		switch {
		case hasPrefix(e.at(iprobs, join(ic, probeKey)), unknownKey):
			if key.Type == "a list" {
				key.Type = "a list of mappings"
			}
			e.mapping(ip, ancestors)
		case key.Type == "a list":
			if t := e.leaf(ip, e.at(iprobs, ic)); t != "" {
				key.Type = "a list, each item " + t
			}
		}
	case hasPrefix(here, "must be "):
		key.Type = e.leaf(path, here)
	default:
		// A mapping was taken as it is: a free-form value, or a mapping
		// of names to values of one kind.
		if t := first(e.at(e.probe(path, map[string]any{probeKey: []any{1}}), join(c, probeKey)), "must be "); t != "" {
			key.Type = "a mapping of names to " + plural(strip(t))
		} else if t := e.typeOf(path, []any{1}); t != "" {
			key.Type = t + " of any keys"
		} else {
			key.Type = "any value"
		}
	}
}

func (e *explorer) probe(path []seg, v any) []Problem {
	return e.decode(document(path, v, e.context))
}

// leaf is the type of a value the decoder refused as a mapping with msgs:
// what it said, and whether it also takes a list of that.
func (e *explorer) leaf(path []seg, msgs []string) string {
	t := strip(first(msgs, "must be "))
	if t == "" || strings.HasPrefix(t, "a list") {
		return t
	}
	c := concrete(path)
	probs := e.probe(path, []any{"x"})
	if len(e.at(probs, c)) == 0 && len(e.at(probs, c+"[0]")) == 0 {
		return t + ", or a list of them"
	}
	return t
}

// typeOf is what the decoder says the value at path must be when handed v;
// "" when it takes v.
func (e *explorer) typeOf(path []seg, v any) string {
	probs := e.probe(path, v)
	if m := first(e.at(probs, concrete(path)), "must be "); m != "" {
		return strip(m)
	}
	return ""
}

// ancestorPath is the pattern of the key up ago levels of keys.
func (e *explorer) ancestorPath(path []seg, ago int) string {
	n := 0
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].name || path[i].item {
			continue
		}
		if n == ago {
			return pattern(path[:i+1])
		}
		n++
	}
	return ""
}

// plural turns "a string" into "strings".
func plural(t string) string {
	t = strings.TrimPrefix(strings.TrimPrefix(t, "an "), "a ")
	return t + "s"
}

func hasPrefix(msgs []string, p string) bool { return first(msgs, p) != "" }

func first(msgs []string, p string) string {
	for _, m := range msgs {
		if strings.HasPrefix(m, p) {
			return m
		}
	}
	return ""
}

// strip turns "must be a number, not a mapping" into "a number".
func strip(m string) string {
	m = strings.TrimPrefix(m, "must be ")
	if i := strings.LastIndex(m, ", not "); i >= 0 {
		m = m[:i]
	} else if i := strings.LastIndex(m, " not "); i >= 0 {
		m = m[:i]
	}
	return m
}

// Problems flattens the errors a decoder returns, joined, into their paths
// and messages, using as to read each one.
func Problems(err error, as func(error) (Problem, bool)) []Problem {
	if err == nil {
		return nil
	}
	var out []Problem
	var walk func(error)
	walk = func(err error) {
		if p, ok := as(err); ok {
			out = append(out, p)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if u := errors.Unwrap(err); u != nil {
			walk(u)
		}
	}
	walk(err)
	return out
}
