package eventlog

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
)

// The cuts an index entry takes before it is refused as too large. The log
// keeps every field whole; the entry is a summary a person reads.
const (
	waitingGoalRunes = 512
	waitingArgsBytes = 4 << 10
	waitingTextRunes = 2048
	// WaitingHandleMax bounds a handle in the index (its key is
	// <task>.<handle>).
	WaitingHandleMax = 200
)

// ValidWaitingKey reports a task or handle that cannot be an index key:
// both are subject tokens ([A-Za-z0-9_-]), so <task>.<handle> splits at its
// one dot.
func ValidWaitingKey(task, handle string) error {
	if err := noeta.ValidateTaskID(task); err != nil {
		return fmt.Errorf("eventlog: waiting entry: %w", err)
	}
	if err := noeta.ValidateToken("handle", handle, WaitingHandleMax); err != nil {
		return fmt.Errorf("eventlog: waiting entry: %w", err)
	}
	return nil
}

// EncodeWaiting checks w and returns it as stored: the goal, the arguments
// and long texts cut (Args, when cut, become a JSON string of their first
// bytes and ArgsCut is set), and its JSON. An entry still over
// WaitingMaxBytes wraps ErrWaitingTooLarge. Both backends store exactly
// these bytes, so an entry reads back the same from either.
func EncodeWaiting(w Waiting) (Waiting, []byte, error) {
	if err := ValidWaitingKey(w.Task, w.Handle); err != nil {
		return w, nil, err
	}
	switch w.Kind {
	case WaitingApproval, WaitingQuestion:
	default:
		return w, nil, fmt.Errorf("eventlog: waiting entry %s.%s: kind %q is not %q or %q", w.Task, w.Handle, w.Kind, WaitingApproval, WaitingQuestion)
	}
	if len(w.Args) > 0 && !json.Valid(w.Args) {
		return w, nil, fmt.Errorf("eventlog: waiting entry %s.%s: args are not valid JSON", w.Task, w.Handle)
	}
	w.Goal = cutRunes(w.Goal, waitingGoalRunes)
	w.Reason = cutRunes(w.Reason, waitingTextRunes)
	w.Question = cutRunes(w.Question, waitingTextRunes)
	w.MayAnswer = cutRunes(w.MayAnswer, waitingTextRunes)
	if len(w.Args) > waitingArgsBytes {
		w.Args = cutArgs(w.Args, waitingArgsBytes)
		w.ArgsCut = true
	}
	b, err := json.Marshal(w)
	if err != nil {
		return w, nil, fmt.Errorf("eventlog: waiting entry %s.%s: %w", w.Task, w.Handle, err)
	}
	if len(b) > WaitingMaxBytes {
		return w, nil, fmt.Errorf("%w: %s.%s is %d bytes encoded, the bound is %d", ErrWaitingTooLarge, w.Task, w.Handle, len(b), WaitingMaxBytes)
	}
	return w, b, nil
}

// DecodeWaiting reads a stored entry back and checks that it is the entry
// of key (task, handle): a value under another entry's key is malformed.
func DecodeWaiting(task, handle string, b []byte) (Waiting, error) {
	var w Waiting
	if err := json.Unmarshal(b, &w); err != nil {
		return w, fmt.Errorf("eventlog: waiting entry %s.%s: %w", task, handle, err)
	}
	if w.Task != task || w.Handle != handle {
		return w, fmt.Errorf("eventlog: waiting entry %s.%s holds the entry of %s.%s", task, handle, w.Task, w.Handle)
	}
	if w.Kind != WaitingApproval && w.Kind != WaitingQuestion {
		return w, fmt.Errorf("eventlog: waiting entry %s.%s: kind %q is not %q or %q", task, handle, w.Kind, WaitingApproval, WaitingQuestion)
	}
	return w, nil
}

// cutArgs keeps the first n bytes of raw arguments, as a JSON string: a cut
// object is no longer JSON, a string of its text is.
func cutArgs(raw json.RawMessage, n int) json.RawMessage {
	s := string(raw[:n])
	for !utf8.ValidString(s) && len(s) > 0 {
		s = s[:len(s)-1]
	}
	b, _ := json.Marshal(s + "…")
	for len(b) > 2*n && len(s) > 0 {
		// Escapes (control bytes, quotes) can grow the text sixfold.
		s = s[:len(s)/2]
		for !utf8.ValidString(s) && len(s) > 0 {
			s = s[:len(s)-1]
		}
		b, _ = json.Marshal(s + "…")
	}
	return b
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k] + "…"
		}
		i++
	}
	return s
}

// SortWaiting orders entries oldest request first, then by task and handle:
// the order of ListWaiting.
func SortWaiting(ws []Waiting) {
	slices.SortFunc(ws, func(a, b Waiting) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), cmp.Compare(a.Task, b.Task), cmp.Compare(a.Handle, b.Handle))
	})
}
