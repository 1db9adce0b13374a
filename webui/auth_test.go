package webui

import "testing"

// TestHostAllowed: a name is accepted only when it is this server's; an
// address always (no DNS answer rebinds it).
func TestHostAllowed(t *testing.T) {
	listen := []string{"127.0.0.1:9470"}
	names := []string{"inbox.example.com"}
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1:9470", true},
		{"localhost:9470", true},
		{"LOCALHOST:9470", true},
		{"[::1]:9470", true},
		{"10.1.2.3:9470", true},
		{"inbox.example.com", true},
		{"inbox.example.com:443", true},
		{"localhost:9999", false},
		{"localhost", false},
		{"attacker.example:9470", false},
		{"inbox.example.com.attacker.example", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := hostAllowed(tt.host, listen, names); got != tt.want {
			t.Errorf("hostAllowed(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	// A listener on a name-less public address accepts no localhost alias.
	if hostAllowed("localhost:80", []string{"192.0.2.1:80"}, nil) {
		t.Error("localhost accepted for a public listener")
	}
}
