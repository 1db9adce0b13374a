package guards

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ConfigError is one mistake in a governance config. Path names the field as it
// is written in the file — agents.researcher.budget.max_cost_usd,
// rules[2].match_arg.regex — and Line and Column, when known (1-based), where it
// is. A config with several mistakes yields all of them, joined with
// [errors.Join]; [errors.As] finds the first.
type ConfigError struct {
	Path   string
	Line   int
	Column int
	Msg    string
}

// Error is "path: message", and " (line N)" when the line is known.
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// configErrors collects ConfigErrors, placing each at the position of its path
// or of the nearest enclosing path the decoder saw.
type configErrors struct {
	list []error
	pos  map[string][2]int
}

func (e *configErrors) add(path, msg string) {
	ce := &ConfigError{Path: path, Msg: msg}
	for p := path; e.pos != nil; p = parentPath(p) {
		if lc, ok := e.pos[p]; ok {
			ce.Line, ce.Column = lc[0], lc[1]
			break
		}
		if p == "" {
			break
		}
	}
	e.list = append(e.list, ce)
}

func (e *configErrors) addf(path, format string, args ...any) {
	e.add(path, fmt.Sprintf(format, args...))
}

// err returns the errors in the order of the file, errors without a position
// last.
func (e *configErrors) err() error {
	slices.SortStableFunc(e.list, func(a, b error) int {
		return cmp.Compare(lineOf(a), lineOf(b))
	})
	return errors.Join(e.list...)
}

func lineOf(err error) int {
	if ce, ok := err.(*ConfigError); ok && ce.Line > 0 {
		return ce.Line
	}
	return math.MaxInt
}

// join appends a key to a path.
func join(path, key string) string {
	if !isPlainKey(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a sequence index to a path.
func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// parentPath drops the last element of a path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if strings.HasSuffix(p, `"`) {
		// A quoted key: find its opening quote.
		for i := len(p) - 2; i >= 0; i-- {
			if p[i] == '"' && (i == 0 || p[i-1] == '.') {
				return strings.TrimSuffix(p[:i], ".")
			}
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// isPlainKey reports whether a key can be written in a path without quotes.
func isPlainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
