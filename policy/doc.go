// Package policy holds the policies that decide what a task does next, one
// decision ([noeta.Decision]) per turn.
//
// [Scripted] replays a task file's script (DESIGN.md §7): the decisions the
// agent will propose, turn by turn, so that every governance path — allowed
// and denied calls, budgets, approvals, fan-outs, waits — can be driven
// without a model. A spawn step carries each child's own script as JSON
// ([noeta.SpawnSpec].Script); the engine hands it to the child, whose policy
// is [NewScripted] of [ScriptFromJSON] of it. The model-backed policies
// live in the subpackages openai and anthropic, on the shared core llm.
//
// The package declares no Policy interface: the engine, which consumes
// policies, declares the one method it needs,
//
//	Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error)
//
// and every policy here has it. Decide need not be deterministic: the engine
// records the whole decision (PolicyDecided version 2) and carries a resumed
// turn out from the record without asking again (docs/adr/0027). Only a turn
// whose record predates that (version 1) is asked again, and must get the
// decision, and the call ids, it had.
//
// The package imports only the root vocabulary and the YAML parser (its
// subpackages import config and the providers' SDKs).
package policy
