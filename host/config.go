package host

import (
	"errors"
	"fmt"

	"github.com/noeta-go/noeta/guards"
)

// ErrBadConfig marks a governance config that cannot run: the message names
// the file, the line and the field.
var ErrBadConfig = errors.New("host: bad config")

// Config is noeta.yaml, decoded.
type Config struct {
	Path       string
	Governance *guards.Config
}

// configError is a mistake in the config found when the host built what
// it asks for, naming its field and line.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrBadConfig }

func (h *Host) configErr(field, msg string) error {
	c := h.opts.Config
	ce := c.Governance.ErrorAt(field, msg)
	loc := c.Path
	if ce.Line > 0 {
		loc = fmt.Sprintf("%s:%d", c.Path, ce.Line)
	}
	return &configError{fmt.Sprintf("%s: %s: %s", loc, field, msg)}
}
