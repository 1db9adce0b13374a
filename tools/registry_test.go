package tools

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

func okRun(context.Context, Call) (Result, error) {
	return Result{Output: json.RawMessage(`1`), OK: true}, nil
}

func def(name string, risk RiskLevel) Tool { return Define(Def{Name: name, Risk: risk, Run: okRun}) }

func TestNewRegistryRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxNameLen+1)
	for _, tt := range []struct {
		name  string
		tools []Tool
		want  string
	}{
		{"nil tool", []Tool{def("a", RiskLow), nil}, "tools: tool 1 is nil"},
		{"duplicate", []Tool{def("a", RiskLow), def("b", RiskLow), def("a", RiskHigh)}, `tools: two tools are named "a"`},
		{"empty name", []Tool{def("", RiskLow)}, "tool name is empty"},
		{"long name", []Tool{def(long, RiskLow)}, "longer than 64"},
		{"glob star", []Tool{def("read*", RiskLow)}, `has '*'`},
		{"space", []Tool{def("read file", RiskLow)}, `has ' '`},
		{"leading digit", []Tool{def("1tool", RiskLow)}, "does not start with a letter"},
		{"leading underscore", []Tool{def("_x", RiskLow)}, "does not start with a letter"},
		{"zero risk", []Tool{def("a", 0)}, `tools: tool "a" has unknown risk level risk(0)`},
		{"risk out of range", []Tool{def("a", 9)}, "unknown risk level risk(9)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := NewRegistry(tt.tools...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, %v; want an error containing %q", reg, err, tt.want)
			}
		})
	}
}

func TestNewRegistryAcceptsNames(t *testing.T) {
	t.Parallel()
	names := []string{"a", "Edit", "mcp__github__create_issue", "web.fetch", "git-diff", strings.Repeat("x", MaxNameLen)}
	var ts []Tool
	for _, n := range names {
		ts = append(ts, def(n, RiskLow))
	}
	if _, err := NewRegistry(ts...); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRegistry(); err != nil {
		t.Fatalf("an empty registry: %v", err)
	}
}

func TestRegistryLookup(t *testing.T) {
	t.Parallel()
	edit := Define(Def{Name: "edit_file", Risk: RiskMedium, Edits: true, Run: okRun})
	reg, err := NewRegistry(def("zeta", RiskHigh), def("alpha", RiskLow), edit)
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); !slices.Equal(got, []string{"alpha", "edit_file", "zeta"}) {
		t.Fatalf("Names() = %v", got)
	}
	reg.Names()[0] = "mutated"
	if reg.Names()[0] != "alpha" {
		t.Fatal("Names() shares its slice with the registry")
	}
	if tool, ok := reg.Lookup("zeta"); !ok || tool.Name() != "zeta" {
		t.Fatalf("Lookup(zeta) = %v, %v", tool, ok)
	}
	if _, ok := reg.Lookup("nope"); ok {
		t.Fatal("Lookup(nope) found a tool")
	}
	for _, tt := range []struct {
		name  string
		risk  RiskLevel
		wire  string
		ok    bool
		edits bool
	}{
		{"alpha", RiskLow, "low", true, false},
		{"edit_file", RiskMedium, "medium", true, true},
		{"zeta", RiskHigh, "high", true, false},
		{"nope", 0, "", false, false},
	} {
		if r, ok := reg.Risk(tt.name); r != tt.risk || ok != tt.ok {
			t.Errorf("Risk(%q) = %v, %v; want %v, %v", tt.name, r, ok, tt.risk, tt.ok)
		}
		if s, ok := reg.RiskString(tt.name); s != tt.wire || ok != tt.ok {
			t.Errorf("RiskString(%q) = %q, %v; want %q, %v", tt.name, s, ok, tt.wire, tt.ok)
		}
		if e := reg.Edits(tt.name); e != tt.edits {
			t.Errorf("Edits(%q) = %v, want %v", tt.name, e, tt.edits)
		}
	}
	// The method value has the shape of guards.RiskLookup.
	type riskLookup func(tool string) (risk string, ok bool)
	var lookup riskLookup = reg.RiskString
	if s, ok := lookup("zeta"); s != "high" || !ok {
		t.Fatalf("lookup(zeta) = %q, %v", s, ok)
	}
}

