package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
)

// The ready queue. Each ready, unreserved task has at most one message, its
// signal, on <prefix>.ready.<queue>.<p>.<task> in the work-queue stream
// <PREFIX>_READY; the body is the row's ready epoch. A queue is one durable
// pull consumer (filter <prefix>.ready.<queue>.>), shared by every
// Dispatcher, so FIFO per queue is the stream's order and a signal is handed
// to one fetcher at a time. The row stays the truth: a fetched signal is
// honoured only if the row is ready, unreserved, in that queue and at that
// epoch; any other signal is stale, acknowledged (which removes it) and
// dropped.

// signal publishes task's ready signal for epoch. The stream refuses a second
// message on a subject (DiscardNewPerSubject), which is how signals coalesce:
// a refusal means a signal is already there.
//
// fresh says the row has just become ready. A signal already there from an
// earlier epoch sits at its old place in the queue: it was left behind by a
// lease by name, or it is the signal of the lease that just ended, whose
// acknowledgement (asynchronous) has not removed it yet. It is purged (that
// message only, by sequence, so a signal published concurrently survives)
// and the signal published again, so the task joins the back of the queue
// now, as memlog's does. Otherwise (a repair) whatever signal is there is
// enough: a stale one is re-signalled by whoever fetches and drops it.
func (d *Dispatcher) signal(ctx context.Context, task, queue string, epoch uint64, fresh bool) error {
	return d.publishSignal(ctx, d.subj.ready(queue, task), epoch, fresh)
}

// signalFront publishes task's signal for epoch ahead of the queue (see
// taskRow.Front), replacing one left there by an earlier spell.
func (d *Dispatcher) signalFront(ctx context.Context, task, queue string, epoch uint64) error {
	return d.publishSignal(ctx, d.subj.readyFront(queue, task), epoch, true)
}

func (d *Dispatcher) publishSignal(ctx context.Context, subj string, epoch uint64, fresh bool) error {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	body := strconv.AppendUint(nil, epoch, 10)
	for attempt := 0; ; attempt++ {
		_, err := d.js.Publish(ctx, subj, body)
		if err == nil || !subjectFull(err) {
			return err
		}
		if !fresh {
			return nil
		}
		if attempt == 4 {
			// Refused every time: other publishers keep putting signals
			// there, each at least as new as the one read before it.
			return nil
		}
		there, err := d.readyLeaderGet(ctx, msgGetRequest{LastFor: subj})
		if err != nil {
			return err
		}
		if there == nil {
			continue // removed (acknowledged, dropped) since the refusal: publish again
		}
		if old, perr := strconv.ParseUint(string(there.Data), 10, 64); perr == nil && old >= epoch {
			return nil // as new as ours (a concurrent publisher) or newer
		}
		if err := d.ready.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(there.Sequence+1)); err != nil {
			return fmt.Errorf("purge stale ready signal: %w", err)
		}
	}
}

// readySpell is what a targeted lease needs to know of the ready spell it
// ended: where its signals are and which epoch they carry.
type readySpell struct {
	queue     string
	epoch     uint64
	signalled bool // unreserved: the spell was signalled
	front     bool // signalled ahead of the queue too
}

// withdrawSignals removes the ready signals of a spell a lease by name
// ended. Left in place, each was fetched, checked against the row and
// dropped by the queue's next untargeted Lease, and a process that leases
// many tasks by name filled the queue with them, so every untargeted Lease
// waded through the lot (docs/scale.md).
//
// Only the spell's own signal goes: the message there is read from the
// stream's leader, kept if it carries a later epoch (the task became ready
// again, e.g. a wake arrived and the lease was released, before this ran),
// and otherwise purged by its sequence, so a signal published after the read
// survives. Best effort, in the background once the lease is granted: a
// signal that stays (or is fetched first) is stale, and dropped by its
// fetcher as before.
func (d *Dispatcher) withdrawSignals(task string, spell readySpell) {
	ctx, cancel := d.detached()
	defer cancel()
	subjects := []string{d.subj.ready(spell.queue, task)}
	if spell.front {
		subjects = append(subjects, d.subj.readyFront(spell.queue, task))
	}
	for _, subj := range subjects {
		withdrawn, err := d.withdrawSignal(ctx, subj, spell.epoch)
		if err != nil {
			d.log.Warn("withdraw the ready signal of a task leased by name; its fetcher drops it", "task", task, "subject", subj, "err", err)
			continue
		}
		if withdrawn {
			d.stats.withdrawnSignals.Add(1)
		}
	}
}

