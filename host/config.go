package host

import (
	"errors"
	"fmt"
)

// ErrBadConfig marks a governance config that cannot run: the message names
// the file, the line and the field.
var ErrBadConfig = errors.New("host: bad config")

// configError is a mistake in the config found when the host built what
// it asks for: FILE:LINE: field: message.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrBadConfig }

func (h *Host) configErr(field, msg string) error {
	c := h.opts.Config
	ce := c.ErrorAt(field, msg)
	loc := c.Path
	if loc == "" {
		loc = "config"
	}
	if ce.Line > 0 {
		loc = fmt.Sprintf("%s:%d", loc, ce.Line)
	}
	return &configError{fmt.Sprintf("%s: %s: %s", loc, ce.Path, ce.Msg)}
}
