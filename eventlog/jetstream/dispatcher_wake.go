package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Timers. A suspend on a timed condition (timer_fired{fire_at}, or a
// human_response with expire_at: see deadlineOf) that is not yet due
// publishes a message schedule on <prefix>.timer.<p>.<task>.<generation>,
// in the timers stream, which only the engine writes:
//
//	Nats-Schedule:        @at <deadline rounded up to the whole second>
//	Nats-Schedule-Target: <prefix>.timer.<p>.<task>
//	Nats-TTL:             never (a schedule outlives the stream's MaxAge)
//	Noeta-Timer-Generation: <generation of the lease that suspended>
//	body:                 the condition's canonical JSON
//
// At the deadline the broker (the stream leader, on its own clock) stores a
// copy of the message on the target subject, keeping the custom header and
// the body, and purges the schedule; nothing polls for due timers. The
// timers consumer applies the copy, once. @at has second precision and the
// server parses it as given, so the deadline is rounded up: a timer may fire
// up to a second late, never early.
//
// A fired timer wakes only the suspend that armed it (same generation, same
// condition), as memlog's timer does; a timer whose suspend has ended (the
// task was woken by something else, or forced back to ready) is dropped, not
// buffered. Re-arming the same suspend publishes to the same subject, and the
// schedule's implicit roll-up replaces the earlier one, so it fires once.

// armTimer publishes (or replaces) the schedule of cond for task's suspend
// at generation gen.
func (d *Dispatcher) armTimer(ctx context.Context, task string, gen uint64, cond noeta.Wake) error {
	body, err := noeta.Canonical(cond)
	if err != nil {
		return fmt.Errorf("jetstream: timer of %s: %w", task, err)
	}
	deadline, ok := deadlineOf(&cond)
	if !ok {
		return fmt.Errorf("jetstream: timer of %s: %s has no deadline", task, cond.Kind)
	}
	m := nats.NewMsg(d.subj.timer(task, gen))
	m.Header.Set(hdrTimerGen, strconv.FormatUint(gen, 10))
	m.Header.Set(jetstream.MsgTTLHeader, "never")
	m.Data = body
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if _, err := d.js.PublishMsg(ctx, m,
		jetstream.WithScheduleAt(ceilSecond(deadline)),
		jetstream.WithScheduleTarget(d.subj.timerTarget(task))); err != nil {
		return fmt.Errorf("jetstream: timer of %s: %w", task, err)
	}
	return nil
}

func ceilSecond(t time.Time) time.Time {
	s := t.Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s
}

// fireTimer wakes task's suspend at gen on the timed condition cond if the
// row is still that suspend and the deadline has passed (by the local
// clock; the broker's firing is trusted: it is the deadline). seq, when not
// 0, is the fired copy being applied, from the timers stream (legacy: from
// the wake stream of the layout before the split, whose sequences the row
// keeps with the wakes'). errSkip if the suspend has ended.
func (d *Dispatcher) fireTimer(ctx context.Context, task string, gen uint64, cond noeta.Wake, seq uint64, legacy bool) (*taskRow, error) {
	return d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		applied := func(r *taskRow) *[]uint64 {
			if legacy {
				return &r.Applied
			}
			return &r.AppliedTimers
		}
		if r != nil && seq != 0 && slices.Contains(*applied(r), seq) {
			return nil, errDuplicate
		}
		if r == nil || r.Status != eventlog.DispatchSuspended || r.Generation != gen ||
			r.WakeOn == nil || !r.WakeOn.Equal(cond) {
			return nil, errSkip
		}
		if deadline, _ := deadlineOf(&cond); seq == 0 && d.cfg.Now().Before(deadline) {
			return nil, errSkip
		}
		r.FireTimer()
		if seq != 0 {
			noteApplied(applied(r), seq)
		}
		return r, nil
	})
}

