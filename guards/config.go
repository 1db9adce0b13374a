package guards

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/noeta-go/noeta/internal/glob"
)

// AgentConfig is the governance of one agent: the agents.<name> entry of
// noeta.yaml.
type AgentConfig struct {
	// Tools is the agent's tool set. Unless Permissions.AllowedTools is set it
	// is also the allowlist, as in the reference; if both are set, a tool must
	// be on both.
	Tools []string
	// Budget is budget:.
	Budget BudgetLimits
	// Permissions is permissions:, with Mode from permission_mode:.
	Permissions PermissionPolicy
	// Repetition is repetition:; with a threshold of 0 (the default) the
	// agent has no Repetition guard.
	Repetition RepetitionPolicy
	// RateLimits is rate_limits:, calls per window of the tools a pattern
	// matches, per principal or per agent; without any the agent has no
	// RateLimiter guard.
	RateLimits []RateLimit
}

// RuleSet is a named user guard made of rules: an entry of guards: in
// noeta.yaml, a guard of its own at its own priority (at least
// MinUserPriority; 100 if not given in the file).
type RuleSet struct {
	// Name is the guard's name, recorded with its verdicts; not one of the
	// built-ins' names.
	Name string
	// Priority places the set among the guards, in ascending order; 100 by
	// default in the file, and at least MinUserPriority, so that a user's
	// set runs after the built-ins.
	Priority int
	// Rules are the set's rules, in order; the first that matches decides.
	Rules []Rule
	// Shadow puts the whole set in shadow: it is judged on every tool call
	// as it would decide, and its answer is reported in [Decision.Shadows],
	// never counted.
	Shadow bool
}

// Config is the governance config of a process: each agent's budget,
// permissions and repetition policy, and the rules and named rule sets that
// apply to every agent. It is validated, and its rules compiled, when it is
// made ([NewConfig]; package config decodes noeta.yaml into one); it is
// immutable and safe for concurrent use.
type Config struct {
	agents map[string]AgentConfig
	rules  *Rules   // nil: no process-wide rules
	sets   []*Rules // named rule sets, in config order
	// ruleTools is the match_tool of every rule, with its path, for
	// CheckTools.
	ruleTools []toolRef
}

// toolRef is a tool name or pattern of the config and where it is.
type toolRef struct {
	path string
	name string
}

