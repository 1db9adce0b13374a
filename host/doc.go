// Package host runs noeta over a [Backend] (the eventlog seams: memlog in
// one process, JetStream across a fleet through
// eventlog/jetstream/jshost): the guard stacks, the tools, the policies,
// the in-process observers (the caller's, ChildLifecycle always) and a
// graceful worker pool, and a client over them: [Host.Submit],
// [Host.Wait], [Host.Approve], [Host.Cancel], [Host.Events].
//
// It names no backend and reads no YAML: the caller composes the options.
// Package hostconfig is the composition the engine's verbs use (noeta.yaml
// and the connection flags, the embedded server by default); an embedding
// Go program may compose host itself and link only what it uses (see the
// package example and examples/embed).
package host
