package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// WakePublisher delivers wakes through the wake ingress (WakeSubject): a
// durable publish that whichever Dispatcher of the prefix consumes applies
// to the task's row. It is how a process that holds no Dispatcher — an
// observer worker, whose NATS account may publish to wake subjects but not
// touch the dispatcher's buckets — wakes a task.
type WakePublisher struct {
	js     jetstream.JetStream
	prefix string
}

// NewWakePublisher returns the publisher of prefix ("noeta" if empty) on nc.
func NewWakePublisher(nc *nats.Conn, prefix string) (*WakePublisher, error) {
	if prefix == "" {
		prefix = "noeta"
	}
	if err := noeta.ValidateToken("prefix", prefix, 32); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &WakePublisher{js: js, prefix: prefix}, nil
}

// Wake publishes event for task and returns once the wake stream holds it.
// matched is always false: whether it matched is decided later, by the
// Dispatcher that applies it.
func (w *WakePublisher) Wake(ctx context.Context, task string, event noeta.Wake) (bool, error) {
	if err := validTaskID("task", task); err != nil {
		return false, err
	}
	if err := event.Validate(); err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %w", eventlog.ErrInvalidArgument, task, err)
	}
	body, err := noeta.Canonical(event)
	if err != nil {
		return false, fmt.Errorf("%w: wake event for task %q: %v", eventlog.ErrInvalidArgument, task, err)
	}
	if _, err := w.js.Publish(ctx, WakeSubject(w.prefix, task), body); err != nil {
		return false, fmt.Errorf("jetstream: publish wake for %s: %w", task, overCap(err, task))
	}
	return false, nil
}

// overCap returns err wrapping eventlog.ErrTooManyWakes as well when the
// broker refused a publish because the subject holds its cap of wakes not
// yet applied (WakeStreamConfig): the sender is flooding one task, and
// errors.Is tells it so.
func overCap(err error, task string) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "maximum messages per subject") {
		return fmt.Errorf("%w: task %q has as many wakes waiting to be applied as the wake stream takes per subject: %w", eventlog.ErrTooManyWakes, task, err)
	}
	return err
}

// ApproveSubject is the approval subject approver answers task's approvals
// on: <prefix>.approve.<approver>.<p>.<task>. The dispatcher that applies a
// message from it records approver as the one who answered, so the
// subject, not the body, says who answered; how far that is vouched for is
// the dispatcher's DispatcherConfig.ApproveSubjectAuth: noeta.AuthNATS
// where deploy/nats lets each approver's NATS user publish only under its
// own name, noeta.AuthLocal on the embedded default.
func ApproveSubject(prefix, approver, task string) (string, error) {
	if prefix == "" {
		prefix = "noeta"
	}
	if err := noeta.ValidateToken("prefix", prefix, 32); err != nil {
		return "", fmt.Errorf("%w: %w", eventlog.ErrInvalidArgument, err)
	}
	if err := noeta.ValidateToken("approver", approver, 64); err != nil {
		return "", fmt.Errorf("%w: %w", eventlog.ErrInvalidArgument, err)
	}
	if err := validTaskID("task", task); err != nil {
		return "", err
	}
	return dispatchSubjects{prefix}.approve(approver, task), nil
}

// ApprovalPublisher answers approvals on one approver's approval subject
// (ApproveSubject): what an approver's NATS user, allowed to publish only
// there, uses instead of a plain wake.
type ApprovalPublisher struct {
	js       jetstream.JetStream
	prefix   string
	approver string
}

// NewApprovalPublisher returns the publisher of approver's answers under
// prefix ("noeta" if empty) on nc.
func NewApprovalPublisher(nc *nats.Conn, prefix, approver string) (*ApprovalPublisher, error) {
	if prefix == "" {
		prefix = "noeta"
	}
	if _, err := ApproveSubject(prefix, approver, noeta.NewTaskID()); err != nil {
		return nil, fmt.Errorf("jetstream: approval publisher: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &ApprovalPublisher{js: js, prefix: prefix, approver: approver}, nil
}

// Answer publishes the approver's decision on task's request handle, with
// reason, and returns once the wake stream holds it. Whether it answers
// anything is decided later, by the Dispatcher that applies it (a task not
// waiting on handle refuses it, logged and counted there) and by the engine
// (the approval rules).
func (p *ApprovalPublisher) Answer(ctx context.Context, task, handle string, decision noeta.ApprovalDecision, reason string) error {
	subj, err := ApproveSubject(p.prefix, p.approver, task)
	if err != nil {
		return err
	}
	ev := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: handle, Decision: string(decision), Text: reason, Approver: p.approver}
	if err := validApproval(ev); err != nil {
		return fmt.Errorf("%w: answer for task %q: %w", eventlog.ErrInvalidArgument, task, err)
	}
	body, err := noeta.Canonical(ev)
	if err != nil {
		return fmt.Errorf("%w: answer for task %q: %v", eventlog.ErrInvalidArgument, task, err)
	}
	if _, err := p.js.Publish(ctx, subj, body); err != nil {
		return fmt.Errorf("jetstream: publish the answer of %s for %s: %w", p.approver, task, overCap(err, task))
	}
	return nil
}

// validApproval reports a body an approval subject may not carry: anything
// but a human_response deciding approve or deny.
func validApproval(ev noeta.Wake) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if ev.Kind != noeta.WakeHumanResponse {
		return fmt.Errorf("an approval subject carries human_response answers, not %s", ev.Kind)
	}
	if d := noeta.ApprovalDecision(ev.Decision); d != noeta.ApprovalApprove && d != noeta.ApprovalDeny {
		return fmt.Errorf("decision is %q, want %q or %q", ev.Decision, noeta.ApprovalApprove, noeta.ApprovalDeny)
	}
	return nil
}

// fromOutside is ev as the ingress applies it: ExpireAt is the engine's to
// set on a condition and means nothing on an event, and Auth, Approver and
// ReceivedAt come from the subject it arrived on and the broker's timestamp
// of the message (stored), never from the sender's body. approver is "" for
// the plain wake subject, where a human_response proves nothing about who
// gave it (noeta.AuthNone; the approver it asserts is kept for the record);
// on an approval subject the answer is recorded as approver, authenticated
// as subjectAuth (DispatcherConfig.ApproveSubjectAuth: what the broker's
// permissions vouch for, never what the body claims). The stream's
// timestamp is set by the server that stored the message: a publisher
// cannot choose it, so it cannot date an answer before an expiry it missed.
func fromOutside(ev noeta.Wake, approver, subjectAuth string, stored time.Time) noeta.Wake {
	ev = ev.WithoutExpiry()
	ev.ReceivedAt = time.Time{}
	if ev.Kind != noeta.WakeHumanResponse {
		return ev
	}
	ev.ReceivedAt = receivedAt(stored)
	if approver != "" {
		ev.Approver = approver
		ev.Auth = subjectAuth
	} else {
		ev.Auth = noeta.AuthNone
	}
	return ev
}

// receivedAt is t as a wake records it: UTC, without a monotonic reading,
// to the millisecond (an expiry is recorded to the millisecond). Cut
// down, not rounded: an answer received in the deadline's millisecond
// reads as received at it, which is too late.
func receivedAt(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}
