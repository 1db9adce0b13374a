// Package guards decides, before an effect happens, whether a task may take it.
//
// The engine asks at three action points, each a [noeta.ProposedAction]: a tool
// call, a subtask spawn, and finishing. A [Guard] answers ALLOW, DENY or
// REQUIRE_APPROVAL with a reason; the engine records every answer that is not
// ALLOW, with the guard's name, before it acts on it, so the audit trail says
// which rule decided.
//
// # Combination
//
// A [Stack] runs its guards in ascending [Guard.Priority], in registration
// order among equal priorities. The first answer that is not ALLOW decides, and
// the guards after it are not called; if every guard allows, the action is
// allowed. The result, a [Decision], names the guard that decided. There is no
// "deny beats approval" merging: a REQUIRE_APPROVAL from a guard that runs early
// ends the check just as a DENY does, which is why priorities matter.
//
// # Fail-closed
//
// Anything that is not an explicit ALLOW is a refusal. A guard that panics,
// returns an error, returns the zero [noeta.Verdict] or overruns the stack's
// per-check deadline is a DENY whose reason names the guard ("guard "x"
// panicked: …"). So is a check whose context is already cancelled, an action
// of a kind the guards do not know, and a nil *Stack. A tool whose risk level
// is unknown, an argument document that is not valid JSON, and a user rule that
// errors at run time are all denials. A user rule that cannot read all of what
// it judges — an argument over [MatchStringCap], a shell command that does not
// parse or is only known at run time — refuses if its action refuses, and
// does not match if its action is allow ([MatchShell]).
//
// # The default stack
//
// [Config.AgentStack] builds an agent's stack from the governance config
// (the agents:, rules: and guards: of noeta.yaml, which package config
// decodes; this package only holds the Go values and checks them with
// [NewConfig]): [Budget] (priority 10; its cost and tool-call caps bound the
// task's whole tree of subtasks, docs/adr/0054), [Permission] (20), [Repetition] (30,
// only when its threshold is above 0), the [RateLimiter] (40, only when the
// agent has rate_limits; it counts in the [RateCounter] of [WithRates],
// shared by every host of the deployment, and denies when it cannot,
// docs/adr/0093), the process-wide [Rules] (100, only when
// rules are configured), the named rule sets of the config, then the Go guards
// the caller passes. User guards — rule sets and Go guards — may not take a
// priority below [MinUserPriority] (100): they run after every built-in, so a
// user rule can only tighten what the built-ins allowed, never loosen it.
//
// # Cost
//
// The guards of this package run on the caller's goroutine and allocate
// nothing on the ALLOW path, except [Rules] when a rule's tool pattern matches
// and it has to look inside the arguments (decoding them for CEL), and the
// [RateLimiter], which does IO: it runs on a goroutine of its own, under the
// deadline, and costs a counter's round trip per limit that matches. A guard from
// elsewhere runs on a goroutine of its own so that its deadline can be enforced
// even if it never returns; that costs a few allocations per check.
package guards
