package guards

import (
	"errors"
	"fmt"
	"strings"

	"github.com/noeta-go/noeta/internal/fieldpath"
)

// ConfigError is one mistake in a governance config given as Go values
// ([NewConfig]). Path names the field as noeta.yaml would write it —
// agents.researcher.budget.max_cost_usd, rules[2].match_arg.regex — so that
// package config, which decodes the file, can place it at its line (and
// Line and Column are then set). A config with several mistakes yields all of
// them, joined with [errors.Join]; [errors.As] finds the first.
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

// configErrors collects ConfigErrors.
type configErrors struct {
	list []error
}

func (e *configErrors) add(path, msg string) {
	e.list = append(e.list, &ConfigError{Path: path, Msg: msg})
}

func (e *configErrors) addf(path, format string, args ...any) {
	e.add(path, fmt.Sprintf(format, args...))
}

// err returns the errors joined, in the order they were found.
func (e *configErrors) err() error { return errors.Join(e.list...) }

// join appends a key to a path.
func join(path, key string) string { return fieldpath.Join(path, key) }

// index appends a sequence index to a path.
func index(path string, i int) string { return fieldpath.Index(path, i) }
