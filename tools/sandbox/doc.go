// Package sandbox runs every process a tool starts confined, so that an
// action a guard allowed can do only what the sandbox's [Policy] lets it:
// the `shell` tool's commands and stdio MCP servers alike.
//
// A sandboxed process starts in new user, PID, mount, IPC, UTS and network
// namespaces, under a first process: the small helper binary
// (cmd/noeta-sandbox, package internal/sandboxinit) or the engine's own,
// started as "noeta-sandbox-init". As PID 1 of its namespaces it mounts a
// /proc of its own, builds a root of the tool's own in which only the
// allowed paths appear, covers what must stay hidden, brings up a loopback
// of its own
// and relays the egress proxy; then, on every one of its threads, it sets
// the resource limits, drops every capability, sets no_new_privs, enforces
// a Landlock ruleset (the workspace read-write, the system's program and
// library directories read-only, nothing else) and a seccomp filter, and
// starts the tool, which inherits all of them and can undo none. It then
// watches the tree's process count, memory, processor time and wall time.
// When the tool's main process exits, the first process ends every process
// left in the PID namespace and exits: nothing a call starts outlives it.
//
// [Sandbox.Command] starts the first process with the call (an exec.Cmd);
// [Sandbox.Start] hands the call to one started ahead, which has done the
// part of the work no call decides (ADR 0056).
//
// A program that creates a [Sandbox] must call [Main] first thing in its
// main function (and a test binary in TestMain): that is where a
// re-executed binary becomes the sandbox's first process instead of the
// program. [New] refuses to build a Sandbox otherwise.
//
// Network egress is governed: a process has no route out but the [Proxy]
// the engine runs for its call, which admits only the host:port pairs the
// policy allows and accounts for every connection (noeta.Egress).
//
// docs/sandbox.md has the threat model, the configuration and how to see
// what a call reached.
package sandbox
