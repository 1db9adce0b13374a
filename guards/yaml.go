package guards

import (
	"fmt"
	"math"
	"strings"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/boundedio"
	"go.yaml.in/yaml/v3"
)

// ParseConfig reads the governance parts of a noeta.yaml file:
//
//	agents:
//	  <name>:
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
//	rules:                                 # process-wide, priority 100
//	  - match_tool: "shell"
//	    match_arg: {path: command, regex: "rm\\s+-rf"}   # or equals: / contains:
//	    match_shell: {path: command, program: rm, flags_all: [recursive, force]}
//	    when: 'args.command.size() > 100'  # CEL over tool, args, task
//	    action: deny                       # allow | deny | require_approval
//	    reason: "destructive shell command"
//	guards:                                # named rule sets, priority >= 100
//	  - {name: change-freeze, priority: 150, rules: [...]}
//	hooks:                                 # run by package observers
//	  post_tool_use: [{match_tool: "*", command: ["./notify.sh"], timeout_seconds: 10}]
//	  notification: [{on: approval, command: ["./page-oncall.sh"]}]
//	observers:                             # run in process (see [ObserversConfig])
//	  audit: {file: audit.jsonl}           # or {stdout: true}, or {subject: SUBJ}
//
// Decoding is strict: an unknown key at any level, a duplicate key, a value of
// the wrong type, a regex or CEL expression that does not compile, and every
// check [NewConfig] makes are errors, each a [*ConfigError] naming its path in
// the file and its line; all of them are returned, joined. A key given as null
// counts as absent: an absent list is "no list", an empty one ([]) a list of
// nothing. Anchors, aliases and merge keys (<<) are followed. The hooks
// section is only parsed and validated here (see [HooksConfig]); package
// observers runs the hooks, and the binary hands them over. data over
// [MaxConfigSize] bytes is refused before it is parsed.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, &ConfigError{Msg: fmt.Sprintf("the config is %d bytes, over the limit of %d MiB", len(data), MaxConfigSize>>20)}
	}
	// Bound the node tree before the parser builds it.
	if err := boundedio.CheckYAML(data, maxConfigNodes); err != nil {
		return nil, &ConfigError{Msg: err.Error()}
	}
	var root yaml.Node
	if err := safeUnmarshal(data, &root); err != nil {
		return nil, &ConfigError{Msg: err.Error()}
	}
	errs := &configErrors{pos: map[string][2]int{}}
	d := &decoder{errs: errs}
	agents, rules, sets, hooks := d.top(&root)
	if d.exhausted {
		return nil, errs.err()
	}
	cfg := buildConfig(agents, rules, sets, errs)
	validateHooks(hooks, errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	cfg.hooks = withHookDefaults(hooks)
	cfg.observers = d.obs
	cfg.pos = errs.pos
	return cfg, nil
}

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

// MaxConfigSize is the largest governance config parsed: 1 MiB, and what the
// binaries allow a noeta.yaml file to be. The YAML parser builds the whole
// node tree before the limits below are looked at, so the size is what bounds
// its memory (measured: under 160 MB at 1 MiB for the worst shapes).
const MaxConfigSize = 1 << 20

// Limits on what a config document may make the decoder do: aliases can make a
// small document a very large tree, or a cycle.
const (
	maxConfigNodes = 100_000
	maxConfigDepth = 64
)

type decoder struct {
	errs      *configErrors
	obs       ObserversConfig // observers:, read by top
	nodes     int
	depth     int
	exhausted bool
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

func (d *decoder) top(root *yaml.Node) (map[string]AgentConfig, []Rule, []RuleSet, HooksConfig) {
	doc := root
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil, nil, HooksConfig{}
		}
		doc = doc.Content[0]
	}
	if isNull(doc) {
		return nil, nil, nil, HooksConfig{}
	}
	f, _ := d.fields(doc, "", "agents", "rules", "guards", "hooks", "observers")
	if n, ok := f["observers"]; ok && !isNull(n) {
		d.obs = d.observers(n, "observers")
	}
	var agents map[string]AgentConfig
	if n, ok := f["agents"]; ok {
		agents = d.agents(n, "agents")
	}
	var rules []Rule
	if n, ok := f["rules"]; ok {
		rules = d.rules(n, "rules")
	}
	var sets []RuleSet
	if n, ok := f["guards"]; ok {
		for i, g := range d.seq(n, "guards") {
			p := index("guards", i)
			gf, ok := d.fields(g, p, "name", "priority", "rules")
			if !ok && gf == nil {
				continue
			}
			s := RuleSet{Priority: MinUserPriority}
			s.Name, _ = d.str(gf["name"], join(p, "name"))
			if pr, _ := d.integer(gf["priority"], join(p, "priority")); pr != nil {
				s.Priority = *pr
			}
			s.Rules = d.rules(gf["rules"], join(p, "rules"))
			sets = append(sets, s)
		}
	}
	var hooks HooksConfig
	if n, ok := f["hooks"]; ok {
		hooks = d.hooks(n, "hooks")
	}
	return agents, rules, sets, hooks
}

func (d *decoder) agents(n *yaml.Node, path string) map[string]AgentConfig {
	if n = d.enter(n, path); n == nil {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]AgentConfig, len(ps))
	for _, p := range ps {
		ap := join(path, p.key)
		d.mark(ap, p.keyN)
		f, ok := d.fields(p.value, ap, "tools", "permission_mode", "budget", "permissions", "repetition")
		if !ok && f == nil {
			continue
		}
		var a AgentConfig
		a.Tools = d.strList(f["tools"], join(ap, "tools"))
		if m, ok := d.str(f["permission_mode"], join(ap, "permission_mode")); ok {
			a.Permissions.Mode = PermissionMode(m)
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
				a.Permissions.MaxRiskLevel = RiskLevel(r)
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
		out[p.key] = a
	}
	return out
}

func (d *decoder) rules(n *yaml.Node, path string) []Rule {
	items := d.seq(n, path)
	out := make([]Rule, 0, len(items))
	for i, it := range items {
		p := index(path, i)
		f, ok := d.fields(it, p, "match_tool", "match_arg", "match_shell", "when", "action", "reason")
		if !ok && f == nil {
			continue
		}
		var r Rule
		r.MatchTool, _ = d.str(f["match_tool"], join(p, "match_tool"))
		r.When, _ = d.str(f["when"], join(p, "when"))
		r.Reason, _ = d.str(f["reason"], join(p, "reason"))
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

func (d *decoder) matchArg(n *yaml.Node, path string) *MatchArg {
	f, _ := d.fields(n, path, "path", "equals", "contains", "regex")
	m := &MatchArg{}
	m.Path, _ = d.str(f["path"], join(path, "path"))
	var ops []MatchOp
	for _, op := range []MatchOp{MatchEquals, MatchContains, MatchRegex} {
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
	case MatchEquals:
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

func (d *decoder) matchShell(n *yaml.Node, path string) *MatchShell {
	f, _ := d.fields(n, path, "path", "program", "flags_all", "flags_any")
	m := &MatchShell{}
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
