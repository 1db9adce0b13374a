// Package config is the one decoder of noeta.yaml. It reads the file once,
// strictly, into the typed values of each part of noeta: the governance
// (agents:, rules:, guards:) as a compiled *guards.Config, the hooks: section
// for the hooks observer, the observers: section for the observers a
// process runs in process, the MCP servers whose tools the engine offers
// (mcp_servers:, and an MCP client's JSON file mcp_servers_file names), and
// the sandbox: section for the processes tools start.
//
//	models:
//	  <name>:
//	    provider: openai                   # openai | anthropic
//	    model: gpt-4.1-mini
//	    base_url: http://127.0.0.1:8080/v1 # optional: any OpenAI-compatible server
//	    api_key_env: OPENAI_API_KEY        # optional; the provider's usual variable by default
//	    max_tokens: 2048                   # optional
//	    timeout_seconds: 120               # optional, per attempt
//	    max_retries: 3                     # optional; on 429, 5xx and connection errors
//	    max_context_chars: 200000          # optional
//	    price: {input_per_mtok: 0.40, output_per_mtok: 1.60}   # or: price: free
//	agents:                                # the agents, by name: what each may do
//	  <name>:
//	    model: fast                        # a name in models:; without it the agent runs scripts
//	    system_prompt: "You are a careful research assistant."
//	    max_context_chars: 100000          # optional; the model's by default
//	    tools: [read_file, shell]
//	    permission_mode: default          # default | acceptEdits | bypassPermissions
//	    budget: {max_iterations: 20, max_tool_calls: 50, max_cost_usd: 2.0,
//	             max_spawned_subtasks: 5, max_subtask_depth: 3}
//	    permissions:
//	      allowed_tools: [read_file, shell]
//	      denied_tools: []
//	      max_risk_level: high             # low | medium | high
//	      allowed_subtask_agents: [helper]
//	      require_approval_tools: []
//	    repetition: {threshold: 3, action: require_approval, window: 8}
//	    rate_limits: [{tool: "mcp__github__*", calls: 60, window: 1m, per: principal}]   # shared by the fleet
//	    approval_timeout: 1h               # optional: its approval requests expire, denied by timeout
//	    approval: inbox                    # inbox | elicitation | client_prompt, or a list: where a gateway also asks (its MCP client's user; Claude Code's own prompt)
//	    sandbox: {network: {allow: ["proxy.golang.org:443"]}, limits: {memory_mb: 4096}}   # over sandbox:
//	rules:                                 # process-wide, priority 100
//	  - match_tool: "shell"
//	    match_arg: {path: command, regex: "rm\\s+-rf"}   # or equals: / contains:
//	    match_shell: {path: command, program: rm, flags_all: [recursive, force]}
//	    when: 'args.command.size() > 100'  # CEL over tool, args, task
//	    action: deny                       # allow | deny | require_approval
//	    reason: "destructive shell command"
//	    shadow: false                      # true: judged and recorded (GuardShadowed), never decides
//	guards:                                # named rule sets, priority >= 100
//	  - name: change-freeze
//	    priority: 150
//	    rules: [{match_tool: "write_file", action: deny, reason: "freeze"}]
//	    shadow: false                      # true puts the whole set in shadow
//	hooks:                                 # run by package observers
//	  post_tool_use: [{match_tool: "*", command: ["./notify.sh"], timeout_seconds: 10}]
//	  notification: [{on: approval, command: ["./page-oncall.sh"]}]
//	observers:                             # run in process
//	  audit: {file: audit.jsonl}           # or {stdout: true}, or {subject: SUBJ}
//	  metrics: {listen: "127.0.0.1:9464"}
//	  trace: {otlp_endpoint: "localhost:4317", protocol: grpc, insecure: true}
//	  fanout: {listen: "127.0.0.1:8081"}   # or {} for the host's HTTP listener
//	approvals:                             # who may answer approvals; see package approvals
//	  self_approval: deny
//	  rules: [{name: sre-shell, when: 'tool == "shell"', approvers: 'approver == "sre"', quorum: 2, timeout: 30m}]
//	mcp_servers:                           # tools mcp__<server>__<tool>; see MCPServer
//	  files:  {command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."], env: {}, cwd: "."}
//	  issues: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: "Bearer ${ISSUES_TOKEN}"}}
//	  db:     {command: ["./db-mcp"], sandbox: {write: [/srv/shared]}}   # over sandbox:
//	  py:     {command: python3, args: [server.py], env: {}}   # the MCP clients' form; type: stdio | http allowed
//	mcp_servers_file: .mcp.json            # more servers from an MCP client's file; see MCPServer
//	http:                                  # the HTTP API and the inbox page; see HTTP
//	  tokens: [{name: alice, sha256: "<64 hex>"}]
//	sandbox:                               # how tools' processes run (shell, stdio MCP servers); see Sandbox
//	  enabled: true                        # the default; false runs them unsandboxed, warned about at every start
//	  network: none                        # the default; or {allow: ["api.github.com:443", "*.internal:8080"]}
//	  read: [/opt/tools]                   # extra read-only paths; write: [...] extra read-write ones
//	  limits: {cpu_seconds: 300, memory_mb: 2048, processes: 256, file_size_mb: 1024, open_files: 1024, wall_seconds: 1800}
//
// Decoding is strict: an unknown key at any level, a duplicate key, a value of
// the wrong type, a regex or CEL expression that does not compile, and every
// check guards.NewConfig makes are errors, each an [*Error] naming the file,
// the path of the field and its line; all of them are returned, joined, in
// the order of the file. A key given as null counts as absent: an absent
// list is "no list", an empty one ([]) a list of nothing. Anchors, aliases
// and merge keys (<<) are followed, within bounds on the nodes they make.
// The file mcp_servers_file names is read as strictly, its mistakes naming
// it, the JSON path (mcpServers.files.args[0]) and the line, after
// noeta.yaml's.
//
// Package config imports guards (it compiles the governance with
// guards.NewConfig), and observers imports config (it runs the hooks and
// sinks configured here); guards never imports config.
package config

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/glob"
	"go.yaml.in/yaml/v3"
)

