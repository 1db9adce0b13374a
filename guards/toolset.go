package guards

import (
	"strings"

	"github.com/noeta-go/noeta/internal/glob"
)

// toolSet is a list of tool names from the config — an agent's tools:, its
// allowed, denied and approval lists — in which an entry with a glob
// character ('*', '?', '[') is a pattern over tool names, read as the rules'
// match_tool is ("mcp__files__*" is every tool of the MCP server files).
type toolSet struct {
	exact map[string]struct{}
	globs []glob.Pattern
}

// isToolPattern reports whether a list entry is a pattern.
func isToolPattern(s string) bool { return strings.ContainsAny(s, "*?[") }

// newToolSet returns nil for a nil list and a (possibly empty) set
// otherwise, so that "no list" and "an empty list" stay different.
func newToolSet(list []string) *toolSet {
	if list == nil {
		return nil
	}
	s := &toolSet{exact: make(map[string]struct{}, len(list))}
	for _, t := range list {
		if isToolPattern(t) {
			s.globs = append(s.globs, glob.Compile(t))
			continue
		}
		s.exact[t] = struct{}{}
	}
	return s
}

// has reports whether name is in the set (s must not be nil).
func (s *toolSet) has(name string) bool {
	if _, ok := s.exact[name]; ok {
		return true
	}
	for i := range s.globs {
		if s.globs[i].Match(name) {
			return true
		}
	}
	return false
}

// MayCall reports whether the agent's tool lists let it call tool at all —
// its tools: and permissions.allowed_tools (each, when set) name it, and
// permissions.denied_tools does not — before risk levels and approvals,
// which the Permission guard decides per call. It is what a model is
// offered; the guards still decide every call.
func (a AgentConfig) MayCall(tool string) bool {
	if d := newToolSet(a.Permissions.DeniedTools); d != nil && d.has(tool) {
		return false
	}
	for _, list := range [][]string{a.Tools, a.Permissions.AllowedTools} {
		if s := newToolSet(list); s != nil && !s.has(tool) {
			return false
		}
	}
	return true
}