// withdrawSignal purges the message on subj if it is a signal of epoch or an
// earlier one, reporting whether one was purged.
func (d *Dispatcher) withdrawSignal(ctx context.Context, subj string, epoch uint64) (bool, error) {
	there, err := d.readyLeaderGet(ctx, msgGetRequest{LastFor: subj})
	if err != nil || there == nil {
		return false, err
	}
	if got, perr := strconv.ParseUint(string(there.Data), 10, 64); perr == nil && got > epoch {
		return false, nil // a later spell's: the task is ready again
	}
	pctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if err := d.ready.Purge(pctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(there.Sequence+1)); err != nil {
		return false, fmt.Errorf("purge: %w", err)
	}
	return true, nil
}

// subjectFull reports the work-queue stream refusing a message because its
// subject already holds one (10077, "maximum messages per subject exceeded").
func subjectFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 &&
		strings.Contains(apiErr.Description, "maximum messages per subject")
}

// queueConsumer returns the durable consumer of queue, creating it (an
// idempotent create-or-update: every Dispatcher may race to) on first use.
// front selects the consumer of the signals that go ahead of the queue
// ("readyfront-<queue>": no queue's own consumer name, "ready-<queue>",
// can be it).
func (d *Dispatcher) queueConsumer(ctx context.Context, queue string, front bool) (jetstream.Consumer, error) {
	key, name, filter, what := queue, "ready-"+queue, d.subj.readyQueue(queue), "ready queue "
	if front {
		key, name, filter, what = "front:"+queue, "readyfront-"+queue, d.subj.readyFrontQueue(queue), "ahead of ready queue "
	}
	d.mu.Lock()
	c := d.queues[key]
	d.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	c, err := d.js.CreateOrUpdateConsumer(ctx, d.cfg.readyStream(), jetstream.ConsumerConfig{
		Durable:           name,
		Description:       "noeta " + what + queue,
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           ackWait(d.cfg.LeaseTTL, readyAckWait),
		MaxDeliver:        -1,
		InactiveThreshold: readyInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: ready consumer of queue %s: %w", queue, err)
	}
	d.mu.Lock()
	d.queues[key] = c
	d.mu.Unlock()
	return c, nil
}

func (d *Dispatcher) forgetConsumer(queue string) {
	d.mu.Lock()
	delete(d.queues, queue)
	delete(d.queues, "front:"+queue)
	d.mu.Unlock()
}

// frontSignal fetches, without waiting, the queue's next signal ahead of the
// queue: nil if none. It is one short request per untargeted Lease; a
// failure here is not the caller's (the task's signal at the back is still
// there), so it only reports nothing.
//
// The front consumer is created in the background on first use (and after
// it went missing), never on the caller's time: a Lease with a short
// deadline on a loaded cluster spent all of it creating the consumer, every
// time, and no task was leased at all. Until it exists there is nothing to
// take ahead of the queue but what its signal at the back also takes.
func (d *Dispatcher) frontSignal(queue string) jetstream.Msg {
	d.mu.Lock()
	cons := d.queues["front:"+queue]
	start := cons == nil && !d.frontCreating[queue]
	if start {
		d.frontCreating[queue] = true
	}
	d.mu.Unlock()
	if cons == nil {
		if start && !d.goTracked(func() { d.createFront(queue) }) {
			d.mu.Lock()
			delete(d.frontCreating, queue)
			d.mu.Unlock()
		}
		return nil
	}
	msg, err := d.fetchOnce(cons, 0)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
			d.mu.Lock()
			delete(d.queues, "front:"+queue)
			d.mu.Unlock()
		}
		return nil
	}
	return msg
}