func TestBuiltinsMetadata(t *testing.T) {
	t.Parallel()
	all, err := Builtins(BuiltinConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(all...)
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); !slices.Equal(got, []string{"echo", "read_file", "shell", "sleep", "write_file"}) {
		t.Fatalf("Names() = %v", got)
	}
	for _, tt := range []struct {
		name  string
		risk  RiskLevel
		edits bool
	}{
		{"echo", RiskLow, false},
		{"sleep", RiskLow, false},
		{"read_file", RiskLow, false},
		{"write_file", RiskHigh, true},
		{"shell", RiskHigh, false},
	} {
		tool, _ := reg.Lookup(tt.name)
		if tool.Risk() != tt.risk || tool.Edits() != tt.edits {
			t.Errorf("%s: risk %v edits %v, want %v %v", tt.name, tool.Risk(), tool.Edits(), tt.risk, tt.edits)
		}
	}
}

func TestBuiltinConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  BuiltinConfig
		want string
	}{
		{BuiltinConfig{ShellTimeout: -1}, "ShellTimeout"},
		{BuiltinConfig{OutputCap: -1}, "OutputCap"},
		{BuiltinConfig{MaxReadBytes: -1}, "MaxReadBytes"},
		{BuiltinConfig{MaxSleep: -1}, "MaxSleep"},
		{BuiltinConfig{ShellPath: "sh"}, `ShellPath "sh" is not absolute`},
	} {
		if _, err := Builtins(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Builtins(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	d := BuiltinConfig{}.withDefaults()
	if d.ShellTimeout != DefaultShellTimeout || d.OutputCap != 64<<10 || d.MaxReadBytes != 1<<20 || d.ShellPath != "/bin/sh" || d.MaxSleep != DefaultMaxSleep {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestRegistryRun(t *testing.T) {
	t.Parallel()
	var seen Call
	record := Define(Def{Name: "record", Risk: RiskLow, Run: func(_ context.Context, c Call) (Result, error) {
		seen = c
		return Result{OK: true}, nil
	}})
	boom := Define(Def{Name: "boom", Risk: RiskLow, Run: func(context.Context, Call) (Result, error) { panic("kaput") }})
	bad := Define(Def{Name: "bad", Risk: RiskLow, Run: func(context.Context, Call) (Result, error) {
		return Result{Output: json.RawMessage(`{oops`), OK: true}, nil
	}})
	mute := Define(Def{Name: "mute", Risk: RiskLow, Run: func(context.Context, Call) (Result, error) { return Result{}, nil }})
	infra := Define(Def{Name: "infra", Risk: RiskLow, Run: func(context.Context, Call) (Result, error) {
		return Result{OK: true}, ErrNoWorkspace
	}})
	nofn := Define(Def{Name: "nofn", Risk: RiskLow})
	reg, err := NewRegistry(record, boom, bad, mute, infra, nofn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	res, err := reg.Run(ctx, noeta.ToolCall{CallID: "c9", Tool: "record", Args: json.RawMessage(`{"a":1}`)}, "/ws")
	if err != nil || !res.OK || string(res.Output) != "null" {
		t.Fatalf("record: %+v, %v; want OK with null output", res, err)
	}
	if seen.ID != "c9" || string(seen.Args) != `{"a":1}` || seen.Workspace != "/ws" {
		t.Fatalf("the tool saw %+v", seen)
	}

	res, err = reg.Run(ctx, noeta.ToolCall{CallID: "c1", Tool: "nope"}, "/ws")
	if err != nil || res.OK || res.Error != `unknown tool "nope"` {
		t.Fatalf("unknown tool: %+v, %v", res, err)
	}

	_, err = reg.Run(ctx, noeta.ToolCall{Tool: "boom"}, "/ws")
	if !errors.Is(err, ErrPanicked) || !strings.Contains(err.Error(), "kaput") {
		t.Fatalf("panic: got %v, want ErrPanicked with the value", err)
	}

	if _, err = reg.Run(ctx, noeta.ToolCall{Tool: "bad"}, "/ws"); !errors.Is(err, ErrBadOutput) {
		t.Fatalf("bad output: got %v, want ErrBadOutput", err)
	}

	res, err = reg.Run(ctx, noeta.ToolCall{Tool: "mute"}, "/ws")
	if err != nil || res.OK || res.Error != "mute: failed" {
		t.Fatalf("failure without a reason: %+v, %v", res, err)
	}

	res, err = reg.Run(ctx, noeta.ToolCall{Tool: "infra"}, "/ws")
	if !errors.Is(err, ErrNoWorkspace) || res.OK {
		t.Fatalf("infra error: %+v, %v; want the error and no result", res, err)
	}

	if _, err = reg.Run(ctx, noeta.ToolCall{Tool: "nofn"}, "/ws"); err == nil {
		t.Fatal("a Def without Run ran")
	}
}
