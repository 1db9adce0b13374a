package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Gateway is the gateway: section of noeta.yaml: how engine gateway offers
// the tools to its clients.
//
//	gateway:
//	  aliases:                             # the name a client sees → the tool it calls
//	    read_docs: mcp__files__read_file
//	    search: mcp__github__search_code
//
// A client sees an aliased tool under its alias only, and calls it by it;
// the log, the rules, the permissions and every other guard see the tool's
// own name, so a rule written for mcp__files__read_file governs the calls
// of read_docs. An alias is 1 to 64 of A-Z a-z 0-9 _ . -, not under mcp__
// (the MCP tools' own names), and not the name of another tool; a tool has
// one alias at most. A tool the agent may not call is not offered under its
// alias either.
type Gateway struct {
	// Aliases maps each alias to the tool's name in the registry:
	// mcp__<server>__<tool>, or a built-in's name.
	Aliases map[string]string
}

// aliasName is what an alias may be: a name MCP clients take for a tool.
var aliasName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func (d *decoder) gateway(n *yaml.Node, path string) Gateway {
	var g Gateway
	f, ok := d.fields(n, path, "aliases")
	if !ok && f == nil {
		return g
	}
	ap := join(path, "aliases")
	an := d.enter(f["aliases"], ap)
	if an == nil {
		return g
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(an, ap)
	g.Aliases = make(map[string]string, len(ps))
	byTool := map[string]string{}
	for _, p := range ps {
		kp := join(ap, p.key)
		d.mark(kp, p.keyN)
		tool, ok := d.str(p.value, kp)
		if !ok {
			if isNull(p.value) {
				d.errs.add(kp, "must name the tool the alias calls")
			}
			continue
		}
		switch {
		case !aliasName.MatchString(p.key):
			d.errs.addf(kp, "the alias %q must be 1 to 64 of A-Z a-z 0-9 _ . -", p.key)
		case strings.HasPrefix(strings.ToLower(p.key), MCPToolPrefix):
			d.errs.addf(kp, "the alias %q is under %s, the MCP tools' own names: an alias may not pass for another tool", p.key, MCPToolPrefix)
		case !mcpToolName.MatchString(tool) || isGlob(tool):
			d.errs.addf(kp, "%q is not a tool's name (a pattern is not taken): want mcp__<server>__<tool> or a built-in's name", tool)
		case byTool[tool] != "":
			d.errs.addf(kp, "%s has an alias already, %q: a tool has one alias at most", tool, byTool[tool])
		default:
			byTool[tool] = p.key
			g.Aliases[p.key] = tool
		}
	}
	return g
}

// checkAliases reports an alias that is the name of a tool of known, or
// whose tool is not one of known (nor an MCP server's, known only once it
// runs).
func (f *File) checkAliases(known []string, errs *errorList) {
	for _, alias := range sortedKeys(f.Gateway.Aliases) {
		tool := f.Gateway.Aliases[alias]
		p := join(join("gateway", "aliases"), alias)
		if slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(k, alias) }) {
			errs.addf(p, "the alias %q is the name of a tool already: a client could not tell which it calls", alias)
			continue
		}
		if slices.Contains(known, tool) {
			continue
		}
		if deferred, problem := f.deferredMCP(tool); deferred {
			if problem != "" {
				errs.add(p, problem)
			}
			continue
		}
		errs.add(p, fmt.Sprintf("%q is no tool (the tools: %s)", tool, strings.Join(known, ", ")))
	}
}
