package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Hooks is the hooks: section of noeta.yaml: user commands run after the
// fact, by package observers, never by a guard (a hook cannot change what
// happens; the PreToolUse layer is rules:).
//
//	hooks:
//	  post_tool_use:
//	    - {match_tool: "*", command: ["./notify.sh"], timeout_seconds: 10}
//	  notification:
//	    - {on: approval, command: ["./page-oncall.sh"]}
//	    - on: [question, parked, failed]
//	      url: https://hooks.example.com/noeta
//	      headers: {Authorization: "env:NOETA_HOOK_TOKEN"}
//	      timeout_seconds: 5
//	      retries: 3
type Hooks struct {
	// PostToolUse runs after every ToolCallFinished of a matching tool.
	PostToolUse []ToolHook
	// Notification runs on what the hook names in On.
	Notification []NotificationHook
}

// ToolHook is one entry of hooks.post_tool_use.
type ToolHook struct {
	// MatchTool is a glob over the whole tool name, matched exactly as rules'
	// match_tool is (package internal/glob: case-sensitive, '*' any run of
	// characters, '?' one character, [seq] and [!seq] classes).
	MatchTool string
	// Command is the argv of the command, run directly, never through a
	// shell; a relative program path is relative to the workspace.
	Command []string
	// Timeout bounds one run (timeout_seconds; DefaultHookTimeout if not
	// given); the command's whole process group is killed at it.
	Timeout time.Duration
}

// NotificationHook is one entry of hooks.notification: a command (given the
// record as JSON on stdin) or a webhook (POSTed a JSON body), run when a
// task reaches one of the events in On.
type NotificationHook struct {
	// On names the events the hook runs on: HookOnApproval, HookOnQuestion,
	// HookOnParked, HookOnFailed (one or several; a scalar in YAML is a list
	// of one).
	On []string
	// Command is the argv of a command hook, as in ToolHook. Exactly one of
	// Command and URL is set.
	Command []string
	// URL is the http or https address a webhook POSTs to. Redirects are not
	// followed; credentials go in Headers, never in the URL.
	URL string
	// Headers are sent with every POST of a webhook. A value "env:NAME" is
	// the environment variable NAME, read once when the hooks start
	// ([NotificationHook.ResolveHeaders]); a missing one is an error then.
	Headers map[string]string
	// Timeout bounds one run of a command, or one attempt of a webhook
	// (DefaultHookTimeout if 0).
	Timeout time.Duration
	// Retries is how many times a webhook is tried again after a
	// connection error, a timeout, a 408, a 429 or a 5xx, with backoff. The
	// decoder sets DefaultHookRetries when retries: is absent; in Go, 0 is
	// none.
	Retries int
}

// The events a notification hook runs on.
const (
	// HookOnApproval: a task asks a person to approve an action
	// (ApprovalRequested).
	HookOnApproval = "approval"
	// HookOnQuestion: a task asks a person a question and waits for the
	// answer (its yield_for_human suspend).
	HookOnQuestion = "question"
	// HookOnParked: a task is parked for a person after its turn was left
	// unfinished too often (the park suspend).
	HookOnParked = "parked"
	// HookOnFailed: a task failed (TaskFailed).
	HookOnFailed = "failed"
)

// HookEvents are the values of NotificationHook.On.
var HookEvents = []string{HookOnApproval, HookOnQuestion, HookOnParked, HookOnFailed}

// Limits of a webhook.
const (
	DefaultHookRetries = 3
	MaxHookRetries     = 10
	MaxHookURLLen      = 2048
	MaxHookHeaders     = 32
)

