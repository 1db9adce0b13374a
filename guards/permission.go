package guards

import (
	"context"
	"fmt"
	"strings"

	"github.com/noeta-go/noeta"
)

// RiskLevel is how much harm a tool can do: low < medium < high.
type RiskLevel string

// The known risk levels, in order.
const (
	RiskLow    RiskLevel = "low"
	RiskMedium RiskLevel = "medium"
	RiskHigh   RiskLevel = "high"
)

// rank orders the known levels from 1; an unknown level ranks 0.
func (r RiskLevel) rank() int {
	switch r {
	case RiskLow:
		return 1
	case RiskMedium:
		return 2
	case RiskHigh:
		return 3
	}
	return 0
}

// Admits says whether a tool whose risk level is level (known false: its
// level is not known) may be offered under a max_risk_level of r, as the
// Permission guard would judge it: an unset r admits every tool; under a set
// one, a tool of unknown or unrecognised risk is refused. What the engine
// offers a model and what the gateway lists ask it here, so neither offers
// a tool the guard would refuse. An r that is no level admits nothing, as
// the guard refuses every call under it.
func (r RiskLevel) Admits(level string, known bool) bool {
	if r == "" {
		return true
	}
	most := RiskLevel(strings.ToLower(string(r))).rank()
	if most == 0 {
		return false
	}
	l := RiskLevel(strings.ToLower(level)).rank()
	return known && l != 0 && l <= most
}

// knownRiskLevels is quoted in the fail-closed reason for an unknown level.
var knownRiskLevels = []string{string(RiskLow), string(RiskMedium), string(RiskHigh)}

// RiskLookup returns the risk level of a tool, and false for a tool it does not
// know. The tool registry provides it; the guards never see tools themselves.
// A level other than low, medium or high is treated as unknown. It is called on
// the hot path and must be safe for concurrent use.
type RiskLookup func(tool string) (risk string, ok bool)

// RiskMap returns a RiskLookup over a fixed map, which it does not copy.
func RiskMap(m map[string]string) RiskLookup {
	return func(tool string) (string, bool) {
		r, ok := m[tool]
		return r, ok
	}
}

// PermissionMode decides which tools need a human's approval when
// [PermissionPolicy.RequireApprovalTools] is not set.
type PermissionMode string

// The permission modes.
const (
	// ModeDefault: every tool whose risk level is not low needs approval.
	ModeDefault PermissionMode = "default"
	// ModeAcceptEdits: as ModeDefault, except the file-editing tools
	// (edit_file, write_file, and the reference's Edit and Write).
	ModeAcceptEdits PermissionMode = "acceptEdits"
	// ModeBypassPermissions: no tool needs approval.
	ModeBypassPermissions PermissionMode = "bypassPermissions"
)

// isEditTool names the tools that ModeAcceptEdits lets run unasked: the
// reference's Edit and Write, and their names in this project's tool set.
func isEditTool(name string) bool {
	switch name {
	case "edit_file", "write_file", "Edit", "Write":
		return true
	}
	return false
}

// PermissionPolicy says which tools and subtask agents an agent may use.
// For the lists, nil means "no list" and an empty list is a list of nothing:
// a nil AllowedTools allows every tool, an empty one none.
type PermissionPolicy struct {
	// AllowedTools, if not nil, is the only tools the agent may call.
	AllowedTools []string
	// DeniedTools may never be called; this is checked first.
	DeniedTools []string
	// MaxRiskLevel, if set, refuses tools above it, and every tool whose risk
	// level is unknown.
	MaxRiskLevel RiskLevel
	// AllowedSubtaskAgents, if not nil, is the only agents the agent may spawn.
	AllowedSubtaskAgents []string
	// RequireApprovalTools, if not nil, is the tools that need a human's
	// approval, and Mode is not consulted.
	RequireApprovalTools []string
	// Mode decides which tools need approval when RequireApprovalTools is
	// nil; empty means ModeDefault.
	Mode PermissionMode
}

func (p PermissionPolicy) validate(path string, modePath string, errs *configErrors) {
	if p.MaxRiskLevel != "" && p.MaxRiskLevel.rank() == 0 {
		errs.addf(join(path, "max_risk_level"), "unknown risk level %q (want low, medium or high)", p.MaxRiskLevel)
	}
	switch p.Mode {
	case "", ModeDefault, ModeAcceptEdits, ModeBypassPermissions:
	default:
		errs.addf(modePath, "unsupported permission mode %q (want default, acceptEdits or bypassPermissions)", p.Mode)
	}
}

// needsRisks reports whether the policy reads risk levels.
func (p PermissionPolicy) needsRisks() bool {
	return p.MaxRiskLevel != "" || (p.RequireApprovalTools == nil && p.Mode != ModeBypassPermissions)
}

// Permission decides which tools and agents an agent may use, and which tools
// need a human's approval. For a tool call the checks run in the reference's
// order and the first that applies decides:
//
//  1. a denied tool is refused;
//  2. with an allowlist, a tool not on it is refused;
//  3. with a risk ceiling, a tool the risk lookup does not know, a tool of an
//     unknown level, and a tool above the ceiling are refused;
//  4. a tool in the approval set needs approval — the explicit
//     RequireApprovalTools, or else the set the mode derives from risk
//     levels, which fails closed like 3;
//  5. otherwise the call is allowed.
//
// A spawn is refused if the agent is not on the subtask allowlist. Finishing is
// always allowed: Permission gates side effects, not termination.
type Permission struct {
	denied *toolSet // nil: none
	// allowed are the allowlists a tool must be on, each: allowed_tools
	// and, from AgentStack, the agent's tools:.
	allowed  []*toolSet
	maxRank  int // 0: no ceiling
	maxRisk  RiskLevel
	agents   map[string]struct{} // nil: any agent
	approval *toolSet            // nil: derived from mode
	mode     PermissionMode
	risks    RiskLookup
	edits    func(tool string) bool // nil: isEditTool
}

