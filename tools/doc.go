// Package tools holds what a task can do to the world: the [Tool] interface,
// the [Registry] the engine resolves tool names with, and the built-in tools
// echo, sleep, read_file, write_file and shell ([Builtins]).
//
// # Running a tool
//
// The engine calls [Tool.Run] (or [Registry.Run], which also resolves the name
// and turns a panic into an error) with a context that carries the call's
// deadline and the task's cancellation, and a [Call]: the call id, the JSON
// args object the policy proposed, and the task's workspace directory. Every
// built-in stops promptly when the context ends.
//
// The outcome has two channels, and the split is part of the contract:
//
//   - A [Result] is what the model gets to see. A tool that ran and could not
//     do its job (bad args, a path outside the workspace, a missing file, a
//     non-zero exit status, its own timeout) returns a Result with OK false
//     and Error saying why. The engine records it in ToolCallFinished and the
//     task carries on.
//   - A returned error means the call produced no result at all: the context
//     ended first (the error wraps ctx.Err(), so errors.Is with
//     context.Canceled or context.DeadlineExceeded holds), the workspace is
//     missing ([ErrNoWorkspace]), the shell could not be started, or the tool
//     panicked ([ErrPanicked]). The engine decides what to record; a
//     cancelled call in particular is not a tool failure.
//
// # Risk and edits
//
// Every tool has a [RiskLevel] (low < medium < high) that the Permission guard
// compares with an agent's max_risk_level and that decides, in permission mode
// default, which tools need approval. [Tool.Edits] marks the tools that only
// change files in the workspace (write_file): permission mode acceptEdits lets
// those run without asking. The guards never see tools; they take
// [Registry.RiskString] as their risk lookup.
//
// # Input schemas
//
// Every tool describes its args with a JSON Schema ([Tool.InputSchema]; a
// [Def] without one takes any object) and a [Tool.Description]: a model is
// offered the agent's tools as [Registry.Specs]. [NewRegistry] compiles each
// schema once and refuses one that does not compile or does not describe an
// object. The engine checks a call with [Registry.ValidateArgs] before the
// guards: args the schema refuses, and a tool the registry lacks, are
// recorded as a refusal the model reads and never run. The built-ins'
// schemas say exactly what their Run accepts.
//
// # Output caps and the ContentStore
//
// Two limits with two owners. A tool bounds what it returns, so that a command
// printing gigabytes cannot exhaust the engine's memory: shell keeps at most
// [BuiltinConfig.OutputCap] bytes of stdout and of stderr, read_file at most
// [BuiltinConfig.MaxReadBytes] of a file, and both say "truncated": true when
// they cut. What fits in an event is the engine's business: a result whose
// output is over the inline payload limit goes to the ContentStore and
// ToolCallFinished carries output_ref instead of output (eventlog.Spill). This
// package imports only the root vocabulary, so it never sees the store.
//
// # Workspace confinement
//
// read_file and write_file resolve paths against [Call.Workspace] through
// [os.Root]: ".." that climbs out, an absolute path outside the workspace, and
// a symbolic link that points outside are all refused. shell runs in the
// workspace with HOME set to it but is not confined by this package: a shell
// command can do whatever the engine's user can, which is why it is high risk.
//
// The shell tool uses process groups and is for Unix systems.
package tools
