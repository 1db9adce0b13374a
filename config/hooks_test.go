package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseHooks(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want Hooks
	}{
		{"design example", designConfig, Hooks{
			PostToolUse:  []ToolHook{{MatchTool: "*", Command: []string{"./notify.sh"}, Timeout: DefaultHookTimeout}},
			Notification: []NotificationHook{{On: []string{"approval"}, Command: []string{"./page-oncall.sh"}, Timeout: DefaultHookTimeout}},
		}},
		{"no hooks key", "agents: {a: {}}\n", Hooks{}},
		{"hooks null", "hooks:\n", Hooks{}},
		{"sections null", "hooks: {post_tool_use: ~, notification: }\n", Hooks{}},
		{"timeouts and arguments", `
hooks:
  post_tool_use:
    - match_tool: "read_*"
      command: [/usr/bin/env, sh, -c, 'echo "$NOETA_TOOL" >> tools.log', ""]
      timeout_seconds: 2.5
    - {match_tool: "?cho", command: [./a], timeout_seconds: 3600}
  notification:
    - {on: approval, command: [./page], timeout_seconds: 1}
`, Hooks{
			PostToolUse: []ToolHook{
				{MatchTool: "read_*", Command: []string{"/usr/bin/env", "sh", "-c", `echo "$NOETA_TOOL" >> tools.log`, ""}, Timeout: 2500 * time.Millisecond},
				{MatchTool: "?cho", Command: []string{"./a"}, Timeout: time.Hour},
			},
			Notification: []NotificationHook{{On: []string{"approval"}, Command: []string{"./page"}, Timeout: time.Second}},
		}},
		{"webhooks and lists of events", `
hooks:
  notification:
    - on: [question, parked, failed]
      url: https://hooks.example.com/noeta?team=sre
      headers: {Authorization: "env:NOETA_HOOK_TOKEN", X-Team: sre}
      timeout_seconds: 5
    - {on: approval, url: "http://127.0.0.1:9000/hook", retries: 0}
    - {on: [failed], command: [./page]}
`, Hooks{Notification: []NotificationHook{
			{On: []string{"question", "parked", "failed"}, URL: "https://hooks.example.com/noeta?team=sre",
				Headers: map[string]string{"Authorization": "env:NOETA_HOOK_TOKEN", "X-Team": "sre"}, Timeout: 5 * time.Second, Retries: DefaultHookRetries},
			{On: []string{"approval"}, URL: "http://127.0.0.1:9000/hook", Timeout: DefaultHookTimeout},
			{On: []string{"failed"}, Command: []string{"./page"}, Timeout: DefaultHookTimeout},
		}}},
		// Read as rules' match_tool is: a class is a class (internal/glob).
		{"a character class", "hooks:\n  post_tool_use:\n    - {match_tool: \"[rw]*_file\", command: [a]}\n", Hooks{
			PostToolUse: []ToolHook{{MatchTool: "[rw]*_file", Command: []string{"a"}, Timeout: DefaultHookTimeout}},
		}},
		{"anchors", `
hooks:
  post_tool_use:
    - &h {match_tool: shell, command: [./x]}
    - {<<: *h, match_tool: echo}
`, Hooks{PostToolUse: []ToolHook{
			{MatchTool: "shell", Command: []string{"./x"}, Timeout: DefaultHookTimeout},
			{MatchTool: "echo", Command: []string{"./x"}, Timeout: DefaultHookTimeout},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := f.Hooks
			if len(got.PostToolUse) == 0 {
				got.PostToolUse = nil
			}
			if len(got.Notification) == 0 {
				got.Notification = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Hooks() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseHooksErrors(t *testing.T) {
	long := strings.Repeat("a", MaxHookArgLen+1)
	many := "[" + strings.Repeat("a, ", MaxHookArgs) + "a]"
	tests := []struct {
		name string
		yaml string
		want []string // each must appear
	}{
		{"hooks not a mapping", "hooks: whatever [here]\n", []string{"hooks: must be a mapping, not a string (line 1)"}},
		{"unknown hooks key", "hooks:\n  pre_tool_use: []\n", []string{"hooks.pre_tool_use: unknown key (known: post_tool_use, notification) (line 2)"}},
		{"section not a list", "hooks:\n  post_tool_use: {match_tool: x}\n", []string{"hooks.post_tool_use: must be a list, not a mapping (line 2)"}},
		{"entry not a mapping", "hooks:\n  notification: [approval]\n", []string{"hooks.notification[0]: must be a mapping, not a string"}},
		{"unknown post_tool_use key", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a], notify: {log: true}}\n", []string{"hooks.post_tool_use[0].notify: unknown key (known: match_tool, command, timeout_seconds) (line 3)"}},
		{"unknown notification key", "hooks:\n  notification:\n    - {on: approval, command: [a], match_tool: x}\n", []string{"hooks.notification[0].match_tool: unknown key (known: on, command, url, headers, timeout_seconds, retries)"}},
		{"command missing", "hooks:\n  post_tool_use:\n    - {match_tool: x}\n", []string{"hooks.post_tool_use[0].command: required: a non-empty list, the program and its arguments (line 3)"}},
		{"command empty", "hooks:\n  notification:\n    - {on: approval, command: []}\n", []string{"hooks.notification[0].command: required"}},
		{"command null", "hooks:\n  notification:\n    - {on: approval, command: ~}\n", []string{"hooks.notification[0].command: required"}},
		{"command a string", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: ./notify.sh}\n", []string{"hooks.post_tool_use[0].command: must be a list of strings, not a string"}},
		{"command item not a string", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [./n, 5]}\n", []string{"hooks.post_tool_use[0].command[1]: must be a string, not an integer"}},
		{"command item null", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [./n, ~]}\n", []string{"hooks.post_tool_use[0].command[1]: must be a string, not null"}},
		{"empty program", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [\"\", a]}\n", []string{"hooks.post_tool_use[0].command[0]: the program must not be empty"}},
		{"too many arguments", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: " + many + "}\n", []string{"hooks.post_tool_use[0].command: has 33 items; at most 32"}},
		{"argument too long", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a, " + long + "]}\n", []string{"hooks.post_tool_use[0].command[1]: is 4097 bytes; at most 4096"}},
		{"match_tool missing", "hooks:\n  post_tool_use:\n    - {command: [a]}\n", []string{`hooks.post_tool_use[0].match_tool: required: a glob over tool names ("*" for every tool)`}},
		{"match_tool empty", "hooks:\n  post_tool_use:\n    - {match_tool: \"\", command: [a]}\n", []string{"hooks.post_tool_use[0].match_tool: required"}},
		{"match_tool not a string", "hooks:\n  post_tool_use:\n    - {match_tool: 5, command: [a]}\n", []string{"hooks.post_tool_use[0].match_tool: must be a string, not an integer"}},
		{"on missing", "hooks:\n  notification:\n    - {command: [a]}\n", []string{"hooks.notification[0].on: required: what the hook runs on (approval, question, parked, failed; one or a list)"}},
		{"on unknown", "hooks:\n  notification:\n    - {on: suspend, command: [a]}\n", []string{`hooks.notification[0].on[0]: must be one of approval, question, parked, failed, not "suspend" (line 3)`}},
		{"on not a string", "hooks:\n  notification:\n    - {on: {a: b}, command: [a]}\n", []string{"hooks.notification[0].on: must be a string, not a mapping"}},
		{"on twice", "hooks:\n  notification:\n    - {on: [failed, failed], command: [a]}\n", []string{"hooks.notification[0].on[1]: failed is listed twice"}},
		{"on empty list", "hooks:\n  notification:\n    - {on: [], command: [a]}\n", []string{"hooks.notification[0].on: required"}},
		{"command and url", "hooks:\n  notification:\n    - {on: failed, command: [a], url: \"https://x\"}\n", []string{"hooks.notification[0]: a hook is a command or a url, not both"}},
		{"url not http", "hooks:\n  notification:\n    - {on: failed, url: \"ftp://x/y\"}\n", []string{`hooks.notification[0].url: must be an http:// or https:// URL, not "ftp:"`}},
		{"url relative", "hooks:\n  notification:\n    - {on: failed, url: /hook}\n", []string{`hooks.notification[0].url: must be an http:// or https:// URL, not ":"`}},
		{"url no host", "hooks:\n  notification:\n    - {on: failed, url: \"https:///x\"}\n", []string{"hooks.notification[0].url: has no host"}},
		{"url with credentials", "hooks:\n  notification:\n    - {on: failed, url: \"https://u:p@x/\"}\n", []string{"hooks.notification[0].url: must not carry credentials"}},
		{"url not a string", "hooks:\n  notification:\n    - {on: failed, url: [a]}\n", []string{"hooks.notification[0].url: must be a string, not a sequence"}},
		{"headers on a command", "hooks:\n  notification:\n    - {on: failed, command: [a], headers: {X-A: b}}\n", []string{"hooks.notification[0].headers: headers are for a url hook"}},
		{"retries on a command", "hooks:\n  notification:\n    - {on: failed, command: [a], retries: 2}\n", []string{"hooks.notification[0].retries: retries are for a url hook"}},
		{"header name", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", headers: {\"X A\": b}}\n", []string{`hooks.notification[0].headers."X A": is not a valid header name`}},
		{"header set by the hook", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", headers: {content-type: text/plain}}\n", []string{"hooks.notification[0].headers.content-type: is set by the hook itself"}},
		{"header value newline", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", headers: {X-A: \"a\\r\\nX-B: c\"}}\n", []string{"hooks.notification[0].headers.X-A: must be a header value"}},
		{"header env name", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", headers: {X-A: \"env:A-B\"}}\n", []string{"hooks.notification[0].headers.X-A: env: must name an environment variable"}},
		{"header value not a string", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", headers: {X-A: [b]}}\n", []string{"hooks.notification[0].headers.X-A: must be a string"}},
		{"retries negative", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", retries: -1}\n", []string{"hooks.notification[0].retries: must be from 0 to 10"}},
		{"retries too many", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", retries: 11}\n", []string{"hooks.notification[0].retries: must be from 0 to 10"}},
		{"retries not an integer", "hooks:\n  notification:\n    - {on: failed, url: \"https://x\", retries: 1.5}\n", []string{"hooks.notification[0].retries: must be an integer"}},
		{"timeout zero", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a], timeout_seconds: 0}\n", []string{"hooks.post_tool_use[0].timeout_seconds: must be > 0"}},
		{"timeout negative", "hooks:\n  notification:\n    - {on: approval, command: [a], timeout_seconds: -1}\n", []string{"hooks.notification[0].timeout_seconds: must be > 0"}},
		{"timeout NaN", "hooks:\n  notification:\n    - {on: approval, command: [a], timeout_seconds: .nan}\n", []string{"hooks.notification[0].timeout_seconds: must be > 0"}},
		{"timeout too long", "hooks:\n  notification:\n    - {on: approval, command: [a], timeout_seconds: 3601}\n", []string{"hooks.notification[0].timeout_seconds: must be at most 3600 (an hour)"}},
		{"timeout infinite", "hooks:\n  notification:\n    - {on: approval, command: [a], timeout_seconds: .inf}\n", []string{"hooks.notification[0].timeout_seconds: must be at most 3600"}},
		{"timeout a string", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a], timeout_seconds: 10s}\n", []string{"hooks.post_tool_use[0].timeout_seconds: must be a number, not a string"}},
		{"duplicate key", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a], command: [b]}\n", []string{"hooks.post_tool_use[0].command: duplicate key"}},
		{"second entry", "hooks:\n  post_tool_use:\n    - {match_tool: x, command: [a]}\n    - {match_tool: y}\n", []string{"hooks.post_tool_use[1].command: required", "(line 4)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got\n%v\nwant it to contain %q", err, w)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("%T is not a *Error", err)
			}
		})
	}
}

