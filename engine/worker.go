package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/backoff"
)

// Outcome is how a segment ended.
type Outcome struct {
	Task   string
	Status noeta.TaskStatus // suspended or terminal
	Reason string
	WakeOn *noeta.Wake
}

// RunLease runs one leased segment of a task to its next suspend or terminal
// record and releases the lease with the wake it consumed.
//
// While it runs, a heartbeat goroutine renews the lease; if the lease is
// lost (a renewal is refused, or a write finds another writer), the segment
// stops at once and RunLease returns an error wrapping
// eventlog.ErrInvalidLease without releasing or failing anything: the task
// is no longer this worker's to report on. If ctx ends (the worker is
// stopping or was killed), it likewise returns without touching the
// dispatcher, and the lease expires into the next worker's hands. A damaged
// log (DamagedLog: a gap, a corrupt record) fails the segment for good, with
// a reason starting ReasonDamagedLog, before anything is written: the task
// ends terminal in the dispatcher, its matched wake kept, until someone
// repairs the log and enqueues it again. A wake that fits nothing in the log
// (ErrWakeRecovery) ends the task too, recorded: a TaskFailed under the same
// lease, then a terminal release. Any other error fails the segment as
// retryable, once it has run again under the same lease, from a fresh
// fold, Config.SegmentRetries times after short growing pauses and failed
// each time (ADR 0115); at the dispatcher's cap the next lease carries
// Ending and only records the end (ADR 0050). An ending lease that cannot
// record it leaves its lease to expire, and the next ending lease tries
// again (ADR 0063).
func (e *Engine) RunLease(ctx context.Context, lease eventlog.Lease) (Outcome, error) {
	segCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	e.mu.Lock()
	e.cancels[lease.Task] = segmentStop{lease.ID, stop}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		// Only this segment's entry: a newer segment of the task (this one
		// lost its lease and is winding down) may have replaced it.
		if e.cancels[lease.Task].lease == lease.ID {
			delete(e.cancels, lease.Task)
		}
		e.mu.Unlock()
	}()

	hbDone := make(chan struct{})
	hbCtx, hbStop := context.WithCancel(segCtx)
	go func() {
		defer close(hbDone)
		e.heartbeat(hbCtx, lease, stop)
	}()

	seg, err := e.runSegment(segCtx, lease)
	// A failure that may pass (the store between leader elections, a
	// policy's server unreachable) is tried again under this lease before
	// it counts: a Fail would have the task ready at once, leased and
	// failed again as fast as it fails, and a few seconds of outage would
	// spend its attempts (ADR 0115). The run starts afresh from the log,
	// as the next lease's would. The pauses stay short (up to 4× the
	// first): the store is back after an election, and a longer pause
	// would only keep the task waiting once it is.
	pause := backoff.New(e.cfg.SegmentRetryPause, 4*e.cfg.SegmentRetryPause)
	for try := 1; try <= e.cfg.SegmentRetries && e.retryInLease(segCtx, lease, seg, err); try++ {
		e.log.Warn("segment failed; running it again under its lease", "task", lease.Task, "lease", lease.ID,
			"try", try, "of", e.cfg.SegmentRetries, "in", pause.Next(), "err", err)
		if pause.Wait(segCtx) != nil {
			break // the lease lost or the worker stopping: reported below
		}
		seg, err = e.runSegment(segCtx, lease)
	}
	hbStop()
	<-hbDone

	if cause := context.Cause(segCtx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		// The segment stopped because of its cause (a lost lease, a cancel
		// request); report that rather than the write it interrupted.
		err = fmt.Errorf("%w (stopped while: %v)", cause, err)
	}
	switch {
	case err == nil:
		out := Outcome{Task: lease.Task, Status: seg.st.Status, Reason: seg.st.Reason, WakeOn: seg.st.WakeOn}
		if rerr := e.release(ctx, seg); rerr != nil {
			return out, rerr
		}
		return out, nil
	case errors.Is(err, eventlog.ErrInvalidLease):
		e.log.Warn("lease lost; stopped without writing", "task", lease.Task, "lease", lease.ID, "generation", lease.Generation, "err", err)
		return Outcome{Task: lease.Task}, err
	case ctx.Err() != nil, errors.Is(err, errCancelRequested):
		return Outcome{Task: lease.Task}, err
	}
	// A wake that fits nothing in the log would fit nothing on a retry
	// either: that failure is final. So is a damaged log: every retry would
	// read the same hole, and writing past it would build on a history
	// whose lost part may hold a tool call's result.
	retry := !errors.Is(err, ErrWakeRecovery)
	reason := err.Error()
	if DamagedLog(err) {
		retry = false
		reason = ReasonDamagedLog + ": " + reason
		e.damaged.Add(1)
		e.log.Error("the task's log is damaged; refusing to run the task until it is repaired (engine doctor lists the damage)", "task", lease.Task, "err", err)
	} else {
		e.log.Error("segment failed", "task", lease.Task, "retryable", retry, "err", err)
	}
	if lease.Ending != "" && retry {
		// The end could not be recorded (the store unavailable, most
		// likely). The lease is left to expire: a TTL from now the task's
		// next lease carries the same Ending and tries again, rather than
		// a Fail that would have it retried at once, as fast as it fails.
		e.log.Error("could not record the task's end; the next lease tries again", "task", lease.Task, "ending", lease.Ending, "err", err)
		return Outcome{Task: lease.Task}, err
	}
	if !retry && !DamagedLog(err) {
		// The task ends here and its log is sound: the end goes in the log
		// first, under this lease, as any other end would. Only if that
		// cannot be written does the dispatcher alone hear of it.
		out, rerr := e.recordEnd(ctx, lease, reason)
		if rerr == nil {
			return out, err
		}
		e.log.Error("could not record the task's end; the dispatcher ends it alone", "task", lease.Task, "err", rerr)
	}
	if ferr := e.cfg.Dispatcher.Fail(ctx, lease, eventlog.Failure{Retryable: retry, Reason: truncate(reason, 1024)}); ferr != nil && !errors.Is(ferr, eventlog.ErrInvalidLease) {
		e.log.Error("fail", "task", lease.Task, "err", ferr)
	}
	return Outcome{Task: lease.Task}, err
}

