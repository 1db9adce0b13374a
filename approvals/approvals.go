// Package approvals decides who may answer an approval request: the
// approvals: section of noeta.yaml compiled into a [Policy].
//
//	approvals:
//	  self_approval: deny            # allow (default) | deny
//	  rules:
//	    - name: sre-approves-shell
//	      when: 'tool == "shell"'                        # CEL over the request
//	      approvers: 'approver in ["sre", "alice"]'      # CEL over the request, approver and auth
//	      quorum: 2                                      # distinct approvers (1..16, default 1)
//	      timeout: 30m                                   # the request expires, denied by timeout
//	      self_approval: deny                            # overrides the section's
//
// Every rule whose when holds applies to a request: an answer must satisfy
// the approvers of all of them, the quorum is the largest, the timeout the
// smallest (with the agent's approval_timeout). A request no rule matches
// may be answered by anyone authenticated, once. The rules are judged again
// for every answer, from the names the request recorded, so an answer that
// arrives by any path (a NATS approval subject, HTTP, the CLI) meets the
// same rules. Every expression fails closed: a when that errors applies its
// rule, an approvers that errors refuses.
package approvals

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"github.com/noeta-go/noeta/internal/celissues"
)

// ErrNotAllowed is wrapped by [Policy.Check] when an answer may not be
// taken; the message says why.
var ErrNotAllowed = errors.New("approvals: approver not allowed")

// SelfApproval says whether the submitter of a task may answer its
// approvals.
type SelfApproval string

// The self_approval values; "" on a rule inherits the section's.
const (
	SelfAllow SelfApproval = "allow"
	SelfDeny  SelfApproval = "deny"
)

// Bounds of a rule.
const (
	MaxQuorum = 16
	// MaxTimeout bounds a timeout: a year.
	MaxTimeout = 366 * 24 * time.Hour
	// CELCostLimit bounds one evaluation of an expression, in CEL cost
	// units (the guards' limit).
	CELCostLimit = 1_000_000
	maxExprLen   = 16 * 1024
)

// NamePattern is what a rule's name must match: it travels in records and
// index entries and is typed by people.
var NamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Rule is one entry of approvals.rules.
type Rule struct {
	Name string
	// When is CEL over the request (task, agent, action, tool, args, guard,
	// reason, submitter, child_agent); empty matches every request.
	When string
	// Approvers is CEL over the request, approver and auth; empty allows
	// every approver.
	Approvers string
	// Quorum is how many distinct approvers must approve (0: 1).
	Quorum int
	// Timeout, if set, expires the request: it resolves denied by timeout.
	Timeout time.Duration
	// SelfApproval overrides Config.SelfApproval for requests it matches.
	SelfApproval SelfApproval
}

// Config is the approvals: section and the agents' approval_timeout.
type Config struct {
	// SelfApproval says whether a task's submitter may answer its
	// requests: allow (also "", the default) or deny.
	SelfApproval SelfApproval
	// Rules say who may answer which requests; every rule whose when holds
	// applies to a request.
	Rules []Rule
	// AgentTimeouts is each agent's approval_timeout.
	AgentTimeouts map[string]time.Duration
	// AgentDoors is each agent's approval: the doors a gateway opens to
	// its sessions' requests besides the inbox (DoorInbox, the default;
	// DoorElicitation; DoorClientPrompt), one or several.
	AgentDoors map[string][]string
}

// The values of an agent's approval:.
const (
	// DoorInbox: a request waits for an answer in the inbox, engine
	// approve or engine approvals.
	DoorInbox = "inbox"
	// DoorElicitation: a gateway also asks its client's own user, through
	// MCP elicitation; the answer is judged by the rules as any other,
	// with auth elicitation (docs/adr/0100).
	DoorElicitation = "elicitation"
	// DoorClientPrompt: a gateway hands the approval of a Claude Code hook
	// session's call to Claude Code's own permission prompt, as an answer
	// of the session's principal with auth client_prompt, judged by the
	// rules as any other; the call runs only if Claude Code's user allows
	// it there (docs/adr/0106).
	DoorClientPrompt = "client_prompt"
)