// File is a decoded noeta.yaml. It is immutable once returned; its sections
// are the caller's values (slices are not shared with other Files).
type File struct {
	// Path is the path given to Load, or the name given to Parse.
	Path string
	// Governance is the agents:, rules: and guards: sections, compiled; an
	// empty config (no agents, no rules) when the file has none.
	Governance *guards.Config
	// Hooks is the hooks: section, validated, default timeouts filled in.
	Hooks Hooks
	// Observers is the observers: section, validated.
	Observers Observers
	// Models is the models: section, by name, defaults filled in; every
	// model has a price (or says price: free).
	Models map[string]Model
	// AgentModels holds, for each agent that names a model, its model
	// keys; an agent without model: is absent (it runs scripts only).
	AgentModels map[string]AgentModel
	// MCPServers is the mcp_servers: section and the servers of
	// mcp_servers_file, by name, defaults filled in.
	MCPServers map[string]MCPServer
	// MCPServersFile is the path of the MCP client's file mcp_servers_file
	// named, as read (relative to noeta.yaml's directory when it was
	// relative); "" when there is none.
	MCPServersFile string
	// Approvals is the approvals: section and the agents'
	// approval_timeout, compiled: who may answer which approval request.
	Approvals *approvals.Policy
	// HTTP is the http: section: who may use the HTTP API (package webui).
	HTTP HTTP
	// Gateway is the gateway: section: the aliases engine gateway offers
	// tools under.
	Gateway Gateway
	// Sandbox is the sandbox: section: how the processes tools start run,
	// by default. [File.SandboxFor] and [File.SandboxForMCP] give the
	// settings in force for an agent or an MCP server.
	Sandbox Sandbox
	// AgentSandboxes holds, for each agent that has a sandbox: key, what it
	// sets over the top-level sandbox:; an agent without one is absent.
	AgentSandboxes map[string]Sandbox

	pos positions
	// mcpDisabled holds the servers MCPServersFile marks disabled, for
	// CheckTools to say why a tool of one is unknown.
	mcpDisabled map[string]bool
}

// Load reads path, a regular file of at most MaxSize bytes, until ctx ends,
// and decodes it with [ParseContext]. Every error names the file.
func Load(ctx context.Context, path string) (*File, error) {
	data, err := boundedio.ReadFile(ctx, path, MaxSize)
	if err != nil {
		return nil, err // a *fs.PathError: it names path
	}
	return ParseContext(ctx, path, data)
}

