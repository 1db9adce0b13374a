package config

import (
	"strings"
	"testing"
)

func TestParseGatewayAliases(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(`mcp_servers:
  files: {command: [server]}
gateway:
  aliases:
    read_docs: mcp__files__read_file
    say: echo
`))
	if err != nil {
		t.Fatal(err)
	}
	if a := f.Gateway.Aliases; len(a) != 2 || a["read_docs"] != "mcp__files__read_file" || a["say"] != "echo" {
		t.Fatalf("aliases = %v", a)
	}
	if err := f.CheckTools([]string{"echo", "read_file"}); err != nil {
		t.Fatalf("CheckTools: %v", err)
	}
	if f, err := Parse("", []byte("gateway:\n")); err != nil || f.Gateway.Aliases != nil {
		t.Fatalf("an empty gateway: section: %+v %v", f, err)
	}
}

// TestParseGatewayAliasErrors: an alias that could pass for another tool,
// or name none, is refused when the config loads, naming its path.
func TestParseGatewayAliasErrors(t *testing.T) {
	const servers = "mcp_servers:\n  files: {command: [server]}\n"
	known := []string{"echo", "read_file", "shell"}
	for _, tt := range []struct{ name, yaml, path, msg string }{
		{"unknown key", "gateway: {alias: {}}", "gateway.alias", "unknown key"},
		{"not a mapping", "gateway: {aliases: [a]}", "gateway.aliases", "must be a mapping"},
		{"under mcp__", "gateway: {aliases: {mcp__files__read: mcp__files__read_file}}", "gateway.aliases.mcp__files__read", "under mcp__"},
		{"under MCP__ in upper case", "gateway: {aliases: {MCP__x__y: mcp__files__read_file}}", "gateway.aliases.MCP__x__y", "under mcp__"},
		{"a space", `gateway: {aliases: {"read docs": mcp__files__read_file}}`, `gateway.aliases."read docs"`, "1 to 64"},
		{"too long", "gateway: {aliases: {" + strings.Repeat("a", 65) + ": echo}}", "gateway.aliases." + strings.Repeat("a", 65), "1 to 64"},
		{"a pattern", `gateway: {aliases: {all: "mcp__files__*"}}`, "gateway.aliases.all", "not a tool's name"},
		{"no tool", "gateway: {aliases: {x: }}", "gateway.aliases.x", "must name the tool"},
		{"not a string", "gateway: {aliases: {x: [echo]}}", "gateway.aliases.x", "must be a string"},
		{"two aliases of one tool", "gateway: {aliases: {a: echo, b: echo}}", "gateway.aliases.b", "one alias at most"},
		{"an alias twice", "gateway: {aliases: {a: echo, a: shell}}", "gateway.aliases.a", "duplicate key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("noeta.yaml", []byte(servers+tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.path+":") || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %s: …%s…", err, tt.path, tt.msg)
			}
		})
	}
	for _, tt := range []struct{ name, yaml, path, msg string }{
		{"a built-in's name", "gateway: {aliases: {read_file: mcp__files__read_file}}", "gateway.aliases.read_file", "the name of a tool already"},
		{"a built-in's name in another case", "gateway: {aliases: {Shell: mcp__files__run}}", "gateway.aliases.Shell", "the name of a tool already"},
		{"an unknown server", "gateway: {aliases: {r: mcp__nofiles__read}}", "gateway.aliases.r", "nofiles"},
		{"an unknown tool", "gateway: {aliases: {r: shel}}", "gateway.aliases.r", `"shel" is no tool`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("noeta.yaml", []byte(servers+tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = f.CheckTools(known)
			if err == nil || !strings.Contains(err.Error(), tt.path+":") || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %s: …%s…", err, tt.path, tt.msg)
			}
		})
	}
}
