// Package noeta is the shared vocabulary of the noeta runtime: task ids and
// statuses, the event types recorded in a task's log and their payloads, wake
// conditions and [Matches], the actions a guard is asked about, verdicts, and the
// [GovernanceState] slice that budgets and guards read.
//
// It does no IO and starts no goroutines. Storage seams live in package eventlog,
// backends below it, and the engine, guards and observers import this package and
// never each other's backends.
//
// Payload JSON field names are a public contract: other languages read the same
// logs. Fields are added only as optional ones, so an older reader keeps folding a
// newer writer's log; readers skip event types they do not know.
package noeta
