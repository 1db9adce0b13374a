// Package hookspec is what a user's hook is, and the rules it must meet:
// the hooks: section of noeta.yaml decodes into these types (package
// config, which reports a broken rule at its file and line) and the hooks
// observer runs them (package observers, which checks them again for a
// hook built in Go). Both check with [Check], so the two cannot disagree on
// what a valid hook is.
package hookspec

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/noeta-go/noeta/internal/fieldpath"
)

// ToolHook is one entry of hooks.post_tool_use.
type ToolHook struct {
	// MatchTool is a glob over the whole tool name, matched exactly as rules'
	// match_tool is (package internal/glob: case-sensitive, '*' any run of
	// characters, '?' one character, [seq] and [!seq] classes).
	MatchTool string
	// Command is the argv of the command, run directly, never through a
	// shell; a relative program path is relative to the workspace.
	Command []string
	// Timeout bounds one run (timeout_seconds; DefaultTimeout if not
	// given); the command's whole process group is killed at it.
	Timeout time.Duration
}

// NotificationHook is one entry of hooks.notification: a command (given the
// record as JSON on stdin) or a webhook (POSTed a JSON body), run when a
// task reaches one of the events in On.
type NotificationHook struct {
	// On names the events the hook runs on: OnApproval, OnQuestion,
	// OnParked, OnFailed (one or several; a scalar in YAML is a list
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
	// (DefaultTimeout if 0).
	Timeout time.Duration
	// Retries is how many times a webhook is tried again after a
	// connection error, a timeout, a 408, a 429 or a 5xx, with backoff. The
	// decoder sets DefaultRetries when retries: is absent; in Go, 0 is
	// none.
	Retries int
}

// The events a notification hook runs on.
const (
	// OnApproval: a task asks a person to approve an action
	// (ApprovalRequested).
	OnApproval = "approval"
	// OnQuestion: a task asks a person a question and waits for the
	// answer (its yield_for_human suspend).
	OnQuestion = "question"
	// OnParked: a task is parked for a person after its turn was left
	// unfinished too often (the park suspend).
	OnParked = "parked"
	// OnFailed: a task failed (TaskFailed).
	OnFailed = "failed"
)

// Events are the values of NotificationHook.On.
var Events = []string{OnApproval, OnQuestion, OnParked, OnFailed}

// Limits of a webhook.
const (
	DefaultRetries = 3
	MaxRetries     = 10
	MaxURLLen      = 2048
	MaxHeaders     = 32
)

var (
	headerName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
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
	DefaultTimeout = 10 * time.Second
	MaxTimeout     = time.Hour
	MaxArgs        = 32
	MaxArgLen      = 4096
)

// Error is one broken rule: Path names the field as noeta.yaml writes it
// (hooks.notification[0].url).
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }

// Validate is [Check] as an error: every broken rule, an [*Error] each,
// joined with [errors.Join]; nil when there is none.
func Validate(post []ToolHook, notify []NotificationHook) error {
	var errs []error
	Check(post, notify, func(path, msg string) { errs = append(errs, &Error{Path: path, Msg: msg}) })
	return errors.Join(errs...)
}

