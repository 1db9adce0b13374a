package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/noeta-go/noeta"
)

// MaxNameLen is the longest tool name a registry accepts.
const MaxNameLen = 64

// Registry is the set of tools the engine can run, by name. Every method is
// safe for concurrent use: a registry changes only through
// [Registry.Replace], which swaps a source's tools atomically.
type Registry struct {
	cur atomic.Pointer[registryState]
	mu  sync.Mutex // serialises Replace
}

// registryState is one immutable version of a registry's tools.
type registryState struct {
	byName  map[string]Tool
	names   []string
	schemas map[string]toolSchema
}

func (r *Registry) state() *registryState { return r.cur.Load() }

// toolSchema is a tool's input schema, compiled once at registration.
type toolSchema struct {
	compiled *jsonschema.Schema
	raw      json.RawMessage // canonical
}

// NewRegistry builds a registry of tools. A nil tool, an invalid name, a risk
// level that is not known and two tools with one name are refused. A valid name
// is 1 to [MaxNameLen] characters: a letter, then letters, digits, '_', '-' or
// '.'; so a name never contains the glob characters of rules. Each tool's
// input schema is compiled here: one that does not compile, or that does not
// describe an object, is refused too.
func NewRegistry(tools ...Tool) (*Registry, error) {
	st, err := newRegistryState(tools)
	if err != nil {
		return nil, err
	}
	r := &Registry{}
	r.cur.Store(st)
	return r, nil
}

func newRegistryState(tools []Tool) (*registryState, error) {
	r := &registryState{byName: make(map[string]Tool, len(tools)), schemas: make(map[string]toolSchema, len(tools))}
	for i, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("tools: tool %d is nil", i)
		}
		name := t.Name()
		if err := validName(name); err != nil {
			return nil, fmt.Errorf("tools: tool %d: %w", i, err)
		}
		if risk := t.Risk(); !risk.Valid() {
			return nil, fmt.Errorf("tools: tool %q has unknown risk level %s", name, risk)
		}
		if _, dup := r.byName[name]; dup {
			return nil, fmt.Errorf("tools: two tools are named %q", name)
		}
		sch, raw, err := compileSchema(name, t.InputSchema())
		if err != nil {
			return nil, err
		}
		r.schemas[name] = toolSchema{compiled: sch, raw: raw}
		r.byName[name] = t
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)
	return r, nil
}

// Replace swaps the registry's tools whose names begin with prefix for ts,
// each of which must begin with prefix too: a tool source whose list
// changed (an MCP server's, prefix mcp__<server>__). The new tools are
// checked as NewRegistry checks them; on an error nothing changes. A call
// that resolved its tool before the swap runs with that tool.
func (r *Registry) Replace(prefix string, ts []Tool) error {
	if prefix == "" {
		return fmt.Errorf("tools: replace: an empty prefix would replace every tool")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.state()
	keep := make([]Tool, 0, len(old.names)+len(ts))
	for _, n := range old.names {
		if !strings.HasPrefix(n, prefix) {
			keep = append(keep, old.byName[n])
		}
	}
	for _, t := range ts {
		if t != nil && !strings.HasPrefix(t.Name(), prefix) {
			return fmt.Errorf("tools: replace: tool %q is not under %q", t.Name(), prefix)
		}
	}
	st, err := newRegistryState(append(keep, ts...))
	if err != nil {
		return err
	}
	r.cur.Store(st)
	return nil
}

func validName(name string) error {
	if name == "" {
		return fmt.Errorf("tool name is empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("tool name %q is longer than %d characters", name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return fmt.Errorf("tool name %q does not start with a letter", name)
		}
		if !letter && !(c >= '0' && c <= '9') && c != '_' && c != '-' && c != '.' {
			return fmt.Errorf("tool name %q has %q (want letters, digits, '_', '-' or '.')", name, c)
		}
	}
	return nil
}

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (Tool, bool) {
	t, ok := r.state().byName[name]
	return t, ok
}

// Risk returns the risk level of the tool called name, and false for a tool
// the registry does not have.
func (r *Registry) Risk(name string) (RiskLevel, bool) {
	t, ok := r.state().byName[name]
	if !ok {
		return 0, false
	}
	return t.Risk(), true
}

// RiskString is [Registry.Risk] with the level as its wire string. Its method
// value has the shape of guards.RiskLookup, which is how the Permission guard
// learns risk levels without importing this package:
//
//	guards.RiskLookup(reg.RiskString)
func (r *Registry) RiskString(name string) (string, bool) {
	risk, ok := r.Risk(name)
	if !ok {
		return "", false
	}
	return risk.String(), true
}

// Edits reports whether the tool called name is an edit tool ([Tool.Edits]);
// false for a tool the registry does not have.
func (r *Registry) Edits(name string) bool {
	t, ok := r.state().byName[name]
	return ok && t.Edits()
}

// Names returns the tool names in ascending order, in a slice of the caller's.
func (r *Registry) Names() []string {
	return append([]string(nil), r.state().names...)
}

// Run resolves call.Tool and runs it in workspace. It adds to [Tool.Run] what
// every caller would otherwise repeat:
//
//   - a tool the registry does not have is a failed Result (the model named
//     it), not an error;
//   - a panic in the tool is an error wrapping [ErrPanicked];
//   - nil output becomes null, output that is not valid JSON is an error
//     wrapping [ErrBadOutput], and a failed Result with no Error gets one.
func (r *Registry) Run(ctx context.Context, call noeta.ToolCall, workspace string) (res Result, err error) {
	return r.RunAs(ctx, call, workspace, Caller{})
}

// Caller is who makes a call: the task and its agent.
type Caller struct {
	Task  string
	Agent string
}

// RunAs is Run for a call made by a task: its agent's sandbox policy
// confines the processes the call starts.
func (r *Registry) RunAs(ctx context.Context, call noeta.ToolCall, workspace string, by Caller) (res Result, err error) {
	t, ok := r.state().byName[call.Tool]
	if !ok {
		return Failf("unknown tool %q", call.Tool), nil
	}
	defer func() {
		if p := recover(); p != nil {
			res, err = Result{}, fmt.Errorf("%w: %s: %v", ErrPanicked, call.Tool, p)
		}
	}()
	res, err = t.Run(ctx, Call{ID: call.CallID, Args: call.Args, Workspace: workspace, Agent: by.Agent, Task: by.Task})
	if err != nil {
		return Result{}, err
	}
	if len(res.Output) == 0 {
		res.Output = json.RawMessage("null")
	} else if !json.Valid(res.Output) {
		return Result{}, fmt.Errorf("%w: %s", ErrBadOutput, call.Tool)
	}
	if !res.OK && res.Error == "" {
		res.Error = call.Tool + ": failed"
	}
	return res, nil
}
