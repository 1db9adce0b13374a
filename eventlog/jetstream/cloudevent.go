package jetstream

import "github.com/noeta-go/noeta/eventlog"

// CloudEvent returns the CloudEvents 1.0 structured-mode JSON of env
// (application/cloudevents+json): exactly the body the log publishes and
// stores for that record (DESIGN.md §3), with the per-task position in the
// sequence extension, or the inbox key in inboxkey for an inbox record. Pass a
// committed record, as Read, Inbox, a Subscriber or a write returned it: the
// id, time and sequence are the log's. An envelope that does not make a valid
// CloudEvent (no id, an unknown origin) is an error wrapping
// eventlog.ErrInvalidArgument.
func CloudEvent(env eventlog.Envelope) ([]byte, error) {
	return cloudEventBody(env)
}
