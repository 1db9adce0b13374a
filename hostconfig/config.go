package hostconfig

import (
	"errors"
	"fmt"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
)

// ErrBadConfig marks a governance config that cannot run: the message names
// the file, the line and the field.
var ErrBadConfig = errors.New("host: bad config")

// badOption is a host.ErrBadOptions whose message is only what is wrong.
func badOption(format string, args ...any) error {
	return &optionError{fmt.Sprintf(format, args...)}
}

type optionError struct{ msg string }

func (e *optionError) Error() string        { return e.msg }
func (e *optionError) Is(target error) bool { return target == host.ErrBadOptions }

// configError is a mistake in the config found when the host built what
// it asks for: FILE:LINE: field: message.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrBadConfig }

func configErr(c *config.File, field, msg string) error {
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
