package config

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/noeta-go/noeta/internal/hookspec"
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

// ToolHook is one entry of hooks.post_tool_use: the hooks observer's own
// type (package internal/hookspec), so that the decoder and the observer
// check it by the same rules and no conversion stands between them.
type ToolHook = hookspec.ToolHook

// NotificationHook is one entry of hooks.notification (see [ToolHook]).
type NotificationHook = hookspec.NotificationHook

// The events a notification hook runs on.
const (
	// HookOnApproval: a task asks a person to approve an action
	// (ApprovalRequested).
	HookOnApproval = hookspec.OnApproval
	// HookOnQuestion: a task asks a person a question and waits for the
	// answer (its yield_for_human suspend).
	HookOnQuestion = hookspec.OnQuestion
	// HookOnParked: a task is parked for a person after its turn was left
	// unfinished too often (the park suspend).
	HookOnParked = hookspec.OnParked
	// HookOnFailed: a task failed (TaskFailed).
	HookOnFailed = hookspec.OnFailed
)

// HookEvents are the values of NotificationHook.On.
var HookEvents = hookspec.Events

// Limits of a webhook.
const (
	DefaultHookRetries = hookspec.DefaultRetries
	MaxHookRetries     = hookspec.MaxRetries
	MaxHookURLLen      = hookspec.MaxURLLen
	MaxHookHeaders     = hookspec.MaxHeaders
)

// Limits of a hook entry. The command limits are the reference's.
const (
	DefaultHookTimeout = hookspec.DefaultTimeout
	MaxHookTimeout     = hookspec.MaxTimeout
	MaxHookArgs        = hookspec.MaxArgs
	MaxHookArgLen      = hookspec.MaxArgLen
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

// validateHooks reports every mistake of h (hookspec.Check). Decode
// errors (a value of the wrong type) were reported by the decoder, which
// then leaves a placeholder that passes here.
func validateHooks(h Hooks, errs *errorList) {
	hookspec.Check(h.PostToolUse, h.Notification, errs.add)
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
	return hookspec.Timeout(*s, path, d.errs.add)
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