// consumeLane applies one of the Dispatcher's two inputs (lane): every
// Dispatcher runs each on a durable consumer shared by all of them, so each
// message goes to one of them; the row's record of applied stream sequences
// makes a redelivery (an ack lost, a process dead before acking) a no-op.
func (d *Dispatcher) consumeLane(l lane, it jetstream.MessagesContext) {
	defer d.wg.Done()
	for {
		m, err := it.Next()
		if err != nil {
			if d.closed.Load() {
				return
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				// Stopped on its own, not by Close: wakes and fired timers
				// would wait for another process. Create it again.
				if it = d.reopenLane(l, it); it == nil {
					return
				}
				continue
			}
			d.log.Warn(l.what, "err", err)
			d.kickReconcile() // a missed heartbeat: the consumer's leader moved
			select {
			case <-d.done:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if d.closed.Load() {
			// Drained after Close: another Dispatcher applies it now.
			_ = m.Nak()
			continue
		}
		d.applyIngress(m)
	}
}

// verdict is what becomes of an input message once applied.
type verdict int

const (
	verdictAck   verdict = iota // applied, or dropped for good (counted and logged)
	verdictTerm                 // not a wake at all: never to be delivered again
	verdictRetry                // a transient failure: deliver again shortly
	verdictHold                 // the task's buffer is full: deliver again later
	// verdictHoldAnswer: an answer on a handle whose earlier answer is
	// being judged (the task is leased or ready with it): the first
	// approval of a quorum, or a refused one, leaves the request open, so
	// this answer is tried again once the task waits again, for a while.
	verdictHoldAnswer
)

// applyIngress applies one message of either lane and acknowledges it as
// the row says.
func (d *Dispatcher) applyIngress(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		d.stats.invalidWakes.Add(1)
		d.log.Error("input message without metadata; dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	var v verdict
	if md.Stream == d.cfg.timerStream() {
		v = d.applyFiredTimer(m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream)
	} else {
		v = d.applyWakeMsg(m.Subject(), m.Headers(), m.Data(), md.Sequence.Stream, md.Timestamp, false)
	}
	switch v {
	case verdictAck:
		_ = m.Ack()
	case verdictTerm:
		_ = m.Term()
	case verdictRetry:
		_ = m.NakWithDelay(time.Second)
	case verdictHold:
		_ = m.NakWithDelay(heldWakeDelay)
	case verdictHoldAnswer:
		if md.NumDelivered < heldAnswerTries {
			_ = m.NakWithDelay(heldAnswerDelay)
			return
		}
		// The task never waited on it again: the earlier answer closed the
		// request, or the task is busy for long. Refused like any answer to
		// nothing open.
		d.stats.refusedWakes.Add(1)
		d.log.Warn("human_response on the wake ingress met an earlier answer to the same handle and the task did not wait on it again; dropped",
			"subject", m.Subject(), "seq", md.Sequence.Stream, "tries", md.NumDelivered)
		_ = m.Ack()
	}
}

// applyFiredTimer applies a copy the broker fired from a timer schedule.
// The timers stream is the engine's alone, so its header is trusted.
func (d *Dispatcher) applyFiredTimer(subject string, hdr nats.Header, data []byte, seq uint64) verdict {
	task, ok := d.subj.taskOfTimer(subject)
	var ev noeta.Wake
	err := fmt.Errorf("subject is not %s", d.subj.timersFired())
	if ok {
		if err = json.Unmarshal(data, &ev); err == nil {
			err = ev.Validate()
		}
	}
	gen, gerr := strconv.ParseUint(hdr.Get(hdrTimerGen), 10, 64)
	if err == nil && gerr != nil {
		err = fmt.Errorf("generation header %q: %w", hdr.Get(hdrTimerGen), gerr)
	}
	if _, timed := deadlineOf(&ev); err == nil && !timed {
		err = fmt.Errorf("a %s wake has no deadline", ev.Kind)
	}
	if err != nil {
		d.stats.invalidWakes.Add(1)
		d.log.Warn("invalid fired timer; dropped", "subject", subject, "seq", seq, "err", err)
		return verdictTerm
	}
	ctx, cancel := d.detached()
	defer cancel()
	return d.timerOutcome(ctx, task, seq, func() error {
		_, err := d.fireTimer(ctx, task, gen, ev, seq, false)
		return err
	})
}

// timerOutcome counts and judges the application of a fired timer.
func (d *Dispatcher) timerOutcome(ctx context.Context, task string, seq uint64, fire func() error) verdict {
	err := fire()
	switch {
	case err == nil:
		d.stats.wakesApplied.Add(1)
		d.stats.timersFired.Add(1)
	case errors.Is(err, errDuplicate):
		d.stats.duplicateWakes.Add(1)
		err = d.repairSignal(ctx, task) // the process that applied it may have died before signalling
	case errors.Is(err, errSkip):
		d.stats.staleTimers.Add(1)
		err = nil
	}
	if err != nil {
		d.log.Warn("apply a fired timer; retrying", "task", task, "seq", seq, "err", err)
		return verdictRetry
	}
	return verdictAck
}

// applyWakeMsg applies one message of the wake stream: a plain wake or an
// approval. legacy is set for the wake stream of the layout before the
// split (migrate.go), where fired timers arrived too, marked by their
// header; on today's wake stream, which any waker writes, that header is a
// forgery and the message is dropped. stored is the broker's timestamp of
// the message, which becomes an answer's ReceivedAt.
func (d *Dispatcher) applyWakeMsg(subject string, hdr nats.Header, data []byte, seq uint64, stored time.Time, legacy bool) verdict {
	src, ok := d.subj.parseIngress(subject)
	task := src.task
	var ev noeta.Wake
	var err error
	if ok {
		err = json.Unmarshal(data, &ev)
		if err == nil {
			if legacy && hdr.Get(hdrTimerGen) != "" {
				err = ev.Validate() // the broker's own copy: kept as fired
			} else {
				ev = fromOutside(ev, src.approver, d.cfg.ApproveSubjectAuth, stored)
				if src.approver != "" {
					err = validApproval(ev)
				} else {
					err = ev.Validate()
				}
			}
		}
	} else {
		err = fmt.Errorf("subject is neither %s nor %s", d.subj.wakeIngress(), d.subj.approveIngress())
	}
	if err != nil {
		d.stats.invalidWakes.Add(1)
		d.log.Warn("invalid wake on the ingress; dropped", "subject", subject, "seq", seq, "err", err)
		return verdictTerm
	}

	ctx, cancel := d.detached()
	defer cancel()
	if g := hdr.Get(hdrTimerGen); g != "" {
		gen, perr := strconv.ParseUint(g, 10, 64)
		if !legacy || perr != nil || ev.Kind != noeta.WakeTimerFired {
			// Only the broker's copy of an armed timer carries the header,
			// and since the split only on the timers stream: anything else
			// with it is a forgery (a human's answer dressed as a timer
			// would skip the answer rules).
			d.stats.invalidWakes.Add(1)
			d.log.Warn("a timer header on the wake ingress; dropped", "subject", subject, "seq", seq, "kind", ev.Kind, "generation", g)
			return verdictTerm
		}
		return d.timerOutcome(ctx, task, seq, func() error {
			_, err := d.fireTimer(ctx, task, gen, ev, seq, true)
			return err
		})
	}
	maxPending := d.cfg.MaxPendingWakes
	if legacy {
		// What the old layout accepted is applied whole: the cap is for
		// floods from now on, not for what was already promised.
		maxPending = math.MaxInt
	}
	_, err = d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		if r == nil {
			return nil, errNoRow
		}
		if slices.Contains(r.Applied, seq) {
			return nil, errDuplicate
		}
		if _, err := r.Wake(task, ev, maxPending); err != nil {
			return nil, err
		}
		noteApplied(&r.Applied, seq)
		return r, nil
	})
	switch {
	case err == nil:
		d.stats.wakesApplied.Add(1)
	case errors.Is(err, eventlog.ErrAlreadyAnswered) && !legacy:
		d.stats.heldWakes.Add(1)
		return verdictHoldAnswer
	case errors.Is(err, eventlog.ErrNotWaiting), errors.Is(err, eventlog.ErrAlreadyAnswered):
		// The sender published and left: nobody can be told, so the
		// refusal is logged and counted, and the message acked (a
		// redelivery would be refused the same way).
		d.stats.refusedWakes.Add(1)
		d.log.Warn("human_response on the wake ingress answers nothing the task waits on; dropped",
			"task", task, "handle", ev.Handle, "decision", ev.Decision, "approver", ev.Approver, "auth", ev.Auth, "seq", seq, "err", err)
		err = nil
	case errors.Is(err, eventlog.ErrTooManyWakes):
		// Held in the stream, not dropped: it is applied once the task
		// has consumed some of its buffer. Held messages count against
		// the stream's per-subject cap, so past it the broker refuses the
		// sender (WakeStreamConfig).
		d.stats.heldWakes.Add(1)
		d.log.Warn("wake held on the ingress: the task's buffer of pending wakes is full",
			"task", task, "kind", ev.Kind, "seq", seq, "cap", d.cfg.MaxPendingWakes)
		return verdictHold
	case errors.Is(err, errDuplicate):
		d.stats.duplicateWakes.Add(1)
		err = d.repairSignal(ctx, task) // the process that applied it may have died before signalling
	case errors.Is(err, errNoRow):
		d.stats.unknownTaskWakes.Add(1)
		d.log.Warn("wake for a task the dispatcher does not know (never enqueued); dropped",
			"task", task, "kind", ev.Kind, "seq", seq)
		err = nil
	}
	if err != nil {
		// Transient (the server, a timeout): try again shortly.
		d.log.Warn("apply ingress wake; retrying", "task", task, "seq", seq, "err", err)
		return verdictRetry
	}
	return verdictAck
}

var (
	errNoRow     = errors.New("jetstream: dispatcher: no row")
	errDuplicate = errors.New("jetstream: dispatcher: ingress message already applied")
)
