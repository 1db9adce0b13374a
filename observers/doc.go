// Package observers holds the components that act on what tasks have already
// recorded: audit, live fan-out, hooks and the child lifecycle, and the
// runners that feed them. Metrics and traces, which need the OpenTelemetry
// and Prometheus libraries, are in package observers/telemetry, so that
// implementing or running an observer does not build them (docs/adr/0025).
//
// An observer is fed committed records, in-process from an
// [eventlog.Subscriber] or out of process from a durable feed, and it can never
// change them: none of them holds a lease, so none can append to a task's log.
//
// [ChildLifecycle] is the one observer that writes. When a child task ends it
// writes the outcome, lease-free, into the parent's inbox (at most once per
// child, whatever the redeliveries) and wakes the parent through the
// dispatcher; the parent's own engine records what it consumed. It never writes
// the log whose record triggered it.
//
// Two runners feed them. [InProcess] hands each record, on the writer's
// goroutine, to a bounded queue per observer and never waits: a full queue
// drops and counts, and an observer that keeps failing is paused. [Durable]
// feeds each observer from an [eventlog.Feed] through a consumer group of its
// own, one record in flight per partition (docs/adr/0014): at-least-once, in
// each task's order, so [Audit] and telemetry.Trace are idempotent by (task,
// seq) and telemetry.Metrics and [Hooks] say they are at-least-once.
//
// Interfaces are declared here, where they are consumed, and are as narrow as
// each observer needs, so what an observer may do shows in what it takes.
package observers
