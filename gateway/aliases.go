package gateway

import (
	"strings"

	"github.com/noeta-go/noeta/host"
)

// Aliases: a client may see a tool under another name (noeta.yaml's
// gateway.aliases, ADR 0097). Only what the client sees changes: the
// handler of an aliased tool hands the engine the tool's own name, so the
// log, the rules, the permissions, the pins and every other guard see
// mcp__<server>__<tool>, never the alias.

// exposed is the name a client sees tool under.
func (g *Gateway) exposed(tool string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a, ok := g.aliasOf[tool]; ok {
		return a
	}
	return tool
}

// exposedAll maps tools to the names a client sees them under.
func (g *Gateway) exposedAll(tools []string) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = g.Exposed(t)
	}
	return out
}

// setAliases takes aliases (alias → tool) for h's registry: an alias that
// is a tool's own name is dropped, warned about (the config's check
// refuses it when the host opens; a tool added in Go may still collide),
// so that a client's name always means one tool.
func (g *Gateway) setAliases(h *host.Host, aliases map[string]string) {
	names := h.Tools().Names()
	aliasOf := make(map[string]string, len(aliases))
	for alias, tool := range aliases {
		taken := false
		for _, n := range names {
			if strings.EqualFold(n, alias) {
				taken = true
				break
			}
		}
		if taken {
			g.log.Warn("gateway: an alias that is a tool's own name is not offered", "alias", alias, "tool", tool)
			continue
		}
		aliasOf[tool] = alias
	}
	g.aliasOf = aliasOf
}
