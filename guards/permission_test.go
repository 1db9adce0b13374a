package guards

import (
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

var testRisks = map[string]string{
	"read_file":  "low",
	"echo":       "low",
	"memory":     "medium",
	"write_file": "medium",
	"edit_file":  "medium",
	"shell":      "high",
	"weird":      "extreme",
	"Edit":       "high",
}

func TestPermissionToolCalls(t *testing.T) {
	bypass := ModeBypassPermissions
	tests := []struct {
		name    string
		policy  PermissionPolicy
		risks   map[string]string // nil: no lookup at all
		tool    string
		verdict noeta.Verdict
		reason  string
	}{
		// 1. denied tools, first of all.
		{"denied tool", PermissionPolicy{DeniedTools: []string{"shell"}, Mode: bypass}, nil, "shell", noeta.VerdictDeny, `tool "shell" denied by policy`},
		{"denied wins over the allowlist", PermissionPolicy{DeniedTools: []string{"shell"}, AllowedTools: []string{"shell"}, Mode: bypass}, nil, "shell", noeta.VerdictDeny, `tool "shell" denied by policy`},
		{"denied wins over approval", PermissionPolicy{DeniedTools: []string{"shell"}, RequireApprovalTools: []string{"shell"}}, nil, "shell", noeta.VerdictDeny, `tool "shell" denied by policy`},
		// 2. allowlist.
		{"not on the allowlist", PermissionPolicy{AllowedTools: []string{"echo"}, Mode: bypass}, nil, "shell", noeta.VerdictDeny, `tool "shell" not in allowlist`},
		{"on the allowlist", PermissionPolicy{AllowedTools: []string{"echo"}, Mode: bypass}, nil, "echo", noeta.VerdictAllow, ""},
		{"an empty allowlist allows nothing", PermissionPolicy{AllowedTools: []string{}, Mode: bypass}, nil, "echo", noeta.VerdictDeny, `tool "echo" not in allowlist`},
		{"no allowlist allows anything", PermissionPolicy{Mode: bypass}, nil, "anything", noeta.VerdictAllow, ""},
		{"allowlist before the risk ceiling", PermissionPolicy{AllowedTools: []string{"echo"}, MaxRiskLevel: RiskLow, Mode: bypass}, testRisks, "nope", noeta.VerdictDeny, `tool "nope" not in allowlist`},
		// 3. risk ceiling, fail-closed.
		{"below the ceiling", PermissionPolicy{MaxRiskLevel: RiskMedium, Mode: bypass}, testRisks, "read_file", noeta.VerdictAllow, ""},
		{"at the ceiling", PermissionPolicy{MaxRiskLevel: RiskMedium, Mode: bypass}, testRisks, "memory", noeta.VerdictAllow, ""},
		{"above the ceiling", PermissionPolicy{MaxRiskLevel: RiskMedium, Mode: bypass}, testRisks, "shell", noeta.VerdictDeny, `tool "shell" risk_level "high" exceeds max "medium"`},
		{"ceiling low refuses medium", PermissionPolicy{MaxRiskLevel: RiskLow, Mode: bypass}, testRisks, "memory", noeta.VerdictDeny, `tool "memory" risk_level "medium" exceeds max "low"`},
		{"ceiling high allows high", PermissionPolicy{MaxRiskLevel: RiskHigh, Mode: bypass}, testRisks, "shell", noeta.VerdictAllow, ""},
		{"unknown tool under a ceiling", PermissionPolicy{MaxRiskLevel: RiskHigh, Mode: bypass}, testRisks, "ghost", noeta.VerdictDeny, `tool "ghost" has no metadata registered with the permission guard; fail-closed`},
		{"unknown risk level under a ceiling", PermissionPolicy{MaxRiskLevel: RiskHigh, Mode: bypass}, testRisks, "weird", noeta.VerdictDeny, `tool "weird" has unknown risk_level "extreme"; fail-closed (known levels: ["low" "medium" "high"])`},
		{"no ceiling: the lookup is not consulted", PermissionPolicy{RequireApprovalTools: []string{}}, map[string]string{}, "ghost", noeta.VerdictAllow, ""},
		// 4. approval: explicit set.
		{"explicit approval set", PermissionPolicy{RequireApprovalTools: []string{"echo"}}, nil, "echo", noeta.VerdictRequireApproval, `tool "echo" requires human approval`},
		{"explicit approval set, other tool", PermissionPolicy{RequireApprovalTools: []string{"echo"}}, nil, "shell", noeta.VerdictAllow, ""},
		{"explicit set wins over bypass", PermissionPolicy{RequireApprovalTools: []string{"shell"}, Mode: bypass}, nil, "shell", noeta.VerdictRequireApproval, `tool "shell" requires human approval`},
		{"explicit empty set wins over default mode", PermissionPolicy{RequireApprovalTools: []string{}, Mode: ModeDefault}, testRisks, "shell", noeta.VerdictAllow, ""},
		{"ceiling before approval", PermissionPolicy{MaxRiskLevel: RiskMedium, RequireApprovalTools: []string{"shell"}}, testRisks, "shell", noeta.VerdictDeny, `tool "shell" risk_level "high" exceeds max "medium"`},
		// 4. approval: modes.
		{"default: low runs", PermissionPolicy{}, testRisks, "read_file", noeta.VerdictAllow, ""},
		{"default: medium needs approval", PermissionPolicy{Mode: ModeDefault}, testRisks, "memory", noeta.VerdictRequireApproval, `tool "memory" requires human approval`},
		{"default: high needs approval", PermissionPolicy{}, testRisks, "shell", noeta.VerdictRequireApproval, `tool "shell" requires human approval`},
		{"default: edits need approval", PermissionPolicy{}, testRisks, "write_file", noeta.VerdictRequireApproval, `tool "write_file" requires human approval`},
		{"default: unknown tool fails closed", PermissionPolicy{}, testRisks, "ghost", noeta.VerdictDeny, `tool "ghost" has no metadata registered with the permission guard; fail-closed`},
		{"default: unknown level fails closed", PermissionPolicy{}, testRisks, "weird", noeta.VerdictDeny, `tool "weird" has unknown risk_level "extreme"; fail-closed (known levels: ["low" "medium" "high"])`},
		{"acceptEdits: write_file runs", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "write_file", noeta.VerdictAllow, ""},
		{"acceptEdits: edit_file runs", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "edit_file", noeta.VerdictAllow, ""},
		{"acceptEdits: the reference's Edit runs", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "Edit", noeta.VerdictAllow, ""},
		{"acceptEdits: other medium needs approval", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "memory", noeta.VerdictRequireApproval, `tool "memory" requires human approval`},
		{"acceptEdits: high needs approval", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "shell", noeta.VerdictRequireApproval, `tool "shell" requires human approval`},
		{"acceptEdits: low runs", PermissionPolicy{Mode: ModeAcceptEdits}, testRisks, "echo", noeta.VerdictAllow, ""},
		{"bypass: high runs", PermissionPolicy{Mode: bypass}, testRisks, "shell", noeta.VerdictAllow, ""},
		{"bypass: unknown tool runs without a ceiling", PermissionPolicy{Mode: bypass}, testRisks, "ghost", noeta.VerdictAllow, ""},
		{"bypass under a ceiling still fails closed", PermissionPolicy{Mode: bypass, MaxRiskLevel: RiskHigh}, testRisks, "ghost", noeta.VerdictDeny, `tool "ghost" has no metadata registered with the permission guard; fail-closed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lookup RiskLookup
			if tt.risks != nil {
				lookup = RiskMap(tt.risks)
			}
			p, err := NewPermission(tt.policy, lookup)
			if err != nil {
				t.Fatal(err)
			}
			wantVerdict(t, checkGuard(t, p, toolCall(tt.tool, `{}`), gctx(noeta.GovernanceState{}, 0)), tt.verdict, tt.reason)
		})
	}
}

func TestPermissionLookupCalledOnce(t *testing.T) {
	calls := 0
	p, err := NewPermission(PermissionPolicy{MaxRiskLevel: RiskHigh}, func(string) (string, bool) { calls++; return "medium", true })
	if err != nil {
		t.Fatal(err)
	}
	wantVerdict(t, checkGuard(t, p, toolCall("memory", `{}`), gctx(noeta.GovernanceState{}, 0)), noeta.VerdictRequireApproval, "")
	if calls != 1 {
		t.Errorf("the risk lookup ran %d times, want 1", calls)
	}
}

func TestPermissionSpawnAndFinish(t *testing.T) {
	tests := []struct {
		name    string
		agents  []string
		a       noeta.ProposedAction
		verdict noeta.Verdict
		reason  string
	}{
		{"no subtask allowlist allows any agent", nil, spawn("anyone"), noeta.VerdictAllow, ""},
		{"on the subtask allowlist", []string{"helper"}, spawn("helper"), noeta.VerdictAllow, ""},
		{"not on the subtask allowlist", []string{"helper"}, spawn("root"), noeta.VerdictDeny, `agent "root" not in subtask allowlist`},
		{"an empty subtask allowlist allows no agent", []string{}, spawn("helper"), noeta.VerdictDeny, `agent "helper" not in subtask allowlist`},
		{"finish is always allowed", []string{}, finish(), noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Everything denied for tools, to show spawn and finish do not
			// look at the tool rules.
			p, err := NewPermission(PermissionPolicy{AllowedTools: []string{}, DeniedTools: []string{"helper"}, MaxRiskLevel: RiskLow, AllowedSubtaskAgents: tt.agents}, RiskMap(nil))
			if err != nil {
				t.Fatal(err)
			}
			wantVerdict(t, checkGuard(t, p, tt.a, gctx(noeta.GovernanceState{}, 0)), tt.verdict, tt.reason)
		})
	}
}

func TestNewPermissionErrors(t *testing.T) {
	tests := []struct {
		name   string
		policy PermissionPolicy
		risks  RiskLookup
		want   string
	}{
		{"unknown ceiling", PermissionPolicy{MaxRiskLevel: "severe", Mode: ModeBypassPermissions}, RiskMap(nil), `max_risk_level: unknown risk level "severe"`},
		{"unknown mode", PermissionPolicy{Mode: "yolo"}, RiskMap(nil), `permission_mode: unsupported permission mode "yolo"`},
		{"ceiling without a lookup", PermissionPolicy{MaxRiskLevel: RiskHigh, Mode: ModeBypassPermissions}, nil, "a risk lookup is needed"},
		{"default mode without a lookup", PermissionPolicy{}, nil, `a risk lookup is needed for max_risk_level or for permission mode "default"`},
		{"acceptEdits without a lookup", PermissionPolicy{Mode: ModeAcceptEdits}, nil, "a risk lookup is needed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPermission(tt.policy, tt.risks)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	for _, p := range []PermissionPolicy{{Mode: ModeBypassPermissions}, {RequireApprovalTools: []string{}}} {
		if _, err := NewPermission(p, nil); err != nil {
			t.Errorf("NewPermission(%+v, nil): %v; no lookup is needed", p, err)
		}
	}
}

// TestRiskLevelAdmits: what may be offered under a max_risk_level is what
// the Permission guard would let through; unknown levels fail closed.
func TestRiskLevelAdmits(t *testing.T) {
	tests := []struct {
		max   RiskLevel
		level string
		known bool
		want  bool
	}{
		{"", "high", true, true},
		{"", "", false, true},
		{RiskMedium, "low", true, true},
		{RiskMedium, "medium", true, true},
		{RiskMedium, "MEDIUM", true, true},
		{RiskMedium, "high", true, false},
		{RiskMedium, "", false, false},
		{RiskMedium, "extreme", true, false},
		{RiskHigh, "high", true, true},
		{"severe", "low", true, false},
	}
	for _, tt := range tests {
		if got := tt.max.Admits(tt.level, tt.known); got != tt.want {
			t.Errorf("max %q, tool %q (known %v): %v, want %v", tt.max, tt.level, tt.known, got, tt.want)
		}
	}
}
