package config

import (
	"math"
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

// NotificationHook is one entry of hooks.notification.
type NotificationHook struct {
	// On names what the hook is run on; only HookOnApproval (an
	// ApprovalRequested record) for now.
	On string
	// Command and Timeout are as in ToolHook.
	Command []string
	Timeout time.Duration
}

// HookOnApproval is the one value of NotificationHook.On so far: the hook
// runs when a task asks a human for approval.
const HookOnApproval = "approval"

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
		switch n.On {
		case HookOnApproval:
		case "":
			errs.add(join(p, "on"), "required: what the hook runs on (approval)")
		default:
			errs.addf(join(p, "on"), "must be approval, not %q", n.On)
		}
		validateHookCommand(n.Command, join(p, "command"), errs)
		validateHookTimeout(n.Timeout, join(p, "timeout_seconds"), errs)
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
			hf, ok := d.fields(it, p, "on", "command", "timeout_seconds")
			if !ok && hf == nil {
				continue
			}
			nh := NotificationHook{On: HookOnApproval}
			if s, ok := d.str(hf["on"], join(p, "on")); ok || isNull(hf["on"]) {
				nh.On = s
			}
			nh.Command = d.hookCommand(hf["command"], join(p, "command"))
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
