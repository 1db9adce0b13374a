package mcp

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// DefaultTimeoutSeconds bounds one call of a [Server] that gives no
// TimeoutSeconds.
const DefaultTimeoutSeconds = 60

// Tool names: every tool of a server is registered as
// mcp__<server>__<tool>, the names operators write rules in.
const (
	ToolPrefix    = "mcp__"
	ToolSeparator = "__"
)

// ToolName is the registry name of a server's tool.
func ToolName(server, tool string) string { return ToolPrefix + server + ToolSeparator + tool }

// Server is an MCP server a [Source] offers the tools of: an entry of
// noeta.yaml's mcp_servers:, converted by the composition layer, or built
// in Go. Exactly one of Command (stdio) and URL (streamable HTTP) is set.
type Server struct {
	// Name is the server's name, the <server> of its tools' names.
	Name string
	// Command is the argv of a stdio server, started by the source.
	Command []string
	// Env is added to the command's environment, which otherwise has only
	// the engine's HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG and TMPDIR
	// (not its API keys). Values may hold ${VAR}, expanded from
	// Options.LookupEnv when the server starts; they are never printed.
	Env map[string]string
	// Cwd is the command's working directory; the engine's when empty.
	Cwd string
	// URL is the endpoint of a streamable HTTP server.
	URL string
	// Headers are sent with every request to URL, ${VAR} expanded like Env;
	// they are never printed.
	Headers map[string]string
	// TimeoutSeconds bounds one call (DefaultTimeoutSeconds when 0).
	TimeoutSeconds int
	// TrustAnnotations takes the server's readOnlyHint as low risk. An
	// annotation is the server's own claim, which nothing checks: by
	// default every tool is medium risk, high when the server marks it
	// destructive.
	TrustAnnotations bool
	// Tools are per-tool overrides, by the tool's name on the server.
	Tools map[string]ToolOverride
}

// ToolOverride is what the operator says of one of a server's tools, over
// its annotations.
type ToolOverride struct {
	// Risk is low, medium or high; "" keeps the level of the annotations.
	Risk string
	// Edits marks the tool as an edit tool (permission mode acceptEdits).
	// Never taken from annotations.
	Edits bool
	// TimeoutSeconds overrides the server's; 0 keeps it.
	TimeoutSeconds int
}

// Stdio reports a server the source starts as a command.
func (s Server) Stdio() bool { return len(s.Command) > 0 }

// check refuses a server the source cannot start: the mistakes noeta.yaml's
// decoder reports with their line, for a Server built in Go.
func (s Server) check() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("an mcp server needs a name")
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("mcp server %q: give Command (a stdio server) or URL (a streamable HTTP server), not both", s.Name)
	case s.Command == nil && s.URL == "":
		return fmt.Errorf("mcp server %q: needs Command (a stdio server) or URL (a streamable HTTP server)", s.Name)
	case s.Command != nil && (len(s.Command) == 0 || s.Command[0] == ""):
		return fmt.Errorf("mcp server %q: Command must start with the program to run", s.Name)
	case s.TimeoutSeconds < 0:
		return fmt.Errorf("mcp server %q: TimeoutSeconds must be >= 0", s.Name)
	}
	return nil
}

// ExpandEnv returns Env with each ${VAR} replaced by lookup(VAR). A
// variable lookup does not have is an error naming the key and the
// variable, never the value: a server must not start with half a secret.
func (s Server) ExpandEnv(lookup func(string) (string, bool)) (map[string]string, error) {
	return expandAll(s.Name, "env", s.Env, lookup)
}

// ExpandHeaders is [Server.ExpandEnv] for Headers.
func (s Server) ExpandHeaders(lookup func(string) (string, bool)) (map[string]string, error) {
	return expandAll(s.Name, "headers", s.Headers, lookup)
}

func expandAll(server, field string, m map[string]string, lookup func(string) (string, bool)) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, err := expandVars(m[k], lookup)
		if err != nil {
			return nil, fmt.Errorf("mcp server %q: %s.%s: %w", server, field, k, err)
		}
		out[k] = v
	}
	return out, nil
}

// varRef is one ${VAR}.
var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)

func expandVars(v string, lookup func(string) (string, bool)) (string, error) {
	var err error
	out := varRef.ReplaceAllStringFunc(v, func(ref string) string {
		name := ref[2 : len(ref)-1]
		val, ok := lookup(name)
		if !ok && err == nil {
			err = fmt.Errorf("environment variable %s is not set", name)
		}
		return val
	})
	if err != nil {
		return "", err
	}
	return out, nil
}
