package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TaskFileError is one mistake in a task file, or in a script given as JSON.
// File is the file's name as the caller gave it (empty for JSON), Line the
// 1-based line of the mistake (0 when unknown: JSON input carries no useful
// lines, and its Path locates it), Path the field as written in the file:
// script[2].tool_calls[0].args, with a child's script nested in its spawn
// member (script[1].spawn[0].script[0].finish.answer). A file with several
// mistakes yields all of them (up to a limit), joined with [errors.Join] in
// the order of the file; [errors.As] finds the first.
type TaskFileError struct {
	File string
	Line int
	Path string
	Msg  string
}

// Error reads like a compiler's: task.yaml:7: script[2].tool_calls[0].args:
// must be a mapping, not a string.
func (e *TaskFileError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ": ")
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	default:
		b.WriteString("policy: ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// maxErrors bounds how many mistakes are reported: past a few dozen, more of
// them only bury the first, and hostile input could make millions.
const maxErrors = 25

// errorList collects the mistakes of one document.
type errorList struct {
	file string
	list []*TaskFileError
}

func (l *errorList) add(line int, path, msg string) {
	l.list = append(l.list, &TaskFileError{File: l.file, Line: line, Path: path, Msg: msg})
}

func (l *errorList) addf(line int, path, format string, args ...any) {
	l.add(line, path, fmt.Sprintf(format, args...))
}

func (l *errorList) empty() bool { return len(l.list) == 0 }

// err returns the mistakes in the order of the file (those without a line in
// the order found), or nil.
func (l *errorList) err() error {
	if len(l.list) == 0 {
		return nil
	}
	list := slices.Clone(l.list)
	slices.SortStableFunc(list, func(a, b *TaskFileError) int {
		return cmp.Compare(a.Line, b.Line)
	})
	var errs []error
	for i, e := range list {
		if i == maxErrors {
			errs = append(errs, &TaskFileError{File: l.file, Msg: fmt.Sprintf("and %d more mistakes", len(list)-maxErrors)})
			break
		}
		errs = append(errs, e)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
