package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestSecrets: a long secret is hidden everywhere; a short one only as a
// whole token; one of under four bytes never. Before, a one-character API
// key was replaced everywhere it occurred, and "invalid request" with key
// "e" read "invalid r[redacted]qu[redacted]st".
func TestSecrets(t *testing.T) {
	for _, tt := range []struct {
		name, in, secret, want string
	}{
		{"long, anywhere", "Bearer sk-abcdef123456 and xsk-abcdef123456x", "sk-abcdef123456", "Bearer [redacted] and x[redacted]x"},
		{"one character", "invalid request: key e rejected", "e", "invalid request: key e rejected"},
		{"three characters", "the abc key", "abc", "the abc key"},
		{"short, a whole token", "password hunter2 rejected; nats://u:hunter2@h", "hunter2", "password [redacted] rejected; nats://u:[redacted]@h"},
		{"short, inside a word", "xhunter2 hunter2x", "hunter2", "xhunter2 hunter2x"},
		{"short, after =", "password=hunter2&x", "hunter2", "password=[redacted]&x"},
		{"short, at both ends", "hunter2", "hunter2", "[redacted]"},
		{"empty secret", "text", "", "text"},
	} {
		if got := Secrets(tt.in, Mark, tt.secret); got != tt.want {
			t.Errorf("%s: Secrets(%q, %q) = %q, want %q", tt.name, tt.in, tt.secret, got, tt.want)
		}
	}
}

func TestURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/[redacted]"},
		{"https://h.example/hook?token=QSECRET&x=1", "https://h.example/[redacted]?[redacted]"}, {"https://h.example?token=QSECRET", "https://h.example?[redacted]"},
		{"https://h.example/a/b?token=QSECRET#frag", "https://h.example/[redacted]?[redacted]"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/"},
		{"https://user:pw@h/", "https://user:[redacted]@h/"},
		{"https://tok@h", "https://[redacted]@h"},
		{"::not a url", "[redacted]"},
	} {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestError(t *testing.T) {
	raw := "https://hooks.example/services/SECRETPATH?token=QSECRET"
	base := &url.Error{Op: "Post", URL: raw, Err: errors.New("connection refused")}
	err := Error(base, raw)
	if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "https://hooks.example/[redacted]?[redacted]") {
		t.Errorf("Error = %q", err)
	}
	wrapped := Error(errors.New("answered 500 for "+raw), raw)
	if strings.Contains(wrapped.Error(), "SECRET") {
		t.Errorf("Error = %q", wrapped)
	}
}
