package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Timers. A suspend on timer_fired{fire_at} that is not yet due publishes a
// message schedule on <prefix>.wake.<p>.<task>.timer.<generation>:
//
//	Nats-Schedule:        @at <fire_at rounded up to the whole second>
//	Nats-Schedule-Target: <prefix>.wake.<p>.<task>
//	Nats-TTL:             never (a schedule outlives the stream's MaxAge)
//	Noeta-Timer-Generation: <generation of the lease that suspended>
//	body:                 the condition's canonical JSON
//
// At the deadline the broker (the stream leader, on its own clock) stores a
// copy of the message on the target subject, keeping the custom header and
// the body, and purges the schedule; nothing polls for due timers. The copy
// is an ordinary ingress message: the ingress consumer applies it, once.
// @at has second precision and the server parses it as given, so the
// deadline is rounded up: a timer may fire up to a second late, never early.
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
	m := nats.NewMsg(d.subj.wakeTimer(task, gen))
	m.Header.Set(hdrTimerGen, strconv.FormatUint(gen, 10))
	m.Header.Set(jetstream.MsgTTLHeader, "never")
	m.Data = body
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if _, err := d.js.PublishMsg(ctx, m,
		jetstream.WithScheduleAt(ceilSecond(cond.FireAt)),
		jetstream.WithScheduleTarget(d.subj.wake(task))); err != nil {
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

// fireTimer wakes task with cond if the row is still the suspend at gen on
// cond and the deadline has passed (by the local clock; the broker's firing
// is trusted: it is the deadline). seq, when not 0, is the ingress message
// being applied. errSkip if the suspend has ended.
func (d *Dispatcher) fireTimer(ctx context.Context, task string, gen uint64, cond noeta.Wake, seq uint64) (*taskRow, error) {
	return d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
		if r != nil && seq != 0 && slices.Contains(r.Applied, seq) {
			return nil, errDuplicate
		}
		if r == nil || r.Status != eventlog.DispatchSuspended || r.Generation != gen ||
			r.WakeOn == nil || !r.WakeOn.Equal(cond) {
			return nil, errSkip
		}
		if seq == 0 && d.cfg.Now().Before(cond.FireAt) {
			return nil, errSkip
		}
		r.fireTimer()
		if seq != 0 {
			r.noteApplied(seq)
		}
		return r, nil
	})
}

// consumeIngress applies the wake ingress: every Dispatcher runs it on the
// shared durable consumer, so each message goes to one of them; the row's
// record of applied stream sequences makes a redelivery (an ack lost, a
// process dead before acking) a no-op.
func (d *Dispatcher) consumeIngress(it jetstream.MessagesContext) {
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
				if it = d.reopenIngress(it); it == nil {
					return
				}
				continue
			}
			d.log.Warn("wake ingress", "err", err)
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

// applyIngress applies one ingress message and acknowledges it once the row
// says so.
func (d *Dispatcher) applyIngress(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		d.stats.invalidWakes.Add(1)
		d.log.Error("wake ingress message without metadata; dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	seq := md.Sequence.Stream
	src, ok := d.subj.parseIngress(m.Subject())
	task := src.task
	var ev noeta.Wake
	if ok {
		err = json.Unmarshal(m.Data(), &ev)
		if err == nil {
			ev = fromOutside(ev, src.approver)
			if src.approver != "" {
				err = validApproval(ev)
			} else {
				err = ev.Validate()
			}
		}
	} else {
		err = fmt.Errorf("subject is neither %s nor %s", d.subj.wakeIngress(), d.subj.approveIngress())
	}
	if err != nil {
		d.stats.invalidWakes.Add(1)
		d.log.Warn("invalid wake on the ingress; dropped", "subject", m.Subject(), "seq", seq, "err", err)
		_ = m.Term()
		return
	}

	ctx, cancel := d.detached()
	defer cancel()
	if g := m.Headers().Get(hdrTimerGen); g != "" {
		gen, perr := strconv.ParseUint(g, 10, 64)
		if perr != nil {
			d.stats.invalidWakes.Add(1)
			d.log.Warn("fired timer with a bad generation; dropped", "subject", m.Subject(), "seq", seq, "generation", g)
			_ = m.Term()
			return
		}
		if ev.Kind != noeta.WakeTimerFired {
			// Only the broker's copy of an armed timer carries the header;
			// anything else with it is a forgery (a human's answer dressed
			// as a timer would skip the answer rules).
			d.stats.invalidWakes.Add(1)
			d.log.Warn("a timer header on a wake that is not timer_fired; dropped", "subject", m.Subject(), "seq", seq, "kind", ev.Kind)
			_ = m.Term()
			return
		}
		_, err = d.fireTimer(ctx, task, gen, ev, seq)
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
	} else {
		_, err = d.mutate(ctx, task, func(r *taskRow) (*taskRow, error) {
			if r == nil {
				return nil, errNoRow
			}
			if slices.Contains(r.Applied, seq) {
				return nil, errDuplicate
			}
			if _, err := r.applyWake(task, ev); err != nil {
				return nil, err
			}
			r.noteApplied(seq)
			return r, nil
		})
		switch {
		case err == nil:
			d.stats.wakesApplied.Add(1)
		case errors.Is(err, eventlog.ErrNotWaiting), errors.Is(err, eventlog.ErrAlreadyAnswered):
			// The sender published and left: nobody can be told, so the
			// refusal is logged and counted, and the message acked (a
			// redelivery would be refused the same way).
			d.stats.refusedWakes.Add(1)
			d.log.Warn("human_response on the wake ingress answers nothing the task waits on; dropped",
				"task", task, "handle", ev.Handle, "decision", ev.Decision, "approver", ev.Approver, "seq", seq, "err", err)
			err = nil
		case errors.Is(err, errDuplicate):
			d.stats.duplicateWakes.Add(1)
			err = d.repairSignal(ctx, task) // the process that applied it may have died before signalling
		case errors.Is(err, errNoRow):
			d.stats.unknownTaskWakes.Add(1)
			d.log.Warn("wake for a task the dispatcher does not know (never enqueued); dropped",
				"task", task, "kind", ev.Kind, "seq", seq)
			err = nil
		}
	}
	if err != nil {
		// Transient (the server, a timeout): try again shortly.
		d.log.Warn("apply ingress wake; retrying", "task", task, "seq", seq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

var (
	errNoRow     = errors.New("jetstream: dispatcher: no row")
	errDuplicate = errors.New("jetstream: dispatcher: ingress message already applied")
)
