package jshost

import (
	"context"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// RoutesAnswers reports whether an approval answer given through this
// backend travels on the approver's own approval subject (a remote NATS,
// where the broker vouches for who answered) rather than being handed to
// the dispatcher in process (the embedded default).
func (b *Backend) RoutesAnswers() bool { return !b.opts.Embedded() }

// SendAnswer publishes an answer on approver's approval subject
// (<prefix>.approve.<approver>.<p>.<task>): the broker, not this process,
// vouches for who answered, since the approver's NATS user may publish
// only under its own name (deploy/nats's approver role).
func (b *Backend) SendAnswer(ctx context.Context, task, handle, approver string, decision noeta.ApprovalDecision, reason string) error {
	p, err := jetstream.NewApprovalPublisher(b.nc, b.opts.Prefix, approver)
	if err != nil {
		return err
	}
	return p.Answer(ctx, task, handle, decision, reason)
}