// ConfigError is one mistake in a Config; Path names the field as
// noeta.yaml writes it (approvals.rules[1].when), so package config can
// place it at its line.
type ConfigError struct {
	Path string
	Msg  string
}

func (e *ConfigError) Error() string { return e.Path + ": " + e.Msg }

// Policy is a compiled Config. The zero of *Policy (nil) has no rules, no
// timeouts and allows self-approval.
type Policy struct {
	self  SelfApproval
	rules []compiled
	byN   map[string]int
	agent map[string]time.Duration
	doors map[string][]string
}

type compiled struct {
	Rule
	when, approvers cel.Program
}

var (
	reqVars = []cel.EnvOption{
		cel.Variable("task", cel.StringType),
		cel.Variable("agent", cel.StringType),
		cel.Variable("action", cel.StringType),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("guard", cel.StringType),
		cel.Variable("reason", cel.StringType),
		cel.Variable("submitter", cel.StringType),
		cel.Variable("child_agent", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(maxExprLen),
		cel.ParserRecursionLimit(100),
	}
	whenEnv = sync.OnceValues(func() (*cel.Env, error) { return cel.NewEnv(reqVars...) })
	apprEnv = sync.OnceValues(func() (*cel.Env, error) {
		return cel.NewEnv(append(slices.Clone(reqVars), cel.Variable("approver", cel.StringType), cel.Variable("auth", cel.StringType), cel.Variable("self", cel.BoolType))...)
	})
)

// Compile checks c and compiles its expressions; every mistake is a
// *ConfigError, all of them joined.
func Compile(c Config) (*Policy, error) {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, &ConfigError{Path: path, Msg: fmt.Sprintf(format, a...)})
	}
	p := &Policy{self: c.SelfApproval, byN: map[string]int{}, agent: map[string]time.Duration{}, doors: map[string][]string{}}
	if err := checkSelf(c.SelfApproval); err != "" {
		add("approvals.self_approval", "%s", err)
	}
	for i, r := range c.Rules {
		path := fmt.Sprintf("approvals.rules[%d]", i)
		switch {
		case r.Name == "":
			add(path+".name", "required: a name of letters, digits, - and _ (it is recorded on the requests it matches)")
		case !NamePattern.MatchString(r.Name):
			add(path+".name", "%q must be 1 to 64 letters, digits, - and _", r.Name)
		default:
			if j, dup := p.byN[r.Name]; dup {
				add(path+".name", "%q is the name of rules[%d] too; names must be unique", r.Name, j)
			}
			p.byN[r.Name] = i
		}
		if r.Quorum < 0 || r.Quorum > MaxQuorum {
			add(path+".quorum", "must be 1 to %d, not %d", MaxQuorum, r.Quorum)
		}
		if r.Timeout < 0 || r.Timeout > MaxTimeout {
			add(path+".timeout", "must be > 0 and at most %s, not %s", MaxTimeout, r.Timeout)
		}
		if err := checkSelf(r.SelfApproval); err != "" {
			add(path+".self_approval", "%s", err)
		}
		cr := compiled{Rule: r}
		if cr.Quorum == 0 {
			cr.Quorum = 1
		}
		var err error
		if r.When != "" {
			if cr.when, err = compile(whenEnv, r.When); err != nil {
				add(path+".when", "%v", err)
			}
		}
		if r.Approvers != "" {
			if cr.approvers, err = compile(apprEnv, r.Approvers); err != nil {
				add(path+".approvers", "%v", err)
			}
		}
		p.rules = append(p.rules, cr)
	}
	for a, d := range c.AgentTimeouts {
		if d <= 0 || d > MaxTimeout {
			add("agents."+a+".approval_timeout", "must be > 0 and at most %s, not %s", MaxTimeout, d)
		}
		p.agent[a] = d
	}
	for a, doors := range c.AgentDoors {
		for _, door := range doors {
			switch door {
			case DoorInbox, DoorElicitation, DoorClientPrompt:
			default:
				add("agents."+a+".approval", "must be inbox, elicitation or client_prompt (or a list of them), not %q", door)
			}
		}
		p.doors[a] = slices.Clone(doors)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Elicits reports whether a gateway asks its client's user to answer the
// requests of agent's tasks (approval: elicitation).
func (p *Policy) Elicits(agent string) bool {
	return p != nil && slices.Contains(p.doors[agent], DoorElicitation)
}

// PromptsClient reports whether a gateway hands the requests of agent's
// Claude Code hook sessions to Claude Code's own permission prompt
// (approval: client_prompt).
func (p *Policy) PromptsClient(agent string) bool {
	return p != nil && slices.Contains(p.doors[agent], DoorClientPrompt)
}

func checkSelf(s SelfApproval) string {
	switch s {
	case "", SelfAllow, SelfDeny:
		return ""
	}
	return fmt.Sprintf("must be allow or deny, not %q", s)
}

// compile parses and type-checks src, which must be of type bool.
func compile(envf func() (*cel.Env, error), src string) (prg cel.Program, err error) {
	defer func() {
		if v := recover(); v != nil {
			prg, err = nil, fmt.Errorf("CEL compiler failed: %v", v)
		}
	}()
	env, err := envf()
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if err := celissues.Err(iss); err != nil {
		return nil, err
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("must be a bool expression, not %v (compare a value from args, e.g. args.force == true)", t)
	}
	return env.Program(ast, cel.CostLimit(CELCostLimit), cel.EvalOptions(cel.OptOptimize))
}

// Request is what the rules read of an approval request.
type Request struct {
	Task, Agent, Action, Tool string
	// Args is the action's arguments as JSON (a tool call's arguments; a
	// spawn's {agent, goal, script}; a finish's {answer}); not an object:
	// args is empty.
	Args       json.RawMessage
	Guard      string
	Reason     string
	Submitter  string
	ChildAgent string
}

func (r Request) vars() map[string]any {
	args := map[string]any{}
	if len(r.Args) > 0 {
		var m map[string]any
		if json.Unmarshal(r.Args, &m) == nil && m != nil {
			args = m
		}
	}
	submitter := r.Submitter
	if n, err := Approver(submitter); err == nil {
		// In the one form approver is in, so submitter == approver holds
		// of one person through one door however either was spelt.
		submitter = n
	}
	return map[string]any{
		"task": r.Task, "agent": r.Agent, "action": r.Action, "tool": r.Tool, "args": args,
		"guard": r.Guard, "reason": r.Reason, "submitter": submitter, "child_agent": r.ChildAgent,
	}
}

// Requirement is what the matching rules ask of a request, fixed when it
// is made and recorded on its ApprovalRequested.
type Requirement struct {
	Rules   []string
	Quorum  int
	Timeout time.Duration // 0: never expires
	// Problems lists the when expressions that failed to evaluate (their
	// rules apply: fail closed), for the caller to log.
	Problems []string
}

// Require returns what the rules matching req ask.
func (p *Policy) Require(req Request) Requirement {
	out := Requirement{Quorum: 1}
	if p == nil {
		return out
	}
	out.Timeout = p.agent[req.Agent]
	var vars map[string]any
	for _, r := range p.rules {
		if r.when != nil {
			if vars == nil {
				vars = req.vars()
			}
			ok, err := eval(r.when, vars)
			if err != nil {
				out.Problems = append(out.Problems, fmt.Sprintf("rule %s: when: %v (the rule applies)", r.Name, err))
			} else if !ok {
				continue
			}
		}
		out.Rules = append(out.Rules, r.Name)
		out.Quorum = max(out.Quorum, r.Quorum)
		if r.Timeout > 0 && (out.Timeout == 0 || r.Timeout < out.Timeout) {
			out.Timeout = r.Timeout
		}
	}
	return out
}

func eval(prg cel.Program, vars map[string]any) (ok bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			ok, err = false, fmt.Errorf("evaluation failed: %v", v)
		}
	}()
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, isBool := out.Value().(bool)
	if !isBool {
		return false, fmt.Errorf("result is %v, not bool", out.Type())
	}
	return b, nil
}

