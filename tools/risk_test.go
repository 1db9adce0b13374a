package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRiskLevelOrder(t *testing.T) {
	t.Parallel()
	if !(RiskLow < RiskMedium && RiskMedium < RiskHigh) {
		t.Fatalf("got low=%d medium=%d high=%d, want ascending", RiskLow, RiskMedium, RiskHigh)
	}
	var zero RiskLevel
	if zero.Valid() || RiskLevel(4).Valid() {
		t.Fatal("the zero level and level 4 must not be valid")
	}
}

func TestRiskLevelText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		level RiskLevel
		wire  string
	}{{RiskLow, "low"}, {RiskMedium, "medium"}, {RiskHigh, "high"}} {
		b, err := tt.level.MarshalText()
		if err != nil || string(b) != tt.wire {
			t.Errorf("MarshalText(%d) = %q, %v; want %q", tt.level, b, err, tt.wire)
		}
		if tt.level.String() != tt.wire {
			t.Errorf("String() = %q, want %q", tt.level.String(), tt.wire)
		}
		var got RiskLevel
		if err := got.UnmarshalText([]byte(tt.wire)); err != nil || got != tt.level {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.wire, got, err, tt.level)
		}
		p, err := ParseRiskLevel(tt.wire)
		if err != nil || p != tt.level {
			t.Errorf("ParseRiskLevel(%q) = %v, %v", tt.wire, p, err)
		}
	}
}

func TestRiskLevelJSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		Max RiskLevel `json:"max"`
	}
	b, err := json.Marshal(doc{Max: RiskMedium})
	if err != nil || string(b) != `{"max":"medium"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"max":"high"}`), &d); err != nil || d.Max != RiskHigh {
		t.Fatalf("Unmarshal = %v, %v", d.Max, err)
	}
	if _, err := json.Marshal(doc{}); err == nil || !strings.Contains(err.Error(), "cannot encode risk(0)") {
		t.Fatalf("Marshal of the zero level: got %v, want a refusal", err)
	}
}

func TestRiskLevelUnknown(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "LOW", "extreme", "critical", " low"} {
		r := RiskHigh
		err := r.UnmarshalText([]byte(s))
		if err == nil {
			t.Errorf("UnmarshalText(%q): no error", s)
			continue
		}
		if r != RiskHigh {
			t.Errorf("UnmarshalText(%q) changed the level to %v", s, r)
		}
		want := `tools: unknown risk level "` + s + `" (want low, medium or high)`
		if err.Error() != want {
			t.Errorf("UnmarshalText(%q): got %q, want %q", s, err, want)
		}
	}
}
