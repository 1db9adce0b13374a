// Package schemas holds the JSON Schema (draft 2020-12) of every noeta event
// payload, one file per event type (<Type>.json, with shared definitions in
// defs.json), embedded in the binary, and validates payloads against them. The
// schemas are the public contract of the payloads for readers in other
// languages; the Go structs in package noeta are their source of truth.
//
// A schema's $id is the dataschema of the records it describes:
// urn:noeta:schema:<Type>:<Version>. The schemas are strict (no unknown
// properties anywhere), and that does not break forward compatibility: a writer
// that adds a field bumps the version, its records carry the newer id, and a
// reader validates only records whose id it knows ([Known]), skipping the check
// for the rest exactly as it skips event types it does not know.
package schemas

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"math/big"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Version is the base schema version: the last part of the $id of defs.json
// and of every event type that has not moved past it (see [TypeVersion]).
const Version = 1

// versions lists the event types whose schema has moved past Version. A
// type's version moves when its payload gains members; the members are only
// ever added and optional, so the newest schema of a type still accepts the
// records of its older versions, and a record that carries an older id is
// validated against it.
var versions = map[string]int{
	"PolicyDecided":         3, // the recorded decision (2, docs/adr/0027); the model's text (3, docs/adr/0084)
	"ApprovalRequested":     2, // quorum, rules, expiry (docs/adr/0032)
	"ApprovalResolved":      2, // auth, approvers
	"TaskCreated":           3, // submitted_by (2); budget (3, docs/adr/0054)
	"SubtaskSpawned":        2, // budget
	"SubtaskResultRecorded": 2, // spend
	"TaskSuspended":         2, // wake_on.expire_at
	"TaskWoken":             3, // wake_event.auth (2), wake_event.received_at (3)
	"ToolCallFinished":      3, // egress (2, docs/adr/0055); preview (3, docs/adr/0102)
}

// TypeVersion is the schema version of eventType's records as this package
// writes them.
func TypeVersion(eventType string) int {
	if v, ok := versions[eventType]; ok {
		return v
	}
	return Version
}

const (
	idPrefix    = "urn:noeta:schema:"
	defsFile    = "defs.json"
	draft202012 = "https://json-schema.org/draft/2020-12/schema"
)

// Sentinels: callers decide with errors.Is; the message says what and where.
var (
	// ErrUnknownType is wrapped by [Validate] for an event type without a schema.
	ErrUnknownType = errors.New("schemas: unknown event type")
	// ErrInvalid is wrapped by [Validate] for a payload its schema rejects.
	ErrInvalid = errors.New("schemas: invalid payload")
)

//go:embed *.json
var files embed.FS

// ID returns the $id of eventType's schema, which is also the dataschema of its
// records. It only formats: whether the type has a schema is [Known]'s question.
func ID(eventType string) string {
	return idPrefix + eventType + ":" + strconv.Itoa(TypeVersion(eventType))
}

// byID maps the $id of every embedded event schema to its type. It is built from
// the file names alone, so Known, which runs on every read, costs a map lookup
// and never waits for the schemas to compile.
var byID = func() map[string]string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("schemas: reading the embedded files: " + err.Error())
	}
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		if name := e.Name(); name != defsFile {
			t := strings.TrimSuffix(name, path.Ext(name))
			for v := 1; v <= TypeVersion(t); v++ {
				m[idPrefix+t+":"+strconv.Itoa(v)] = t
			}
		}
	}
	return m
}()

// Known maps a dataschema id back to its event type when it is the id of one of
// the schemas embedded here or of an older version of one (its records
// validate against the newest). A newer version's id, or anyone else's, is
// not known: such records are not ours to validate.
func Known(id string) (eventType string, ok bool) {
	eventType, ok = byID[id]
	return eventType, ok
}

