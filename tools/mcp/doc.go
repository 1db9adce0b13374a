// Package mcp makes the tools of MCP servers (Model Context Protocol)
// tools of noeta's registry, on the official Go SDK.
//
// A [Source] is one server of noeta.yaml's mcp_servers: a command the engine
// starts and talks to over stdio, or a streamable HTTP URL. Its tools are
// named mcp__<server>__<tool> (the names Claude Code gives them, which
// operators already write rules in), carry the server's input schema and
// description, and a risk level from the tool's annotations — readOnlyHint
// low, destructiveHint high, otherwise medium — unless the config overrides
// it; only the config can mark one an edit tool.
//
// # Lifecycle
//
// A server starts on first use ([Source.Tools] or a call), within its
// timeout; a stdio server leads a process group of its own with SIGKILL as
// its parent-death signal, inherits only HOME, LOGNAME, PATH, SHELL, TERM,
// USER, LANG and TMPDIR of the engine's environment (plus its configured
// env), and the end of its stderr is kept for errors. A
// server that fails to start, or dies, is started again on the next use,
// after a backoff that doubles from [Options.MinBackoff] to
// [Options.MaxBackoff] and resets once a call succeeds. The tool list is
// fetched at start and again after notifications/tools/list_changed.
// [Source.Close] stops the server.
//
// # Calls and faults
//
// A call has the server's timeout (or the tool's); when its context ends the
// SDK sends notifications/cancelled. Everything the model can act on is a
// failed [tools.Result] naming the server, never a hang: a server that
// cannot start (a missing command, one that exits at once, one that writes
// garbage to stdout), one that dies during the call, a tool that is gone
// from the list, a timeout, isError, and a result over
// [Options.MaxResultBytes]. Only the caller's context ending is an error.
// A fault ends that server's session (and kills its process) and nothing
// else.
//
// # Results
//
// A result's Output is {"text": ..., "structured": ..., "content": [...]}:
// text content joined with newlines, structuredContent as the server sent
// it, and a summary (type, MIME type, size, URI) of each image, audio,
// resource and resource link: binaries are never inlined.
package mcp
