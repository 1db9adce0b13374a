// Package redact hides secrets in text that is logged, printed or
// recorded: known secret values (an API key, a password) and the parts of
// a URL that may carry one.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// Mark stands where a secret was.
const Mark = "[redacted]"

// Lengths that decide how a known secret value is hidden. A value of at
// least AnywhereLen bytes is hidden wherever it occurs. A shorter one is
// hidden only where it stands as a whole token (not inside a longer run of
// letters, digits, '-' and '_'), and one shorter
// than MinLen not at all: hiding every "a" of a message because a key was
// "a" mangles the message and hides nothing a reader could not guess.
const (
	AnywhereLen = 8
	MinLen      = 4
)

// Secrets returns s with every occurrence of each secret replaced by mark,
// as the lengths above say.
func Secrets(s, mark string, secrets ...string) string {
	for _, sec := range secrets {
		switch {
		case len(sec) < MinLen:
		case len(sec) >= AnywhereLen:
			s = strings.ReplaceAll(s, sec, mark)
		default:
			s = replaceTokens(s, sec, mark)
		}
	}
	return s
}

// replaceTokens replaces the occurrences of sec in s that no token byte
// adjoins.
func replaceTokens(s, sec, mark string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, sec)
		if i < 0 {
			break
		}
		end := i + len(sec)
		whole := (i == 0 || !tokenByte(rest[i-1])) && (end == len(rest) || !tokenByte(rest[end]))
		b.WriteString(rest[:i])
		if whole {
			b.WriteString(mark)
		} else {
			b.WriteString(sec)
		}
		rest = rest[end:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(rest)
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// URL is raw with everything that may be a secret hidden: a password (or
// a userinfo that is all token), the path (a Slack or Discord webhook's
// token is its path) and the query, whole; the fragment is dropped. What
// is left, the scheme and host, says where it goes. Text that does not
// parse as a URL is hidden whole.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Mark
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		if _, has := u.User.Password(); has {
			b.WriteString(u.User.Username() + ":" + Mark + "@")
		} else {
			b.WriteString(Mark + "@")
		}
	}
	b.WriteString(u.Host)
	if p := u.EscapedPath(); p != "" && p != "/" {
		b.WriteString("/" + Mark)
	} else {
		b.WriteString(p)
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + Mark)
	}
	return b.String()
}

// Error is err with the text of URL in its message made URL(u) (a
// *url.Error from an HTTP client quotes the whole URL): the chain is kept.
func Error(err error, u string) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = URL(ue.URL)
	}
	msg := err.Error()
	if u != "" && strings.Contains(msg, u) {
		return &redacted{msg: strings.ReplaceAll(msg, u, URL(u)), err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