// leaseFromQueue is the untargeted Lease: fetch the queue's next signal,
// take the row it names with a compare-and-set, acknowledge the signal.
func (d *Dispatcher) leaseFromQueue(ctx context.Context, queue, worker string, wait bool) (eventlog.Lease, error) {
	unanswered := 0
	for {
		if err := d.check(ctx); err != nil {
			return eventlog.Lease{}, err
		}
		cons, err := d.queueConsumer(ctx, queue, false)
		if err != nil {
			return eventlog.Lease{}, err
		}
		var msg jetstream.Msg
		if wait {
			var handed *eventlog.Lease
			msg, handed, err = d.waitSignal(ctx, queue, worker, cons)
			if handed != nil {
				return *handed, nil
			}
		} else if msg = d.frontSignal(queue); msg == nil {
			msg, err = d.pollSignal(ctx, queue, cons)
		}
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			// Nobody answered the pull: the consumer has no leader yet (just
			// created on a cluster, or a leader change), or it is gone
			// (removed for inactivity, see readyInactive). Pause; now and then
			// create it again, which is a no-op if it exists.
			unanswered++
			if unanswered%10 == 0 || !errors.Is(err, nats.ErrNoResponders) {
				d.forgetConsumer(queue)
			}
			if err := d.unansweredPause(ctx, unanswered, err); err != nil {
				return eventlog.Lease{}, err
			}
			continue
		}
		if err != nil {
			return eventlog.Lease{}, err
		}
		unanswered = 0
		if msg == nil {
			return eventlog.Lease{}, fmt.Errorf("%w: queue %q has no ready, unreserved task", eventlog.ErrNoReadyTask, queue)
		}
		task, ok := d.subj.taskOfReady(msg.Subject())
		epoch, perr := strconv.ParseUint(string(msg.Data()), 10, 64)
		if !ok || perr != nil {
			d.log.Warn("dropping a malformed ready signal", "subject", msg.Subject())
			_ = msg.Term()
			continue
		}
		lease, err := d.grant(ctx, task, worker, func(r *taskRow) error {
			if r == nil || r.Status != eventlog.DispatchReady || r.Reserved || r.Queue != queue || r.ReadyEpoch != epoch {
				return errStaleSignal
			}
			return nil
		})
		if errors.Is(err, errStaleSignal) {
			d.stats.staleSignals.Add(1)
			d.dropStale(ctx, msg, task)
			continue
		}
		if err != nil {
			// Back to the queue at once for another worker (a grant
			// undone for a cancelled ctx has signalled afresh, and this one
			// is stale).
			_ = msg.Nak()
			return eventlog.Lease{}, err
		}
		// The row is leased whatever becomes of the ack: a signal that
		// survives it is stale and dropped by its next fetcher.
		_ = msg.Ack()
		return lease, nil
	}
}

// unansweredPause pauses before a pull request nobody answered is sent
// again, and gives up with err after about RequestTimeout of them.
func (d *Dispatcher) unansweredPause(ctx context.Context, n int, err error) error {
	const step = 20 * time.Millisecond
	if time.Duration(n)*step > d.cfg.RequestTimeout {
		return fmt.Errorf("jetstream: ready queue consumer does not answer: %w", err)
	}
	t := time.NewTimer(step)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return eventlog.ErrClosed
	case <-t.C:
		return nil
	}
}

var errStaleSignal = errors.New("jetstream: stale ready signal")

// dropStale removes a stale signal and, if the row is nevertheless ready
// (a signal published while the stale one was still there was refused as a
// duplicate), signals it again.
func (d *Dispatcher) dropStale(ctx context.Context, msg jetstream.Msg, task string) {
	actx, cancel := d.withTimeout(ctx)
	err := msg.DoubleAck(actx)
	cancel()
	if err != nil {
		d.log.Warn("acknowledge stale ready signal", "subject", msg.Subject(), "err", err)
		return
	}
	r, _, err := d.getRow(ctx, task)
	if err != nil || r == nil || r.Status != eventlog.DispatchReady || r.Reserved {
		return
	}
	if err := d.signal(ctx, task, r.Queue, r.ReadyEpoch, false); err != nil {
		d.log.Warn("re-signal ready task", "task", task, "err", err)
	}
}

