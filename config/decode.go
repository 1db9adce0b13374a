package config

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/guards"
	"go.yaml.in/yaml/v3"
)

// safeUnmarshal parses YAML into a node tree, turning a panic of the parser
// on hostile input into an error.
func safeUnmarshal(data []byte, root *yaml.Node) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("yaml: %v", v)
		}
	}()
	return yaml.Unmarshal(data, root)
}

// MaxSize is the largest noeta.yaml parsed: 1 MiB, and what the binaries
// allow the file to be. The YAML parser builds the whole node tree before the
// limits below are looked at, so the size is what bounds its memory
// (measured: under 160 MB at 1 MiB for the worst shapes).
const MaxSize = 1 << 20

// Limits on what a config document may make the decoder do: aliases can make a
// small document a very large tree, or a cycle.
const (
	maxConfigNodes = 100_000
	maxConfigDepth = 64
)

type decoder struct {
	errs      *errorList
	nodes     int
	depth     int
	exhausted bool

	// ctx bounds the read of mcp_servers_file, and dir is the directory
	// its relative path is taken from (noeta.yaml's).
	ctx context.Context
	dir string
	// fileErrs are the mistakes found in mcp_servers_file, which name
	// that file; nil when there is none.
	fileErrs *errorList
	// mcpFile is the path of mcp_servers_file, as read.
	mcpFile string
	// disabled holds the servers a client's file marks disabled.
	disabled map[string]bool
}

// enter resolves aliases and counts the node against the limits; it returns
// nil once they are exceeded.
func (d *decoder) enter(n *yaml.Node, path string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
		d.nodes++
	}
	d.nodes++
	if d.nodes > maxConfigNodes || d.depth > maxConfigDepth {
		if !d.exhausted {
			d.exhausted = true
			d.errs.addf(path, "the document is too large or too deeply nested (through aliases?) to read")
		}
		return nil
	}
	if n != nil {
		d.mark(path, n)
	}
	return n
}

func (d *decoder) mark(path string, n *yaml.Node) {
	if _, ok := d.errs.pos[path]; !ok && n.Line > 0 {
		d.errs.pos[path] = [2]int{n.Line, n.Column}
	}
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		}
		return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
	}
	return "a document"
}

type pair struct {
	key   string
	keyN  *yaml.Node
	value *yaml.Node
}

// pairs returns a mapping's entries in order, merge keys expanded (explicit
// keys win, then earlier merged mappings), reporting non-string and duplicate
// keys. A null stands for an empty mapping.
func (d *decoder) pairs(n *yaml.Node, path string) ([]pair, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		d.errs.addf(path, "must be a mapping, not %s", kindName(n))
		return nil, false
	}
	var out, merged []pair
	seen := map[string]bool{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergeSources(v, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode || (k.ShortTag() != "!!str" && !isNull(k)) {
			d.errs.addf(path, "keys must be strings; line %d has %s", k.Line, kindName(k))
			ok = false
			continue
		}
		if seen[k.Value] {
			d.errs.addf(join(path, k.Value), "duplicate key (line %d)", k.Line)
			ok = false
			continue
		}
		seen[k.Value] = true
		out = append(out, pair{key: k.Value, keyN: k, value: v})
	}
	for _, p := range merged {
		if !seen[p.key] {
			seen[p.key] = true
			out = append(out, p)
		}
	}
	return out, ok
}

// mergeSources returns the entries a << key brings in: one mapping or a
// sequence of them.
func (d *decoder) mergeSources(v *yaml.Node, path string) []pair {
	if v = d.enter(v, path); v == nil {
		return nil
	}
	srcs := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		srcs = v.Content
	}
	var out []pair
	for _, s := range srcs {
		if s = d.enter(s, path); s == nil {
			return out
		}
		if s.Kind != yaml.MappingNode {
			d.errs.addf(path, "a merge key (<<) needs a mapping or a sequence of mappings, not %s", kindName(s))
			continue
		}
		d.depth++
		ps, _ := d.pairs(s, path)
		d.depth--
		out = append(out, ps...)
	}
	return out
}

