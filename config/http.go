package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/guards"
	"go.yaml.in/yaml/v3"
)

// HTTP is the http: section of noeta.yaml: who may use the HTTP API and the
// inbox page (package webui), on engine serve --http and engine ui.
//
//	http:
//	  tokens:                        # bearer tokens, as hashes only
//	    - {name: alice, sha256: "<64 hex digits of sha256(token)>"}
//	    - {name: bob, sha256: "...", agent: dev-junior}   # bob's gateway sessions are dev-junior's tasks
//	  trusted_proxy:                 # off unless given
//	    header: X-Auth-Request-User
//	    from: ["127.0.0.1/32"]       # required: the peers whose header is believed
//	  hosts: [inbox.example.com]     # Host names accepted besides the listener's
//
// The token itself is never in the file: `engine token` prints a new one and
// its line. A token's name is the approver recorded for its answers.
type HTTP struct {
	// Tokens are the bearer tokens accepted, each kept as its SHA-256.
	Tokens []HTTPToken
	// TrustedProxy, when set, believes an authenticating proxy's header.
	TrustedProxy *TrustedProxy
	// Hosts are the Host header values accepted besides the listener's own
	// address (and, on a loopback listener, localhost): the names a reverse
	// proxy or a DNS name serves the page under. A request naming any other
	// host is refused, so a rebound DNS name cannot reach the API.
	Hosts []string
}

// HTTPToken is one entry of http.tokens.
type HTTPToken struct {
	// Name is the principal: the approver of the answers given with it.
	Name string
	// SHA256 is the SHA-256 of the token.
	SHA256 [32]byte
	// Agent, if set, is the agent whose tasks this principal's sessions
	// through engine gateway --listen are (else the gateway's --agent).
	Agent string
}

// TrustedProxy is http.trusted_proxy: an authenticating reverse proxy that
// sets Header to the user's name. The header is believed only from a peer in
// From; from any other it is ignored.
type TrustedProxy struct {
	Header string
	From   []netip.Prefix
}

// AgentOf maps each principal whose token names an agent to it.
func (h HTTP) AgentOf() map[string]string {
	out := map[string]string{}
	for _, t := range h.Tokens {
		if t.Agent != "" {
			out[t.Name] = t.Agent
		}
	}
	return out
}

// checkTokenAgents refuses a token whose agent is not in agents:.
func checkTokenAgents(h HTTP, gov *guards.Config, errs *errorList) {
	for i, t := range h.Tokens {
		if t.Agent == "" || gov == nil {
			continue
		}
		if _, ok := gov.Agent(t.Agent); !ok {
			errs.addf(join(index(join("http", "tokens"), i), "agent"), "%q is not an agent of agents: (the agents: %s)", t.Agent, strings.Join(gov.Agents(), ", "))
		}
	}
}

// Empty reports whether the section configures no way to authenticate.
func (h HTTP) Empty() bool { return len(h.Tokens) == 0 && h.TrustedProxy == nil }

// principalName is what a token name (an approver) may be: it is recorded as
// the approver and compared with the task's submitter, so it has no spaces
// and no characters a log line would need to escape.
var principalName = regexp.MustCompile(`^[A-Za-z0-9_.@:+-]{1,128}$`)

// CheckPrincipal refuses a name an HTTP principal may not have: one that
// is not 1 to 128 of A-Z a-z 0-9 _ . @ : + -, or that reads as another
// kind of approver in any case — the expiry's "timeout" (Timeout, TIMEOUT),
// or the local user's "cli:…" (CLI:root) — as approvals.SamePerson
// compares names.
func CheckPrincipal(name string) error {
	switch {
	case !principalName.MatchString(name):
		return fmt.Errorf("%q: want 1 to 128 of A-Z a-z 0-9 _ . @ : + -", name)
	case approvals.Reserved(name):
		return fmt.Errorf("%q reads as %q, the approver recorded for an expired request", name, noeta.ApproverTimeout)
	case strings.EqualFold(name, "cli") || len(name) >= len(approvals.CLIPrefix) && strings.EqualFold(name[:len(approvals.CLIPrefix)], approvals.CLIPrefix):
		return fmt.Errorf("%q reads as the local user of the embedded default (cli:$USER)", name)
	}
	if _, err := approvals.Approver(name); err != nil {
		return err
	}
	return nil
}