// compiled compiles every embedded schema once, at first use. An embedded schema
// that does not compile is a programming error, so it panics, naming the file;
// the package's tests load them all. OnceValue repeats the panic on every later
// call instead of handing out a half-built map.
var compiled = sync.OnceValue(func() map[string]*jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// date-time is an annotation in 2020-12 unless asserted; fire_at must be a
	// real instant.
	c.AssertFormat()
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("schemas: reading the embedded files: " + err.Error())
	}
	var types []string
	for _, e := range entries {
		name := e.Name()
		id := idPrefix + "defs:" + strconv.Itoa(Version)
		if name != defsFile {
			t := strings.TrimSuffix(name, path.Ext(name))
			id = ID(t)
			types = append(types, t)
		}
		b, err := files.ReadFile(name)
		if err != nil {
			panic(fmt.Sprintf("schemas: %s: %v", name, err))
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			panic(fmt.Sprintf("schemas: %s: %v", name, err))
		}
		// The file name, the $id and the dialect must agree: a copied schema
		// whose $id was not updated would otherwise shadow another type's.
		obj, _ := doc.(map[string]any)
		if got, _ := obj["$id"].(string); got != id {
			panic(fmt.Sprintf("schemas: %s: $id is %q, want %q", name, got, id))
		}
		if got, _ := obj["$schema"].(string); got != draft202012 {
			panic(fmt.Sprintf("schemas: %s: $schema is %q, want %q", name, got, draft202012))
		}
		if err := c.AddResource(id, doc); err != nil {
			panic(fmt.Sprintf("schemas: %s: %v", name, err))
		}
	}
	m := make(map[string]*jsonschema.Schema, len(types))
	for _, t := range types {
		sch, err := c.Compile(ID(t))
		if err != nil {
			panic(fmt.Sprintf("schemas: %s.json: %v", t, err))
		}
		m[t] = sch
	}
	return m
})

// Validate checks payload, the JSON data of a record of eventType, against the
// type's schema. It returns an error wrapping [ErrUnknownType] for a type with no
// schema, and one wrapping [ErrInvalid] for a payload that is not JSON or that
// the schema rejects; the message names the type, the field as a JSON pointer
// and what is wrong with it, e.g.
//
//	schemas: invalid payload: TaskSuspended: /wake_on/handle: missing property
//
// It is safe for concurrent use. The first call compiles the schemas.
func Validate(eventType string, payload []byte) error {
	sch, ok := compiled()[eventType]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownType, eventType)
	}
	// UnmarshalJSON keeps numbers as json.Number, so an integer beyond 2^53 is
	// judged as written, not as a rounded float64.
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%w: %s: not JSON: %v", ErrInvalid, eventType, err)
	}
	if err := sch.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return fmt.Errorf("%w: %s: %v", ErrInvalid, eventType, err)
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalid, eventType, describe(verr))
	}
	return nil
}

// printer renders the library's keyword messages; it is read-only once built.
var printer = message.NewPrinter(language.English)

// violation is one leaf of a validation error tree, reduced to what a person
// needs: where (a JSON pointer into the payload) and what.
type violation struct {
	at          []string
	msg         string
	conditional bool // raised under if/then/else or dependentSchemas
}

// describe reduces the library's error tree (one branch per keyword that
// failed, nested through $ref, allOf and if/then) to a single line: the deepest
// violation, which is the most specific one, and how many others there were.
func describe(verr *jsonschema.ValidationError) string {
	var all []violation
	collect(verr, &all)
	if len(all) == 0 { // not expected: every failure has a leaf
		return verr.Error()
	}
	// Deterministic: the library walks objects in map order, and the same payload
	// must always produce the same message.
	slices.SortStableFunc(all, func(a, b violation) int {
		if len(a.at) != len(b.at) {
			return cmp.Compare(len(b.at), len(a.at)) // deepest first
		}
		if a.conditional != b.conditional {
			if a.conditional {
				return 1 // a plain keyword before one under a condition
			}
			return -1
		}
		if c := cmp.Compare(pointer(a.at), pointer(b.at)); c != 0 {
			return c
		}
		return cmp.Compare(a.msg, b.msg)
	})
	v := all[0]
	where := pointer(v.at)
	if where == "" {
		where = "payload"
	}
	s := where + ": " + v.msg
	if n := len(all) - 1; n == 1 {
		s += " (and 1 more error)"
	} else if n > 1 {
		s += fmt.Sprintf(" (and %d more errors)", n)
	}
	return s
}

