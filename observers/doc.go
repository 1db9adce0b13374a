// Package observers holds the components that act on what tasks have already
// recorded: audit, metrics, traces, live fan-out, hooks and the child
// lifecycle. An observer is fed committed records, in-process from an
// [eventlog.Subscriber] or out of process from a durable feed, and it can never
// change them: none of them holds a lease, so none can append to a task's log.
//
// [ChildLifecycle] is the one observer that writes. When a child task ends it
// writes the outcome, lease-free, into the parent's inbox (at most once per
// child, whatever the redeliveries) and wakes the parent through the
// dispatcher; the parent's own engine records what it consumed. It never writes
// the log whose record triggered it.
//
// Interfaces are declared here, where they are consumed, and are as narrow as
// each observer needs, so what an observer may do shows in what it takes.
package observers
