package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/noeta-go/noeta/internal/glob"
	"go.yaml.in/yaml/v3"
)

// MCP server defaults and bounds.
const (
	// DefaultMCPTimeoutSeconds bounds one call of an MCP server's tool
	// unless the server or the tool says otherwise.
	DefaultMCPTimeoutSeconds = 60
	maxMCPTimeoutSeconds     = 3600
	// MCPToolPrefix starts the registry name of every MCP tool:
	// mcp__<server>__<tool>, the names operators already write rules in.
	MCPToolPrefix = "mcp__"
	// ClaudeCodeToolPrefix starts the registry name of each of Claude
	// Code's tools that its hook reports to the gateway:
	// claude_code__Bash, claude_code__mcp__github__create_issue.
	ClaudeCodeToolPrefix = "claude_code__"
	// MCPSeparator separates the server from the tool in an MCP tool's name.
	MCPSeparator = "__"
	// maxMCPServerName leaves room for a tool name within the registry's
	// 64 characters.
	maxMCPServerName = 32
)

// MCPServer is one entry of mcp_servers: a server whose tools become the
// registry's tools mcp__<name>__<tool>. Exactly one of Command (stdio) and
// URL (streamable HTTP) is set.
//
//	mcp_servers:
//	  files:  {command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."], env: {}, cwd: "."}
//	  issues: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: "Bearer ${ISSUES_TOKEN}"}}
//	  db:
//	    command: ["./db-mcp"]
//	    timeout_seconds: 30                # per call; 60 by default
//	    trust_annotations: true            # take readOnlyHint as low risk (false by default)
//	    tools:
//	      drop_table: {risk: high}         # low | medium | high; medium by default (see TrustAnnotations)
//	      format_sql: {risk: low, timeout_seconds: 5}
//	      write_migration: {edits: true}   # permission mode acceptEdits runs it without asking
//	    sandbox: {write: [/srv/shared]}    # over the top-level sandbox:; see Sandbox
//	  py:
//	    command: python3                   # the MCP clients' form: the program alone
//	    args: [server.py]                  # its arguments, beside a command that is a string
//	    type: stdio                        # as the clients write it: stdio, or http beside a url
//
// command is the whole argv as a list, or, as the MCP clients write it, the
// program as a string with its arguments in args (a list with args is an
// error); type, which the clients write beside it, may say stdio, or http
// (streamable-http) for a url. The older HTTP+SSE transport (type: sse) is
// refused, and a url without type is taken as streamable HTTP. noeta
// expands ${VAR} only in env and headers, when the server starts (Cursor's
// ${env:VAR} is read as ${VAR}): a ${...} in a url, and in the clients'
// form's command and args, is refused, as are ${VAR:-default} and
// ${input:...} in env and headers, rather than taken as text a client would
// have expanded.
//
// mcp_servers_file: PATH (relative to noeta.yaml's directory) reads the
// servers of an MCP client's JSON file, {"mcpServers": {<name>: {...}}} as
// Claude Code's .mcp.json, Claude Desktop and Cursor write it, or VS Code's
// {"servers": {...}}, with the keys command (a string), args, env, cwd,
// type, url and headers, read as above. They join mcp_servers: and are
// governed like them (the top-level sandbox, default risks, the agents'
// tool lists); a name in both is an error, and a server that needs
// noeta's keys (tools, timeout_seconds, trust_annotations, sandbox) is
// declared in noeta.yaml instead. The file is read strictly, an unknown
// key being an error naming the file, the JSON path and the line, and the
// clients' own keys are decided one by one: disabled: true leaves the
// server out; autoApprove and alwaysAllow (tools a client runs unasked)
// are refused unless empty, approvals being noeta.yaml's; timeout is
// refused, its unit differing between clients; envFile and VS Code's
// inputs are refused, the server needing what they would give it; and a
// file with comments or trailing commas (JSONC) is not JSON.
type MCPServer struct {
	// Name is the server's key: a letter, then letters, digits, '-' and
	// single '_', at most 32 characters.
	Name string
	// Command is the argv of a stdio server, started by the engine: the
	// list, or the program and then args.
	Command []string
	// Env is added to the command's environment, which otherwise has only
	// the engine's HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG and TMPDIR
	// (not its API keys). Values may hold ${VAR}, expanded from the
	// engine's environment when the server starts (package tools/mcp);
	// they are never printed.
	Env map[string]string
	// Cwd is the command's working directory; the engine's when empty, and
	// a relative one is taken from the engine's.
	Cwd string
	// URL is the endpoint of a streamable HTTP server.
	URL string
	// Headers are sent with every request to URL, ${VAR} expanded like Env
	// when the server starts; they are never printed.
	Headers map[string]string
	// TimeoutSeconds bounds one call.
	TimeoutSeconds int
	// TrustAnnotations takes the server's readOnlyHint as low risk. An
	// annotation is the server's own claim, which nothing checks: a tool
	// marked read-only that writes would run unasked in permission mode
	// default. So by default every tool is medium risk, high when the
	// server marks it destructive (a claim that only asks for more care),
	// and an operator who trusts the server says so here.
	TrustAnnotations bool
	// Tools are per-tool overrides, by the tool's name on the server.
	Tools map[string]MCPTool
	// Sandbox is what the server's sandbox: sets over the top-level
	// sandbox: for the command; [File.SandboxForMCP] gives the settings in
	// force. A url server has none (sandbox: on one is an error).
	Sandbox Sandbox
}

