package eventlogtest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The case of the pending-wake cap (listed in dispatcherCases). Before it, a
// row buffered every wake that matched nothing, without end: a flood of
// wakes to one task grew its row until a write was over the server's
// largest message, and the task could no longer be dispatched at all.

func maxPendingWakes(b Backend) int {
	if b.MaxPendingWakes > 0 {
		return b.MaxPendingWakes
	}
	return eventlog.DefaultMaxPendingWakes
}

// testWakeBufferCap: the buffer takes MaxPendingWakes wakes; the next is
// refused with ErrTooManyWakes naming the task and the cap, and nothing is
// kept. A wake the task's suspend matches is never refused by the cap, and
// a consumed buffer slot takes a wake again.
func testWakeBufferCap(t *testing.T, b Backend) {
	limit := maxPendingWakes(b)
	task, l := newLeased(t, b)
	buffered := make([]noeta.Wake, limit)
	for i := range buffered {
		buffered[i] = eventCond()
		wake(t, b, task, buffered[i], false)
	}
	if st := inspect(t, b, task); st.PendingWakes != limit {
		t.Fatalf("PendingWakes: got %d, want %d", st.PendingWakes, limit)
	}
	matched, err := b.Dispatcher.Wake(t.Context(), task, eventCond())
	wantErrIs(t, "Wake past the cap", err, eventlog.ErrTooManyWakes)
	if matched {
		t.Errorf("Wake past the cap: got matched true")
	}
	if msg := err.Error(); !strings.Contains(msg, task) || !strings.Contains(msg, strconv.Itoa(limit)) {
		t.Errorf("Wake past the cap: %q does not name the task %s and the cap %d", msg, task, limit)
	}
	if st := inspect(t, b, task); st.PendingWakes != limit {
		t.Errorf("PendingWakes after the refusal: got %d, want %d (nothing kept)", st.PendingWakes, limit)
	}

	// A wake the suspend matches is not buffered, so the cap does not apply.
	cond := eventCond()
	suspendOn(t, b, l, cond)
	wake(t, b, task, cond, true)
	l = leaseTask(t, b, task)
	// Suspending on a buffered wake matches it at once and frees its slot.
	release(t, b, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &buffered[0], Reason: "waiting", ConsumedWake: l.Wake})
	st := wantStatus(t, b, task, eventlog.DispatchReady, "after suspending on a buffered wake")
	if st.PendingWakes != limit-1 {
		t.Errorf("PendingWakes after one was matched: got %d, want %d", st.PendingWakes, limit-1)
	}
	wake(t, b, task, eventCond(), false)
}
