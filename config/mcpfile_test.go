package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParseMCPClientForm: a server written the way the MCP clients write
// one (command a string, args a list, type beside it) decodes to the same
// argv as noeta's list form.
func TestParseMCPClientForm(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, yaml string
		want       MCPServer
	}{
		{"the list form", "a: {command: [npx, -y, pkg]}",
			MCPServer{Name: "a", Command: []string{"npx", "-y", "pkg"}}},
		{"a string and args", "a: {command: npx, args: [-y, pkg], env: {K: \"${V}\"}, cwd: /srv}",
			MCPServer{Name: "a", Command: []string{"npx", "-y", "pkg"}, Env: map[string]string{"K": "${V}"}, Cwd: "/srv"}},
		{"a string alone", "a: {command: ./server}", MCPServer{Name: "a", Command: []string{"./server"}}},
		{"empty args", "a: {command: ./server, args: []}", MCPServer{Name: "a", Command: []string{"./server"}}},
		{"type stdio", "a: {type: stdio, command: python3, args: [server.py]}",
			MCPServer{Name: "a", Command: []string{"python3", "server.py"}}},
		{"type http", "a: {type: http, url: \"https://h/mcp\"}", MCPServer{Name: "a", URL: "https://h/mcp"}},
		{"type streamable-http", "a: {type: streamable-http, url: \"https://h/mcp\"}", MCPServer{Name: "a", URL: "https://h/mcp"}},
		{"noeta's keys with the client form", "a: {command: ./db, args: [--ro], timeout_seconds: 5, tools: {drop: {risk: high}}}",
			MCPServer{Name: "a", Command: []string{"./db", "--ro"}, TimeoutSeconds: 5, Tools: map[string]MCPTool{"drop": {Risk: "high"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse("noeta.yaml", []byte("mcp_servers:\n  "+tt.yaml+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want.TimeoutSeconds == 0 {
				want.TimeoutSeconds = DefaultMCPTimeoutSeconds
			}
			got := f.MCPServers["a"]
			got.Env, want.Env = nilIfEmpty(got.Env), nilIfEmpty(want.Env)
			got.Headers = nilIfEmpty(got.Headers)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestParseMCPClientFormBad: what noeta cannot do as the clients do is
// refused with the path and line of the field, never read another way.
func TestParseMCPClientFormBad(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, yaml, want string }{
		{"a list with args", "a: {command: [npx, -y], args: [pkg]}",
			"mcp_servers.a.args: args goes with command as a string (command: npx, args: [-y, pkg]); with command as a list, put the arguments in the list (line 2)"},
		{"args alone", "a: {args: [pkg]}", "mcp_servers.a.args: args needs command"},
		{"args not a list", "a: {command: npx, args: pkg}", "mcp_servers.a.args: must be a list of strings, not a string"},
		{"command a mapping", "a: {command: {npx: 1}}", "mcp_servers.a.command: must be a list of strings, or a string with its arguments in args, not a mapping"},
		{"empty command", "a: {command: \"\", args: [x]}", "mcp_servers.a.command: must start with the program"},
		{"a variable in command", "a: {command: \"${PY}\", args: [s.py]}", "mcp_servers.a.command: noeta expands ${VAR} only in env and headers"},
		{"a variable in args", "a: {command: npx, args: [--root, \"${HOME}/x\"]}", "mcp_servers.a.args[1]: noeta expands ${VAR} only in env and headers"},
		{"a variable in url", "a: {url: \"https://${HOST}/mcp\"}", "mcp_servers.a.url: noeta expands ${VAR} only in env and headers"},
		{"a default in env", "a: {command: x, env: {T: \"${T:-dev}\"}}", "mcp_servers.a.env.T: noeta does not take ${VAR:-default}"},
		{"an input in headers", "a: {url: \"https://h/mcp\", headers: {A: \"${input:token}\"}}", "mcp_servers.a.headers.A: noeta asks no one for ${input:...}"},
		{"type sse", "a: {type: sse, url: \"https://h/sse\"}", "mcp_servers.a.type: noeta speaks MCP over stdio and streamable HTTP, not the older HTTP+SSE transport"},
		{"type stdio with url", "a: {type: stdio, url: \"https://h/mcp\"}", "mcp_servers.a.type: type stdio needs command, not url"},
		{"type http with command", "a: {type: http, command: x}", "mcp_servers.a.type: type http needs url, not command"},
		{"another type", "a: {type: websocket, url: \"https://h/mcp\"}", `mcp_servers.a.type: must be stdio, http or streamable-http, not "websocket"`},
		{"a client's key", "a: {command: x, disabled: true}", "mcp_servers.a.disabled: unknown key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("noeta.yaml", []byte("mcp_servers:\n  "+tt.yaml+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant %q", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "noeta.yaml" || ce.Line != 2 {
				t.Errorf("%v: want a *Error naming noeta.yaml, line 2", err)
			}
		})
	}
}

// writeMCPFiles writes noeta.yaml and an MCP client's file beside it, and
// returns noeta.yaml's path.
func writeMCPFiles(t *testing.T, yaml, jsonName, json string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, jsonName), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "noeta.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMCPServersFileGolden: a project's .mcp.json as Claude Code writes it
// (claude mcp add --scope project) is read as the same servers written in
// noeta.yaml, and governed like them: an agent may name their tools.
func TestMCPServersFileGolden(t *testing.T) {
	t.Parallel()
	golden, err := os.ReadFile(filepath.Join("testdata", "claude-code.mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeMCPFiles(t, "mcp_servers_file: .mcp.json\nagents:\n  a: {tools: [\"mcp__github__*\", mcp__sentry__search]}\n", ".mcp.json", string(golden))
	fromJSON, err := Load(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := Parse("noeta.yaml", []byte(`
mcp_servers:
  filesystem: {command: [npx, -y, "@modelcontextprotocol/server-filesystem", .], env: {}}
  github:
    command: [docker, run, -i, --rm, -e, GITHUB_PERSONAL_ACCESS_TOKEN, ghcr.io/github/github-mcp-server]
    env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}"}
  sentry: {url: "https://mcp.sentry.dev/mcp", headers: {Authorization: "Bearer ${SENTRY_TOKEN}"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON.MCPServers, fromYAML.MCPServers) {
		t.Errorf("from .mcp.json: %+v\nfrom noeta.yaml: %+v", fromJSON.MCPServers, fromYAML.MCPServers)
	}
	if want := filepath.Join(filepath.Dir(cfg), ".mcp.json"); fromJSON.MCPServersFile != want {
		t.Errorf("MCPServersFile = %q, want %q", fromJSON.MCPServersFile, want)
	}
	if err := fromJSON.CheckTools([]string{"read_file"}); err != nil {
		t.Errorf("CheckTools: %v", err)
	}
}

// TestMCPServersFile: the forms of the clients' files that noeta reads, and
// those it refuses, each refusal naming the file, the JSON path of the
// field and its line.
func TestMCPServersFile(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-t0ken"
	for _, tt := range []struct {
		name, json string
		want       map[string]MCPServer // when accepted
		err        string               // when refused
		line       int
	}{
		{name: "Claude Desktop", json: `{"mcpServers": {"weather": {"command": "python3", "args": ["weather.py"], "env": {"API_KEY": "${WEATHER_KEY}"}}}}`,
			want: map[string]MCPServer{"weather": {Name: "weather", Command: []string{"python3", "weather.py"}, Env: map[string]string{"API_KEY": "${WEATHER_KEY}"}}}},
		{name: "VS Code", json: "{\n\t\"servers\": {\n\t\t\"fetch\": {\"type\": \"stdio\", \"command\": \"uvx\", \"args\": [\"mcp-server-fetch\"]},\n\t\t\"remote\": {\"type\": \"http\", \"url\": \"https://h/mcp\"}\n\t},\n\t\"inputs\": []\n}",
			want: map[string]MCPServer{"fetch": {Name: "fetch", Command: []string{"uvx", "mcp-server-fetch"}}, "remote": {Name: "remote", URL: "https://h/mcp"}}},
		{name: "Cursor", json: `{"mcpServers": {"docs": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}}}}`,
			want: map[string]MCPServer{"docs": {Name: "docs", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "Bearer ${DOCS_TOKEN}"}}}},
		{name: "Cline's defaults", json: `{"mcpServers": {"git": {"command": "uvx", "args": ["mcp-server-git"], "disabled": false, "autoApprove": [], "alwaysAllow": []}}}`,
			want: map[string]MCPServer{"git": {Name: "git", Command: []string{"uvx", "mcp-server-git"}}}},
		{name: "a disabled server is left out", json: `{"mcpServers": {"on": {"command": "a"}, "off": {"command": "b", "disabled": true}}}`,
			want: map[string]MCPServer{"on": {Name: "on", Command: []string{"a"}}}},
		{name: "JSON escapes", json: `{"mcpServers": {"a": {"command": "C:\\bin\/srv", "args": ["\u00e9", "\ud83d\ude00"]}}}`,
			want: map[string]MCPServer{"a": {Name: "a", Command: []string{`C:\bin/srv`, "é", "😀"}}}},
		{name: "no servers", json: `{"mcpServers": {}}`, want: nil},

		{name: "type sse", json: "{\"mcpServers\": {\n  \"old\": {\"type\": \"sse\", \"url\": \"https://h/sse\"}}}",
			err: "mcpServers.old.type: noeta speaks MCP over stdio and streamable HTTP, not the older HTTP+SSE transport", line: 2},
		{name: "a command as a list", json: "{\"mcpServers\": {\n\"a\": {\"command\": [\"npx\", \"x\"]}}}",
			err: "mcpServers.a.command: must be a string, the program to run (its arguments go in args), not a sequence", line: 2},
		{name: "autoApprove", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"autoApprove\": [\"delete\"]}}}",
			err: "mcpServers.a.autoApprove: noeta takes no approvals from a client's file", line: 2},
		{name: "alwaysAllow", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"alwaysAllow\": [\"delete\"]}}}",
			err: "mcpServers.a.alwaysAllow: noeta takes no approvals from a client's file", line: 2},
		{name: "timeout", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"timeout\": 60}}}",
			err: "mcpServers.a.timeout: the clients disagree on its unit", line: 2},
		{name: "envFile", json: "{\"servers\": {\"a\": {\"command\": \"x\",\n\"envFile\": \"${workspaceFolder}/.env\"}}}",
			err: "servers.a.envFile: noeta reads no env file", line: 2},
		{name: "disabled not a boolean", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"disabled\": \"yes\"}}}",
			err: "mcpServers.a.disabled: must be true or false, not a string", line: 2},
		{name: "an unknown key", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"transportType\": \"stdio\"}}}",
			err: "mcpServers.a.transportType: unknown key (known: command, args, type, env, cwd, url, headers, disabled, autoApprove, alwaysAllow, timeout, envFile)", line: 2},
		{name: "noeta's keys", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"trust_annotations\": true}}}",
			err: "mcpServers.a.trust_annotations: unknown key", line: 2},
		{name: "a variable in args", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"args\": [\"${HOME}\"]}}}",
			err: "mcpServers.a.args[0]: noeta expands ${VAR} only in env and headers", line: 2},
		{name: "a variable in cwd", json: "{\"servers\": {\"a\": {\"command\": \"x\",\n\"cwd\": \"${workspaceFolder}\"}}}",
			err: "servers.a.cwd: noeta expands ${VAR} only in env and headers", line: 2},
		{name: "a default in a header", json: "{\"mcpServers\": {\"a\": {\"url\": \"https://h/mcp\",\n\"headers\": {\"Authorization\": \"Bearer ${TOKEN:-" + secret + "}\"}}}}",
			err: "mcpServers.a.headers.Authorization: noeta does not take ${VAR:-default}", line: 2},
		{name: "a Cursor reference in args", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"args\": [\"${env:HOME}\"]}}}",
			err: "mcpServers.a.args[0]: noeta expands ${VAR} only in env and headers", line: 2},
		{name: "a Cursor reference that names no variable", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"env\": {\"K\": \"${env:a-b}\"}}}}",
			err: "mcpServers.a.env.K: a ${...} in the value must name an environment variable", line: 2},
		{name: "inputs", json: "{\"servers\": {},\n\"inputs\": [{\"type\": \"promptString\", \"id\": \"k\"}]}",
			err: "inputs: noeta asks no one for inputs", line: 2},
		{name: "both keys", json: "{\"mcpServers\": {},\n\"servers\": {}}", err: "servers: the file has both mcpServers and servers", line: 2},
		{name: "neither key", json: "{\n\"preferences\": {}}", err: "preferences: unknown key (known: mcpServers, servers, inputs)", line: 1},
		{name: "not an object", json: `["mcpServers"]`, err: "must be a JSON object with mcpServers"},
		{name: "comments", json: "{\n// mine\n\"servers\": {}}", err: "not JSON (comments and trailing commas are not JSON): invalid character '/' looking for beginning of object key string (line 2)"},
		{name: "a duplicate server", json: "{\"mcpServers\": {\"a\": {\"command\": \"x\"},\n\"a\": {\"command\": \"y\"}}}",
			err: "mcpServers.a: duplicate key (line 2)", line: 1},
		{name: "a bad server name", json: "{\"mcpServers\": {\n\"my.server\": {\"command\": \"x\"}}}",
			err: `mcpServers."my.server": a server name must be a letter`, line: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeMCPFiles(t, "mcp_servers_file: mcp.json\n", "mcp.json", tt.json)
			f, err := Load(t.Context(), cfg)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				for n, s := range tt.want {
					s.TimeoutSeconds = DefaultMCPTimeoutSeconds
					tt.want[n] = s
				}
				for n, s := range f.MCPServers {
					s.Env, s.Headers = nilIfEmpty(s.Env), nilIfEmpty(s.Headers)
					f.MCPServers[n] = s
				}
				if !reflect.DeepEqual(f.MCPServers, tt.want) {
					t.Errorf("got  %+v\nwant %+v", f.MCPServers, tt.want)
				}
				return
			}
			jsonPath := filepath.Join(filepath.Dir(cfg), "mcp.json")
			if err == nil || !strings.Contains(err.Error(), jsonPath+": "+tt.err) {
				t.Fatalf("got %v\nwant %q", err, jsonPath+": "+tt.err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != jsonPath || ce.Line != tt.line {
				t.Errorf("%v: want a *Error naming %s, line %d", err, jsonPath, tt.line)
			}
		})
	}
}

// TestMCPServersFileAndYAML: the file's servers join mcp_servers:; a name
// in both is an error naming both places; a file that cannot be read is
// an error of noeta.yaml's mcp_servers_file, and the file is taken from
// noeta.yaml's directory, not the working directory.
func TestMCPServersFileAndYAML(t *testing.T) {
	t.Parallel()
	const file = `{"mcpServers": {"files": {"command": "npx", "args": ["x"]},
"db": {"command": "db-mcp"}}}`
	cfg := writeMCPFiles(t, "mcp_servers:\n  issues: {url: \"https://h/mcp\"}\nmcp_servers_file: .mcp.json\n", ".mcp.json", file)
	f, err := Load(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedKeys(f.MCPServers); !reflect.DeepEqual(got, []string{"db", "files", "issues"}) {
		t.Errorf("servers %v", got)
	}

	// A disabled server is left out, and an agent that names its tools
	// is told why.
	disabled := writeMCPFiles(t, "mcp_servers_file: .mcp.json\nagents:\n  a: {tools: [\"mcp__db__*\"]}\n", ".mcp.json",
		`{"mcpServers": {"files": {"command": "x"}, "db": {"command": "db-mcp", "disabled": true}}}`)
	if f, err = Load(t.Context(), disabled); err != nil {
		t.Fatal(err)
	}
	want := `agents.a.tools[0]: "mcp__db__*": MCP server "db" is disabled in ` + filepath.Join(filepath.Dir(disabled), ".mcp.json") + " (mcp_servers: files)"
	if err := f.CheckTools(nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckTools: %v\nwant %q", err, want)
	}

	jsonPath := filepath.Join(filepath.Dir(cfg), ".mcp.json")
	for _, tt := range []struct{ name, yaml, want string }{
		{"a name in both", "mcp_servers:\n  db: {command: [./db]}\nmcp_servers_file: .mcp.json\n",
			"noeta.yaml: mcp_servers.db: is declared here and in " + jsonPath + " (mcpServers.db, line 2): keep one (line 2)"},
		{"a missing file", "mcp_servers_file: nope.json\n", "noeta.yaml: mcp_servers_file: cannot read the MCP servers file: open " +
			filepath.Join(filepath.Dir(cfg), "nope.json") + ": no such file or directory (line 1)"},
		{"a directory", "mcp_servers_file: .\n", "noeta.yaml: mcp_servers_file: cannot read the MCP servers file: read " + filepath.Dir(cfg) + ": not a regular file"},
		{"empty", "mcp_servers_file: \"\"\n", "noeta.yaml: mcp_servers_file: must be the path of an MCP client's JSON file (.mcp.json, .vscode/mcp.json), not empty (line 1)"},
		{"null", "mcp_servers_file:\n", "noeta.yaml: mcp_servers_file: must be the path of an MCP client's JSON file (.mcp.json, .vscode/mcp.json), not null (line 1)"},
		{"not a string", "mcp_servers_file: [a]\n", "noeta.yaml: mcp_servers_file: must be a string, not a sequence (line 1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(filepath.Dir(cfg), "noeta.yaml")
			_, err := Parse(p, []byte(tt.yaml))
			want := strings.Replace(tt.want, "noeta.yaml", p, 1)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v\nwant %q", err, want)
			}
		})
	}
}

// FuzzMCPServersFileStrings: a string in an MCP client's file is read as
// encoding/json reads it, whatever its escapes and characters (the YAML
// parser, which finds the lines, reads some of them otherwise), or the
// file is refused; it is never read as another string.
func FuzzMCPServersFileStrings(f *testing.F) {
	for _, s := range []string{"plain", "C:\\bin", "a/b", "é", "😀", "\u0085", "\u2028x\u2029", "\x00", "\t\n", "\ufeff", "\"q\"", "'s'", "*a", "&a", "!!int 1", "{a: b}", "- x", "#c", "\ud7ff\ue000"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, raw bool) {
		lit, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal of a string: %v", err) // it never fails: a string always encodes
		}
		if raw && !strings.ContainsAny(s, "\"\\") && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 }) && utf8.ValidString(s) {
			lit = []byte(`"` + s + `"`) // what JSON allows unescaped, written so
		}
		data := []byte(`{"k": ` + string(lit) + `}`)
		var want map[string]string
		if err := json.Unmarshal(data, &want); err != nil {
			if !raw {
				t.Fatalf("encoding/json refuses what it wrote: %v", err)
			}
			return // a raw literal JSON itself refuses: not a file of the domain
		}
		d := &decoder{errs: &errorList{file: "f.json", pos: positions{}}}
		n, ok := d.parseJSON(data)
		if !ok {
			return // refused: never misread
		}
		if got := n.Content[1].Value; got != want["k"] {
			t.Fatalf("%q read as %q, want %q", data, got, want["k"])
		}
	})
}