// headerName is an HTTP header field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// hostName is a Host header value: a name or address, with an optional port.
var hostName = regexp.MustCompile(`^[A-Za-z0-9.:\[\]-]{1,255}$`)

func (d *decoder) http(n *yaml.Node, path string) HTTP {
	var out HTTP
	f, ok := d.fields(n, path, "tokens", "trusted_proxy", "hosts")
	if !ok && f == nil {
		return out
	}
	names := map[string]bool{}
	hashes := map[[32]byte]bool{}
	for i, it := range d.seq(f["tokens"], join(path, "tokens")) {
		p := index(join(path, "tokens"), i)
		tf, ok := d.fields(it, p, "name", "sha256", "agent")
		if !ok && tf == nil {
			continue
		}
		var t HTTPToken
		name, ok := d.str(tf["name"], join(p, "name"))
		switch {
		case !ok:
			d.errs.add(join(p, "name"), "required: who the token is (the approver its answers are recorded under)")
		case CheckPrincipal(name) != nil:
			d.errs.add(join(p, "name"), CheckPrincipal(name).Error())
		case names[name]:
			d.errs.addf(join(p, "name"), "%q is given twice", name)
		}
		names[name] = true
		t.Name = name
		sum, ok := d.str(tf["sha256"], join(p, "sha256"))
		if !ok {
			d.errs.add(join(p, "sha256"), "required: the 64 hex digits of the SHA-256 of the token (engine token prints one)")
		} else if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
			d.errs.add(join(p, "sha256"), "must be 64 hex digits, the SHA-256 of the token (the token itself never goes in the file)")
		} else {
			copy(t.SHA256[:], b)
			if hashes[t.SHA256] {
				d.errs.add(join(p, "sha256"), "the same token hash is given twice")
			}
			hashes[t.SHA256] = true
		}
		if a, ok := d.str(tf["agent"], join(p, "agent")); ok {
			t.Agent = a
		}
		out.Tokens = append(out.Tokens, t)
	}
	if pn, ok := f["trusted_proxy"]; ok && !isNull(pn) {
		pp := join(path, "trusted_proxy")
		pf, _ := d.fields(pn, pp, "header", "from")
		tp := &TrustedProxy{}
		h, ok := d.str(pf["header"], join(pp, "header"))
		switch {
		case !ok:
			d.errs.add(join(pp, "header"), "required: the header the proxy sets to the user's name (e.g. X-Auth-Request-User)")
		case !headerName.MatchString(h):
			d.errs.addf(join(pp, "header"), "%q is not an HTTP header name", h)
		case strings.EqualFold(h, "Authorization") || strings.EqualFold(h, "Cookie") || strings.EqualFold(h, "Host"):
			d.errs.addf(join(pp, "header"), "%q carries something else; name the header the proxy sets to the user", h)
		}
		tp.Header = h
		from := d.strList(pf["from"], join(pp, "from"))
		if len(from) == 0 {
			d.errs.add(join(pp, "from"), "required: the addresses (CIDR) of the proxies whose header is believed; from any other peer it is ignored")
		}
		for i, s := range from {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				d.errs.addf(index(join(pp, "from"), i), "%q is not a CIDR prefix (e.g. 127.0.0.1/32)", s)
				continue
			}
			tp.From = append(tp.From, pfx.Masked())
		}
		out.TrustedProxy = tp
	}
	for i, h := range d.strList(f["hosts"], join(path, "hosts")) {
		if !hostName.MatchString(h) {
			d.errs.addf(index(join(path, "hosts"), i), "%q is not a host name", h)
			continue
		}
		out.Hosts = append(out.Hosts, strings.ToLower(h))
	}
	return out
}
