package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/noeta-go/noeta"
)

// Tool is one thing a task can do. Implementations must be safe for
// concurrent use: one Tool value serves every task and worker of the process.
type Tool interface {
	// Name is the name policies and task files call the tool by, and the name
	// guards, rules and configs refer to. See [NewRegistry] for what is valid.
	Name() string
	// Risk is the tool's risk level; it must be a known level.
	Risk() RiskLevel
	// Edits reports a tool whose only side effect is changing files in the
	// task's workspace. Permission mode acceptEdits runs these without asking.
	Edits() bool
	// Description says what the tool does, for a model choosing a tool.
	Description() string
	// InputSchema is the JSON Schema (draft 2020-12 unless it says
	// otherwise) of the tool's args: an object schema. The registry
	// compiles it once and refuses a tool whose schema does not compile;
	// args that do not match it are never run. nil means any object.
	InputSchema() json.RawMessage
	// Run carries out one call. It must return promptly once ctx is done; see
	// the package documentation for when to return a failed Result and when
	// an error.
	Run(ctx context.Context, call Call) (Result, error)
}

// Call is one invocation of a tool.
type Call struct {
	// ID is the call id the policy gave the call (noeta.ToolCall.CallID).
	ID string
	// Args is the JSON args object; empty and null mean {}.
	Args json.RawMessage
	// Workspace is the task's directory. File tools are confined to it and
	// shell runs in it.
	Workspace string
	// Agent is the agent of the task that makes the call: its sandbox
	// policy confines the processes the call starts.
	Agent string
	// Task is the task that makes the call: a tool run elsewhere (a
	// Claude Code hook's) checks the call is the one its task decided.
	Task string
}

// Result is what a call produced, as the model will see it and as
// ToolCallFinished records it.
type Result struct {
	// Output is any JSON value; nil is recorded as null.
	Output json.RawMessage `json:"output"`
	// OK is false when the tool ran and failed to do its job.
	OK bool `json:"ok"`
	// Error says why, when OK is false.
	Error string `json:"error,omitempty"`
	// Egress is where the call's sandboxed processes asked to connect
	// (recorded in ToolCallFinished, not shown to the model).
	Egress []noeta.Egress `json:"-"`
	// Preview is what a model should read of Output when Output is over
	// the inline limit and recorded by ref (ToolCallFinished's preview):
	// for a tool whose output a model reads better in another shape than
	// its JSON (tools/mcp: the text, a line for each other block). The
	// engine cuts it to noeta.PreviewLimit, so a tool need not keep more
	// than that; empty, the engine shows the output's JSON.
	Preview string `json:"-"`
}

// Succeed returns an OK result whose output is the JSON encoding of v.
func Succeed(v any) (Result, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return Result{}, fmt.Errorf("tools: encode output: %w", err)
	}
	return Result{Output: out, OK: true}, nil
}

// Failf returns a failed result with no output and the formatted error.
func Failf(format string, args ...any) Result {
	return Result{Output: json.RawMessage("null"), Error: fmt.Sprintf(format, args...)}
}

// Errors a Run may return, wrapped with detail; a context's own errors pass
// through wrapped too, so errors.Is(err, context.Canceled) holds.
var (
	// ErrNoWorkspace: the call's workspace is not set, does not exist or is
	// not a directory. A wiring fault of the engine, not the model's.
	ErrNoWorkspace = errors.New("tools: no workspace")
	// ErrPanicked: the tool panicked ([Registry.Run] recovers it).
	ErrPanicked = errors.New("tools: tool panicked")
	// ErrBadOutput: the tool returned output that is not valid JSON.
	ErrBadOutput = errors.New("tools: output is not valid JSON")
)

// Def describes a tool made from a function, for tools too small for a type of
// their own and for tests.
type Def struct {
	Name        string
	Risk        RiskLevel
	Edits       bool
	Description string
	// InputSchema is the args' JSON Schema; nil means {"type": "object"}.
	InputSchema json.RawMessage
	Run         func(ctx context.Context, call Call) (Result, error)
}

// Define returns the Tool that d describes. The registry checks the name and
// the risk level.
func Define(d Def) Tool { return defined{d} }

type defined struct{ d Def }

func (t defined) Name() string    { return t.d.Name }
func (t defined) Risk() RiskLevel { return t.d.Risk }
func (t defined) Edits() bool     { return t.d.Edits }
func (t defined) Description() string {
	return t.d.Description
}
func (t defined) InputSchema() json.RawMessage {
	if t.d.InputSchema == nil {
		return anyObject
	}
	return t.d.InputSchema
}
func (t defined) Run(ctx context.Context, call Call) (Result, error) {
	if t.d.Run == nil {
		return Result{}, fmt.Errorf("tools: %s has no Run function", t.d.Name)
	}
	return t.d.Run(ctx, call)
}

// ctxErr wraps ctx's error for a tool, or returns nil while ctx is live.
func ctxErr(ctx context.Context, tool string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	return nil
}