// runSegment runs lease's segment from a fresh fold of the task's log to
// its next suspend or terminal record, or records the end the lease
// carries, and flushes what it wrote.
func (e *Engine) runSegment(ctx context.Context, lease eventlog.Lease) (*segment, error) {
	seg, err := e.newSegment(ctx, lease)
	switch {
	case err != nil:
		return seg, err
	case lease.Ending != "":
		err = seg.end(lease.Ending)
	default:
		err = seg.drive()
	}
	if err == nil {
		// Records written later are durable before the dispatcher hears of
		// the segment's end.
		err = seg.flush(nil)
	}
	return seg, err
}

// retryInLease says whether seg, which failed with err, runs again under
// lease: only a failure RunLease would report as retryable, of a lease
// that records no end (an ending lease that cannot write leaves its lease
// to expire, ADR 0063), while the lease is held, and not after the policy
// was asked and its decision not recorded: the policy's own failures are
// retried by the policy (a model client's backoff), and a decision lost
// with the failed write was paid for and is not in the log the budget
// guards read, so each run again would spend unseen. Such a failure
// counts toward the attempts at once, as before.
func (e *Engine) retryInLease(ctx context.Context, lease eventlog.Lease, seg *segment, err error) bool {
	return err != nil && ctx.Err() == nil && lease.Ending == "" && (seg == nil || !seg.asked) &&
		!errors.Is(err, eventlog.ErrInvalidLease) && !errors.Is(err, eventlog.ErrClosed) && !errors.Is(err, errCancelRequested) &&
		!errors.Is(err, ErrWakeRecovery) && !DamagedLog(err)
}

