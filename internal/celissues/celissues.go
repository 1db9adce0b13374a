// Package celissues turns cel-go's compile issues into one-line errors, so a
// CEL expression's mistake sits on one line of a config error (the guards'
// rules and the approvals rules share it).
package celissues

import (
	"errors"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
)

// Err returns nil when iss has no error, else one error listing each
// problem with its line and column, without cel-go's caret drawing.
func Err(iss *cel.Issues) error {
	if iss.Err() == nil {
		return nil
	}
	var msgs []string
	for _, e := range iss.Errors() {
		if l := e.Location; l != nil && l.Line() > 0 {
			msgs = append(msgs, fmt.Sprintf("%s (at %d:%d)", e.Message, l.Line(), l.Column()+1))
		} else {
			msgs = append(msgs, e.Message)
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}