var _ inlineGuard = (*Permission)(nil)

// NewPermission returns a Permission guard for p. risks may be nil only if the
// policy never reads risk levels: no MaxRiskLevel, and either an explicit
// RequireApprovalTools or ModeBypassPermissions.
func NewPermission(p PermissionPolicy, risks RiskLookup) (*Permission, error) {
	g, err := newPermission(p, risks)
	if err != nil {
		return nil, fmt.Errorf("guards: permission: %w", err)
	}
	return g, nil
}

func newPermission(p PermissionPolicy, risks RiskLookup, alsoAllowed ...[]string) (*Permission, error) {
	var errs configErrors
	p.validate("", "permission_mode", &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	if risks == nil && p.needsRisks() {
		return nil, fmt.Errorf("a risk lookup is needed for max_risk_level or for permission mode %q", p.modeOrDefault())
	}
	g := &Permission{
		denied:   newToolSet(p.DeniedTools),
		maxRank:  p.MaxRiskLevel.rank(),
		maxRisk:  p.MaxRiskLevel,
		agents:   toSet(p.AllowedSubtaskAgents),
		approval: newToolSet(p.RequireApprovalTools),
		mode:     p.modeOrDefault(),
		risks:    risks,
	}
	for _, list := range append([][]string{p.AllowedTools}, alsoAllowed...) {
		if s := newToolSet(list); s != nil {
			g.allowed = append(g.allowed, s)
		}
	}
	return g, nil
}

func (p PermissionPolicy) modeOrDefault() PermissionMode {
	if p.Mode == "" {
		return ModeDefault
	}
	return p.Mode
}

// toSet returns nil for a nil list and a (possibly empty) set otherwise, so
// that "no list" and "an empty list" stay different.
func toSet(list []string) map[string]struct{} {
	if list == nil {
		return nil
	}
	m := make(map[string]struct{}, len(list))
	for _, s := range list {
		m[s] = struct{}{}
	}
	return m
}

// Name is "permission".
func (*Permission) Name() string { return NamePermission }

// Priority is 20.
func (*Permission) Priority() int { return PriorityPermission }

func (*Permission) inline() {}

// Check applies the policy to a.
func (p *Permission) Check(_ context.Context, a noeta.ProposedAction, _ *Context) (noeta.VerdictResult, error) {
	switch kindOf(a) {
	case kindToolCall:
		call, _ := toolCallOf(a)
		return p.checkTool(call.Tool), nil
	case kindSpawn:
		s, _ := spawnOf(a)
		if p.agents != nil {
			if _, ok := p.agents[s.Agent]; !ok {
				return noeta.Deny(fmt.Sprintf("agent %q not in subtask allowlist", s.Agent)), nil
			}
		}
		return noeta.Allow(), nil
	case kindFinish:
		return noeta.Allow(), nil
	}
	return noeta.VerdictResult{}, errUnsupportedAction(a)
}

func (p *Permission) checkTool(name string) noeta.VerdictResult {
	if p.denied != nil && p.denied.has(name) {
		return noeta.Deny(fmt.Sprintf("tool %q denied by policy", name))
	}
	for _, allowed := range p.allowed {
		if !allowed.has(name) {
			return noeta.Deny(fmt.Sprintf("tool %q not in allowlist", name))
		}
	}
	// The risk level is looked up at most once, and only if needed: with no
	// ceiling and an explicit approval set the lookup is never consulted.
	var rank int
	looked := false
	if p.maxRank > 0 {
		var refusal noeta.VerdictResult
		if rank, refusal = p.riskRank(name); rank == 0 {
			return refusal
		}
		looked = true
		if rank > p.maxRank {
			return noeta.Deny(fmt.Sprintf("tool %q risk_level %q exceeds max %q", name, rankLevel(rank), p.maxRisk))
		}
	}
	if p.approval != nil {
		if p.approval.has(name) {
			return noeta.RequireApproval(fmt.Sprintf("tool %q requires human approval", name))
		}
		return noeta.Allow()
	}
	if p.mode == ModeBypassPermissions || (p.mode == ModeAcceptEdits && p.isEdit(name)) {
		return noeta.Allow()
	}
	if !looked {
		var refusal noeta.VerdictResult
		if rank, refusal = p.riskRank(name); rank == 0 {
			return refusal
		}
	}
	if rank > RiskLow.rank() {
		return noeta.RequireApproval(fmt.Sprintf("tool %q requires human approval", name))
	}
	return noeta.Allow()
}

// riskRank looks a tool's level up; rank 0 comes with the fail-closed DENY.
func (p *Permission) riskRank(name string) (int, noeta.VerdictResult) {
	risk, ok := p.risks(name)
	if !ok {
		return 0, noeta.Deny(fmt.Sprintf("tool %q has no metadata registered with the permission guard; fail-closed", name))
	}
	rank := RiskLevel(risk).rank()
	if rank == 0 {
		return 0, noeta.Deny(fmt.Sprintf("tool %q has unknown risk_level %q; fail-closed (known levels: %q)", name, risk, knownRiskLevels))
	}
	return rank, noeta.VerdictResult{}
}

func rankLevel(rank int) RiskLevel {
	return [...]RiskLevel{"", RiskLow, RiskMedium, RiskHigh}[rank]
}

func (p *Permission) isEdit(name string) bool {
	if p.edits != nil {
		return p.edits(name)
	}
	return isEditTool(name)
}
