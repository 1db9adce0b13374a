package tools

import "fmt"

// RiskLevel is how much harm a tool can do. The known levels are ordered,
// RiskLow < RiskMedium < RiskHigh, so they compare with < and >. The zero value
// is not a level: a registry refuses a tool that reports it, and MarshalText
// refuses to write it, so a tool that forgets its risk cannot pass as low.
type RiskLevel uint8

// The risk levels; the wire strings are low, medium and high.
const (
	RiskLow RiskLevel = iota + 1
	RiskMedium
	RiskHigh
)

// ParseRiskLevel reads a wire string: low, medium or high.
func ParseRiskLevel(s string) (RiskLevel, error) {
	switch s {
	case "low":
		return RiskLow, nil
	case "medium":
		return RiskMedium, nil
	case "high":
		return RiskHigh, nil
	}
	return 0, fmt.Errorf("tools: unknown risk level %q (want low, medium or high)", s)
}

// Valid reports whether r is one of the known levels.
func (r RiskLevel) Valid() bool { return r >= RiskLow && r <= RiskHigh }

// String returns the wire string of a known level, and risk(N) otherwise.
func (r RiskLevel) String() string {
	switch r {
	case RiskLow:
		return "low"
	case RiskMedium:
		return "medium"
	case RiskHigh:
		return "high"
	}
	return fmt.Sprintf("risk(%d)", uint8(r))
}

// MarshalText writes the wire string; a level that is not known is refused.
func (r RiskLevel) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("tools: cannot encode %s", r)
	}
	return []byte(r.String()), nil
}

// UnmarshalText reads a wire string; anything but low, medium or high is an
// error and leaves r unchanged.
func (r *RiskLevel) UnmarshalText(b []byte) error {
	v, err := ParseRiskLevel(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
