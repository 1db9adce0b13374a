package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func builtinRegistry(t *testing.T) *Registry {
	t.Helper()
	ts, err := Builtins(BuiltinConfig{MaxSleep: 10 * time.Second, ShellTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBuiltinSchemas pins what each built-in's schema accepts and refuses: the
// same args its Run accepts (an arg the schema passes is one DecodeArgs
// decodes), and the refusals worded for a model.
func TestBuiltinSchemas(t *testing.T) {
	t.Parallel()
	r := builtinRegistry(t)
	for _, tt := range []struct {
		tool, args string
		want       string // "" accepted; else a part of the error
	}{
		{"echo", `{}`, ""},
		{"echo", `{"anything":[1,2]}`, ""},
		{"echo", ``, ""},
		{"echo", `[1]`, "want object"},
		{"read_file", `{"path":"a.txt"}`, ""},
		{"read_file", `{}`, "missing property 'path'"},
		{"read_file", `{"path":""}`, "args.path"},
		{"read_file", `{"path":"a","x":1}`, "additional properties 'x'"},
		{"read_file", `{"path":7}`, "args.path: got number, want string"},
		{"write_file", `{"path":"a","content":"b"}`, ""},
		{"write_file", `{"path":"a","content":"b","mode":"append","encoding":"base64"}`, ""},
		{"write_file", `{"path":"a","content":"b","mode":null,"encoding":""}`, ""},
		{"write_file", `{"path":"a"}`, "missing property 'content'"},
		{"write_file", `{"path":"a","content":"b","mode":"truncate"}`, "args.mode"},
		{"sleep", `{"seconds":0}`, ""},
		{"sleep", `{"seconds":10}`, ""},
		{"sleep", `{"seconds":10.5}`, "args.seconds"},
		{"sleep", `{"seconds":-1}`, "args.seconds"},
		{"sleep", `{"seconds":"1"}`, "want number"},
		{"shell", `{"command":"ls"}`, ""},
		{"shell", `{"command":"ls","timeout_seconds":null}`, ""},
		{"shell", `{"command":"ls","timeout_seconds":30}`, ""},
		{"shell", `{"command":"ls","timeout_seconds":0}`, "args.timeout_seconds"},
		{"shell", `{"command":"ls","timeout_seconds":31}`, "args.timeout_seconds"},
		{"shell", `{"command":"   "}`, "args.command"},
		{"shell", `{"cmd":"ls"}`, "'cmd' not allowed (and 1 more error)"},
		{"shell", `{"command":`, "not valid JSON"},
	} {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			err := r.ValidateArgs(tt.tool, json.RawMessage(tt.args))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidArgs) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an ErrInvalidArgs containing %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.tool+": ") {
				t.Fatalf("%v does not name the tool", err)
			}
		})
	}
}

// TestBuiltinSpecs checks every built-in describes itself: a description, an
// object schema that is canonical JSON, its risk level.
func TestBuiltinSpecs(t *testing.T) {
	t.Parallel()
	r := builtinRegistry(t)
	specs := r.Specs(append(r.Names(), "nope", "echo"))
	if len(specs) != len(r.Names()) {
		t.Fatalf("Specs gave %d specs for %d tools (unknown and repeated names must be left out)", len(specs), len(r.Names()))
	}
	for i, s := range specs {
		if s.Name != r.Names()[i] {
			t.Fatalf("spec %d is %s, want %s (the order given)", i, s.Name, r.Names()[i])
		}
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
		var obj map[string]any
		if err := json.Unmarshal(s.InputSchema, &obj); err != nil || obj["type"] != "object" {
			t.Errorf("%s: schema %s is not an object schema (%v)", s.Name, s.InputSchema, err)
		}
		risk, _ := r.RiskString(s.Name)
		if s.Risk != risk {
			t.Errorf("%s: risk %q, want %q", s.Name, s.Risk, risk)
		}
	}
	sp, _ := r.Spec("sleep")
	if !strings.Contains(string(sp.InputSchema), `"maximum":10`) {
		t.Errorf("sleep's schema %s does not carry the configured maximum", sp.InputSchema)
	}
	if _, ok := r.Spec("nope"); ok {
		t.Error("Spec of an unknown tool is ok")
	}
}

// TestRegistrySchemas covers Def schemas and what registration refuses.
func TestRegistrySchemas(t *testing.T) {
	t.Parallel()
	good := Define(Def{Name: "lookup", Risk: RiskLow, Description: "Looks a word up.", Run: okRun,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)})
	plain := Define(Def{Name: "plain", Risk: RiskLow, Run: okRun})
	r, err := NewRegistry(good, plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ValidateArgs("lookup", json.RawMessage(`{"word":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.ValidateArgs("lookup", json.RawMessage(`{}`)); !errors.Is(err, ErrInvalidArgs) {
		t.Fatalf("missing word: %v", err)
	}
	if err := r.ValidateArgs("plain", json.RawMessage(`{"any":1}`)); err != nil {
		t.Fatalf("a Def without a schema takes any object: %v", err)
	}
	if err := r.ValidateArgs("plain", json.RawMessage(`"text"`)); !errors.Is(err, ErrInvalidArgs) {
		t.Fatalf("a Def without a schema takes only objects: %v", err)
	}
	if sp, _ := r.Spec("plain"); string(sp.InputSchema) != `{"type":"object"}` {
		t.Fatalf("plain's schema is %s", sp.InputSchema)
	}
	if err := r.ValidateArgs("missing", json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}

	for _, tt := range []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "input schema"},
		{"not an object", `[1]`, "not a JSON object"},
		{"not an object schema", `{"type":"string"}`, `"type": "object"`},
		{"does not compile", `{"type":"object","properties":{"a":{"type":"strin"}}}`, "does not compile"},
		{"bad regexp", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`, "does not compile"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(Define(Def{Name: "bad", Risk: RiskLow, Run: okRun, InputSchema: json.RawMessage(tt.schema)}))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"bad"`) {
				t.Fatalf("got %v; want an error naming the tool and containing %q", err, tt.want)
			}
		})
	}
}
