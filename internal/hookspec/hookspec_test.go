package hookspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestResolveHeaders: env:NAME values are read from the environment once;
// a missing variable, or one holding a line break (a header injection), is
// an error naming the header and the variable and never the value.
func TestResolveHeaders(t *testing.T) {
	env := map[string]string{"TOKEN": "Bearer s3cret", "BAD": "x\r\nX-Evil: 1"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	n := NotificationHook{Headers: map[string]string{"Authorization": "env:TOKEN", "X-Team": "sre"}}
	got, err := n.ResolveHeaders(lookup)
	if err != nil || !reflect.DeepEqual(got, map[string]string{"Authorization": "Bearer s3cret", "X-Team": "sre"}) {
		t.Fatalf("ResolveHeaders: %v, %v", got, err)
	}
	for _, c := range []struct{ header, want string }{
		{"env:MISSING", "header X-A: environment variable MISSING is not set"},
		{"env:BAD", "header X-A: environment variable BAD holds a control character"},
	} {
		_, err := NotificationHook{Headers: map[string]string{"X-A": c.header}}.ResolveHeaders(lookup)
		if err == nil || err.Error() != c.want {
			t.Errorf("ResolveHeaders(%s): %v, want %q", c.header, err, c.want)
		}
	}
}

// TestValidate: every broken rule is reported as an *Error with its path,
// and a valid hook passes.
func TestValidate(t *testing.T) {
	if err := Validate([]ToolHook{{MatchTool: "*", Command: []string{"./n"}}},
		[]NotificationHook{{On: []string{OnApproval}, URL: "https://h.example/x", Headers: map[string]string{"A": "env:T"}, Retries: 2}}); err != nil {
		t.Errorf("valid hooks: %v", err)
	}
	for _, tt := range []struct {
		name   string
		post   []ToolHook
		notify []NotificationHook
		want   string
	}{
		{"no command", []ToolHook{{MatchTool: "*"}}, nil, "hooks.post_tool_use[0].command: required"},
		{"NUL", []ToolHook{{MatchTool: "*", Command: []string{"a\x00"}}}, nil, "hooks.post_tool_use[0].command[0]: must not contain a NUL byte"},
		{"long", []ToolHook{{MatchTool: "*", Command: []string{"x"}, Timeout: 2 * time.Hour}}, nil, "hooks.post_tool_use[0].timeout_seconds: must be at most 3600"},
		{"both", nil, []NotificationHook{{On: []string{OnFailed}, Command: []string{"x"}, URL: "https://h"}}, "hooks.notification[0]: a hook is a command or a url, not both"},
		{"credentials", nil, []NotificationHook{{On: []string{OnFailed}, URL: "https://u:p@h"}}, "hooks.notification[0].url: must not carry credentials"},
		{"scheme", nil, []NotificationHook{{On: []string{OnFailed}, URL: "file:///etc/passwd"}}, `hooks.notification[0].url: must be an http:// or https:// URL, not "file:"`},
		{"Host header", nil, []NotificationHook{{On: []string{OnFailed}, URL: "https://h", Headers: map[string]string{"Host": "x"}}}, "hooks.notification[0].headers.Host: is set by the hook itself"},
		{"twice", nil, []NotificationHook{{On: []string{OnFailed, OnFailed}, Command: []string{"x"}}}, "hooks.notification[0].on[1]: failed is listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.post, tt.notify)
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an *Error containing %q", err, tt.want)
			}
		})
	}
}
