// Package engine moves tasks forward under governance: it folds a task's log
// into its [State], asks the task's policy for each turn's decision, consults
// the guards at the three action points (a tool call, a subtask spawn, a
// finish) and records every verdict that is not an allow before acting, and
// carries decisions out until the task suspends or ends. Each decision is
// recorded whole (PolicyDecided version 2) before it is acted on, so a
// policy is asked once per turn whatever crashes; the policy is told the
// agent, the tools it may call with their schemas, the agents it may spawn
// and the task so far as a [Composer] renders it from the log. A tool call
// that cannot run (unknown tool, args its schema refuses, marked invalid by
// the policy) is recorded as a ToolCallDenied by guard [GuardSchema].
//
// A [Worker] leases a task from the dispatcher, renews the lease while it
// works, resumes from whatever the log says (a wake it already consumed is
// never consumed twice; a turn another worker left half done is finished
// without running a recorded call again) and releases the lease with the
// wake it consumed. Every write is fenced by the lease: a worker that lost
// its task stops at once and reports nothing for it.
package engine
