package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/fieldpath"
)

// Error is one mistake in noeta.yaml. Path names the field as it is written
// in the file — agents.researcher.budget.max_cost_usd,
// rules[2].match_arg.regex — and Line and Column, when known (1-based), where
// it is; File is the file's name ("" when the caller gave none). A file with
// several mistakes yields all of them, in the order of the file, joined with
// [errors.Join]; [errors.As] finds the first.
type Error struct {
	File   string
	Line   int
	Column int
	Path   string
	Msg    string
}

// Error is "file: path: message (line N)", each part only when known.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
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

// positions maps each path of a decoded file to its line and column.
type positions map[string][2]int

// at returns an Error at the position of path or of the nearest enclosing
// path that has one.
func (p positions) at(file, path, msg string) *Error {
	e := &Error{File: file, Path: path, Msg: msg}
	for q := path; p != nil; q = fieldpath.Parent(q) {
		if lc, ok := p[q]; ok {
			e.Line, e.Column = lc[0], lc[1]
			break
		}
		if q == "" {
			break
		}
	}
	return e
}

// errorList collects the mistakes of one file.
type errorList struct {
	file string
	list []error
	pos  positions
}

func (e *errorList) add(path, msg string) { e.list = append(e.list, e.pos.at(e.file, path, msg)) }

func (e *errorList) addf(path, format string, args ...any) {
	e.add(path, fmt.Sprintf(format, args...))
}

// addChecked adds the errors of a check made on Go values (guards.NewConfig,
// CheckTools), each *guards.ConfigError placed at the line of its path.
func (e *errorList) addChecked(err error) {
	if err == nil {
		return
	}
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, one := range list {
		var ce *guards.ConfigError
		if errors.As(one, &ce) {
			e.add(ce.Path, ce.Msg)
			continue
		}
		e.add("", one.Error())
	}
}

// err returns the errors in the order of the file, errors without a position
// last.
func (e *errorList) err() error {
	slices.SortStableFunc(e.list, func(a, b error) int {
		return cmp.Compare(lineOf(a), lineOf(b))
	})
	return errors.Join(e.list...)
}

// joinErrs joins the errors of noeta.yaml, then those of a second file
// (mcp_servers_file; nil when there is none), in one flat list, each file's
// in its own order: the caller unwraps one level to find every *Error.
func joinErrs(main, second *errorList) error {
	if second == nil {
		return main.err()
	}
	// err sorts each list by line.
	if main.err() == nil && second.err() == nil {
		return nil
	}
	return errors.Join(append(slices.Clone(main.list), second.list...)...)
}

func lineOf(err error) int {
	if ce, ok := err.(*Error); ok && ce.Line > 0 {
		return ce.Line
	}
	return math.MaxInt
}

// join appends a key to a path.
func join(path, key string) string { return fieldpath.Join(path, key) }

// index appends a sequence index to a path.
func index(path string, i int) string { return fieldpath.Index(path, i) }