// MCPTool overrides what noeta would otherwise take from an MCP tool's
// annotations.
type MCPTool struct {
	// Risk is low, medium or high; "" keeps the level of the annotations
	// (see MCPServer.TrustAnnotations).
	Risk string
	// Edits marks the tool as an edit tool (permission mode acceptEdits).
	// Never taken from annotations.
	Edits bool
	// TimeoutSeconds overrides the server's; 0 keeps it.
	TimeoutSeconds int
}

// Stdio reports a server the engine starts as a command.
func (s MCPServer) Stdio() bool { return len(s.Command) > 0 }

// varRef is one ${VAR}; validated at decode time, so the expansion when a
// server starts (package tools/mcp) meets only well-formed references.
var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)

// cursorRef is Cursor's and VS Code's spelling of ${VAR}, ${env:VAR}: the
// same variable, so it is read as ${VAR}.
var cursorRef = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)

// checkVars reports a value whose ${...} references are not all variable
// names, or that has a '$' followed by '{' without a closing '}'. The value
// is not quoted: it may be a secret.
func checkVars(v string) string {
	for _, m := range varRef.FindAllStringSubmatch(v, -1) {
		switch {
		case envName.MatchString(m[1]):
		case strings.HasPrefix(m[1], "env:") && envName.MatchString(m[1][len("env:"):]):
		case strings.Contains(m[1], ":-"):
			// The MCP clients' default; noeta refuses to start a
			// server whose variable is unset rather than guess.
			return "noeta does not take ${VAR:-default}: write ${VAR}, which must be set when the server starts"
		case strings.HasPrefix(m[1], "input:"):
			return "noeta asks no one for ${input:...}: write ${VAR}, taken from the engine's environment"
		default:
			return "a ${...} in the value must name an environment variable (letters, digits and _)"
		}
	}
	if strings.Contains(varRef.ReplaceAllString(v, ""), "${") {
		return "the value has a ${ without a closing }"
	}
	return ""
}

