package noeta

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTaskID(t *testing.T) {
	tests := []struct {
		id      string
		ok      bool
		mention string
	}{
		{NewTaskID(), true, ""},
		{"a", true, ""},
		{"A-b_9", true, ""},
		{strings.Repeat("x", 64), true, ""},
		{"", false, "empty"},
		{strings.Repeat("x", 65), false, "65 bytes"},
		{"a.b", false, `'.' at byte 1`},
		{"a b", false, `' ' at byte 1`},
		{"a>", false, `'>' at byte 1`},
		{"é", false, "byte 0"},
	}
	for _, tt := range tests {
		err := ValidateTaskID(tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateTaskID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidTaskID) {
				t.Errorf("ValidateTaskID(%q) = %v, want it to wrap ErrInvalidTaskID", tt.id, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("ValidateTaskID(%q) = %q, want it to mention %q", tt.id, err, tt.mention)
			}
		}
	}
}

func TestNewTaskIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := NewTaskID()
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		if len(id) != 26 {
			t.Fatalf("id %s has length %d, want 26", id, len(id))
		}
	}
}