var (
	hookHeaderName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
	hookEnvName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// ResolveHeaders returns Headers with each "env:NAME" value replaced by
// lookup(NAME); a variable that is not set, or whose value is not a valid
// header value, is an error naming the header and the variable (never the
// value).
func (n NotificationHook) ResolveHeaders(lookup func(string) (string, bool)) (map[string]string, error) {
	if len(n.Headers) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(n.Headers))
	var errs []string
	for _, k := range sortedKeys(n.Headers) {
		v := n.Headers[k]
		if name, ok := strings.CutPrefix(v, "env:"); ok {
			got, set := lookup(name)
			switch {
			case !set:
				errs = append(errs, fmt.Sprintf("header %s: environment variable %s is not set", k, name))
				continue
			case !validHeaderValue(got):
				errs = append(errs, fmt.Sprintf("header %s: environment variable %s holds a control character", k, name))
				continue
			}
			v = got
		}
		out[k] = v
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// validHeaderValue refuses control characters (a CR or LF would start
// another header), tab excepted.
func validHeaderValue(v string) bool {
	for _, c := range []byte(v) {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Limits of a hook entry. The command limits are the reference's.
const (
	DefaultHookTimeout = 10 * time.Second
	MaxHookTimeout     = time.Hour
	MaxHookArgs        = 32
	MaxHookArgLen      = 4096
)

// Empty reports whether there is no hook.
func (h Hooks) Empty() bool { return len(h.PostToolUse) == 0 && len(h.Notification) == 0 }

// Validate checks hooks given as Go values, with the same rules and the same
// path-named errors ([*Error], without a line) as the decoder; a Timeout of 0
// stands for DefaultHookTimeout.
func (h Hooks) Validate() error {
	errs := &errorList{}
	validateHooks(h, errs)
	return errs.err()
}

// validateHooks reports every mistake of h. Missing values are reported as
// required; decode errors (a value of the wrong type) were reported by the
// decoder, which then leaves a placeholder that passes here.
func validateHooks(h Hooks, errs *errorList) {
	for i, t := range h.PostToolUse {
		p := index(join("hooks", "post_tool_use"), i)
		if t.MatchTool == "" {
			errs.add(join(p, "match_tool"), `required: a glob over tool names ("*" for every tool)`)
		}
		validateHookCommand(t.Command, join(p, "command"), errs)
		validateHookTimeout(t.Timeout, join(p, "timeout_seconds"), errs)
	}
	for i, n := range h.Notification {
		p := index(join("hooks", "notification"), i)
		if len(n.On) == 0 {
			errs.add(join(p, "on"), "required: what the hook runs on (approval, question, parked, failed; one or a list)")
		}
		for j, on := range n.On {
			switch {
			case !slices.Contains(HookEvents, on):
				errs.addf(index(join(p, "on"), j), "must be one of approval, question, parked, failed, not %q", on)
			case slices.Index(n.On, on) != j:
				errs.addf(index(join(p, "on"), j), "%s is listed twice", on)
			}
		}
		switch {
		case n.URL != "" && n.Command != nil:
			errs.add(p, "a hook is a command or a url, not both")
		case n.URL != "":
			validateHookURL(n.URL, join(p, "url"), errs)
		default:
			validateHookCommand(n.Command, join(p, "command"), errs)
		}
		if n.URL == "" && len(n.Headers) > 0 {
			errs.add(join(p, "headers"), "headers are for a url hook")
		}
		if n.URL == "" && n.Retries != 0 {
			errs.add(join(p, "retries"), "retries are for a url hook")
		}
		validateHookHeaders(n.Headers, join(p, "headers"), errs)
		if n.Retries < 0 || n.Retries > MaxHookRetries {
			errs.addf(join(p, "retries"), "must be from 0 to %d", MaxHookRetries)
		}
		validateHookTimeout(n.Timeout, join(p, "timeout_seconds"), errs)
	}
}

// validateHookURL accepts an absolute http or https URL with a host and
// without credentials (they would be logged with it; a header keeps them).
func validateHookURL(raw, path string, errs *errorList) {
	if len(raw) > MaxHookURLLen {
		errs.addf(path, "is %d bytes; at most %d", len(raw), MaxHookURLLen)
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		// A url.Error quotes the whole URL, whose path or query may be
		// a credential: only why it does not parse is said.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		errs.addf(path, "is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		errs.addf(path, "must be an http:// or https:// URL, not %q", u.Scheme+":")
	case u.Host == "":
		errs.add(path, "has no host")
	case u.User != nil:
		errs.add(path, "must not carry credentials; put them in headers (a value env:NAME reads them from the environment)")
	case u.Fragment != "":
		errs.add(path, "must not have a #fragment")
	}
}

func validateHookHeaders(h map[string]string, path string, errs *errorList) {
	if len(h) > MaxHookHeaders {
		errs.addf(path, "has %d headers; at most %d", len(h), MaxHookHeaders)
	}
	for _, k := range sortedKeys(h) {
		v := h[k]
		kp := join(path, k)
		switch {
		case !hookHeaderName.MatchString(k):
			errs.add(kp, "is not a valid header name")
		case strings.EqualFold(k, "Content-Type") || strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Host"):
			errs.addf(kp, "is set by the hook itself")
		}
		if name, ok := strings.CutPrefix(v, "env:"); ok {
			if !hookEnvName.MatchString(name) {
				errs.add(kp, "env: must name an environment variable (letters, digits and _)")
			}
			continue
		}
		if !validHeaderValue(v) || len(v) > MaxHookArgLen {
			errs.add(kp, "must be a header value: no control characters, at most 4096 bytes")
		}
	}
}

func validateHookCommand(cmd []string, path string, errs *errorList) {
	if len(cmd) == 0 {
		errs.add(path, "required: a non-empty list, the program and its arguments")
		return
	}
	if len(cmd) > MaxHookArgs {
		errs.addf(path, "has %d items; at most %d", len(cmd), MaxHookArgs)
	}
	for i, a := range cmd {
		switch {
		case a == "" && i == 0:
			errs.add(index(path, i), "the program must not be empty")
		case len(a) > MaxHookArgLen:
			errs.addf(index(path, i), "is %d bytes; at most %d", len(a), MaxHookArgLen)
		case strings.IndexByte(a, 0) >= 0:
			errs.add(index(path, i), "must not contain a NUL byte")
		}
	}
}

func validateHookTimeout(d time.Duration, path string, errs *errorList) {
	if d < 0 {
		errs.add(path, "must be > 0")
	} else if d > MaxHookTimeout {
		errs.addf(path, "must be at most %d (an hour)", int(MaxHookTimeout/time.Second))
	}
}

// hookTimeout converts timeout_seconds; it reports a bad value at path and
// returns 0 (the default) for it.
func hookTimeout(s float64, path string, errs *errorList) time.Duration {
	switch {
	case math.IsNaN(s) || !(s > 0):
		errs.add(path, "must be > 0")
		return 0
	case s > MaxHookTimeout.Seconds():
		errs.addf(path, "must be at most %d (an hour)", int(MaxHookTimeout/time.Second))
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// withHookDefaults fills in the default timeouts.
func withHookDefaults(h Hooks) Hooks {
	for i := range h.PostToolUse {
		if h.PostToolUse[i].Timeout == 0 {
			h.PostToolUse[i].Timeout = DefaultHookTimeout
		}
	}
	for i := range h.Notification {
		if h.Notification[i].Timeout == 0 {
			h.Notification[i].Timeout = DefaultHookTimeout
		}
	}
	return h
}

func (d *decoder) hooks(n *yaml.Node, path string) Hooks {
	var h Hooks
	f, ok := d.fields(n, path, "post_tool_use", "notification")
	if !ok && f == nil {
		return h
	}
	if pn, ok := f["post_tool_use"]; ok {
		pp := join(path, "post_tool_use")
		items := d.seq(pn, pp)
		h.PostToolUse = make([]ToolHook, 0, len(items))
		for i, it := range items {
			p := index(pp, i)
			hf, ok := d.fields(it, p, "match_tool", "command", "timeout_seconds")
			if !ok && hf == nil {
				continue
			}
			t := ToolHook{MatchTool: "*"} // a placeholder if the decoder reports it
			if s, ok := d.str(hf["match_tool"], join(p, "match_tool")); ok || isNull(hf["match_tool"]) {
				t.MatchTool = s
			}
			t.Command = d.hookCommand(hf["command"], join(p, "command"))
			t.Timeout = d.hookTimeout(hf["timeout_seconds"], join(p, "timeout_seconds"))
			h.PostToolUse = append(h.PostToolUse, t)
		}
	}
	if nn, ok := f["notification"]; ok {
		np := join(path, "notification")
		items := d.seq(nn, np)
		h.Notification = make([]NotificationHook, 0, len(items))
		for i, it := range items {
			p := index(np, i)
			hf, ok := d.fields(it, p, "on", "command", "url", "headers", "timeout_seconds", "retries")
			if !ok && hf == nil {
				continue
			}
			nh := NotificationHook{On: []string{HookOnApproval}, Retries: DefaultHookRetries}
			before := len(d.errs.list)
			if on := d.strOrList(hf["on"], join(p, "on")); len(d.errs.list) == before {
				nh.On = on
			}
			if u, ok := d.str(hf["url"], join(p, "url")); ok {
				nh.URL = u
			}
			if nh.URL == "" || hf["command"] != nil {
				nh.Command = d.hookCommand(hf["command"], join(p, "command"))
			}
			if nh.URL == "" {
				nh.Retries = 0
			}
			nh.Headers = d.hookHeaders(hf["headers"], join(p, "headers"))
			if r, ok := d.integer(hf["retries"], join(p, "retries")); ok && r != nil {
				nh.Retries = *r
			}
			nh.Timeout = d.hookTimeout(hf["timeout_seconds"], join(p, "timeout_seconds"))
			h.Notification = append(h.Notification, nh)
		}
	}
	return h
}

// hookCommand reads command:; a value of the wrong type is reported here and
// leaves a placeholder, so that validateHooks does not report it again.
func (d *decoder) hookCommand(n *yaml.Node, path string) []string {
	if isNull(n) {
		return nil
	}
	before := len(d.errs.list)
	cmd := d.strList(n, path)
	if len(d.errs.list) > before && len(cmd) == 0 {
		return []string{"-"}
	}
	return cmd
}

// hookTimeout reads timeout_seconds (a number of seconds); absent is 0, the
// default.
func (d *decoder) hookTimeout(n *yaml.Node, path string) time.Duration {
	s, ok := d.number(n, path)
	if !ok || s == nil {
		return 0
	}
	return hookTimeout(*s, path, d.errs)
}

// hookHeaders reads headers: a map of strings; a value is checked by
// validateHooks.
func (d *decoder) hookHeaders(n *yaml.Node, path string) map[string]string {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	d.depth++
	defer func() { d.depth-- }()
	ps, _ := d.pairs(n, path)
	out := make(map[string]string, len(ps))
	for _, p := range ps {
		kp := join(path, p.key)
		d.mark(kp, p.keyN)
		v := d.enter(p.value, kp)
		if v == nil || v.Kind != yaml.ScalarNode || isNull(v) {
			d.errs.add(kp, "must be a string")
			continue
		}
		out[p.key] = v.Value
	}
	return out
}