// A value of the wrong type is reported once, not again as missing.
func TestParseHooksReportsOnce(t *testing.T) {
	_, err := Parse("", []byte("hooks:\n  post_tool_use:\n    - {match_tool: 5, command: ./n, timeout_seconds: x}\n  notification:\n    - {on: 1, command: [2]}\n"))
	if err == nil {
		t.Fatal("no error")
	}
	list := err.(interface{ Unwrap() []error }).Unwrap()
	if len(list) != 5 {
		t.Errorf("got %d errors, want 5 (one per bad value):\n%v", len(list), err)
	}
	if strings.Contains(err.Error(), "required") {
		t.Errorf("a value of the wrong type was reported as missing too:\n%v", err)
	}
}

// Hooks errors are reported with the others, in file order.
func TestParseHooksWithOtherErrors(t *testing.T) {
	_, err := Parse("", []byte(`
hooks:
  notification: [{on: never, command: [a]}]
agents:
  a: {budget: {max_cost_usd: -1}}
`))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	i, j := strings.Index(msg, "hooks.notification[0].on"), strings.Index(msg, "agents.a.budget.max_cost_usd")
	if i < 0 || j < 0 || i > j {
		t.Errorf("want both errors, the hooks one first (line 3 before line 5):\n%v", msg)
	}
}

