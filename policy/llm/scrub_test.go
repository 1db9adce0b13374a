package llm

import "testing"

// TestScrubShortKey: a key too short to be a secret leaves a message as it
// is, and a real key is hidden wherever it is. Before, every "e" of a
// message was replaced when the key was "e": "HTTP 400: invalid request"
// read "HTTP 400: invalid r[redacted]qu[redacted]st".
func TestScrubShortKey(t *testing.T) {
	for _, tt := range []struct{ key, in, want string }{
		{"e", "openai gpt: HTTP 400: invalid request", "openai gpt: HTTP 400: invalid request"},
		{"", "invalid request", "invalid request"},
		{"sk-0123456789abcdef", "HTTP 401: invalid key sk-0123456789abcdef", "HTTP 401: invalid key [redacted]"},
	} {
		if got := (&Policy{secret: tt.key}).scrub(tt.in); got != tt.want {
			t.Errorf("key %q: scrub(%q) = %q, want %q", tt.key, tt.in, got, tt.want)
		}
	}
}