// NewConfig validates and compiles a config given as Go values. Errors name
// fields as the file would.
func NewConfig(agents map[string]AgentConfig, rules []Rule, sets []RuleSet) (*Config, error) {
	var errs configErrors
	cfg := buildConfig(agents, rules, sets, &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func buildConfig(agents map[string]AgentConfig, rules []Rule, sets []RuleSet, errs *configErrors) *Config {
	cfg := &Config{agents: make(map[string]AgentConfig, len(agents))}
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		a := cloneAgent(agents[name])
		p := join("agents", name)
		if name == "" {
			errs.add(p, "an agent needs a name")
		}
		a.Budget.validate(join(p, "budget"), errs)
		a.Permissions.validate(join(p, "permissions"), join(p, "permission_mode"), errs)
		a.Repetition.validate(join(p, "repetition"), errs)
		validateRateLimits(a.RateLimits, join(p, "rate_limits"), errs)
		for i, sub := range a.Permissions.AllowedSubtaskAgents {
			if _, ok := agents[sub]; !ok {
				errs.addf(index(join(join(p, "permissions"), "allowed_subtask_agents"), i), "unknown agent %q", sub)
			}
		}
		cfg.agents[name] = a
	}
	for i, r := range rules {
		cfg.ruleTools = append(cfg.ruleTools, toolRef{join(index("rules", i), "match_tool"), r.MatchTool})
	}
	for i, s := range sets {
		for j, r := range s.Rules {
			cfg.ruleTools = append(cfg.ruleTools, toolRef{join(index(join(index("guards", i), "rules"), j), "match_tool"), r.MatchTool})
		}
	}
	if len(rules) > 0 {
		cfg.rules = buildRules(NameRules, PriorityRules, rules, false, "rules", errs)
	}
	seen := map[string]bool{}
	for i, s := range sets {
		p := index("guards", i)
		checkUserGuard(s.Name, s.Priority, join(p, "name"), join(p, "priority"), errs)
		if seen[s.Name] {
			errs.addf(join(p, "name"), "%q is already the name of another guard", s.Name)
		}
		seen[s.Name] = true
		if len(s.Rules) == 0 {
			errs.add(join(p, "rules"), "required: a rule set needs at least one rule")
		}
		cfg.sets = append(cfg.sets, buildRules(s.Name, s.Priority, s.Rules, s.Shadow, join(p, "rules"), errs))
	}
	return cfg
}

func cloneAgent(a AgentConfig) AgentConfig {
	a.Tools = slices.Clone(a.Tools)
	a.RateLimits = slices.Clone(a.RateLimits)
	a.Budget = BudgetLimits{
		MaxIterations:      clonePtr(a.Budget.MaxIterations),
		MaxCostUSD:         clonePtr(a.Budget.MaxCostUSD),
		MaxToolCalls:       clonePtr(a.Budget.MaxToolCalls),
		MaxSpawnedSubtasks: clonePtr(a.Budget.MaxSpawnedSubtasks),
		MaxSubtaskDepth:    clonePtr(a.Budget.MaxSubtaskDepth),
	}
	p := &a.Permissions
	p.AllowedTools = slices.Clone(p.AllowedTools)
	p.DeniedTools = slices.Clone(p.DeniedTools)
	p.AllowedSubtaskAgents = slices.Clone(p.AllowedSubtaskAgents)
	p.RequireApprovalTools = slices.Clone(p.RequireApprovalTools)
	return a
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// CheckTools reports every tool the config names that is not one of known
// (the tool registry's names), each as a [*ConfigError] with its path; nil
// when there is none. Exact names are checked in each agent's tools,
// allowed_tools, denied_tools and require_approval_tools; a match_tool
// pattern (rules, named rule sets) and a rate limit's tool must match at
// least one known tool.
// Either mistake would otherwise surface only when a task of the agent runs
// — or never: a misspelt denied tool or deny rule denies nothing. Package
// config's File.CheckTools adds the lines, and the hooks' patterns.
func (c *Config) CheckTools(known []string) error {
	return c.CheckToolsDeferred(known, nil)
}

// DeferredTools decides about a tool name or match_tool pattern that matches
// none of the known tools, for tools that are only known at run time (an MCP
// server's): deferred reports that the name is one of those; problem, when
// not "", says why it is refused all the same (a server that is not
// configured). A name for which deferred is false is checked as usual.
type DeferredTools func(nameOrPattern string) (deferred bool, problem string)

// CheckToolsDeferred is [Config.CheckTools] with the names deferred claims
// accepted (or refused with its problem) instead of reported unknown. nil
// defers nothing.
func (c *Config) CheckToolsDeferred(known []string, deferred DeferredTools) error {
	var errs configErrors
	isKnown := func(t string) bool { return slices.Contains(known, t) }
	// runTime reports a name deferred decides, adding its problem if any.
	runTime := func(path, t string) bool {
		if deferred == nil {
			return false
		}
		ok, problem := deferred(t)
		if ok && problem != "" {
			errs.addf(path, "%s", problem)
		}
		return ok
	}
	exact := func(path string, list []string) {
		for i, t := range list {
			if isToolPattern(t) {
				g := glob.Compile(t)
				if !slices.ContainsFunc(known, g.Match) && !runTime(index(path, i), t) {
					errs.addf(index(path, i), "%q matches no tool (the tools: %s)", t, strings.Join(known, ", "))
				}
				continue
			}
			if !isKnown(t) && !runTime(index(path, i), t) {
				errs.addf(index(path, i), "unknown tool %q (the tools: %s)", t, strings.Join(known, ", "))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.agents)) {
		a := c.agents[name]
		p := join("agents", name)
		pp := join(p, "permissions")
		exact(join(p, "tools"), a.Tools)
		exact(join(pp, "allowed_tools"), a.Permissions.AllowedTools)
		exact(join(pp, "denied_tools"), a.Permissions.DeniedTools)
		exact(join(pp, "require_approval_tools"), a.Permissions.RequireApprovalTools)
		// A misspelt pattern would limit nothing.
		for i, l := range a.RateLimits {
			if l.Tool == "" {
				continue
			}
			path := join(index(join(p, "rate_limits"), i), "tool")
			g := glob.Compile(l.Tool)
			if !slices.ContainsFunc(known, g.Match) && !runTime(path, l.Tool) {
				errs.addf(path, "%q matches no tool (the tools: %s)", l.Tool, strings.Join(known, ", "))
			}
		}
	}
	for _, r := range c.ruleTools {
		if r.name == "" {
			continue // reported when the config was built
		}
		g := glob.Compile(r.name)
		if !slices.ContainsFunc(known, g.Match) && !runTime(r.path, r.name) {
			errs.addf(r.path, "%q matches no tool (the tools: %s)", r.name, strings.Join(known, ", "))
		}
	}
	return errs.err()
}

// Agents returns the names of the configured agents, sorted.
func (c *Config) Agents() []string { return slices.Sorted(maps.Keys(c.agents)) }

// Agent returns a copy of an agent's config.
func (c *Config) Agent(name string) (AgentConfig, bool) {
	a, ok := c.agents[name]
	if !ok {
		return AgentConfig{}, false
	}
	return cloneAgent(a), true
}

// AgentStack builds the guard stack of an agent:
//
//  1. Budget (10);
//  2. Permission (20), with risk levels from risks;
//  3. Repetition (30), if the agent's repetition threshold is above 0;
//  4. RateLimiter (40), if the agent has rate limits, counting in the
//     stack's [WithRates] counter (without one it denies every call a
//     limit applies to);
//  5. the process-wide Rules (100), if any rules are configured;
//  6. the named rule sets, in config order, each at its priority;
//  7. the caller's Go guards, in the order given.
//
// Every user guard (6 and 7) must have a priority of at least MinUserPriority,
// so that it runs after the built-ins and can only tighten; a Go guard below it
// is refused, as is a tool in the agent's tools that risks does not know.
// Building a stack is cheap, but it need only be done once per agent: a stack
// is immutable and safe for concurrent use.
func (c *Config) AgentStack(agent string, risks RiskLookup, user []Guard, opts ...StackOption) (*Stack, error) {
	a, ok := c.agents[agent]
	if !ok {
		return nil, fmt.Errorf("guards: unknown agent %q", agent)
	}
	path := join("agents", agent)
	if risks != nil {
		var errs configErrors
		for i, t := range a.Tools {
			if isToolPattern(t) {
				continue // a pattern: its tools' levels are looked up per call
			}
			if _, ok := risks(t); !ok {
				errs.addf(index(join(path, "tools"), i), "unknown tool %q", t)
			}
		}
		if err := errs.err(); err != nil {
			return nil, err
		}
	}
	budget, err := NewBudget(a.Budget)
	if err != nil {
		return nil, err
	}
	// The agent's tools: is an allowlist of its own beside allowed_tools: a
	// tool must be on each that is set.
	perm, err := newPermission(a.Permissions, risks, a.Tools)
	if err != nil {
		return nil, fmt.Errorf("guards: %s: %w", path, err)
	}
	gs := []Guard{budget, perm}
	if a.Repetition.Threshold > 0 {
		rep, err := NewRepetition(a.Repetition)
		if err != nil {
			return nil, err
		}
		gs = append(gs, rep)
	}
	var rl *RateLimiter
	if len(a.RateLimits) > 0 {
		if rl, err = NewRateLimiter(agent, a.RateLimits, nil, nil); err != nil {
			return nil, err
		}
		gs = append(gs, rl)
	}
	if c.rules != nil {
		gs = append(gs, c.rules)
	}
	for _, s := range c.sets {
		gs = append(gs, s)
	}
	for i, g := range user {
		if g == nil {
			return nil, fmt.Errorf("guards: user guard %d is nil", i)
		}
		if p := g.Priority(); p < MinUserPriority {
			return nil, fmt.Errorf("guards: user guard %q has priority %d; user guards must have priority >= %d, after the built-ins, so that they can only tighten", g.Name(), p, MinUserPriority)
		}
		gs = append(gs, g)
	}
	st, err := NewStack(gs, opts...)
	if err != nil {
		return nil, err
	}
	if st.edits != nil {
		perm.edits = st.edits
	}
	if rl != nil {
		rl.counter = st.rates
		if st.rateNow != nil {
			rl.now = st.rateNow
		}
	}
	return st, nil
}

// HasRateLimits reports whether an agent of the config has rate limits:
// then a host that runs its tasks needs a counter its fleet shares.
func (c *Config) HasRateLimits() bool {
	for _, a := range c.agents {
		if len(a.RateLimits) > 0 {
			return true
		}
	}
	return false
}