// recordEnd ends the task under lease in a segment of its own (the failed
// one may hold records it folded and never wrote): TaskFailed with reason,
// then the release.
func (e *Engine) recordEnd(ctx context.Context, lease eventlog.Lease, reason string) (Outcome, error) {
	seg, err := e.newSegment(ctx, lease)
	if err != nil {
		return Outcome{Task: lease.Task}, err
	}
	if err := seg.end(reason); err != nil {
		return Outcome{Task: lease.Task}, err
	}
	if err := seg.flush(nil); err != nil {
		return Outcome{Task: lease.Task}, err
	}
	out := Outcome{Task: lease.Task, Status: seg.st.Status, Reason: seg.st.Reason}
	return out, e.release(ctx, seg)
}

// end records why the task ends (the dispatcher gave up on it, Lease.Ending,
// or its lease's wake fits nothing): a TaskFailed with the reason, and
// nothing else of the task runs. A task
// whose log already ends it is only released. Writing the record is what
// makes the end visible to everything that reads the log — the fold, the
// audit, the failed notification — rather than to the dispatcher alone.
func (g *segment) end(reason string) error {
	if g.st.Status == noeta.StatusTerminal {
		return nil
	}
	g.e.log.Error("the task ends; recording why", "task", g.st.Task, "reason", reason)
	if err := g.closeStartedCalls(); err != nil {
		return err
	}
	return g.terminate(noeta.TaskFailed{Error: truncate(reason, maxErrorLen)})
}

// closeStartedCalls records every call of the current turn that the log
// shows started and not finished as interrupted, in the order they
// started, as a resumed turn does (toolCalls): a task that ends while a
// call's worker was lost (a stale reclaim, the cap of attempts) leaves no
// call whose fate its log does not state. The call is not run. The tool
// names come from the ToolCallStarted records, read from the turn's
// TurnStarted on: a rare path, and the fold keeps only the calls' status.
func (g *segment) closeStartedCalls() error {
	open := 0
	for _, s := range g.st.Turn.Calls {
		if s == CallStarted {
			open++
		}
	}
	if open == 0 {
		return nil
	}
	envs, err := g.e.cfg.Log.Read(g.ctx, g.st.Task, g.st.Turn.Seq)
	if err != nil {
		return fmt.Errorf("engine: task %s: read turn %d's calls: %w", g.st.Task, g.st.Turn.N, err)
	}
	var started []noeta.ToolCallStarted
	for _, env := range envs {
		if env.Type != noeta.TypeToolCallStarted {
			continue
		}
		p, _, err := env.Decode()
		if err != nil {
			return fmt.Errorf("engine: task %s seq %d: %w", g.st.Task, env.Seq, err)
		}
		if s, ok := p.(*noeta.ToolCallStarted); ok && g.st.Turn.Calls[s.CallID] == CallStarted {
			started = append(started, *s)
		}
	}
	if len(started) != open {
		return fmt.Errorf("%w: task %s: turn %d has %d calls started and not finished, its records from seq %d name %d",
			ErrBadLog, g.st.Task, g.st.Turn.N, open, g.st.Turn.Seq, len(started))
	}
	for _, s := range started {
		if err := g.emit(noeta.ToolCallFinished{CallID: s.CallID, Tool: s.Tool, OK: false, Output: json.RawMessage("null"), Error: msgInterrupted}, eventlog.OriginTool, ActorTool); err != nil {
			return err
		}
	}
	return nil
}

// ReasonDamagedLog starts the failure reason of a task the engine refused to
// run because its log is damaged (DamagedLog).
const ReasonDamagedLog = "damaged_log"

// DamagedLog reports whether err says a task's log itself is damaged: a gap
// in its Seqs (eventlog.ErrGap), a record that does not decode
// (eventlog.ErrCorrupt), a log a fold cannot make sense of (ErrBadLog).
// None of them goes away on a retry.
func DamagedLog(err error) bool {
	return errors.Is(err, eventlog.ErrGap) || errors.Is(err, eventlog.ErrCorrupt) || errors.Is(err, ErrBadLog)
}

