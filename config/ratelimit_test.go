package config

import (
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/guards"
)

func TestRateLimitsParse(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(`
agents:
  dev:
    tools: [echo, shell]
    rate_limits:
      - {tool: "sh*", calls: 5, window: 1m}
      - {calls: 100, window: 1h, per: agent}
      - {tool: echo, calls: 2, window: 30s, per: principal}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Governance.Agent("dev")
	want := []guards.RateLimit{
		{Tool: "sh*", Calls: 5, Window: time.Minute},
		{Calls: 100, Window: time.Hour, Per: guards.RatePerAgent},
		{Tool: "echo", Calls: 2, Window: 30 * time.Second, Per: guards.RatePerPrincipal},
	}
	if len(a.RateLimits) != len(want) {
		t.Fatalf("got %+v", a.RateLimits)
	}
	for i := range want {
		if a.RateLimits[i] != want[i] {
			t.Errorf("[%d] = %+v, want %+v", i, a.RateLimits[i], want[i])
		}
	}
	if !f.Governance.HasRateLimits() {
		t.Error("HasRateLimits is false")
	}
}

func TestRateLimitsErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"not a list", "rate_limits: {calls: 1, window: 1m}", "agents.dev.rate_limits: must be a list, not a mapping (line 4)"},
		{"null entry", "rate_limits: [~]", "agents.dev.rate_limits[0]: must be a mapping {tool, calls, window, per}, not null"},
		{"unknown key", "rate_limits: [{calls: 1, window: 1m, burst: 2}]", "agents.dev.rate_limits[0].burst: unknown key (known: tool, calls, window, per)"},
		{"calls missing", "rate_limits: [{window: 1m}]", "agents.dev.rate_limits[0].calls: required"},
		{"calls null", "rate_limits: [{calls: ~, window: 1m}]", "agents.dev.rate_limits[0].calls: required"},
		{"calls zero", "rate_limits: [{calls: 0, window: 1m}]", "agents.dev.rate_limits[0].calls: must be from 1 to 1000000000, not 0"},
		{"calls negative", "rate_limits: [{calls: -3, window: 1m}]", "agents.dev.rate_limits[0].calls: must be from 1 to"},
		{"calls not an integer", "rate_limits: [{calls: many, window: 1m}]", "agents.dev.rate_limits[0].calls: must be an integer, not a string"},
		{"window missing", "rate_limits: [{calls: 1}]", "agents.dev.rate_limits[0].window: required"},
		{"window null", "rate_limits: [{calls: 1, window: }]", "agents.dev.rate_limits[0].window: required"},
		{"window not a duration", "rate_limits: [{calls: 1, window: hourly}]", `agents.dev.rate_limits[0].window: "hourly" is not a duration`},
		{"window a number", "rate_limits: [{calls: 1, window: 60}]", "agents.dev.rate_limits[0].window: must be a string, not an integer"},
		{"window too short", "rate_limits: [{calls: 1, window: 1m}, {calls: 1, window: 500ms}]", "agents.dev.rate_limits[1].window: must be at least 1s, not 500ms"},
		{"window negative", "rate_limits: [{calls: 1, window: -1m}]", "agents.dev.rate_limits[0].window: must be at least 1s"},
		{"window too long", "rate_limits: [{calls: 1, window: 48h}]", "agents.dev.rate_limits[0].window: must be at most 24h0m0s, not 48h0m0s"},
		{"window fractional", "rate_limits: [{calls: 1, window: 1500ms}]", "agents.dev.rate_limits[0].window: must be whole seconds"},
		{"per unknown", "rate_limits: [{calls: 1, window: 1m, per: user}]", `agents.dev.rate_limits[0].per: must be principal or agent, not "user"`},
		{"per empty", `rate_limits: [{calls: 1, window: 1m, per: ""}]`, "agents.dev.rate_limits[0].per: must be principal or agent, not empty"},
		{"tool empty", `rate_limits: [{tool: "", calls: 1, window: 1m}]`, "agents.dev.rate_limits[0].tool: must be a tool name or pattern, not empty"},
		{"tool not a string", "rate_limits: [{tool: 5, calls: 1, window: 1m}]", "agents.dev.rate_limits[0].tool: must be a string, not an integer"},
		{"the same limit twice", "rate_limits: [{calls: 1, window: 1m}, {tool: '*', calls: 5, window: 1m, per: principal}]", "agents.dev.rate_limits[1]: counts the same calls in the same windows as rate_limits[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "agents:\n  dev:\n    tools: [echo]\n    " + tt.yaml + "\n"
			_, err := Parse("noeta.yaml", []byte(doc))
			if err == nil {
				t.Fatalf("no error for\n%s", doc)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got\n%v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestRateLimitsSameToolOtherWindowOrScope(t *testing.T) {
	_, err := Parse("noeta.yaml", []byte(`
agents:
  dev:
    rate_limits:
      - {calls: 10, window: 1m}
      - {calls: 100, window: 1h}
      - {calls: 50, window: 1m, per: agent}
`))
	if err != nil {
		t.Fatal(err)
	}
}

func TestRateLimitToolMustMatchATool(t *testing.T) {
	f, err := Parse("noeta.yaml", []byte(`
agents:
  dev:
    tools: [echo]
    rate_limits:
      - {tool: "ech*", calls: 10, window: 1m}
      - {tool: "shel", calls: 10, window: 1m}
      - {calls: 10, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = f.CheckTools([]string{"echo", "shell"})
	if err == nil || !strings.Contains(err.Error(), `agents.dev.rate_limits[1].tool: "shel" matches no tool`) {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "rate_limits[0]") || strings.Contains(err.Error(), "rate_limits[2]") {
		t.Errorf("a pattern that matches was reported: %v", err)
	}
}
