package config

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/internal/boundedio"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoad: Load reads a file and every error names it, the decoder's with
// the line, a read's with the path.
func TestLoad(t *testing.T) {
	good := writeFile(t, "noeta.yaml", designConfig+"observers:\n  audit: {file: a.jsonl}\n")
	f, err := Load(t.Context(), good)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != good || f.Governance == nil || len(f.Governance.Agents()) != 2 || len(f.Hooks.PostToolUse) != 1 ||
		f.Observers.Audit == nil || f.Observers.Audit.File != "a.jsonl" {
		t.Errorf("Load = %+v", f)
	}
	if e := f.ErrorAt("observers.audit.file", "cannot open"); e.File != good || e.Line == 0 ||
		!strings.HasPrefix(e.Error(), good+": observers.audit.file: cannot open (line ") {
		t.Errorf("ErrorAt = %+v: %v", e, e)
	}

	bad := writeFile(t, "bad.yaml", "agents:\n  a:\n    budget: {max_cost_usd: -1}\n")
	_, err = Load(t.Context(), bad)
	var ce *Error
	if !errors.As(err, &ce) || ce.File != bad || ce.Line != 3 || ce.Path != "agents.a.budget.max_cost_usd" {
		t.Errorf("a bad file: %v (%+v)", err, ce)
	}

	dir := t.TempDir()
	big := writeFile(t, "big.yaml", "# "+strings.Repeat("x", MaxSize))
	missing := filepath.Join(dir, "missing.yaml")
	for _, tt := range []struct {
		name, path string
		is         error
	}{
		{"missing", missing, fs.ErrNotExist},
		{"a directory", dir, boundedio.ErrNotRegular},
		{"over the size limit", big, boundedio.ErrTooLarge},
	} {
		_, err := Load(t.Context(), tt.path)
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, err, tt.is, tt.path)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Load(ctx, good); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled ctx: got %v", err)
	}
}

func TestErrorString(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{Msg: "m"}, "m"},
		{Error{Path: "a.b", Msg: "m"}, "a.b: m"},
		{Error{Path: "a.b", Msg: "m", Line: 3, Column: 5}, "a.b: m (line 3)"},
		{Error{File: "noeta.yaml", Path: "a.b", Msg: "m", Line: 3}, "noeta.yaml: a.b: m (line 3)"},
		{Error{File: "noeta.yaml", Msg: "yaml: bad"}, "noeta.yaml: yaml: bad"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.e, got, tt.want)
		}
	}
}

// TestParseEmpty: an empty file is a valid one with nothing in it, and a
// Governance to build stacks from (never nil).
func TestParseEmpty(t *testing.T) {
	for _, doc := range []string{"", "\n", "# nothing\n", "~\n", "agents:\nrules:\nguards:\nhooks:\nobservers:\n"} {
		f, err := Parse("", []byte(doc))
		if err != nil {
			t.Errorf("%q: %v", doc, err)
			continue
		}
		if f.Governance == nil || len(f.Governance.Agents()) != 0 || !f.Hooks.Empty() || !f.Observers.Empty() || f.Path != "" {
			t.Errorf("%q: not empty: %+v", doc, f)
		}
	}
	f, err := Parse("", nil)
	if err != nil || f.Governance == nil {
		t.Errorf("nil data: %v, %+v", err, f)
	}
}

// FuzzParse: any document either decodes or yields errors that are each an
// *Error with a message; the decoder never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{designConfig, "observers: {audit: {file: a}, metrics: {listen: ':1'}, trace: {otlp_endpoint: 'h:1'}, fanout: {}}\n",
		"hooks: {post_tool_use: [{match_tool: '[a-c]*', command: [x], timeout_seconds: 0.5}]}\n", "a: &a [*a]\n", "<<: {agents: {}}\n",
		"mcp_servers_file: testdata/claude-code.mcp.json\nmcp_servers: {a: {command: x, args: [y]}}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		file, err := Parse("f.yaml", []byte(doc))
		if err == nil {
			if file == nil || file.Governance == nil {
				t.Fatalf("no error and no File")
			}
			if err := file.Hooks.Validate(); err != nil {
				t.Fatalf("decoded hooks fail Validate: %v", err)
			}
			return
		}
		list := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			list = j.Unwrap()
		}
		for _, e := range list {
			// A mistake in the file mcp_servers_file names is that file's.
			ce, ok := e.(*Error)
			if !ok || ce.Msg == "" || ce.File == "" {
				t.Fatalf("%T %q is not an *Error with a message naming its file", e, e)
			}
		}
	})
}
