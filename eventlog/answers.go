package eventlog

import (
	"fmt"

	"github.com/noeta-go/noeta"
)

// CheckAnswer decides whether the human_response ev may be applied to the
// dispatcher row of task, which is in status, suspended on wakeOn (while
// suspended) and holding matched (a delivered wake not yet consumed). Every
// backend calls it before it applies a human_response, and applies one only
// when it returns nil: ev matches the suspend of this moment. A human answers
// what is asked now; an answer buffered for a later suspend would approve a
// request nobody has seen.
//
// ErrAlreadyAnswered: an earlier answer on the same handle was matched and
// the task has not consumed it yet (the loser of an approve/deny race).
// ErrNotWaiting: anything else. Both errors say what the task waits on.
func CheckAnswer(task string, status DispatchStatus, wakeOn, matched *noeta.Wake, ev noeta.Wake) error {
	if status == DispatchSuspended && noeta.Matches(wakeOn, &ev) {
		return nil
	}
	if matched != nil && matched.Kind == noeta.WakeHumanResponse && matched.Handle == ev.Handle {
		by := matched.Approver
		if by == "" {
			by = "someone"
		}
		what := matched.Decision
		if what == "" {
			what = "an answer"
		}
		return fmt.Errorf("%w: task %q: handle %q was answered first (%s by %s); this answer is not applied",
			ErrAlreadyAnswered, task, ev.Handle, what, by)
	}
	now := string(status)
	if status == DispatchSuspended {
		now = "suspended on " + describeWake(wakeOn)
	}
	return fmt.Errorf("%w: task %q is not waiting on handle %q (it is %s); the answer is refused, not kept",
		ErrNotWaiting, task, ev.Handle, now)
}

func describeWake(w *noeta.Wake) string {
	if w == nil {
		return "nothing"
	}
	switch w.Kind {
	case noeta.WakeHumanResponse:
		return "human_response " + w.Handle
	case noeta.WakeSubtaskCompleted:
		return "subtask_completed " + w.SubtaskID
	case noeta.WakeSubtaskGroupCompleted:
		return "subtask_group_completed " + w.GroupID
	case noeta.WakeExternalEvent:
		return "external_event " + w.EventKind
	case noeta.WakeTimerFired:
		return "timer_fired " + w.FireAt.Format("2006-01-02T15:04:05Z07:00")
	}
	return string(w.Kind)
}
