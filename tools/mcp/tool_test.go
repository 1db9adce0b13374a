package mcp

import (
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/tools"
)

func TestRiskOf(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, tt := range []struct {
		name string
		a    *sdk.ToolAnnotations
		want tools.RiskLevel
	}{
		{"no annotations", nil, tools.RiskMedium},
		{"empty", &sdk.ToolAnnotations{}, tools.RiskMedium},
		{"read-only", &sdk.ToolAnnotations{ReadOnlyHint: true}, tools.RiskLow},
		{"read-only, not destructive", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no}, tools.RiskLow},
		{"destructive", &sdk.ToolAnnotations{DestructiveHint: &yes}, tools.RiskHigh},
		{"claims both", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, tools.RiskHigh},
		{"not destructive", &sdk.ToolAnnotations{DestructiveHint: &no}, tools.RiskMedium},
	} {
		if got := riskOf(tt.a); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestNewToolRefusals: a server tool the registry would refuse is an
// error of its own (Tools leaves it out), so it cannot make the registry
// of every other tool fail; the config's override wins over annotations.
func TestNewToolRefusals(t *testing.T) {
	t.Parallel()
	s := New(config.MCPServer{Name: "srv", Command: []string{"x"}, TimeoutSeconds: 5,
		Tools: map[string]config.MCPTool{"rm": {Risk: "high", Edits: true, TimeoutSeconds: 2}}}, Options{})
	obj := map[string]any{"type": "object"}
	for _, tt := range []struct {
		name string
		def  *sdk.Tool
		want string
	}{
		{"a slash in the name", &sdk.Tool{Name: "a/b", InputSchema: obj}, `has '/'`},
		{"too long", &sdk.Tool{Name: strings.Repeat("a", 60), InputSchema: obj}, "longer than 64"},
		{"not an object", &sdk.Tool{Name: "t", InputSchema: map[string]any{"type": "string"}}, `must have "type": "object"`},
		{"does not compile", &sdk.Tool{Name: "t", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": 5}}}}, "does not compile"},
	} {
		if _, err := s.newTool(tt.def); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	tl, err := s.newTool(&sdk.Tool{Name: "rm", InputSchema: obj, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Name() != "mcp__srv__rm" || tl.Risk() != tools.RiskHigh || !tl.Edits() || tl.(*tool).timeout.Seconds() != 2 {
		t.Errorf("rm = %+v", tl)
	}
}
