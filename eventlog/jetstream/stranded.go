package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
)

// A stranded signal: a ready row whose signal sits on the back subject at
// the row's own epoch while the queue's consumer has nothing to deliver and
// nothing in flight. Seen under faults (deploy/nats TestPartition, and
// TestChaos before it): the consumer had moved past a message the work-queue
// stream still held (its state and the stream's diverged across a leader
// change), so no worker was ever given the task, and a pass, which asks only
// whether a signal is there, repaired nothing. A signal seen on passes
// strandAfter apart at the same epoch, with the consumer reporting nothing
// pending and nothing waiting for an acknowledgement, is purged and
// published again at a new sequence, which the consumer delivers. A backlog
// (signals waiting for busy workers) is never touched: its consumer reports
// them pending.

// strandedSeen is when a pass first saw a ready row's signal at an epoch.
type strandedSeen struct {
	epoch uint64
	since time.Time
}

// strandAfter is how long a signal must have sat before it is suspected:
// two passes at the least, and never less than the ready consumers' ack
// wait, so that a delivery in flight is acknowledged or given back first.
func (d *Dispatcher) strandAfter() time.Duration {
	return max(2*d.cfg.SweepInterval, ackWait(d.cfg.LeaseTTL, readyAckWait))
}

// checkStranded notes the ready rows of s whose signal is there, and
// republishes those stranded since the passes before. A queue or a task
// that cannot be checked now is left to the next pass and the others are
// checked; the errors are returned together.
func (d *Dispatcher) checkStranded(ctx context.Context, s *snapshot, now time.Time) error {
	seen := make(map[string]strandedSeen)
	suspects := map[string][]string{} // queue → tasks
	d.strandMu.Lock()
	for task, r := range s.rows {
		if r.Status != eventlog.DispatchReady || r.Reserved || !s.signals[d.subj.ready(r.Queue, task)] {
			continue
		}
		prev, ok := d.stranded[task]
		if !ok || prev.epoch != r.ReadyEpoch {
			prev = strandedSeen{epoch: r.ReadyEpoch, since: now}
		}
		seen[task] = prev
		if now.Sub(prev.since) >= d.strandAfter() {
			suspects[r.Queue] = append(suspects[r.Queue], task)
		}
	}
	d.stranded = seen
	d.strandMu.Unlock()

	var errs []error
	for queue, tasks := range suspects {
		qctx, cancel := d.passRequest(ctx)
		idle, err := d.queueIdle(qctx, queue)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !idle {
			continue
		}
		for _, task := range tasks {
			rctx, cancel := d.passRequest(ctx)
			err := d.republish(rctx, task)
			cancel()
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// queueIdle reports whether queue's consumer has nothing pending and
// nothing waiting for an acknowledgement. A queue without a consumer (no
// worker has asked for it lately) is not idle: nobody would take a signal
// anyway, and the next Lease creates the consumer, which delivers all.
func (d *Dispatcher) queueIdle(ctx context.Context, queue string) (bool, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	c, err := d.js.Consumer(ctx, d.cfg.readyStream(), "ready-"+queue)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jetstream: ready consumer of queue %s: %w", queue, err)
	}
	info, err := c.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jetstream: ready consumer of queue %s: %w", queue, err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}

// republish purges task's stranded signal and publishes it again, if the
// row, read from the leader, is still ready at the epoch the signal
// carries.
func (d *Dispatcher) republish(ctx context.Context, task string) error {
	r, _, err := d.getRow(ctx, task)
	if err != nil || r == nil || r.Status != eventlog.DispatchReady || r.Reserved {
		return err
	}
	subj := d.subj.ready(r.Queue, task)
	there, err := d.readyLeaderGet(ctx, msgGetRequest{LastFor: subj})
	if err != nil || there == nil {
		return err
	}
	if epoch, perr := strconv.ParseUint(string(there.Data), 10, 64); perr != nil || epoch != r.ReadyEpoch {
		return nil // a stale signal: a Lease drops it and signals again
	}
	pctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if err := d.ready.Purge(pctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(there.Sequence+1)); err != nil {
		return fmt.Errorf("jetstream: purge the stranded signal of %s: %w", task, err)
	}
	d.stats.republished.Add(1)
	return d.signal(ctx, task, r.Queue, r.ReadyEpoch, false)
}
