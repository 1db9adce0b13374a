package webui

import (
	"errors"

	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// forbidden are the errors of an answer the approvals rules refuse; tooMany
// those of a task whose pending answers are at their cap.
var (
	forbidden = []error{engine.ErrApproverNotAllowed}
	tooMany   = []error{eventlog.ErrTooManyWakes}
)

func isForbidden(err error) bool { return isAny(err, forbidden) }

func isTooMany(err error) bool { return isAny(err, tooMany) }

func isAny(err error, list []error) bool {
	for _, e := range list {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
