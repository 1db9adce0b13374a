package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// issue15Config is the mcp_servers:/agents: example of issue 15, verbatim.
const issue15Config = `
mcp_servers:
  files:  {command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."], env: {}, cwd: "."}
  issues: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: "Bearer ${ISSUES_TOKEN}"}}
agents:
  researcher:
    tools: [read_file, "mcp__files__*"]
`

func TestParseMCPServers(t *testing.T) {
	t.Parallel()
	f, err := Parse("noeta.yaml", []byte(issue15Config))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]MCPServer{
		"files": {Name: "files", Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "."},
			Env: map[string]string{}, Cwd: ".", TimeoutSeconds: DefaultMCPTimeoutSeconds},
		"issues": {Name: "issues", URL: "http://127.0.0.1:9000/mcp",
			Headers: map[string]string{"Authorization": "Bearer ${ISSUES_TOKEN}"}, TimeoutSeconds: DefaultMCPTimeoutSeconds},
	}
	if !reflect.DeepEqual(f.MCPServers, want) {
		t.Errorf("MCPServers = %+v\nwant %+v", f.MCPServers, want)
	}
	if err := f.CheckTools([]string{"read_file"}); err != nil {
		t.Errorf("CheckTools: %v", err)
	}

	f, err = Parse("", []byte(`
mcp_servers:
  db:
    command: [./db-mcp, --ro]
    env: {PGPASSWORD: "${PG_PASS}", PORT: 5432}
    timeout_seconds: 30
    trust_annotations: true
    tools:
      drop_table: {risk: high}
      format_sql: {risk: low, timeout_seconds: 5}
      write_migration: {edits: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	db := f.MCPServers["db"]
	wantTools := map[string]MCPTool{"drop_table": {Risk: "high"}, "format_sql": {Risk: "low", TimeoutSeconds: 5}, "write_migration": {Edits: true}}
	// trust_annotations is false unless it is said (before, there was no
	// such key and every server's annotations were trusted).
	if f.MCPServers["db"].TrustAnnotations != true {
		t.Errorf("trust_annotations: true was not read")
	}
	if db.TimeoutSeconds != 30 || !db.Stdio() || !reflect.DeepEqual(db.Tools, wantTools) || db.Env["PORT"] != "5432" {
		t.Errorf("db = %+v", db)
	}
}

// TestParseMCPServersBad: each mistake in mcp_servers is an error with its
// path and line, and a value under env or headers (a secret, often) is
// never in the error.
func TestParseMCPServersBad(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-t0ken"
	for _, tt := range []struct{ name, yaml, want string }{
		{"neither", "mcp_servers:\n  a: {cwd: .}\n", "mcp_servers.a: needs command (a stdio server) or url"},
		{"both", "mcp_servers:\n  a: {command: [x], url: \"http://h/mcp\"}\n", "mcp_servers.a: give command (a stdio server) or url"},
		{"empty command", "mcp_servers:\n  a: {command: []}\n", "mcp_servers.a.command: must start with the program"},
		{"bad url", "mcp_servers:\n  a: {url: \"ftp://h/x\"}\n", "mcp_servers.a.url: must be an http:// or https:// URL"},
		{"credentials in url", "mcp_servers:\n  a: {url: \"https://u:" + secret + "@h/x\"}\n", "must not hold credentials"},
		{"name with __", "mcp_servers:\n  a__b: {command: [x]}\n", "mcp_servers.a__b: a server name must be"},
		{"name with a glob", "mcp_servers:\n  \"a*\": {command: [x]}\n", "a server name must be"},
		{"unknown key", "mcp_servers:\n  a: {command: [x], autoApprove: [y]}\n", "mcp_servers.a.autoApprove: unknown key"},
		{"headers on a command", "mcp_servers:\n  a: {command: [x], headers: {A: b}}\n", "mcp_servers.a.headers: headers are for a url server"},
		{"env on a url", "mcp_servers:\n  a: {url: \"http://h/mcp\", env: {A: b}}\n", "env and cwd are for a command"},
		{"timeout", "mcp_servers:\n  a: {command: [x], timeout_seconds: 0}\n", "mcp_servers.a.timeout_seconds: must be from 1 to 3600"},
		{"risk", "mcp_servers:\n  a: {command: [x], tools: {t: {risk: severe}}}\n", "mcp_servers.a.tools.t.risk: must be low, medium or high"},
		{"edits", "mcp_servers:\n  a: {command: [x], tools: {t: {edits: yes please}}}\n", "mcp_servers.a.tools.t.edits: must be true or false"},
		{"trust_annotations", "mcp_servers:\n  a: {command: [x], trust_annotations: \"yes\"}\n", "mcp_servers.a.trust_annotations: must be true or false"},
		{"tool name", "mcp_servers:\n  a: {command: [x], tools: {\"t/x\": {risk: low}}}\n", "not a tool name noeta can register"},
		{"bad header ref", "mcp_servers:\n  a: {url: \"http://h/mcp\", headers: {Authorization: \"Bearer ${" + secret + "-x}\"}}\n",
			"mcp_servers.a.headers.Authorization: a ${...} in the value must name an environment variable"},
		{"unclosed env ref", "mcp_servers:\n  a: {command: [x], env: {TOKEN: \"" + secret + "${X\"}}\n",
			"mcp_servers.a.env.TOKEN: the value has a ${ without a closing }"},
		{"header not a string", "mcp_servers:\n  a: {url: \"http://h/mcp\", headers: {X: [" + secret + "]}}\n", "mcp_servers.a.headers.X: must be a string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Errorf("%v: want a *Error with a line", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestCheckToolsMCP: agents' tools and rules' patterns under
// mcp__<server>__ are accepted for a configured server, though its tools
// are only known at run time, and refused naming the server otherwise.
//
// Reproduction (before): `tools: ["mcp__files__*"]` with mcp_servers.files
// configured was refused as an unknown tool.
func TestCheckToolsMCP(t *testing.T) {
	t.Parallel()
	known := []string{"echo", "read_file"}
	const servers = "mcp_servers:\n  files: {command: [x]}\n  issues: {url: \"http://h/mcp\"}\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"the issue's example", issue15Config, ""},
		{"an exact MCP tool", servers + "agents:\n  a:\n    tools: [mcp__files__read_file]\n    permissions: {denied_tools: [mcp__issues__close]}\n", ""},
		{"a rule over every server", servers + "rules:\n  - {match_tool: \"mcp__*__delete*\", action: deny}\n", ""},
		{"every MCP tool", servers + "rules:\n  - {match_tool: \"mcp__*\", action: deny}\n", ""},
		{"a hook on a server", servers + "hooks:\n  post_tool_use: [{match_tool: \"mcp__issues__*\", command: [\"true\"]}]\n", ""},
		{"an unknown server", servers + "agents:\n  a:\n    tools: [\"mcp__filez__*\"]\n",
			`agents.a.tools[0]: "mcp__filez__*": no MCP server "filez" is configured (mcp_servers: files, issues) (line 6)`},
		{"an unknown server in a rule", servers + "rules:\n  - {match_tool: mcp__git__push, action: deny}\n",
			`rules[0].match_tool: "mcp__git__push": no MCP server "git" is configured`},
		{"a server glob matching none", servers + "rules:\n  - {match_tool: \"mcp__g*__push\", action: deny}\n",
			`"mcp__g*__push" matches no configured MCP server`},
		{"no servers at all", "rules:\n  - {match_tool: \"mcp__*__delete*\", action: deny}\n",
			`"mcp__*__delete*" matches no configured MCP server (none are configured)`},
		{"no tool part", servers + "agents:\n  a:\n    tools: [mcp__files]\n", `"mcp__files" names no MCP tool`},
		{"a hook on an unknown server", servers + "hooks:\n  post_tool_use: [{match_tool: \"mcp__x__*\", command: [\"true\"]}]\n",
			`hooks.post_tool_use[0].match_tool: "mcp__x__*": no MCP server "x"`},
		{"built-ins still checked", servers + "agents:\n  a:\n    tools: [shel]\n", `unknown tool "shel"`},
		{"Claude Code's tools", "agents:\n  a:\n    tools: [\"claude_code__*\", claude_code__Bash]\nrules:\n  - {match_tool: claude_code__mcp__github__merge, action: deny}\n", ""},
		{"Claude Code's prefix alone", "agents:\n  a:\n    tools: [claude_code__]\n", `"claude_code__" names no Claude Code tool`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse("", []byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = f.CheckTools(known)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("got %v, want one error containing %q", err, tt.want)
			}
		})
	}
}