// Check reports every broken rule of the hooks to add, with the field's
// path. Missing values are reported as required; a Timeout of 0 stands for
// DefaultTimeout. A decoder that reported a value of the wrong type
// leaves a placeholder that passes here, so it is not reported twice.
func Check(post []ToolHook, notify []NotificationHook, add func(path, msg string)) {
	errs := reporter(add)
	for i, t := range post {
		p := index(join("hooks", "post_tool_use"), i)
		if t.MatchTool == "" {
			errs.add(join(p, "match_tool"), `required: a glob over tool names ("*" for every tool)`)
		}
		checkCommand(t.Command, join(p, "command"), errs)
		checkTimeout(t.Timeout, join(p, "timeout_seconds"), errs)
	}
	for i, n := range notify {
		p := index(join("hooks", "notification"), i)
		if len(n.On) == 0 {
			errs.add(join(p, "on"), "required: what the hook runs on (approval, question, parked, failed; one or a list)")
		}
		for j, on := range n.On {
			switch {
			case !slices.Contains(Events, on):
				errs.addf(index(join(p, "on"), j), "must be one of approval, question, parked, failed, not %q", on)
			case slices.Index(n.On, on) != j:
				errs.addf(index(join(p, "on"), j), "%s is listed twice", on)
			}
		}
		switch {
		case n.URL != "" && n.Command != nil:
			errs.add(p, "a hook is a command or a url, not both")
		case n.URL != "":
			checkURL(n.URL, join(p, "url"), errs)
		default:
			checkCommand(n.Command, join(p, "command"), errs)
		}
		if n.URL == "" && len(n.Headers) > 0 {
			errs.add(join(p, "headers"), "headers are for a url hook")
		}
		if n.URL == "" && n.Retries != 0 {
			errs.add(join(p, "retries"), "retries are for a url hook")
		}
		checkHeaders(n.Headers, join(p, "headers"), errs)
		if n.Retries < 0 || n.Retries > MaxRetries {
			errs.addf(join(p, "retries"), "must be from 0 to %d", MaxRetries)
		}
		checkTimeout(n.Timeout, join(p, "timeout_seconds"), errs)
	}
}

// checkURL accepts an absolute http or https URL with a host and
// without credentials (they would be logged with it; a header keeps them).
func checkURL(raw, path string, errs reporter) {
	if len(raw) > MaxURLLen {
		errs.addf(path, "is %d bytes; at most %d", len(raw), MaxURLLen)
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

func checkHeaders(h map[string]string, path string, errs reporter) {
	if len(h) > MaxHeaders {
		errs.addf(path, "has %d headers; at most %d", len(h), MaxHeaders)
	}
	for _, k := range sortedKeys(h) {
		v := h[k]
		kp := join(path, k)
		switch {
		case !headerName.MatchString(k):
			errs.add(kp, "is not a valid header name")
		case strings.EqualFold(k, "Content-Type") || strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Host"):
			errs.addf(kp, "is set by the hook itself")
		}
		if name, ok := strings.CutPrefix(v, "env:"); ok {
			if !envName.MatchString(name) {
				errs.add(kp, "env: must name an environment variable (letters, digits and _)")
			}
			continue
		}
		if !validHeaderValue(v) || len(v) > MaxArgLen {
			errs.add(kp, "must be a header value: no control characters, at most 4096 bytes")
		}
	}
}

func checkCommand(cmd []string, path string, errs reporter) {
	if len(cmd) == 0 {
		errs.add(path, "required: a non-empty list, the program and its arguments")
		return
	}
	if len(cmd) > MaxArgs {
		errs.addf(path, "has %d items; at most %d", len(cmd), MaxArgs)
	}
	for i, a := range cmd {
		switch {
		case a == "" && i == 0:
			errs.add(index(path, i), "the program must not be empty")
		case len(a) > MaxArgLen:
			errs.addf(index(path, i), "is %d bytes; at most %d", len(a), MaxArgLen)
		case strings.IndexByte(a, 0) >= 0:
			errs.add(index(path, i), "must not contain a NUL byte")
		}
	}
}

func checkTimeout(d time.Duration, path string, errs reporter) {
	if d < 0 {
		errs.add(path, "must be > 0")
	} else if d > MaxTimeout {
		errs.addf(path, "must be at most %d (an hour)", int(MaxTimeout/time.Second))
	}
}

// Timeout converts timeout_seconds; it reports a bad value at path and
// returns 0 (the default) for it.
func Timeout(s float64, path string, add func(path, msg string)) time.Duration {
	errs := reporter(add)
	switch {
	case math.IsNaN(s) || !(s > 0):
		errs.add(path, "must be > 0")
		return 0
	case s > MaxTimeout.Seconds():
		errs.addf(path, "must be at most %d (an hour)", int(MaxTimeout/time.Second))
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// reporter adds a broken rule at a path.
type reporter func(path, msg string)

func (r reporter) add(path, msg string) { r(path, msg) }

func (r reporter) addf(path, format string, args ...any) { r(path, fmt.Sprintf(format, args...)) }

func join(path, key string) string { return fieldpath.Join(path, key) }

func index(path string, i int) string { return fieldpath.Index(path, i) }

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
