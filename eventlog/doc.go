// Package eventlog holds the storage seams of noeta and their errors: the
// [Envelope] every record travels in, and one small interface per capability
// ([Reader], [Writer], [Subscriber], [TaskIndex], [LeaseRegistry], [Dispatcher],
// [ContentStore]), so that what a component may do shows in what it takes.
//
// The contract is executable: eventlog/eventlogtest.RunSuite holds every
// behaviour the engine relies on, and each backend (eventlog/memlog,
// eventlog/jetstream) runs it whole. This package never imports a backend.
//
// Names follow the reference system where they exist: StaleSequence,
// InvalidLease, PayloadTooLarge, TaskExists and WakeConsumeMismatch there are
// [ErrStaleSequence], [ErrInvalidLease], [ErrPayloadTooLarge], [ErrTaskExists]
// and [ErrWakeMismatch] here. Every outcome a caller decides on is one of the
// sentinels below (or context.Canceled / context.DeadlineExceeded), wrapped with
// the detail in the message, so callers decide with errors.Is; anything else is
// a failure of the backend itself (a server unreachable, a corrupt record) and
// carries the backend's own error.
package eventlog