// createFront creates queue's front consumer, with a pause before the next
// attempt if that fails.
func (d *Dispatcher) createFront(queue string) {
	ctx, cancel := d.detached()
	_, err := d.queueConsumer(ctx, queue, true)
	cancel()
	if err != nil {
		d.log.Debug("create the consumer ahead of a ready queue; trying again on a later lease", "queue", queue, "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-d.done:
		case <-t.C:
		}
		t.Stop()
	}
	d.mu.Lock()
	delete(d.frontCreating, queue)
	d.mu.Unlock()
}

// pollSignal fetches the queue's next signal without waiting: nil if none.
//
// On a cluster the queue's consumer may run on a replica that has not yet
// applied a signal the stream leader already acknowledged, so an empty
// answer is checked with the stream leader: if it holds a signal for the
// queue, one short pull waits for the consumer to catch up. (The signal may
// also be with another fetcher; the pull then ends empty.)
func (d *Dispatcher) pollSignal(ctx context.Context, queue string, cons jetstream.Consumer) (jetstream.Msg, error) {
	msg, err := d.fetchOnce(cons, 0)
	if err != nil || msg != nil {
		return msg, err
	}
	held, err := d.queueHasSignal(ctx, queue)
	if err != nil || !held {
		return nil, err
	}
	return d.fetchOnce(cons, catchUpWait)
}

// catchUpWait bounds the pull that waits for a lagging consumer replica.
const catchUpWait = 250 * time.Millisecond

// queueHasSignal asks the ready stream's leader whether queue holds a signal.
func (d *Dispatcher) queueHasSignal(ctx context.Context, queue string) (bool, error) {
	m, err := d.readyLeaderGet(ctx, msgGetRequest{NextFor: d.subj.readyQueue(queue)})
	return m != nil, err
}

// readyLeaderGet asks the ready stream's leader (not a replica, which may lag
// behind what was acknowledged) for one message: nil if there is none.
func (d *Dispatcher) readyLeaderGet(ctx context.Context, req msgGetRequest) (*storedMsg, error) {
	return d.leaderGet(ctx, d.cfg.readyStream(), req)
}

// leaderGet reads one message of stream from its leader: nil if there is
// none.
func (d *Dispatcher) leaderGet(ctx context.Context, stream string, req msgGetRequest) (*storedMsg, error) {
	body, _ := json.Marshal(req)
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	resp, err := d.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, fmt.Errorf("jetstream: leader get on %s: %w", stream, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("jetstream: leader get on %s: bad response: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == 10037 { // no message; 10059 (no stream) is an error
			return nil, nil
		}
		return nil, fmt.Errorf("jetstream: leader get on %s: %s (code %d)", stream, r.Error.Description, r.Error.ErrCode)
	}
	return r.Message, nil
}