func TestHooksValidate(t *testing.T) {
	ok := Hooks{
		PostToolUse:  []ToolHook{{MatchTool: "*", Command: []string{"./n"}}},
		Notification: []NotificationHook{{On: []string{HookOnApproval}, Command: []string{"./p"}, Timeout: time.Minute}},
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if err := (Hooks{}).Validate(); err != nil {
		t.Errorf("empty config: %v", err)
	}
	if ok.Empty() || !(Hooks{}).Empty() || !(Hooks{PostToolUse: []ToolHook{}}).Empty() {
		t.Errorf("Empty is wrong")
	}
	bad := Hooks{
		PostToolUse:  []ToolHook{{Command: []string{"./n"}, Timeout: -time.Second}},
		Notification: []NotificationHook{{On: []string{"approve"}, Timeout: 2 * time.Hour}},
	}
	err := bad.Validate()
	if ce, ok := errors.AsType[*Error](err); !ok || ce.Line != 0 || ce.File != "" {
		t.Errorf("%v: want *Errors without a file or line (Go values)", err)
	}
	for _, want := range []string{
		"hooks.post_tool_use[0].match_tool: required",
		"hooks.post_tool_use[0].timeout_seconds: must be > 0",
		`hooks.notification[0].on[0]: must be one of approval, question, parked, failed, not "approve"`,
		"hooks.notification[0].command: required",
		"hooks.notification[0].timeout_seconds: must be at most 3600",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to contain %q", err, want)
		}
	}
}

// TestHookURLErrorHidesTheURL: a webhook URL that does not parse is
// refused saying why, without quoting it (its path or query may be the
// hook's credential). Before, the error quoted url.Parse's message, which
// holds the whole URL.
func TestHookURLErrorHidesTheURL(t *testing.T) {
	_, err := Parse("noeta.yaml", []byte("hooks:\n  notification:\n    - {on: failed, url: \"https://h.example/services/SECRET%zz\"}\n"))
	if err == nil || !strings.Contains(err.Error(), "hooks.notification[0].url: is not a URL") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("the error quotes the URL: %v", err)
	}
}
