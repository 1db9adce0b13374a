// Package host runs noeta: it owns everything a running noeta needs — the
// NATS connection (an embedded nats-server on a data directory, or a NATS
// server or cluster), the JetStream event log and dispatcher, the guard
// stacks, the tools, the policies, the in-process observers (the config's
// and the caller's, ChildLifecycle always), and a graceful worker pool — and
// offers a client over them: [Host.Submit], [Host.Wait], [Host.Approve],
// [Host.Cancel], [Host.Events].
//
// A host that runs tasks ([Options.Workers] > 0) needs its data directory to
// itself; one that runs none is a client, and on a data directory another
// process holds it becomes a client of that process's server. cmd/engine is
// flags and rendering on top of this package; an embedding Go program uses
// it the same way (see the package example).
package host