var mcpServerName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$`)
var mcpToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (d *decoder) mcpServers(n *yaml.Node, path string) map[string]MCPServer {
	if n = d.enter(n, path); n == nil {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]MCPServer, len(ps))
	for _, p := range ps {
		sp := join(path, p.key)
		d.mark(sp, p.keyN)
		if s, ok := d.mcpServer(p.value, sp, p.key, false); ok {
			out[p.key] = s
		}
	}
	return out
}

// The keys of a server in noeta.yaml, and in an MCP client's file
// (mcp_servers_file): the clients' keys that noeta reads, and those it
// refuses by name rather than as unknown, with why.
var (
	yamlKeys = []string{"command", "args", "type", "env", "cwd", "url", "headers", "timeout_seconds",
		"trust_annotations", "tools", "sandbox"}
	clientKeys = []string{"command", "args", "type", "env", "cwd", "url", "headers", "disabled",
		"autoApprove", "alwaysAllow", "timeout", "envFile"}
)

// mcpServer reads one server, written the way noeta.yaml writes it (keys
// yamlKeys) or, client, the way an MCP client's file does (clientKeys). It
// reports false for an entry in error, and for a client's entry marked
// disabled.
func (d *decoder) mcpServer(n *yaml.Node, sp, name string, client bool) (MCPServer, bool) {
	keys := yamlKeys
	if client {
		keys = clientKeys
	}
	if !mcpServerName.MatchString(name) || len(name) > maxMCPServerName {
		d.errs.addf(sp, "a server name must be a letter, then letters, digits, '-' and single '_' (at most %d characters), to make tool names mcp__<server>__<tool>", maxMCPServerName)
		return MCPServer{}, false
	}
	f, ok := d.fields(n, sp, keys...)
	if !ok && f == nil {
		return MCPServer{}, false
	}
	before := len(d.errs.list)
	s := MCPServer{Name: name, TimeoutSeconds: DefaultMCPTimeoutSeconds}
	s.Command = d.mcpCommand(f["command"], f["args"], sp, client)
	u, hasURL := d.str(f["url"], join(sp, "url"))
	switch {
	case s.Command != nil && hasURL:
		d.errs.add(sp, "give command (a stdio server) or url (a streamable HTTP server), not both")
	case s.Command == nil && !hasURL:
		if _, ok := f["command"]; !ok || isNull(f["command"]) {
			d.errs.add(sp, "needs command (a stdio server) or url (a streamable HTTP server)")
		}
	case s.Command != nil && (len(s.Command) == 0 || s.Command[0] == ""):
		d.errs.add(join(sp, "command"), "must start with the program to run")
	case hasURL:
		if pu, err := url.Parse(u); strings.Contains(u, "${") {
			d.errs.add(join(sp, "url"), noExpansion)
		} else if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			d.errs.add(join(sp, "url"), "must be an http:// or https:// URL with a host")
		} else if pu.User != nil {
			d.errs.add(join(sp, "url"), "must not hold credentials; send them in headers with ${VAR}")
		} else {
			s.URL = u
		}
	}
	d.mcpType(f["type"], join(sp, "type"), s.Command != nil, hasURL)
	s.Env = d.secretMap(f["env"], join(sp, "env"))
	if c, ok := d.str(f["cwd"], join(sp, "cwd")); ok {
		if client && strings.Contains(c, "${") {
			d.errs.add(join(sp, "cwd"), noExpansion)
		}
		s.Cwd = c
	}
	s.Headers = d.secretMap(f["headers"], join(sp, "headers"))
	if hasURL && (len(s.Env) > 0 || s.Cwd != "") {
		d.errs.add(sp, "env and cwd are for a command; a url server takes headers")
	}
	if s.Command != nil && len(s.Headers) > 0 {
		d.errs.add(join(sp, "headers"), "headers are for a url server; a command takes env")
	}
	if client {
		disabled := d.clientOnlyKeys(f, sp)
		if disabled && len(d.errs.list) == before {
			if d.disabled == nil {
				d.disabled = map[string]bool{}
			}
			d.disabled[name] = true
		}
		if disabled || len(d.errs.list) > before {
			return MCPServer{}, false
		}
		return s, true
	}
	if sn, ok := f["sandbox"]; ok && !isNull(sn) {
		if hasURL {
			d.errs.add(join(sp, "sandbox"), "a url server starts no process to sandbox; sandbox is for a command")
		} else {
			s.Sandbox = d.sandbox(sn, join(sp, "sandbox"))
		}
	}
	d.bounded(f["timeout_seconds"], join(sp, "timeout_seconds"), 1, maxMCPTimeoutSeconds, &s.TimeoutSeconds)
	if e := d.enter(f["trust_annotations"], join(sp, "trust_annotations")); !isNull(e) {
		if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!bool" || e.Decode(&s.TrustAnnotations) != nil {
			d.errs.addf(join(sp, "trust_annotations"), "must be true or false, not %s", kindName(e))
		}
	}
	s.Tools = d.mcpTools(f["tools"], join(sp, "tools"), name)
	return s, true
}

// noExpansion is the error for a ${...} where noeta expands none. The MCP
// clients expand ${VAR} in command, args, cwd and url too; noeta does only
// in env and headers, when the server starts, so a ${VAR} anywhere else
// would reach the server as its literal text.
const noExpansion = "noeta expands ${VAR} only in env and headers (when the server starts): write the value here"

// noArgExpansion is noExpansion for a command's program and arguments.
const noArgExpansion = noExpansion + ", or pass it to the server in env"

// mcpCommand reads a server's command: a list of strings (noeta's form,
// the whole argv), or a string with args (the MCP clients' form). In the
// clients' form a ${...} in the program or an argument is refused: a
// client would expand it, noeta would pass it on as written. A client's
// file has only the clients' form.
func (d *decoder) mcpCommand(cn, an *yaml.Node, sp string, client bool) []string {
	cp, ap := join(sp, "command"), join(sp, "args")
	cn = d.enter(cn, cp)
	switch {
	case isNull(cn):
		if a := d.enter(an, ap); !isNull(a) {
			d.errs.add(ap, "args needs command, the program to run")
		}
		return nil
	case cn.Kind == yaml.SequenceNode && !client:
		if a := d.enter(an, ap); !isNull(a) {
			d.errs.add(ap, "args goes with command as a string (command: npx, args: [-y, pkg]); with command as a list, put the arguments in the list")
		}
		return d.strList(cn, cp)
	case cn.Kind == yaml.ScalarNode && cn.ShortTag() == "!!str":
		argv := []string{cn.Value}
		if strings.Contains(cn.Value, "${") {
			d.errs.add(cp, noArgExpansion)
		}
		for i, a := range d.strList(an, ap) {
			if strings.Contains(a, "${") {
				d.errs.add(index(ap, i), noArgExpansion)
			}
			argv = append(argv, a)
		}
		return argv
	case client:
		d.errs.addf(cp, "must be a string, the program to run (its arguments go in args), not %s", kindName(cn))
	default:
		d.errs.addf(cp, "must be a list of strings, or a string with its arguments in args, not %s", kindName(cn))
	}
	return nil
}

// mcpType checks a server's type, the key the MCP clients write beside
// command or url. noeta speaks stdio and streamable HTTP; the older
// HTTP+SSE transport is refused, not tried as streamable HTTP.
func (d *decoder) mcpType(n *yaml.Node, path string, command, hasURL bool) {
	t, ok := d.str(n, path)
	if !ok {
		return
	}
	switch t {
	case "stdio":
		if hasURL {
			d.errs.add(path, "type stdio needs command, not url")
		}
	case "http", "streamable-http", "streamableHttp":
		if command {
			d.errs.addf(path, "type %s needs url, not command", t)
		}
	case "sse":
		d.errs.add(path, "noeta speaks MCP over stdio and streamable HTTP, not the older HTTP+SSE transport: give the server's streamable HTTP endpoint (often /mcp) with type http")
	default:
		d.errs.addf(path, "must be stdio, http or streamable-http, not %q", t)
	}
}

// clientOnlyKeys reads the keys MCP clients write that noeta.yaml does not
// have, and reports whether the server is disabled. Each is decided by
// what ignoring it would do:
//   - disabled: true is honoured (the server is left out: it runs no tool).
//   - autoApprove and alwaysAllow (Cline's and Roo Code's lists of tools
//     that run unasked) are refused unless empty: whether a tool runs
//     unasked is noeta.yaml's to say, in agents' permissions and rules.
//   - timeout is refused: the clients that write it disagree on its unit
//     (seconds, milliseconds), and noeta does not guess.
//   - envFile (VS Code's, Cursor's) is refused: the server would start
//     without the variables it names.
func (d *decoder) clientOnlyKeys(f map[string]*yaml.Node, sp string) bool {
	var disabled bool
	if e := d.enter(f["disabled"], join(sp, "disabled")); !isNull(e) {
		if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!bool" || e.Decode(&disabled) != nil {
			d.errs.addf(join(sp, "disabled"), "must be true or false, not %s", kindName(e))
		}
	}
	for _, k := range []string{"autoApprove", "alwaysAllow"} {
		if _, ok := f[k]; !ok {
			continue
		}
		if l := d.strList(f[k], join(sp, k)); len(l) > 0 {
			d.errs.add(join(sp, k), "noeta takes no approvals from a client's file: which tools run unasked is noeta.yaml's to say (agents' permissions, rules with action: allow); leave the list empty")
		}
	}
	if _, ok := f["timeout"]; ok {
		d.errs.add(join(sp, "timeout"), "the clients disagree on its unit (seconds, milliseconds) and noeta does not guess: remove it (a call gets 60 seconds), or declare the server in noeta.yaml with timeout_seconds")
	}
	if _, ok := f["envFile"]; ok {
		d.errs.add(join(sp, "envFile"), "noeta reads no env file: name the variables in env as ${VAR}, taken from the engine's environment when the server starts")
	}
	return disabled
}

// secretMap reads a mapping of strings whose values may be secrets: an
// error names the key, never the value.
func (d *decoder) secretMap(n *yaml.Node, path string) map[string]string {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]string, len(ps))
	for _, p := range ps {
		kp := join(path, p.key)
		d.mark(kp, p.keyN)
		if p.key == "" {
			d.errs.add(kp, "a key must not be empty")
			continue
		}
		v := d.enter(p.value, kp)
		if v == nil || v.Kind != yaml.ScalarNode || isNull(v) {
			d.errs.add(kp, "must be a string")
			continue
		}
		// Any scalar is taken as its text (a port, a flag); a value is
		// never echoed, so neither is its type.
		if msg := checkVars(v.Value); msg != "" {
			d.errs.add(kp, msg)
			continue
		}
		out[p.key] = cursorRef.ReplaceAllString(v.Value, "$${$1}")
	}
	return out
}

func (d *decoder) mcpTools(n *yaml.Node, path, server string) map[string]MCPTool {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]MCPTool, len(ps))
	for _, p := range ps {
		tp := join(path, p.key)
		d.mark(tp, p.keyN)
		if !mcpToolName.MatchString(p.key) || len(MCPToolPrefix+server+MCPSeparator+p.key) > 64 {
			d.errs.addf(tp, "%q is not a tool name noeta can register as mcp__%s__<tool> (letters, digits, '_', '-', '.'; 64 characters in all)", p.key, server)
			continue
		}
		f, ok := d.fields(p.value, tp, "risk", "edits", "timeout_seconds")
		if !ok && f == nil {
			continue
		}
		var t MCPTool
		if r, ok := d.str(f["risk"], join(tp, "risk")); ok {
			if r != "low" && r != "medium" && r != "high" {
				d.errs.addf(join(tp, "risk"), "must be low, medium or high, not %q", r)
			} else {
				t.Risk = r
			}
		}
		if e := d.enter(f["edits"], join(tp, "edits")); !isNull(e) {
			if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!bool" || e.Decode(&t.Edits) != nil {
				d.errs.addf(join(tp, "edits"), "must be true or false, not %s", kindName(e))
			}
		}
		d.bounded(f["timeout_seconds"], join(tp, "timeout_seconds"), 1, maxMCPTimeoutSeconds, &t.TimeoutSeconds)
		out[p.key] = t
	}
	return out
}

// MCPToolName is the registry name of tool on server.
func MCPToolName(server, tool string) string {
	return MCPToolPrefix + server + MCPSeparator + tool
}

// deferredTools decides, for CheckTools, the names known only at run time:
// an MCP server's tools and Claude Code's.
func (f *File) deferredTools(name string) (bool, string) {
	if rest, ok := strings.CutPrefix(name, ClaudeCodeToolPrefix); ok {
		if rest == "" {
			return true, fmt.Sprintf("%q names no Claude Code tool: want claude_code__<tool> (claude_code__Bash, claude_code__*)", name)
		}
		return true, ""
	}
	return f.deferredMCP(name)
}

// deferredMCP decides, for CheckTools, a tool name or pattern under mcp__:
// its tools are known only once the servers run. A name or pattern is
// accepted when its server part names (or, as a glob, matches) a configured
// server, and refused naming the server otherwise.
func (f *File) deferredMCP(name string) (bool, string) {
	rest, ok := strings.CutPrefix(name, MCPToolPrefix)
	if !ok {
		return false, ""
	}
	servers := sortedKeys(f.MCPServers)
	list := "none are configured"
	if len(servers) > 0 {
		list = "mcp_servers: " + strings.Join(servers, ", ")
	}
	server, tool, found := strings.Cut(rest, MCPSeparator)
	if !found || tool == "" {
		if isGlob(rest) && len(servers) > 0 {
			return true, "" // mcp__* and the like: every MCP tool
		}
		return true, fmt.Sprintf("%q names no MCP tool: want mcp__<server>__<tool> (%s)", name, list)
	}
	if isGlob(server) {
		g := glob.Compile(server)
		if slices.ContainsFunc(servers, g.Match) {
			return true, ""
		}
		return true, fmt.Sprintf("%q matches no configured MCP server (%s)", name, list)
	}
	if _, ok := f.MCPServers[server]; !ok {
		if f.mcpDisabled[server] {
			return true, fmt.Sprintf("%q: MCP server %q is disabled in %s (%s)", name, server, f.MCPServersFile, list)
		}
		return true, fmt.Sprintf("%q: no MCP server %q is configured (%s)", name, server, list)
	}
	return true, ""
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