// DamagedLogs counts the segments this engine refused to run because the
// task's log was damaged.
func (e *Engine) DamagedLogs() uint64 { return e.damaged.Load() }

// heartbeat renews the lease until ctx ends; a refused renewal stops the
// segment with the dispatcher's error.
func (e *Engine) heartbeat(ctx context.Context, lease eventlog.Lease, stop context.CancelCauseFunc) {
	every := e.cfg.HeartbeatEvery
	if every == 0 {
		every = max(time.Until(lease.Expires)/3, 10*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		expires, err := e.cfg.Dispatcher.Heartbeat(ctx, lease)
		if err == nil {
			lease.Expires = expires
			continue
		}
		if errors.Is(err, eventlog.ErrInvalidLease) {
			stop(err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		// Renewals that cannot get through (the dispatcher unreachable)
		// do not end the lease, but its expiry does: past it another
		// worker may hold the task, so this one stops, tool calls and all,
		// even though it cannot hear so. A tick of margin keeps it ahead
		// of the takeover.
		if !lease.Expires.IsZero() && time.Now().Add(every).After(lease.Expires) {
			stop(fmt.Errorf("%w: task %s: lease %s expires at %s and no renewal got through (last error: %v)",
				eventlog.ErrLeaseLost, lease.Task, lease.ID, lease.Expires.Format(time.RFC3339Nano), err))
			return
		}
		e.log.Warn("heartbeat failed; retrying at the next tick", "task", lease.Task, "expires", lease.Expires, "err", err)
	}
}

// release ends the segment in the dispatcher as the log says it ended.
func (e *Engine) release(ctx context.Context, seg *segment) error {
	st := seg.st
	e.settleIndex(ctx, st, seg.indexed)
	rel := eventlog.Release{ConsumedWake: seg.lease.Wake, Reason: st.Reason}
	switch st.Status {
	case noeta.StatusSuspended:
		rel.Next, rel.WakeOn = eventlog.DispatchSuspended, st.WakeOn
	case noeta.StatusTerminal:
		rel.Next = eventlog.DispatchTerminal
		if rel.Reason == "" {
			rel.Reason = "completed"
		}
	default:
		return fmt.Errorf("engine: task %s: segment ended %s, not suspended or terminal", st.Task, st.Status)
	}
	return e.cfg.Dispatcher.Release(ctx, seg.lease, rel)
}

// Worker leases tasks from the engine's queue and runs them, one at a time.
type Worker struct {
	e  *Engine
	id string
	// OnSegment, if set, is called after every segment (for progress
	// output and tests); it must not block.
	OnSegment func(Outcome, error)
}

// NewWorker returns a worker named id (it appears in LeaseGranted).
func (e *Engine) NewWorker(id string) *Worker { return &Worker{e: e, id: id} }

// Run leases and runs tasks until ctx ends; it returns nil then. A failed
// lease request is retried after a pause.
func (w *Worker) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		lease, err := w.e.cfg.Dispatcher.Lease(ctx, eventlog.LeaseRequest{Worker: w.id, Queue: w.e.cfg.Queue, TTL: w.e.cfg.LeaseTTL, Wait: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, eventlog.ErrNoReadyTask) {
				w.e.log.Warn("lease request failed", "worker", w.id, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		out, err := w.e.RunLease(ctx, lease)
		if w.OnSegment != nil {
			w.OnSegment(out, err)
		}
	}
	return nil
}

// Pool runs n workers until ctx ends.
type Pool struct {
	Workers []*Worker
}

// NewPool returns n workers named <prefix>-1 … <prefix>-n.
func (e *Engine) NewPool(prefix string, n int) *Pool {
	p := &Pool{}
	for i := range n {
		p.Workers = append(p.Workers, e.NewWorker(fmt.Sprintf("%s-%d", prefix, i+1)))
	}
	return p
}

// Run runs every worker and returns when all have stopped.
func (p *Pool) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range p.Workers {
		wg.Go(func() { _ = w.Run(ctx) })
	}
	wg.Wait()
}