// SelfApprovalDenied reports whether the submitter of the request may not
// answer it under rules (the names it recorded).
func (p *Policy) SelfApprovalDenied(rules []string) bool {
	if p == nil {
		return false
	}
	if len(rules) == 0 {
		return p.self == SelfDeny
	}
	for _, n := range rules {
		s := p.self
		if i, ok := p.byN[n]; ok && p.rules[i].SelfApproval != "" {
			s = p.rules[i].SelfApproval
		}
		if s == SelfDeny {
			return true
		}
	}
	return false
}

// Check reports whether approver, authenticated by auth, may answer req,
// whose ApprovalRequested recorded rules: nil if so, else an error wrapping
// ErrNotAllowed saying why. It judges self-approval and every rule's
// approvers; a rule no longer in the config refuses (the request was made
// under it, and nothing says who may answer now).
func (p *Policy) Check(req Request, rules []string, approver, auth string) error {
	approver, err := Approver(approver)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotAllowed, err)
	}
	if p.SelfApprovalDenied(rules) {
		if req.Submitter == "" {
			// Nothing says who submitted it, so nothing shows the approver
			// is someone else: refused rather than assumed.
			return fmt.Errorf("%w: self_approval is deny and the task does not record who submitted it, so no answer can be shown to come from someone else (submit it with a submitter)", ErrNotAllowed)
		}
		if SamePerson(approver, req.Submitter) {
			return fmt.Errorf("%w: %s submitted this task and may not answer its approvals (self_approval: deny)", ErrNotAllowed, approver)
		}
	}
	if len(rules) == 0 {
		return nil
	}
	var vars map[string]any
	for _, n := range rules {
		i, ok := -1, false
		if p != nil {
			i, ok = p.byN[n]
		}
		if !ok {
			return fmt.Errorf("%w: the request was made under approvals rule %q, which is no longer in the config; nobody may answer it now (it expires, or a cancel ends the task)", ErrNotAllowed, n)
		}
		r := p.rules[i]
		if r.approvers == nil {
			continue
		}
		if vars == nil {
			vars = req.vars()
			vars["approver"], vars["auth"] = approver, auth
			// self compares as self_approval does (SamePerson: without the
			// door's prefix and without case), which a rule's own
			// approver != submitter does not: CLI:Alice answering for
			// the token user alice passes that, never !self.
			vars["self"] = req.Submitter != "" && SamePerson(approver, req.Submitter)
		}
		ok, err := eval(r.approvers, vars)
		if err != nil {
			return fmt.Errorf("%w: rule %s: approvers failed to evaluate (refused): %v", ErrNotAllowed, n, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s may not answer this request: rule %s allows only %s", ErrNotAllowed, approver, n, r.Approvers)
		}
	}
	return nil
}

// MayAnswer says in words who may answer a request made under rules.
func (p *Policy) MayAnswer(rules []string) string {
	var parts []string
	for _, n := range rules {
		if p == nil {
			break
		}
		if i, ok := p.byN[n]; ok && p.rules[i].Approvers != "" {
			parts = append(parts, n+": "+p.rules[i].Approvers)
		}
	}
	s := "anyone authenticated"
	if len(parts) > 0 {
		s = strings.Join(parts, "; ")
	}
	if p.SelfApprovalDenied(rules) {
		s += "; not the submitter"
	}
	return s
}
