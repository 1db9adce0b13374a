package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/noeta-go/noeta"
)

// Errors of [Registry.ValidateArgs], wrapped with the detail a model can act
// on.
var (
	// ErrUnknownTool: the registry has no tool of that name.
	ErrUnknownTool = errors.New("tools: unknown tool")
	// ErrInvalidArgs: the args are not JSON, or do not match the tool's
	// input schema.
	ErrInvalidArgs = errors.New("tools: invalid args")
)

// anyObject is the input schema of a tool that does not describe its own.
var anyObject = json.RawMessage(`{"type":"object"}`)

// compileSchema compiles a tool's input schema (draft 2020-12 unless the
// schema names another dialect). It must be a JSON object whose type is
// "object": tool args are always an object, and a model is told so.
func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = anyObject
	}
	canon, err := noeta.CanonicalizeJSON(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("tools: tool %q: input schema: %w", name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
	if err != nil {
		return nil, nil, fmt.Errorf("tools: tool %q: input schema: %v", name, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("tools: tool %q: input schema is not a JSON object", name)
	}
	if obj["type"] != "object" {
		return nil, nil, fmt.Errorf(`tools: tool %q: input schema must have "type": "object" (args are always an object)`, name)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "urn:noeta:tool:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, fmt.Errorf("tools: tool %q: input schema: %v", name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, nil, fmt.Errorf("tools: tool %q: input schema does not compile: %v", name, err)
	}
	return sch, canon, nil
}

// Spec returns how the tool called name is described to a model: its name,
// description, input schema (canonical JSON) and risk level.
func (r *Registry) Spec(name string) (noeta.ToolSpec, bool) {
	st := r.state()
	t, ok := st.byName[name]
	if !ok {
		return noeta.ToolSpec{}, false
	}
	return noeta.ToolSpec{
		Name:        name,
		Description: t.Description(),
		InputSchema: slices.Clone(st.schemas[name].raw),
		Risk:        t.Risk().String(),
	}, true
}

// Specs returns the specs of names, in the order given, leaving out names the
// registry does not have and repeats.
func (r *Registry) Specs(names []string) []noeta.ToolSpec {
	out := make([]noeta.ToolSpec, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if s, ok := r.Spec(n); ok {
			out = append(out, s)
		}
	}
	return out
}

// ValidateArgs checks args against the input schema of the tool called
// name. Empty args mean {}, as they do to [Registry.Run]; null does not (a
// model that sends null sent no object). The error wraps [ErrUnknownTool] or
// [ErrInvalidArgs] and is worded for the model:
//
//	tools: invalid args: read_file: args: missing property 'path'
func (r *Registry) ValidateArgs(name string, args json.RawMessage) error {
	s, ok := r.state().schemas[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("%w: %s: args are not valid JSON: %v", ErrInvalidArgs, name, err)
	}
	if err := s.compiled.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return fmt.Errorf("%w: %s: %v", ErrInvalidArgs, name, err)
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalidArgs, name, describeArgs(verr))
	}
	return nil
}

var printer = message.NewPrinter(language.English)

type argViolation struct {
	at  []string
	msg string
}

// describeArgs reduces the validator's error tree to one line: the deepest
// violation (the most specific), in a fixed order so the same args always
// give the same message, and how many others there were.
func describeArgs(verr *jsonschema.ValidationError) string {
	var all []argViolation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		all = append(all, argViolation{at: e.InstanceLocation, msg: e.ErrorKind.LocalizedString(printer)})
	}
	walk(verr)
	if len(all) == 0 {
		return verr.Error()
	}
	slices.SortStableFunc(all, func(a, b argViolation) int {
		if len(a.at) != len(b.at) {
			return cmp.Compare(len(b.at), len(a.at))
		}
		if c := cmp.Compare(strings.Join(a.at, "/"), strings.Join(b.at, "/")); c != 0 {
			return c
		}
		return cmp.Compare(a.msg, b.msg)
	})
	v := all[0]
	s := "args"
	if len(v.at) > 0 {
		s += "." + strings.Join(v.at, ".")
	}
	s += ": " + v.msg
	if n := len(all) - 1; n == 1 {
		s += " (and 1 more error)"
	} else if n > 1 {
		s += fmt.Sprintf(" (and %d more errors)", n)
	}
	return s
}

// The input schemas of the built-ins. They say exactly what Run accepts:
// DecodeArgs refuses unknown members (additionalProperties false) and takes
// null for an optional member as absent (so null is allowed there).
const (
	echoSchema = `{"type":"object","description":"Any JSON object; it is returned as it is."}`
	// sleep's maximum is the configured MaxSleep, filled in by sleepSchema.
	readFileSchema  = `{"type":"object","properties":{"path":{"type":"string","minLength":1,"description":"The file's path, relative to the workspace."}},"required":["path"],"additionalProperties":false}`
	writeFileSchema = `{"type":"object","properties":{` +
		`"path":{"type":"string","minLength":1,"description":"The file's path, relative to the workspace; missing parent directories are created."},` +
		`"content":{"type":"string","description":"What to write: text, or base64 when encoding is base64."},` +
		`"mode":{"enum":["overwrite","append","create","",null],"description":"overwrite (the default), append, or create (fails if the file exists)."},` +
		`"encoding":{"enum":["utf-8","base64","",null],"description":"How content is encoded: utf-8 (the default) or base64."}` +
		`},"required":["path","content"],"additionalProperties":false}`
)

func sleepSchema(maxSeconds float64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"seconds":{"type":"number","minimum":0,"maximum":%s,"description":"How long to wait, in seconds."}},"required":["seconds"],"additionalProperties":false}`, jsonNumber(maxSeconds)))
}

func shellSchema(maxSeconds float64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
		`"command":{"type":"string","minLength":1,"pattern":"\\S","description":"The command line, run as sh -c in the workspace."},`+
		`"timeout_seconds":{"type":["number","null"],"exclusiveMinimum":0,"maximum":%s,"description":"The call's timeout, in seconds."}`+
		`},"required":["command"],"additionalProperties":false}`, jsonNumber(maxSeconds)))
}

func jsonNumber(f float64) string {
	b, err := json.Marshal(f)
	if err != nil { // NaN or Inf: never from a validated config
		return "0"
	}
	return string(b)
}