// fetchOnce sends one pull request for one signal, waiting up to wait (0:
// not at all): nil if none came.
func (d *Dispatcher) fetchOnce(cons jetstream.Consumer, wait time.Duration) (jetstream.Msg, error) {
	var (
		batch jetstream.MessageBatch
		err   error
	)
	if wait == 0 {
		batch, err = cons.FetchNoWait(1)
	} else {
		batch, err = cons.Fetch(1, jetstream.FetchMaxWait(wait))
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: fetch ready signal: %w", err)
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !isTimeout(err) {
		if msg != nil {
			_ = msg.Nak()
		}
		return nil, fmt.Errorf("jetstream: fetch ready signal: %w", err)
	}
	return msg, nil
}

// waitSignal takes the queue's next signal ahead of the queue (frontSignal)
// or blocks on the queue until a signal arrives, a task is handed to it
// (see handOff: it is a waiter of queue from the start, so a task created
// while it looks ahead of the queue is handed to it too), ctx ends or the
// Dispatcher closes. The server answers a pull request the moment a signal
// is published, so this is a blocking wait, not a poll. A spare pull request
// of the queue (keepSpare) is adopted before a new one is sent; a new one
// lives waitSlice, or until ctx's deadline if sooner.
func (d *Dispatcher) waitSignal(ctx context.Context, queue, worker string, cons jetstream.Consumer) (jetstream.Msg, *eventlog.Lease, error) {
	w := d.addWaiter(queue, worker)
	// claimed takes what a claimer sends w, handing back a signal in hand.
	claimed := func(m jetstream.Msg) *eventlog.Lease {
		if m != nil {
			_ = m.Nak()
		}
		if lease, ok := d.takeHanded(ctx, w); ok {
			return &lease
		}
		return nil
	}
	// again makes w a waiter anew after a claim that handed nothing, unless
	// the caller has gone meanwhile.
	again := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.closed.Load() {
			return eventlog.ErrClosed
		}
		w = d.addWaiter(queue, worker)
		return nil
	}
	// got settles a signal that arrived: the caller's, unless w was
	// claimed; then the signal goes back and what the claimer sends is
	// taken. done false: nothing was, and w waits again.
	got := func(m jetstream.Msg) (done bool, msg jetstream.Msg, l *eventlog.Lease, err error) {
		if d.dropWaiter(w) {
			return true, m, nil, nil
		}
		if l := claimed(m); l != nil {
			return true, nil, l, nil
		}
		if err := again(); err != nil {
			return true, nil, nil, err
		}
		return false, nil, nil, nil
	}
	// fail ends the wait with err, taking a lease a claimer sends first.
	fail := func(err error) (jetstream.Msg, *eventlog.Lease, error) {
		if !d.dropWaiter(w) {
			if l := claimed(nil); l != nil {
				return nil, l, nil
			}
		}
		return nil, nil, err
	}
	if m := d.frontSignal(queue); m != nil {
		if done, msg, l, err := got(m); done {
			return msg, l, err
		}
	}
	var batch jetstream.MessageBatch
	for {
		if batch == nil {
			var msg jetstream.Msg
			if batch, msg = d.adoptSpare(queue); msg != nil {
				batch = nil // spent: its one signal is msg
				if done, msg, l, err := got(msg); done {
					return msg, l, err
				}
				continue
			}
		}
		if batch == nil {
			wait := waitSlice
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, max(time.Until(dl), 10*time.Millisecond))
			}
			var err error
			if batch, err = cons.Fetch(1, jetstream.FetchMaxWait(wait)); err != nil {
				return fail(fmt.Errorf("jetstream: fetch ready signal: %w", err))
			}
		}
		select {
		case m, ok := <-batch.Messages():
			if !ok {
				err := batch.Error()
				batch = nil
				if err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !isTimeout(err) {
					return fail(fmt.Errorf("jetstream: fetch ready signal: %w", err))
				}
				continue
			}
			batch = nil // spent: its one signal is m
			if done, msg, l, err := got(m); done {
				return msg, l, err
			}
		case h := <-w.handed:
			w.handed <- h // for takeHanded, which gives it back if ctx ended
			if l := claimed(nil); l != nil {
				d.keepSpare(queue, batch)
				return nil, l, nil
			}
			if err := again(); err != nil {
				d.keepSpare(queue, batch)
				return nil, nil, err
			}
		case <-ctx.Done():
			if !d.dropWaiter(w) {
				claimed(nil) // gives a lease back: ctx has ended
			}
			// A signal already delivered is taken (grant undoes the lease,
			// synchronously, for the ended ctx) rather than handed back
			// with a Nak the server applies a moment later.
			select {
			case m, ok := <-batch.Messages():
				if ok {
					return m, nil, nil
				}
				return nil, nil, ctx.Err()
			default:
			}
			d.keepSpare(queue, batch)
			return nil, nil, ctx.Err()
		case <-d.done:
			if !d.dropWaiter(w) {
				claimed(nil)
			}
			return nil, nil, eventlog.ErrClosed
		}
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}