// Parse is [ParseContext] with a context that never ends: its only read is
// of mcp_servers_file, a regular file of bounded size.
func Parse(name string, data []byte) (*File, error) {
	return ParseContext(context.Background(), name, data)
}

// ParseContext decodes data; name is the file's name in errors ("" allowed).
// data over MaxSize bytes is refused before it is parsed. The file that
// mcp_servers_file names, taken from name's directory when relative, is read
// until ctx ends; its mistakes name that file and come after noeta.yaml's.
func ParseContext(ctx context.Context, name string, data []byte) (*File, error) {
	errs := &errorList{file: name, pos: positions{}}
	if len(data) > MaxSize {
		errs.addf("", "the config is %d bytes, over the limit of %d MiB", len(data), MaxSize>>20)
		return nil, errs.err()
	}
	// Bound the node tree before the parser builds it.
	if err := boundedio.CheckYAML(data, maxConfigNodes); err != nil {
		errs.add("", err.Error())
		return nil, errs.err()
	}
	var root yaml.Node
	if err := safeUnmarshal(data, &root); err != nil {
		errs.add("", err.Error())
		return nil, errs.err()
	}
	d := &decoder{errs: errs, ctx: ctx, dir: filepath.Dir(name)}
	s := d.top(&root)
	if d.exhausted {
		return nil, joinErrs(errs, d.fileErrs)
	}
	gov, err := guards.NewConfig(s.agents, s.rules, s.sets)
	errs.addChecked(err)
	validateHooks(s.hooks, errs)
	checkAgentModels(s.agentModels, s.models, errs)
	checkTokenAgents(s.http, gov, errs)
	appr := compileApprovals(s.approvals, errs)
	if err := joinErrs(errs, d.fileErrs); err != nil {
		return nil, err
	}
	return &File{Path: name, Governance: gov, Hooks: withHookDefaults(s.hooks), Observers: s.observers,
		Models: s.models, AgentModels: s.agentModels, MCPServers: s.mcpServers, MCPServersFile: d.mcpFile,
		mcpDisabled: d.disabled,
		Approvals:   appr, HTTP: s.http, Gateway: s.gateway,
		Sandbox: s.sandbox, AgentSandboxes: s.agentSandboxes, pos: errs.pos}, nil
}

// ErrorAt is a mistake found after decoding (an audit file that cannot be
// opened, a listen address already taken), as an [*Error] naming the file,
// path, and the line and column of path or of its nearest parent that has
// one.
func (f *File) ErrorAt(path, msg string) *Error {
	return f.pos.at(f.Path, path, msg)
}

// CheckTools reports every tool the file names that is not one of known (the
// tool registry's names), each as an [*Error] with its path and line; nil
// when there is none. It is guards.Config.CheckTools (agents' tool lists,
// rules' and rule sets' match_tool) plus the post_tool_use hooks' match_tool,
// which must match at least one known tool too: a misspelt pattern would
// never run its hook; and the gateway's aliases, each of which must call a
// tool and be the name of none.
//
// The tools of MCP servers are known only once the servers run, so a name
// or pattern under mcp__<server>__ is accepted when <server> is in
// mcp_servers (or, as a glob, matches one), and refused naming the server
// otherwise. The tools of Claude Code, under claude_code__, are known only
// to a gateway that a Claude Code hook reports them to: such a name is
// accepted as written (docs/adr/0099).
func (f *File) CheckTools(known []string) error {
	errs := &errorList{file: f.Path, pos: f.pos}
	if f.Governance != nil { // nil only in a File built by hand
		errs.addChecked(f.Governance.CheckToolsDeferred(known, f.deferredTools))
	}
	for i, h := range f.Hooks.PostToolUse {
		if h.MatchTool == "" {
			continue // refused by Validate
		}
		g := glob.Compile(h.MatchTool)
		if slices.ContainsFunc(known, g.Match) {
			continue
		}
		p := join(index(join("hooks", "post_tool_use"), i), "match_tool")
		if deferred, problem := f.deferredTools(h.MatchTool); deferred {
			if problem != "" {
				errs.add(p, problem)
			}
			continue
		}
		errs.addf(p, "%q matches no tool (the tools: %s)", h.MatchTool, strings.Join(known, ", "))
	}
	f.checkAliases(known, errs)
	return errs.err()
}