func collect(e *jsonschema.ValidationError, out *[]violation) {
	if len(e.Causes) > 0 {
		if _, ok := e.ErrorKind.(*kind.PropertyNames); !ok {
			for _, c := range e.Causes {
				collect(c, out)
			}
			return
		}
	}
	kw := keywords(e.SchemaURL)
	add := func(msg string, prop ...string) {
		// dependentSchemas is how the schemas say "x and x_ref are exclusive"
		// and "this field belongs to that wake kind": name the property that
		// triggered it.
		if kw.dependsOn != "" {
			if _, ok := e.ErrorKind.(*kind.FalseSchema); ok {
				msg = "not allowed together with " + kw.dependsOn
			} else {
				msg += " when " + kw.dependsOn + " is present"
			}
		}
		at := append(append([]string(nil), e.InstanceLocation...), prop...)
		*out = append(*out, violation{at: at, msg: msg, conditional: kw.conditional})
	}
	switch k := e.ErrorKind.(type) {
	// Point at the missing or unknown property, not at the object around it,
	// one violation each, so the count of the others is right.
	case *kind.Required:
		for _, p := range k.Missing {
			add("missing property", p)
		}
	case *kind.DependentRequired:
		// "preview needs output_ref": name the one missing.
		for _, p := range k.Missing {
			add("missing property when "+k.Prop+" is present", p)
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			add("unknown property", p)
		}
	case *kind.FalseSchema:
		add("not allowed")
	case *kind.MinLength:
		if k.Want == 1 && k.Got == 0 {
			add("must not be empty")
		} else {
			add(k.LocalizedString(printer))
		}
	// The library prints bounds as floats, which turns the uint64 limit into
	// "1.8446744073709552×10¹⁹"; a counter's bound must read exactly.
	case *kind.Minimum:
		add("got " + ratString(k.Got) + ", want >= " + ratString(k.Want))
	case *kind.Maximum:
		add("got " + ratString(k.Got) + ", want <= " + ratString(k.Want))
	default:
		add(e.ErrorKind.LocalizedString(printer))
	}
}

// schemaPath is what describe needs to know about the schema keyword that
// failed.
type schemaPath struct {
	dependsOn   string // the property of the innermost dependentSchemas entry
	conditional bool
}

// keywords reads the fragment of an absolute schema location such as
// urn:noeta:schema:TaskCreated:1#/dependentSchemas/goal_ref/properties/goal.
// Tokens after properties, $defs and dependentSchemas are names, not keywords,
// so a property called "then" is not mistaken for one.
func keywords(schemaURL string) schemaPath {
	var p schemaPath
	_, frag, ok := strings.Cut(schemaURL, "#")
	if !ok {
		return p
	}
	toks := strings.Split(strings.TrimPrefix(frag, "/"), "/")
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "properties", "$defs", "patternProperties":
			i++
		case "dependentSchemas":
			p.conditional = true
			if i+1 < len(toks) {
				p.dependsOn = unescape(toks[i+1])
			}
			i++
		case "if", "then", "else":
			p.conditional = true
		}
	}
	return p
}

// ratString prints a number as it was likely written: integers exactly, other
// numbers in their shortest float64 form.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.RatString()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// pointer renders instance location tokens as a JSON pointer (RFC 6901).
func pointer(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		b.WriteString(escaper.Replace(t))
	}
	return b.String()
}

func unescape(tok string) string { return unescaper.Replace(tok) }

var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)
