package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const aliceHash = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90" // sha256("alice")

func TestParseHTTP(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(`http:
  tokens:
    - {name: alice, sha256: "`+aliceHash+`"}
  trusted_proxy: {header: X-Auth-Request-User, from: ["127.0.0.1/32", "10.1.2.3/8"]}
  hosts: [Inbox.Example.com]
`))
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTP
	if len(h.Tokens) != 1 || h.Tokens[0].Name != "alice" || h.Tokens[0].SHA256[0] != 0x2b {
		t.Errorf("tokens = %+v", h.Tokens)
	}
	if h.TrustedProxy == nil || h.TrustedProxy.Header != "X-Auth-Request-User" ||
		len(h.TrustedProxy.From) != 2 || h.TrustedProxy.From[1] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("trusted_proxy = %+v", h.TrustedProxy)
	}
	if len(h.Hosts) != 1 || h.Hosts[0] != "inbox.example.com" {
		t.Errorf("hosts = %v", h.Hosts)
	}
	if f, err := Parse("", []byte("agents: {a: {}}\n")); err != nil || !f.HTTP.Empty() {
		t.Errorf("no http: section: %+v, %v", f.HTTP, err)
	}
}

// TestParseHTTPErrors: every mistake of the section is refused naming its
// path; in particular a trusted header without the peers it is believed
// from (which would believe it from anyone) and a token given in clear.
func TestParseHTTPErrors(t *testing.T) {
	tests := []struct{ name, yaml, path, msg string }{
		{"unknown key", "http: {token: []}", "http.token", "unknown key"},
		{"token without name", `http: {tokens: [{sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "required"},
		{"token name with a space", `http: {tokens: [{name: "a b", sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "want 1 to 128"},
		{"token named as the expiry", `http: {tokens: [{name: timeout, sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "expired request"},
		{"token named as the local user", `http: {tokens: [{name: "cli:root", sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "local user"},
		{"token named as the local user in upper case", `http: {tokens: [{name: "CLI:root", sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "local user"},
		{"token named as the expiry capitalised", `http: {tokens: [{name: "Timeout", sha256: "` + aliceHash + `"}]}`, "http.tokens[0].name", "expired request"},
		{"token in clear", `http: {tokens: [{name: a, sha256: "s3cret"}]}`, "http.tokens[0].sha256", "64 hex digits"},
		{"token without hash", `http: {tokens: [{name: a}]}`, "http.tokens[0].sha256", "required"},
		{"name twice", `http: {tokens: [{name: a, sha256: "` + aliceHash + `"}, {name: a, sha256: "` + strings.Repeat("0", 64) + `"}]}`, "http.tokens[1].name", "twice"},
		{"hash twice", `http: {tokens: [{name: a, sha256: "` + aliceHash + `"}, {name: b, sha256: "` + aliceHash + `"}]}`, "http.tokens[1].sha256", "twice"},
		{"proxy without from", "http: {trusted_proxy: {header: X-User}}", "http.trusted_proxy.from", "required"},
		{"proxy with empty from", "http: {trusted_proxy: {header: X-User, from: []}}", "http.trusted_proxy.from", "required"},
		{"proxy from not a cidr", "http: {trusted_proxy: {header: X-User, from: [localhost]}}", "http.trusted_proxy.from[0]", "CIDR"},
		{"proxy without header", "http: {trusted_proxy: {from: [127.0.0.1/32]}}", "http.trusted_proxy.header", "required"},
		{"proxy header Authorization", "http: {trusted_proxy: {header: authorization, from: [127.0.0.1/32]}}", "http.trusted_proxy.header", "something else"},
		{"bad host", "http: {hosts: [\"a b\"]}", "http.hosts[0]", "not a host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Path != tt.path || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("err = %v, want path %s and %q", err, tt.path, tt.msg)
			}
		})
	}
}

// TestTokenAgents: a token may name the agent its gateway sessions run as;
// one naming no agent is refused at its path.
func TestTokenAgents(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(`agents: {dev: {}, junior: {}}
http:
  tokens:
    - {name: alice, sha256: "`+aliceHash+`"}
    - {name: bob, sha256: "`+strings.Repeat("ab", 32)+`", agent: junior}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.HTTP.AgentOf(); len(got) != 1 || got["bob"] != "junior" {
		t.Fatalf("AgentOf = %v", got)
	}
	_, err = Parse("noeta.yaml", []byte(`agents: {dev: {}}
http:
  tokens:
    - {name: bob, sha256: "`+aliceHash+`", agent: junoir}
`))
	var ce *Error
	if !errors.As(err, &ce) || ce.Path != "http.tokens[0].agent" || !strings.Contains(ce.Msg, `"junoir" is not an agent`) {
		t.Fatalf("an unknown agent: %v", err)
	}
}
