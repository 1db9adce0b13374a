package eventlogtest

import "testing"

// RunSuite runs the whole contract against fresh backends from f: the event
// log (records, inbox, index), the subscriber, the content store and the
// dispatcher. A backend is conformant only if it passes all of it; no case can
// be skipped.
func RunSuite(t *testing.T, f Factory) {
	t.Helper()
	t.Run("Log", func(t *testing.T) { t.Parallel(); RunLogSuite(t, f) })
	t.Run("Batch", func(t *testing.T) { t.Parallel(); RunBatchSuite(t, f) })
	t.Run("Subscriber", func(t *testing.T) { t.Parallel(); RunSubscriberSuite(t, f) })
	t.Run("Content", func(t *testing.T) { t.Parallel(); RunContentSuite(t, f) })
	t.Run("Dispatcher", func(t *testing.T) { t.Parallel(); RunDispatcherSuite(t, f) })
}

// RunLogSuite runs the cases of [eventlog.Reader], [eventlog.Writer] (log and
// inbox) and [eventlog.TaskIndex], including fencing, idempotency, the payload
// cap, error precedence, cancellation and Close.
func RunLogSuite(t *testing.T, f Factory) {
	t.Helper()
	run(t, f, logCases)
}

// RunSubscriberSuite runs the cases of [eventlog.Subscriber]: delivery after
// durability and before the write returns, order, isolation of failing
// handlers, re-entrant writes and Cancel.
func RunSubscriberSuite(t *testing.T, f Factory) {
	t.Helper()
	run(t, f, subscriberCases)
}

// RunContentSuite runs the cases of [eventlog.ContentStore] and of the spill
// helpers built on it.
func RunContentSuite(t *testing.T, f Factory) {
	t.Helper()
	run(t, f, contentCases)
}

// RunDispatcherSuite runs the cases of [eventlog.Dispatcher] and
// [eventlog.LeaseRegistry]: queues, leases, heartbeats, wakes and the
// exactly-once handoff, failures, reclaim, timers, cancellation and Close,
// and the hand-off of a new task to a blocked Lease (EnqueueOptions.HandOff).
func RunDispatcherSuite(t *testing.T, f Factory) {
	t.Helper()
	run(t, f, dispatcherCases)
	run(t, f, handOffCases)
}

// suiteCase is one independent case: it gets its own backend and its own task
// ids.
type suiteCase struct {
	name string
	fn   func(t *testing.T, b Backend)
}

func run(t *testing.T, f Factory, cases []suiteCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, f(t))
		})
	}
}
