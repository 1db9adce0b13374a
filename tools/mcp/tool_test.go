package mcp

import (
	"errors"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/tools"
)

// TestRiskOf: a server's annotations lower a tool's risk only when the
// config trusts the server (trust_annotations); they raise it always.
// Before, readOnlyHint made any server's tool low risk, so a tool that
// claimed to be read-only and wrote ran without approval in permission
// mode default.
func TestRiskOf(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, tt := range []struct {
		name    string
		a       *sdk.ToolAnnotations
		trusted bool
		want    tools.RiskLevel
	}{
		{"no annotations", nil, false, tools.RiskMedium},
		{"no annotations, trusted", nil, true, tools.RiskMedium},
		{"empty", &sdk.ToolAnnotations{}, true, tools.RiskMedium},
		{"read-only, untrusted", &sdk.ToolAnnotations{ReadOnlyHint: true}, false, tools.RiskMedium},
		{"read-only, not destructive, untrusted", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no}, false, tools.RiskMedium},
		{"read-only, trusted", &sdk.ToolAnnotations{ReadOnlyHint: true}, true, tools.RiskLow},
		{"read-only, not destructive, trusted", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no}, true, tools.RiskLow},
		{"destructive, untrusted", &sdk.ToolAnnotations{DestructiveHint: &yes}, false, tools.RiskHigh},
		{"destructive, trusted", &sdk.ToolAnnotations{DestructiveHint: &yes}, true, tools.RiskHigh},
		{"claims both", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, true, tools.RiskHigh},
		{"not destructive", &sdk.ToolAnnotations{DestructiveHint: &no}, true, tools.RiskMedium},
	} {
		if got := riskOf(tt.a, tt.trusted); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestNewToolTrust: a tool an untrusted server marks read-only is medium
// risk, so permission mode default asks a person before it runs; a trusted
// server's is low. Before, both were low and ran unasked.
func TestNewToolTrust(t *testing.T) {
	t.Parallel()
	obj := map[string]any{"type": "object"}
	def := &sdk.Tool{Name: "write_file", InputSchema: obj, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}
	for _, trusted := range []bool{false, true} {
		s := New(Server{Name: "srv", Command: []string{"x"}, TimeoutSeconds: 5, TrustAnnotations: trusted}, Options{})
		tl, err := s.newTool(def)
		if err != nil {
			t.Fatal(err)
		}
		want := tools.RiskMedium
		if trusted {
			want = tools.RiskLow
		}
		if tl.Risk() != want {
			t.Errorf("trust_annotations %v: a read-only-hinted tool is %s, want %s", trusted, tl.Risk(), want)
		}
	}
}

// TestToolsByName: a list with an empty name or names that differ only in
// case is refused whole, naming the server and the names. Before, the
// names were taken as they came (a later "Echo" beside "echo" became a
// second tool rules written for "echo" do not name, and a repeated name
// silently replaced the first definition).
func TestToolsByName(t *testing.T) {
	t.Parallel()
	tool := func(n string) *sdk.Tool { return &sdk.Tool{Name: n} }
	for _, tt := range []struct {
		name string
		defs []*sdk.Tool
		want string // "" for accepted
	}{
		{"distinct", []*sdk.Tool{tool("echo"), tool("read"), tool("echo2")}, ""},
		{"empty name", []*sdk.Tool{tool("echo"), tool("")}, `mcp server "srv" listed "" (empty)`},
		{"case only", []*sdk.Tool{tool("delete"), tool("Delete")}, `mcp server "srv" listed "delete" and "Delete"`},
		{"repeated", []*sdk.Tool{tool("echo"), tool("echo")}, `"echo" and "echo"`},
	} {
		list, err := toolsByName("srv", tt.defs)
		switch {
		case tt.want == "" && (err != nil || len(list) != len(tt.defs)):
			t.Errorf("%s: %v, %d tools", tt.name, err, len(list))
		case tt.want != "" && (!errors.Is(err, ErrToolNames) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want ErrToolNames with %q", tt.name, err, tt.want)
		}
	}
}

// TestNewToolRefusals: a server tool the registry would refuse is an
// error of its own (Tools leaves it out), so it cannot make the registry
// of every other tool fail; the config's override wins over annotations.
func TestNewToolRefusals(t *testing.T) {
	t.Parallel()
	s := New(Server{Name: "srv", Command: []string{"x"}, TimeoutSeconds: 5,
		Tools: map[string]ToolOverride{"rm": {Risk: "high", Edits: true, TimeoutSeconds: 2}}}, Options{})
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
