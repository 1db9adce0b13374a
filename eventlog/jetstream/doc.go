// Package jetstream is the NATS JetStream backend of the eventlog seams.
//
// Every task's log is one subject, <prefix>.t.<p>.<task>.log, in one stream;
// its last stream sequence is the compare-and-set point of every write. The
// first append of a lease generation is a LeaseGranted record, published with
// the tail the writer read as the expected last subject sequence: once it is
// in, every append still in flight from an older holder fails at the broker,
// and the older holder, reading the tail, stops with eventlog.ErrLeaseLost.
// Inbox writes go to <prefix>.t.<p>.<task>.in.<key>, each published with
// expected last subject sequence 0, so a key is written at most once, forever.
//
// Records are CloudEvents 1.0 in structured JSON mode; payloads of known types
// are validated against the schemas in package schemas before publishing, and
// a record that does not decode or validate on read is reported as corrupt with
// its stream sequence.
//
// Reads that decide a write (the tail, an ambiguous publish) go to the stream
// leader, never to a possibly stale direct get.
//
// [Dispatcher] is the dispatcher on the same cluster: a row per task in KV
// <prefix>_tasks (every transition a compare-and-set on its revision), a
// liveness key per lease in KV <prefix>_leases (bucket TTL, watched by every
// process), a coalesced ready signal per task in the work-queue stream
// <PREFIX>_READY, the wake ingress <PREFIX>_WAKE (plain wakes, and
// approvals on <prefix>.approve.<approver>.<p>.<task>, whose approver the
// subject vouches for; a work queue with no roll-ups and a per-task cap) and
// the engine-only <PREFIX>_TIMERS, into which the broker fires timers and
// approval expiries (@at message schedules). docs/adr/0010 says where this
// departs from DESIGN.md's sketch, docs/adr/0032 why the wake stream and the
// timers are apart.
package jetstream