// fields reads a mapping with a fixed set of keys and returns their values.
func (d *decoder) fields(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, bool) {
	if n = d.enter(n, path); n == nil {
		return nil, false
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, ok := d.pairs(n, path)
	if ps == nil && !ok {
		return nil, false
	}
	out := make(map[string]*yaml.Node, len(ps))
	for _, p := range ps {
		fp := join(path, p.key)
		d.mark(fp, p.keyN)
		if !contains(known, p.key) {
			d.errs.addf(fp, "unknown key (known: %s)", strings.Join(known, ", "))
			ok = false
			continue
		}
		out[p.key] = p.value
	}
	return out, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str reads a string; null is absent.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n = d.enter(n, path); isNull(n) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.errs.addf(path, "must be a string, not %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

// integer reads an int; null is absent.
func (d *decoder) integer(n *yaml.Node, path string) (*int, bool) {
	if n = d.enter(n, path); isNull(n) {
		return nil, true
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.errs.addf(path, "must be an integer, not %s", kindName(n))
		return nil, false
	}
	return &v, true
}

// number reads an int or a float; null is absent.
func (d *decoder) number(n *yaml.Node, path string) (*float64, bool) {
	if n = d.enter(n, path); isNull(n) {
		return nil, true
	}
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil {
		d.errs.addf(path, "must be a number, not %s", kindName(n))
		return nil, false
	}
	return &v, true
}

// strList reads a sequence of strings; null is absent (nil), [] is empty.
func (d *decoder) strList(n *yaml.Node, path string) []string {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.addf(path, "must be a list of strings, not %s", kindName(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, it := range n.Content {
		s, ok := d.str(it, index(path, i))
		switch {
		case ok:
			out = append(out, s)
		case isNull(it):
			// str treats null as absent; in a list it is a mistake.
			d.errs.add(index(path, i), "must be a string, not null")
		}
	}
	return out
}

// seq reads a sequence; null is empty.
func (d *decoder) seq(n *yaml.Node, path string) []*yaml.Node {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.addf(path, "must be a list, not %s", kindName(n))
		return nil
	}
	return n.Content
}

// sections is what the decoder read, before the governance part is
// compiled.
type sections struct {
	agents    map[string]guards.AgentConfig
	rules     []guards.Rule
	sets      []guards.RuleSet
	hooks     Hooks
	observers Observers
	models    map[string]Model
	// agentModels holds the agents' model keys (model, system_prompt,
	// max_context_chars), for the agents that give a model.
	agentModels map[string]AgentModel
	mcpServers  map[string]MCPServer
	// approvals is the approvals: section, with the agents'
	// approval_timeout.
	approvals approvals.Config
	http      HTTP
	gateway   Gateway
	sandbox   Sandbox
	// agentSandboxes holds the agents' sandbox: keys, for the agents that
	// have one.
	agentSandboxes map[string]Sandbox
}

func (d *decoder) top(root *yaml.Node) sections {
	var out sections
	doc := root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return out
		}
		doc = doc.Content[0]
	}
	if isNull(doc) {
		return out
	}
	f, _ := d.fields(doc, "", "agents", "rules", "guards", "hooks", "observers", "models", "mcp_servers",
		"mcp_servers_file", "approvals", "http", "sandbox", "gateway")
	if n, ok := f["http"]; ok && !isNull(n) {
		out.http = d.http(n, "http")
	}
	if n, ok := f["gateway"]; ok && !isNull(n) {
		out.gateway = d.gateway(n, "gateway")
	}
	if n, ok := f["sandbox"]; ok {
		out.sandbox = d.sandbox(n, "sandbox")
	}
	if n, ok := f["observers"]; ok && !isNull(n) {
		out.observers = d.observers(n, "observers")
	}
	if n, ok := f["mcp_servers"]; ok {
		out.mcpServers = d.mcpServers(n, "mcp_servers")
	}
	if n, ok := f["mcp_servers_file"]; ok {
		if file := d.mcpServersFile(n, "mcp_servers_file"); file != nil {
			d.mcpFile = file.path
			d.disabled = file.disabled
			out.mcpServers = d.mergeMCPServers(out.mcpServers, file)
		}
	}
	if n, ok := f["models"]; ok {
		out.models = d.models(n, "models")
	}
	if n, ok := f["approvals"]; ok {
		out.approvals = d.approvals(n, "approvals")
	}
	if n, ok := f["agents"]; ok {
		out.agentModels = map[string]AgentModel{}
		out.approvals.AgentTimeouts = map[string]time.Duration{}
		out.approvals.AgentDoors = map[string][]string{}
		out.agentSandboxes = map[string]Sandbox{}
		out.agents = d.agents(n, "agents", out.agentModels, &out.approvals, out.agentSandboxes)
	}
	if n, ok := f["rules"]; ok {
		out.rules = d.rules(n, "rules")
	}
	if n, ok := f["guards"]; ok {
		for i, g := range d.seq(n, "guards") {
			p := index("guards", i)
			gf, ok := d.fields(g, p, "name", "priority", "rules", "shadow")
			if !ok && gf == nil {
				continue
			}
			s := guards.RuleSet{Priority: guards.MinUserPriority}
			s.Name, _ = d.str(gf["name"], join(p, "name"))
			if pr, _ := d.integer(gf["priority"], join(p, "priority")); pr != nil {
				s.Priority = *pr
			}
			s.Rules = d.rules(gf["rules"], join(p, "rules"))
			// A boolean and nothing else: a shadow set decides nothing, so
			// a misread true would let through what the set denies.
			s.Shadow, _ = d.boolean(gf["shadow"], join(p, "shadow"))
			out.sets = append(out.sets, s)
		}
	}
	if n, ok := f["hooks"]; ok {
		out.hooks = d.hooks(n, "hooks")
	}
	return out
}

func (d *decoder) agents(n *yaml.Node, path string, models map[string]AgentModel, appr *approvals.Config,
	sandboxes map[string]Sandbox) map[string]guards.AgentConfig {
	if n = d.enter(n, path); n == nil {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]guards.AgentConfig, len(ps))
	for _, p := range ps {
		ap := join(path, p.key)
		d.mark(ap, p.keyN)
		f, ok := d.fields(p.value, ap, "tools", "permission_mode", "budget", "permissions", "repetition", "rate_limits", "model", "system_prompt", "max_context_chars", "approval_timeout", "approval", "sandbox")
		if !ok && f == nil {
			continue
		}
		if sn, ok := f["sandbox"]; ok && !isNull(sn) {
			sandboxes[p.key] = d.sandbox(sn, join(ap, "sandbox"))
		}
		if t := d.duration(f["approval_timeout"], join(ap, "approval_timeout")); t > 0 {
			appr.AgentTimeouts[p.key] = t
		}
		if doors := d.strOrList(f["approval"], join(ap, "approval")); len(doors) > 0 {
			appr.AgentDoors[p.key] = doors
		}
		if am, ok := d.agentModel(f, ap); ok {
			models[p.key] = am
		}
		var a guards.AgentConfig
		a.Tools = d.strList(f["tools"], join(ap, "tools"))
		if m, ok := d.str(f["permission_mode"], join(ap, "permission_mode")); ok {
			a.Permissions.Mode = guards.PermissionMode(m)
		}
		if bn, ok := f["budget"]; ok {
			bp := join(ap, "budget")
			bf, _ := d.fields(bn, bp, "max_iterations", "max_tool_calls", "max_cost_usd", "max_spawned_subtasks", "max_subtask_depth")
			a.Budget.MaxIterations, _ = d.integer(bf["max_iterations"], join(bp, "max_iterations"))
			a.Budget.MaxToolCalls, _ = d.integer(bf["max_tool_calls"], join(bp, "max_tool_calls"))
			a.Budget.MaxCostUSD, _ = d.number(bf["max_cost_usd"], join(bp, "max_cost_usd"))
			a.Budget.MaxSpawnedSubtasks, _ = d.integer(bf["max_spawned_subtasks"], join(bp, "max_spawned_subtasks"))
			a.Budget.MaxSubtaskDepth, _ = d.integer(bf["max_subtask_depth"], join(bp, "max_subtask_depth"))
		}
		if pn, ok := f["permissions"]; ok {
			pp := join(ap, "permissions")
			pf, _ := d.fields(pn, pp, "allowed_tools", "denied_tools", "max_risk_level", "allowed_subtask_agents", "require_approval_tools")
			a.Permissions.AllowedTools = d.strList(pf["allowed_tools"], join(pp, "allowed_tools"))
			a.Permissions.DeniedTools = d.strList(pf["denied_tools"], join(pp, "denied_tools"))
			if r, ok := d.str(pf["max_risk_level"], join(pp, "max_risk_level")); ok {
				a.Permissions.MaxRiskLevel = guards.RiskLevel(r)
				if r == "" {
					d.errs.add(join(pp, "max_risk_level"), "must be low, medium or high, not empty")
				}
			}
			a.Permissions.AllowedSubtaskAgents = d.strList(pf["allowed_subtask_agents"], join(pp, "allowed_subtask_agents"))
			a.Permissions.RequireApprovalTools = d.strList(pf["require_approval_tools"], join(pp, "require_approval_tools"))
		}
		if rn, ok := f["repetition"]; ok {
			rp := join(ap, "repetition")
			rf, _ := d.fields(rn, rp, "threshold", "action", "window")
			if t, _ := d.integer(rf["threshold"], join(rp, "threshold")); t != nil {
				a.Repetition.Threshold = *t
			}
			if s, ok := d.str(rf["action"], join(rp, "action")); ok {
				switch s {
				case "deny":
					a.Repetition.Action = noeta.VerdictDeny
				case "require_approval":
					a.Repetition.Action = noeta.VerdictRequireApproval
				default:
					d.errs.addf(join(rp, "action"), "must be deny or require_approval, not %q", s)
				}
			}
			if w, _ := d.integer(rf["window"], join(rp, "window")); w != nil {
				a.Repetition.Window = *w
				if *w == 0 {
					d.errs.add(join(rp, "window"), "must be >= 1 (leave it out for the default of 8)")
				}
			}
		}
		if rn, ok := f["rate_limits"]; ok {
			a.RateLimits = d.rateLimits(rn, join(ap, "rate_limits"))
		}
		out[p.key] = a
	}
	return out
}

// rateLimits reads an agent's rate_limits:; guards.NewConfig checks the
// values.
func (d *decoder) rateLimits(n *yaml.Node, path string) []guards.RateLimit {
	items := d.seq(n, path)
	out := make([]guards.RateLimit, 0, len(items))
	for i, it := range items {
		p := index(path, i)
		if isNull(it) {
			d.errs.add(p, "must be a mapping {tool, calls, window, per}, not null")
			continue
		}
		f, ok := d.fields(it, p, "tool", "calls", "window", "per")
		if !ok && f == nil {
			continue
		}
		var l guards.RateLimit
		if s, ok := d.str(f["tool"], join(p, "tool")); ok {
			l.Tool = s
			if s == "" {
				d.errs.add(join(p, "tool"), `must be a tool name or pattern, not empty (leave it out for "*")`)
				l.Tool = "*"
			}
		}
		switch c, _ := d.integer(f["calls"], join(p, "calls")); {
		case c != nil:
			l.Calls = *c
		case isNull(f["calls"]):
			d.errs.add(join(p, "calls"), "required: how many calls each window admits")
			l.Calls = 1 // reported; keep NewConfig from saying it again
		default:
			l.Calls = 1 // the wrong kind, reported
		}
		switch s, ok := d.str(f["window"], join(p, "window")); {
		case ok:
			w, err := time.ParseDuration(s)
			if err != nil {
				d.errs.addf(join(p, "window"), "%q is not a duration (write it like 30s, 1m or 1h)", s)
				w = time.Second
			}
			l.Window = w
		case isNull(f["window"]):
			d.errs.add(join(p, "window"), "required: the window's length, e.g. 1m")
			l.Window = time.Second
		default:
			l.Window = time.Second // the wrong kind, reported
		}
		if s, ok := d.str(f["per"], join(p, "per")); ok {
			l.Per = guards.RateScope(s)
			if s == "" {
				d.errs.add(join(p, "per"), "must be principal or agent, not empty")
				l.Per = guards.RatePerPrincipal
			}
		}
		out = append(out, l)
	}
	return out
}

func (d *decoder) rules(n *yaml.Node, path string) []guards.Rule {
	items := d.seq(n, path)
	out := make([]guards.Rule, 0, len(items))
	for i, it := range items {
		p := index(path, i)
		f, ok := d.fields(it, p, "match_tool", "match_arg", "match_shell", "when", "action", "reason", "shadow")
		if !ok && f == nil {
			continue
		}
		var r guards.Rule
		r.MatchTool, _ = d.str(f["match_tool"], join(p, "match_tool"))
		r.When, _ = d.str(f["when"], join(p, "when"))
		r.Reason, _ = d.str(f["reason"], join(p, "reason"))
		r.Shadow, _ = d.boolean(f["shadow"], join(p, "shadow"))
		if s, ok := d.str(f["action"], join(p, "action")); ok {
			if err := r.Action.UnmarshalText([]byte(s)); err != nil {
				d.errs.addf(join(p, "action"), "must be allow, deny or require_approval, not %q", s)
				// Keep the rule out of compile's "required" message.
				r.Action = noeta.VerdictAllow
			}
		}
		if mn, ok := f["match_arg"]; ok && !isNull(mn) {
			r.MatchArg = d.matchArg(mn, join(p, "match_arg"))
		}
		if mn, ok := f["match_shell"]; ok && !isNull(mn) {
			r.MatchShell = d.matchShell(mn, join(p, "match_shell"))
		}
		out = append(out, r)
	}
	return out
}

func (d *decoder) matchArg(n *yaml.Node, path string) *guards.MatchArg {
	f, _ := d.fields(n, path, "path", "equals", "contains", "regex")
	m := &guards.MatchArg{}
	m.Path, _ = d.str(f["path"], join(path, "path"))
	var ops []guards.MatchOp
	for _, op := range []guards.MatchOp{guards.MatchEquals, guards.MatchContains, guards.MatchRegex} {
		if _, ok := f[string(op)]; ok {
			ops = append(ops, op)
		}
	}
	switch len(ops) {
	case 0:
		// compileRules reports the missing operator.
		return m
	case 1:
	default:
		d.errs.addf(path, "has both %s and %s; give exactly one of equals, contains or regex", ops[0], ops[1])
	}
	m.Op = ops[0]
	vp := join(path, string(m.Op))
	switch m.Op {
	case guards.MatchEquals:
		d.depth++
		v, _ := d.jsonValue(f["equals"], vp)
		d.depth--
		m.Value = v
	default:
		s, ok := d.str(f[string(m.Op)], vp)
		if !ok {
			if isNull(f[string(m.Op)]) {
				d.errs.add(vp, "must be a string, not null")
			}
			// A placeholder, so that compileRules does not report again.
			s = ""
		}
		m.Value = s
	}
	return m
}

func (d *decoder) matchShell(n *yaml.Node, path string) *guards.MatchShell {
	f, _ := d.fields(n, path, "path", "program", "flags_all", "flags_any")
	m := &guards.MatchShell{}
	m.Path, _ = d.str(f["path"], join(path, "path"))
	m.Programs = d.strOrList(f["program"], join(path, "program"))
	m.FlagsAll = d.flags(f["flags_all"], join(path, "flags_all"))
	m.FlagsAny = d.flags(f["flags_any"], join(path, "flags_any"))
	return m
}

// strOrList reads a string as a list of one, or a list of strings.
func (d *decoder) strOrList(n *yaml.Node, path string) []string {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	if n.Kind == yaml.SequenceNode {
		return d.strList(n, path)
	}
	if s, ok := d.str(n, path); ok {
		return []string{s}
	}
	return nil
}

// flags reads a list of flags, each one a spelling or a list of alternative
// spellings.
func (d *decoder) flags(n *yaml.Node, path string) [][]string {
	items := d.seq(n, path)
	out := make([][]string, 0, len(items))
	for i, it := range items {
		fp := index(path, i)
		if isNull(it) {
			d.errs.add(fp, "must be a flag or a list of its spellings, not null")
			continue
		}
		out = append(out, d.strOrList(it, fp))
	}
	return out
}

// jsonValue converts a YAML value to the Go value of the same JSON: mappings
// with string keys, sequences, null, booleans, numbers (finite) and strings.
// Timestamps and other scalars that YAML would convert stay the text written.
func (d *decoder) jsonValue(n *yaml.Node, path string) (any, bool) {
	if n = d.enter(n, path); n == nil {
		return nil, false
	}
	d.depth++
	defer func() { d.depth-- }()
	switch n.Kind {
	case yaml.MappingNode:
		ps, ok := d.pairs(n, path)
		m := make(map[string]any, len(ps))
		for _, p := range ps {
			v, vok := d.jsonValue(p.value, join(path, p.key))
			ok = ok && vok
			m[p.key] = v
		}
		return m, ok
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		ok := true
		for i, it := range n.Content {
			var vok bool
			s[i], vok = d.jsonValue(it, index(path, i))
			ok = ok && vok
		}
		return s, ok
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i, true
			}
			var u uint64
			if n.Decode(&u) == nil {
				return u, true
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
		default:
			return n.Value, true
		}
	}
	d.errs.addf(path, "not a JSON value: %s %q", kindName(n), n.Value)
	return nil, false
}
