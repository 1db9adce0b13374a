package eventlog

import (
	"time"

	"github.com/noeta-go/noeta"
)

// Deadline returns when the condition w times out, if it does: a
// timer_fired condition at FireAt, a human_response condition that carries
// ExpireAt (an approval that expires) at ExpireAt. Every dispatcher arms a
// timer for a suspend on such a condition; when it fires and the row still
// suspends on that condition, the row is woken with TimerAnswer (a
// timer_fired condition: the condition itself).
func Deadline(w *noeta.Wake) (time.Time, bool) {
	switch {
	case w == nil:
		return time.Time{}, false
	case w.Kind == noeta.WakeTimerFired:
		return w.FireAt, true
	case w.Kind == noeta.WakeHumanResponse && !w.ExpireAt.IsZero():
		return w.ExpireAt, true
	}
	return time.Time{}, false
}

// TimerAnswer is the wake a fired timer delivers for the timed condition
// cond. A timer_fired condition delivers itself: the recorded deadline, not
// the firing time, so a redelivery is byte-identical. A human_response with
// an expiry delivers a denial by nobody: approver noeta.ApproverTimeout,
// auth noeta.AuthTimer, and a reason that names the deadline. It is built
// from the condition alone, so every dispatcher that fires it, and every
// redelivery, gives the same bytes.
func TimerAnswer(cond noeta.Wake) noeta.Wake {
	if cond.Kind != noeta.WakeHumanResponse {
		return cond.Clone()
	}
	return noeta.Wake{
		Kind:     noeta.WakeHumanResponse,
		Handle:   cond.Handle,
		Decision: string(noeta.ApprovalDeny),
		Approver: noeta.ApproverTimeout,
		Auth:     noeta.AuthTimer,
		Text:     "no answer before " + cond.ExpireAt.UTC().Format(time.RFC3339),
	}
}
