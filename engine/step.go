package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/tools"
)

// Result strings the engine records; operators grep for them.
const (
	msgInterrupted = "interrupted: the worker running this call stopped before it finished; the call is not run again"
	msgSkipped     = "skipped: a prior call in this batch awaits approval"
	maxErrorLen    = 2048
	// maxShadowReason bounds a GuardShadowed's reason, in bytes: its
	// canonical JSON may escape each byte to six, and a shadow record that
	// would not fit in a record must not hold up the action it is about.
	maxShadowReason = 256
)

// ErrWakeRecovery is wrapped when a lease's wake fits nothing in the task's
// log: not its suspend condition, not a wake it already consumed.
var ErrWakeRecovery = errors.New("engine: wake does not fit the log")

// segment is one leased run of a task: from the lease to the next suspend or
// terminal record. It holds the folded state and keeps it current by applying
// every record it writes, so nothing in a segment re-reads the log.
type segment struct {
	e     *Engine
	ctx   context.Context
	lease eventlog.Lease
	st    *State
	pol   Policy
	stack *guards.Stack
	// woke is set when this segment wrote the TaskWoken of its wake.
	woke bool
	// asked is set when the policy was asked and what it decided is not
	// yet in the log (cleared by a write of the pending records): a run
	// that fails so is not run again under its lease (retryInLease), as
	// each run would ask, and bill, again with nothing recorded.
	asked bool
	// meta is the guards' metadata, built once: guard contexts share it,
	// so it is never changed once built.
	meta map[string]string
	// offered is what the agent's model is offered, computed once.
	offered *offer
	// indexed holds the handles the segment found or put in the waiting
	// index: those not open at its end are deleted before the release.
	indexed map[string]bool
	// pending are records folded into st and not yet written (emitLater).
	pending []eventlog.Envelope
	// grantPending is set when the segment's LeaseGranted is folded into st
	// ahead of pending and not yet written: the log writes it before the
	// first record of the segment's first batch (eventlog.BatchWriter).
	grantPending bool
	// snapSeq is the seq of the last snapshot the segment wrote (0: none).
	snapSeq uint64
	// sc is what the segment's folds of its own records reuse from one
	// record to the next, as a fold of a log does.
	sc foldScratch
}

func (e *Engine) newSegment(ctx context.Context, lease eventlog.Lease) (*segment, error) {
	var st *State
	if genesis, ok := e.cfg.Fresh.take(e.cfg.Log, lease); ok {
		// The log holds the genesis and nothing else, unless it was
		// damaged: a read after the genesis says which in one look at the
		// tail, and folds what it finds there as FoldTask would.
		rest, err := e.cfg.Log.Read(ctx, lease.Task, genesis.Seq)
		if err != nil {
			return nil, err
		}
		st = &State{}
		var sc foldScratch
		for _, env := range append([]eventlog.Envelope{genesis}, rest...) {
			if err := st.apply(env, &sc); err != nil {
				return nil, err
			}
		}
	} else {
		var note string
		var err error
		st, note, err = FoldTask(ctx, e.cfg.Log, e.cfg.Content, lease.Task)
		if note != "" {
			e.log.Warn("fold", "task", lease.Task, "note", note)
		}
		if err != nil {
			return nil, err
		}
	}
	return &segment{e: e, ctx: ctx, lease: lease, st: st, indexed: e.reconcile(ctx, st)}, nil
}

// emit appends one record under the segment's lease, together with the
// records written later before it, conditional on the last seq the segment
// knows, and folds it in. It returns once they are durable. A record that
// lands anywhere else means another writer took the task: that is a lost
// lease, whatever the backend called it.
func (g *segment) emit(p noeta.Payload, origin eventlog.Origin, actor string) error {
	env, err := g.envelope(p, origin, actor)
	if err != nil {
		return err
	}
	return g.flush(&env)
}

// emitLater folds a record in now and writes it with the next record that
// must be durable (ADR 0038): for records no effect waits on, so a tool
// call's ToolCallFinished, the next TurnStarted and PolicyDecided and the
// ToolCallStarted that must precede the next call's run are one durable
// write. A crash before that write loses them together, and the next holder
// resumes from the log as if the worker had stopped before them: the call
// is recorded as interrupted and not run again, and the policy is asked
// for a turn it never recorded. The first record of a segment waits too:
// the lease's LeaseGranted, which the log writes before it, is folded in
// first, as the fold of the log will see it, so a segment's first turn
// costs one write, not two.
func (g *segment) emitLater(p noeta.Payload, origin eventlog.Origin, actor string) error {
	env, err := g.envelope(p, origin, actor)
	if err != nil {
		return err
	}
	if len(g.pending)+2 > eventlog.MaxBatch || noeta.IsBaselineType(env.Type) {
		return g.flush(&env)
	}
	if g.st.LeaseGen != g.lease.Generation {
		if len(g.pending) > 0 || g.grantPending {
			// Cannot be: the grant is folded with the first pending record.
			return g.flush(&env)
		}
		lg, err := g.grant(g.st.LastSeq + 1)
		if err != nil {
			return err
		}
		if err := g.st.apply(lg, &g.sc); err != nil {
			return err
		}
		g.grantPending = true
	}
	env.Seq, env.LeaseGen = g.st.LastSeq+1, g.lease.Generation
	if err := g.st.apply(env, &g.sc); err != nil {
		return err
	}
	g.pending = append(g.pending, env)
	return nil
}

func (g *segment) envelope(p noeta.Payload, origin eventlog.Origin, actor string) (eventlog.Envelope, error) {
	env, err := eventlog.NewEnvelope(g.st.Task, origin, actor, p)
	if err != nil {
		return env, err
	}
	env.CorrelationID = g.st.Root
	return env, nil
}

// flush writes the pending records and then last (if any) in one batch and
// folds last in. Nothing is pending afterwards, whether it failed or not: a
// failure ends the segment, and the next holder folds the log as it is.
func (g *segment) flush(last *eventlog.Envelope) error {
	if last != nil && g.snapshotRides(*last) {
		// The periodic snapshot ends this batch rather than one of its
		// own: last is folded in, then the snapshot of the state after it
		// is written with it.
		last.Seq, last.LeaseGen = g.st.LastSeq+1, g.lease.Generation
		if err := g.st.apply(*last, &g.sc); err != nil {
			return err
		}
		g.pending = append(g.pending, *last)
		return g.snapshot()
	}
	envs := g.pending
	g.pending = nil
	if last != nil {
		envs = append(envs, *last)
	}
	if len(envs) == 0 {
		return nil
	}
	npend := len(envs)
	if last != nil {
		npend--
	}
	base := g.st.LastSeq - uint64(npend)
	granted := g.grantPending
	g.grantPending = false
	if granted {
		base-- // the LeaseGranted folded ahead of the pending records
	}
	stored, err := eventlog.EmitAll(g.ctx, g.e.cfg.Log, g.lease, envs, eventlog.EmitOptions{ExpectLastSeq: base})
	if err != nil {
		if errors.Is(err, eventlog.ErrStaleSequence) {
			return fmt.Errorf("%w: %w", eventlog.ErrLeaseLost, err)
		}
		return err
	}
	if len(stored) != len(envs) {
		return fmt.Errorf("engine: task %s: wrote %d records, the log stored %d", g.st.Task, len(envs), len(stored))
	}
	for i := range npend {
		if stored[i].Seq != envs[i].Seq {
			return fmt.Errorf("%w: task %s: record %s landed at seq %d, folded at %d", eventlog.ErrLeaseLost, g.st.Task, envs[i].Type, stored[i].Seq, envs[i].Seq)
		}
	}
	var out eventlog.Envelope
	if last != nil {
		out = stored[len(stored)-1]
	}
	// The log took its own copies and keeps no hold on envs (BatchWriter),
	// so the next turn's records reuse the slice: a fresh one a batch was a
	// tenth of what a short task allocated in memory. out is taken first,
	// so not even a backend that broke that rule could clear it.
	clear(envs)
	g.pending = envs[:0]
	g.asked = false
	if last == nil {
		return nil
	}
	if npend == 0 && out.Seq == g.st.LastSeq+2 {
		// The generation's LeaseGranted landed first; fold it in as it is.
		lg, err := g.grant(out.Seq - 1)
		if err != nil {
			return err
		}
		if err := g.st.apply(lg, &g.sc); err != nil {
			return err
		}
	}
	if out.Seq != g.st.LastSeq+1 {
		return fmt.Errorf("%w: task %s: record %s landed at seq %d, folded at %d", eventlog.ErrLeaseLost, g.st.Task, out.Type, out.Seq, g.st.LastSeq+1)
	}
	return g.st.apply(out, &g.sc)
}

// snapshotRides reports whether a periodic snapshot is due and can end the
// batch that writes last: SnapshotEvery turns have passed since the last
// one, last is a record the turn goes on after (a suspend or a terminal
// writes its own snapshot first), and last's seq is known before the write
// (the segment's LeaseGranted is folded in already).
func (g *segment) snapshotRides(last eventlog.Envelope) bool {
	switch {
	case noeta.IsBaselineType(last.Type), noeta.IsTerminalType(last.Type), last.Type == noeta.TypeTaskSuspended:
		return false
	case g.st.LeaseGen != g.lease.Generation && !g.grantPending:
		return false
	case len(g.pending)+3 > eventlog.MaxBatch:
		return false
	}
	return g.st.Turn.N-g.st.SnapTurn >= g.e.cfg.SnapshotEvery
}

// grant is the segment's LeaseGranted as the log writes it, at seq.
func (g *segment) grant(seq uint64) (eventlog.Envelope, error) {
	lg, err := eventlog.NewEnvelope(g.st.Task, eventlog.OriginEngine, g.lease.Worker,
		noeta.LeaseGranted{LeaseID: g.lease.ID, Generation: g.lease.Generation, Worker: g.lease.Worker})
	if err != nil {
		return lg, err
	}
	lg.Seq, lg.LeaseGen = seq, g.lease.Generation
	return lg, nil
}

func (g *segment) engineEmit(p noeta.Payload) error {
	return g.emit(p, eventlog.OriginEngine, g.e.cfg.Actor)
}

// drive runs the segment: the wake-recovery state machine, then turns until
// the task suspends or ends.
func (g *segment) drive() error {
	st := g.st
	if w := g.lease.Wake; w != nil {
		consumed := st.LastWake != nil && st.LastWake.Equal(*w)
		if consumed && st.Status == noeta.StatusSuspended && noeta.Matches(st.WakeOn, w) {
			// Wakes carry no id, so this is either the wake the last
			// segment consumed, redelivered because that segment died
			// after suspending again and before its release, or a new wake
			// equal to it (a second "ping"). Only in the first case did
			// the dispatcher reclaim the last lease.
			ds, err := g.e.cfg.Dispatcher.Inspect(g.ctx, st.Task)
			if err != nil {
				return err
			}
			consumed = ds.ReclaimCount > 0
		}
		if !consumed && w.Kind == noeta.WakeHumanResponse && !g.answersOpen(*w) {
			// A human answered something the task does not wait on now (a
			// dispatcher that buffered it, a row written before answers
			// stopped being buffered): it resolves nothing. The release
			// consumes it and leaves the task as its log says.
			g.e.log.Warn("refused a human_response that answers no request the task waits on",
				"task", st.Task, "handle", w.Handle, "decision", w.Decision, "approver", w.Approver, "waits_on", wakeString(st.WakeOn))
			g.e.refusedAnswers.Add(1)
			if st.Status != noeta.StatusRunning {
				return nil
			}
			return g.loop()
		}
		if !consumed {
			switch {
			case st.Status == noeta.StatusSuspended && noeta.Matches(st.WakeOn, w):
				if err := g.engineEmit(noeta.TaskWoken{WakeEvent: *w}); err != nil {
					return err
				}
				g.woke = true
			case st.Status == noeta.StatusTerminal:
				return nil
			default:
				return fmt.Errorf("%w: task %s is %s waiting on %s; the lease's wake is %s", ErrWakeRecovery, st.Task, st.Status, wakeString(st.WakeOn), wakeString(w))
			}
		}
		if st.Status != noeta.StatusRunning {
			// Consumed by an earlier segment that then suspended or ended
			// but died before its release: release as the log says.
			return nil
		}
		if err := g.afterWake(*w); err != nil {
			return err
		}
	} else if st.Status == noeta.StatusSuspended || st.Status == noeta.StatusTerminal {
		return nil
	}
	return g.loop()
}

// answersOpen reports whether w answers what the task is suspended on now,
// and, when that is an approval, a request the log holds unresolved under
// w's handle.
func (g *segment) answersOpen(w noeta.Wake) bool {
	st := g.st
	if st.Status != noeta.StatusSuspended || !noeta.Matches(st.WakeOn, &w) {
		return false
	}
	if st.Reason != ReasonWaitingApproval {
		return true
	}
	_, ok := st.Governance.PendingApprovals[w.Handle]
	return ok
}

// afterWake records what the wake delivered: subtask results from the inbox,
// an approval's resolution. Each step checks the state first, so a segment
// resuming after a crash here repeats nothing.
func (g *segment) afterWake(w noeta.Wake) error {
	st := g.st
	switch w.Kind {
	case noeta.WakeSubtaskCompleted, noeta.WakeSubtaskGroupCompleted:
		ids := w.SubtaskIDs
		if w.Kind == noeta.WakeSubtaskCompleted {
			ids = []string{w.SubtaskID}
		}
		return g.recordResults(ids)
	case noeta.WakeHumanResponse:
		pa, ok := st.Governance.PendingApprovals[w.Handle]
		if !ok && st.WokenFrom != ReasonWaitingApproval && !slices.ContainsFunc(st.Governance.Approvals, func(a noeta.ApprovalRecord) bool { return a.Handle == w.Handle }) {
			// A question or a park: the same doors and rules as an
			// approval.
			return g.recordReply(w)
		}
		if !ok || st.Answered {
			// Its answer is recorded already (by a segment that died
			// after it).
			return nil
		}
		// Refused or counted, the request stays open and the turn, resumed,
		// suspends on it again.
		return g.recordAnswer(pa, w)
	}
	return nil
}

func (g *segment) recordResults(ids []string) error {
	recorded := map[string]bool{}
	for _, r := range g.st.Governance.SubtaskResults {
		recorded[r.SubtaskID] = true
	}
	missing := false
	for _, id := range ids {
		missing = missing || !recorded[id]
	}
	if !missing {
		return nil
	}
	inbox, err := g.e.cfg.Log.Inbox(g.ctx, g.st.Task)
	if err != nil {
		return err
	}
	byChild := map[string]*noeta.SubtaskCompleted{}
	for _, env := range inbox {
		if env.Type != noeta.TypeSubtaskCompleted {
			continue
		}
		p, _, err := env.Decode()
		if err != nil {
			g.e.log.Warn("inbox record does not decode; skipped", "task", g.st.Task, "key", env.Key, "err", err)
			continue
		}
		sc := p.(*noeta.SubtaskCompleted)
		if _, dup := byChild[sc.SubtaskID]; !dup {
			byChild[sc.SubtaskID] = sc
		}
	}
	for _, id := range ids {
		if recorded[id] {
			continue
		}
		sc, ok := byChild[id]
		if !ok {
			g.e.log.Warn("woken for a subtask whose result is not in the inbox", "task", g.st.Task, "subtask", id)
			continue
		}
		spend, err := g.childSpend(id)
		if err != nil {
			return err
		}
		if err := g.engineEmit(noeta.SubtaskResultRecorded{
			SubtaskID: sc.SubtaskID, Status: sc.Status, Result: sc.Result, ResultRef: sc.ResultRef, Error: sc.Error, GroupID: sc.GroupID,
			Spend: spend,
		}); err != nil {
			return err
		}
		recorded[id] = true
	}
	return nil
}

// childSpend reads what an ended child's tree spent from the child's own
// log (docs/adr/0054): its spend, its ended subtasks' and the allotments of
// any of its subtasks still running. nil when the log cannot say — it cannot
// be read, or the child is not ended in it — and then the child's whole
// allotment counts as spent: a spend nobody could read is never a spend of
// nothing.
func (g *segment) childSpend(id string) (*noeta.TreeSpend, error) {
	cst, note, err := FoldTask(g.ctx, g.e.cfg.Log, g.e.cfg.Content, id)
	if cause := context.Cause(g.ctx); cause != nil {
		return nil, cause
	}
	if err != nil || cst.Status != noeta.StatusTerminal {
		g.e.log.Warn("a subtask's spend cannot be read from its log; its whole allotment counts", "task", g.st.Task, "subtask", id, "err", err, "note", note)
		return nil, nil
	}
	t := cst.Governance.Tree()
	return &t, nil
}

// loop runs turns until the task suspends or ends.
func (g *segment) loop() error {
	st := g.st
	// A turn this lease's own earlier run left open (it failed and runs
	// again, RunLease) is not one an earlier lease abandoned: it is not
	// sealed nor counted toward the cap that parks the task, and its
	// started calls are recorded as interrupted when the turn resumes.
	// Unless that run parked it (its seals past the cap: the park's
	// record is in, its suspend is not): the turn is parked again, never
	// run.
	ownRun := st.LeaseGen == g.lease.Generation && st.Turn.Seals <= g.e.cfg.AbandonCap
	if st.Turn.Open && !g.woke && !ownRun {
		if parked, err := g.seal(); err != nil || parked {
			return err
		}
	}
	// Only the first turn of a segment can be one left open (by a suspend
	// for an approval or a park, or by a worker that stopped); every turn
	// after it is new.
	resume := st.Turn.Open
	for st.Status == noeta.StatusRunning || st.Status == noeta.StatusPending {
		if err := context.Cause(g.ctx); err != nil {
			return err
		}
		if !resume {
			if err := g.emitLater(noeta.TurnStarted{Turn: st.Turn.N + 1}, eventlog.OriginEngine, g.e.cfg.Actor); err != nil {
				return err
			}
		}
		resume = false
		if err := g.turn(); err != nil {
			return err
		}
	}
	return nil
}

// seal records that the current turn was left unfinished by an earlier
// segment and is resumed, or, past the cap, parks the task for a human.
func (g *segment) seal() (parked bool, err error) {
	t := g.st.Turn
	var started []string
	for id, s := range t.Calls {
		if s == CallStarted {
			started = append(started, id)
		}
	}
	reason := fmt.Sprintf("turn %d was left unfinished by an earlier lease", t.N)
	if len(started) > 0 {
		reason += fmt.Sprintf("; calls started and not finished are recorded as failed and not run again: %v", sortedStrings(started))
	}
	if t.Seals+1 >= g.e.cfg.AbandonCap+1 {
		reason = fmt.Sprintf("turn %d was left unfinished %d times in a row; parked for a human", t.N, t.Seals+1)
		if err := g.engineEmit(noeta.StepAttemptAbandoned{BaselineSeq: t.Seq, Action: noeta.AbandonPark, Reason: reason}); err != nil {
			return false, err
		}
		return true, g.suspend(ReasonParked+": "+reason, noeta.HumanResponseWake(ParkHandle(t.N)))
	}
	return false, g.engineEmit(noeta.StepAttemptAbandoned{BaselineSeq: t.Seq, Action: noeta.AbandonRedrive, Reason: reason})
}

// ParkHandle is the wake handle of a task parked at turn n: a human_response
// with it (any decision) resumes the turn.
func ParkHandle(turn int) string { return "resume-turn-" + strconv.Itoa(turn) }

// Approval handles, one per request: a tool call's names its call id, a
// spawn's and a finish's the turn (a turn has at most one of either), and
// each ends in a nonce drawn when the request is made (ADR 0021), so no
// handle can be known before its ApprovalRequested is in the log. A request
// is found again by what it asks for, never by rebuilding its handle: logs
// written before the nonce hold handles without one, and stay answerable.
func toolApprovalHandle(callID string) string { return "approval-" + callID + "-" + handleNonce() }
func spawnApprovalHandle(turn int) string {
	return "approval-spawn-" + strconv.Itoa(turn) + "-" + handleNonce()
}
func finishApprovalHandle(turn int) string {
	return "approval-finish-" + strconv.Itoa(turn) + "-" + handleNonce()
}

// nonceAlphabet is Crockford's base32 in lower case: no i, l, o or u, so a
// handle read aloud or retyped is not mistaken for another.
const nonceAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// handleNonce is 10 characters of base32 from the operating system's
// randomness: 50 bits, so a guessed handle is right once in 10^15.
func handleNonce() string {
	var b [10]byte
	rand.Read(b[:]) // never returns an error; it crashes the program if the OS has no randomness
	for i := range b {
		b[i] = nonceAlphabet[b[i]&31]
	}
	return string(b[:])
}

// pendingHandle returns the handle of the open request for a tool call (or,
// with callID "", for the turn's spawn or finish: action).
func (st *State) pendingHandle(action noeta.ApprovalAction, callID string) (string, bool) {
	for h, pa := range st.Governance.PendingApprovals {
		if pa.Action == action && pa.CallID == callID {
			return h, true
		}
	}
	return "", false
}

// approvedRequest returns the approved request of this turn for a tool call
// (or, with callID "", for the turn's spawn or finish: action).
func (st *State) approvedRequest(action noeta.ApprovalAction, callID string) (noeta.PendingApproval, bool) {
	for _, pa := range st.Turn.Approved {
		if pa.Action == action && pa.CallID == callID {
			return pa, true
		}
	}
	return noeta.PendingApproval{}, false
}

// turn decides the current turn and carries the decision out. A turn whose
// decision is recorded (a version 2 PolicyDecided: an earlier segment
// decided it and then stopped, or suspended for an approval) is carried out
// from the record: the policy is never asked twice for one turn. A turn
// with a version 1 record (written before decisions were recorded) asks
// the policy again and holds it to the recorded kind and call ids.
func (g *segment) turn() error {
	st := g.st
	n := st.Turn.N
	var d noeta.Decision
	if rec := st.Turn.Decision; st.Turn.Decided && rec != nil {
		var err error
		if d, err = g.replayDecision(rec); err != nil {
			return err
		}
	} else {
		var stop bool
		var err error
		if d, stop, err = g.decide(n); err != nil || stop {
			return err
		}
	}
	if err := context.Cause(g.ctx); err != nil {
		return err
	}
	switch d.Kind {
	case noeta.DecisionToolCalls:
		return g.toolCalls(d.ToolCalls)
	case noeta.DecisionSpawn:
		return g.spawn(d.Spawn)
	case noeta.DecisionYieldForHuman:
		return g.suspend(reasonWaitingHuman+truncate(d.Question, 512), noeta.HumanResponseWake("question-"+strconv.Itoa(n)))
	case noeta.DecisionWaitTimer:
		at := g.e.cfg.Now().Add(time.Duration(d.WaitSeconds * float64(time.Second)))
		return g.suspend("waiting_timer", noeta.TimerWake(at))
	case noeta.DecisionWaitExternal:
		return g.suspend("waiting_external", noeta.ExternalWake(d.EventKind))
	case noeta.DecisionStatePatch:
		if !st.Turn.Patched {
			if err := g.engineEmit(noeta.TaskStatePatched{Patch: d.Patch}); err != nil {
				return err
			}
		}
		return g.endTurn()
	case noeta.DecisionFinish:
		return g.finish(d.Answer)
	case noeta.DecisionFail:
		return g.terminate(noeta.TaskFailed{Error: d.Error})
	}
	return g.terminate(noeta.TaskFailed{Error: fmt.Sprintf("unknown decision kind %q", d.Kind)})
}

// decide asks the policy for turn n and records its decision (or, for a
// turn with a version 1 record, checks it against the record). stop is
// true when the turn ended the task instead.
func (g *segment) decide(n int) (d noeta.Decision, stop bool, err error) {
	st := g.st
	if !st.Turn.Decided {
		// A budget run out for every action point denies whatever the
		// policy decides: asking it (a model bills per call) would spend
		// more for nothing, turn after turn. The task ends here instead.
		if s, err := g.guards(); err == nil {
			if guard, reason, out := s.Exhausted(g.guardContext()); out {
				return d, true, g.terminate(noeta.TaskFailed{Error: fmt.Sprintf("budget exhausted before turn %d: %s", n, reason), Guard: guard})
			}
		}
	}
	pol, err := g.policy()
	if err != nil {
		return d, true, g.terminate(noeta.TaskFailed{Error: err.Error()})
	}
	g.asked = true
	d, err = pol.Decide(g.ctx, g.policyInput(n))
	if err != nil {
		if cause := context.Cause(g.ctx); cause != nil {
			return d, true, cause
		}
		return d, true, fmt.Errorf("policy: task %s turn %d: %w", st.Task, n, err)
	}
	d = refuseUnrecordableArgs(d)
	if err := d.Validate(); err != nil {
		d = failedDecision(d, "the policy gave an invalid decision: "+err.Error())
	}
	if st.Turn.Decided {
		// A version 1 record: the policy must decide as it did.
		if d.Kind == noeta.DecisionToolCalls {
			// A resumed turn must propose the calls it recorded: the log
			// knows them by id, and a call under a new id would run again.
			for id := range st.Turn.Calls {
				if !slices.ContainsFunc(d.ToolCalls, func(c noeta.ToolCall) bool { return c.CallID == id }) {
					return d, true, g.terminate(noeta.TaskFailed{Error: fmt.Sprintf("the policy proposed turn %d again without call %s, which the log records (a policy must decide a turn the same way every time, call ids included)", n, id)})
				}
			}
		}
		if st.Turn.Kind != d.Kind {
			return d, true, g.terminate(noeta.TaskFailed{Error: fmt.Sprintf("the policy decided %s for turn %d when it was resumed; %s was recorded (a policy must decide a turn the same way every time)", d.Kind, n, st.Turn.Kind)})
		}
		return d, false, nil
	}
	rec, err := g.recordDecision(n, d)
	if errors.Is(err, noeta.ErrInvalidJSON) {
		// A part the log cannot hold (a patch, an answer, a script that
		// encoding/json accepts and canonical JSON refuses): asking again
		// would bill the model again for the same refusal, so the turn
		// fails the task, recorded.
		d = failedDecision(d, "the policy gave a decision the log cannot hold: "+err.Error())
		rec, err = g.recordDecision(n, d)
	}
	if err != nil {
		return d, true, err
	}
	origin, actor := eventlog.OriginEngine, g.e.cfg.Actor
	if c, ok := pol.(ClientPolicy); ok {
		origin, actor = eventlog.OriginClient, c.Client()
	}
	return d, false, g.emitLater(rec, origin, actor)
}

// failedDecision is a fail decision saying why d cannot be carried out,
// with what deciding d cost, so the budget still counts it.
func failedDecision(d noeta.Decision, why string) noeta.Decision {
	// The model's text stays: what it said is part of why the task failed.
	f := noeta.Decision{Kind: noeta.DecisionFail, Error: why, Text: d.Text,
		CostUSD: d.CostUSD, InputTokens: d.InputTokens, OutputTokens: d.OutputTokens, Model: d.Model, Provider: d.Provider, LatencyMS: d.LatencyMS, Response: d.Response, Notes: d.Notes}
	if err := f.Validate(); err != nil {
		// The cost itself is what is wrong: record none of it.
		return noeta.Decision{Kind: noeta.DecisionFail, Error: why + " (" + err.Error() + ")"}
	}
	return f
}

// refuseUnrecordableArgs marks invalid every call of d whose arguments
// canonical JSON refuses (a duplicate key, a lone surrogate, invalid
// UTF-8, a number past float64: text encoding/json accepts), without its
// arguments. Such a call cannot be recorded as asked for, so it cannot be
// run; as an invalid call it is refused as guard schema and the turn goes
// on (ADR 0027), and the PolicyDecided that carries it is recordable, so
// the turn replays as it ran. d's own slices are not modified.
func refuseUnrecordableArgs(d noeta.Decision) noeta.Decision {
	var calls []noeta.ToolCall
	for i, c := range d.ToolCalls {
		if c.Invalid != "" || len(c.Args) == 0 {
			continue
		}
		if _, err := noeta.CanonicalizeJSON(c.Args); err != nil {
			if calls == nil {
				calls = slices.Clone(d.ToolCalls)
			}
			calls[i].Args = nil
			calls[i].Invalid = "the arguments are not valid JSON: " + strings.TrimPrefix(err.Error(), noeta.ErrInvalidJSON.Error()+" ")
		}
	}
	if calls != nil {
		d.ToolCalls = calls
	}
	return d
}

// endTurn closes a turn that continues the loop; every SnapshotEvery such
// turns it writes a snapshot, so resuming a long task stays cheap.
func (g *segment) endTurn() error {
	if g.st.Turn.N-g.st.SnapTurn >= g.e.cfg.SnapshotEvery {
		return g.snapshot()
	}
	return nil
}

func (g *segment) policy() (Policy, error) {
	if g.pol != nil {
		return g.pol, nil
	}
	p, err := g.e.cfg.Policies(g.ctx, g.st)
	if err != nil {
		return nil, fmt.Errorf("no policy for task %s (agent %s): %v", g.st.Task, g.st.Agent, err)
	}
	g.pol = p
	return p, nil
}

func (g *segment) guards() (*guards.Stack, error) {
	if g.stack != nil {
		return g.stack, nil
	}
	s, err := g.e.stack(g.st.Agent)
	if err != nil {
		return nil, err
	}
	g.stack = s
	return s, nil
}

// guardContext is the read-only view the guards decide on: the folded
// governance of this very moment, kept current record by record. The fold
// only appends to the history lists, so they are shared, not copied: the
// cost does not grow with the task's history.
func (g *segment) guardContext() *guards.Context {
	return guards.NewContextAppendOnly(guards.ContextParams{
		TaskID:       g.st.Task,
		Governance:   g.st.Governance,
		SubtaskDepth: g.st.Depth,
		Metadata:     g.metadata(),
		SubmittedBy:  g.st.SubmittedBy,
	})
}

func (g *segment) metadata() map[string]string {
	if g.meta == nil {
		g.meta = map[string]string{"agent": g.st.Agent}
	}
	return g.meta
}

// check asks the agent's guards about a. A stack that cannot be built denies
// (fail-closed), naming why. If the segment was stopped while the guards
// were asked (the stack then denies every guard it could not ask), the error
// is the stop's cause: a verdict made up because the worker is going away
// must not be recorded as the guards' own.
func (g *segment) check(a noeta.ProposedAction) (guards.Decision, error) {
	s, err := g.guards()
	if err != nil {
		return guards.Decision{VerdictResult: noeta.Deny(err.Error()), Guard: guards.StackName}, nil
	}
	d := s.Check(g.ctx, a, g.guardContext())
	if cause := context.Cause(g.ctx); cause != nil {
		return d, cause
	}
	return d, nil
}

func (g *segment) toolCalls(calls []noeta.ToolCall) error {
	st := g.st
	for i, call := range calls {
		switch st.Turn.Calls[call.CallID] {
		case CallFinished, CallDenied, CallRefused:
			continue
		case CallStarted:
			if err := g.emit(noeta.ToolCallFinished{CallID: call.CallID, Tool: call.Tool, OK: false, Output: json.RawMessage("null"), Error: msgInterrupted}, eventlog.OriginTool, ActorTool); err != nil {
				return err
			}
			continue
		case CallAwaiting:
			handle, ok := st.pendingHandle(noeta.ApprovalToolCall, call.CallID)
			if !ok {
				return fmt.Errorf("engine: task %s: call %s awaits approval but its request is not in the state", st.Task, call.CallID)
			}
			return g.awaitToolApproval(handle, calls[i+1:])
		case CallApproved:
			pa, ok := st.approvedRequest(noeta.ApprovalToolCall, call.CallID)
			if !ok {
				return fmt.Errorf("engine: task %s: call %s is approved but its request is not in the state", st.Task, call.CallID)
			}
			approved, err := g.recordedCall(pa)
			if err != nil {
				return err
			}
			if err := g.runTool(approved); err != nil {
				return err
			}
			continue
		}
		if err := context.Cause(g.ctx); err != nil {
			return err
		}
		if why := g.invalidCall(call); why != "" {
			// Cannot run whatever the guards would say: recorded as a
			// refusal the model reads, and the turn goes on.
			if err := g.engineEmit(noeta.ToolCallDenied{CallID: call.CallID, Tool: deniedToolName(call.Tool), Guard: GuardSchema, Reason: why}); err != nil {
				return err
			}
			continue
		}
		d, err := g.check(noeta.ProposedToolCall{Call: call})
		if err != nil {
			return err
		}
		if err := g.shadowed(noeta.GuardShadowed{Action: noeta.ApprovalToolCall, CallID: call.CallID, Tool: call.Tool}, d); err != nil {
			return err
		}
		switch d.Verdict {
		case noeta.VerdictAllow:
			if err := g.runTool(call); err != nil {
				return err
			}
		case noeta.VerdictRequireApproval:
			handle := toolApprovalHandle(call.CallID)
			if err := g.requestApproval(noeta.ApprovalRequested{
				Handle: handle, Action: noeta.ApprovalToolCall, CallID: call.CallID, Tool: call.Tool,
			}, call.Args, d); err != nil {
				return err
			}
			return g.awaitToolApproval(handle, calls[i+1:])
		default:
			if err := g.engineEmit(noeta.ToolCallDenied{CallID: call.CallID, Tool: call.Tool, Guard: d.Guard, Reason: d.Reason}); err != nil {
				return err
			}
		}
	}
	return g.endTurn()
}

// awaitToolApproval gives the calls after the one awaiting approval a
// skipped result (they never run) and suspends on the approval's handle.
func (g *segment) awaitToolApproval(handle string, later []noeta.ToolCall) error {
	for _, c := range later {
		if g.st.Turn.Calls[c.CallID] != "" {
			continue
		}
		if err := g.emit(noeta.ToolCallFinished{CallID: c.CallID, Tool: c.Tool, OK: false, Output: json.RawMessage("null"), Error: msgSkipped}, eventlog.OriginTool, ActorTool); err != nil {
			return err
		}
	}
	return g.suspend(ReasonWaitingApproval, g.approvalWake(handle))
}

// recordedCall rebuilds the call an approval request recorded.
func (g *segment) recordedCall(pa noeta.PendingApproval) (noeta.ToolCall, error) {
	args, err := g.argsOf(pa)
	if err != nil {
		return noeta.ToolCall{}, err
	}
	return noeta.ToolCall{CallID: pa.CallID, Tool: pa.Tool, Args: args}, nil
}

func (g *segment) argsOf(pa noeta.PendingApproval) (json.RawMessage, error) {
	if pa.ArgsRef == nil {
		return pa.Args, nil
	}
	return g.e.cfg.Content.Get(g.ctx, *pa.ArgsRef)
}

// runTool runs an allowed (or approved) call: ToolCallStarted, the run,
// ToolCallFinished. The call runs only once its ToolCallStarted is in the
// log, and that append is the check that the lease is still live: Emit asks
// the lease registry and compare-and-sets the log's tail, so a worker that
// lost the task starts no new side effect.
func (g *segment) runTool(call noeta.ToolCall) error {
	args, ref, err := eventlog.Spill(g.ctx, g.e.cfg.Content, call.Args, noeta.ArgsInlineLimit)
	if err != nil {
		return err
	}
	if err := g.engineEmit(noeta.ToolCallStarted{CallID: call.CallID, Tool: call.Tool, Args: args, ArgsRef: ref, Turn: g.st.Turn.N}); err != nil {
		return err
	}
	// An approved call runs before the segment has asked its policy
	// anything: resolve it (the next turn asks it anyway). One that cannot
	// be resolved is the next turn's error, not this call's.
	pol, _ := g.policy()
	ctx := g.ctx
	if pr, ok := pol.(ProgressReader); ok {
		if p := pr.ToolProgress(call.CallID); p != nil {
			ctx = tools.WithProgress(ctx, p)
		}
	}
	start := time.Now()
	res, err := g.e.cfg.Tools.RunAs(ctx, call, g.e.cfg.Workspace, tools.Caller{Task: g.st.Task, Agent: g.st.Agent})
	took := time.Since(start)
	if err != nil {
		if cause := context.Cause(g.ctx); cause != nil {
			// Stopped (lease lost, cancelled, shutting down): the next
			// holder records the call as interrupted.
			return cause
		}
		res = tools.Result{Output: json.RawMessage("null"), OK: false, Error: err.Error()}
	}
	out, oref, err := eventlog.Spill(g.ctx, g.e.cfg.Content, res.Output, noeta.ArgsInlineLimit)
	if err != nil {
		return err
	}
	rec := noeta.ToolCallFinished{
		CallID: call.CallID, Tool: call.Tool, OK: res.OK, Output: out, OutputRef: oref,
		Error: truncate(res.Error, maxErrorLen), DurationMS: took.Milliseconds(), Egress: res.Egress,
	}
	if oref != nil && res.OK {
		if rec.Preview, err = preview(rec, res); err != nil {
			return err
		}
	}
	if err := g.emitLater(rec, eventlog.OriginTool, ActorTool); err != nil {
		return err
	}
	if r, ok := pol.(ResultReader); ok {
		r.ToolFinished(&rec)
	}
	return nil
}

// preview is what a model reads of a result whose output is recorded by
// ref (docs/adr/0102): the tool's own rendering for a model, or the
// output's canonical JSON as the composer shows an inline one, cut to
// noeta.PreviewLimit and to the room rec leaves under the payload cap (a
// long error or a sandbox's egress take some).
func preview(rec noeta.ToolCallFinished, res tools.Result) (string, error) {
	b, err := noeta.Canonical(rec)
	if err != nil {
		return "", err
	}
	limit := min(noeta.PreviewLimit, noeta.PayloadMaxBytes-len(b)-len(`,"preview":`))
	if limit < minPreview {
		return "", nil
	}
	text := res.Preview
	if text == "" {
		canon, err := noeta.CanonicalizeJSON(res.Output)
		if err != nil {
			return "", err
		}
		text = jsonText(canon)
	}
	// Cut first: the output may be a mebibyte. A byte that is not UTF-8
	// is counted as the \ufffd it is written as, and made one, so the
	// record handed to a ResultReader reads as the log will.
	return strings.ToValidUTF8(noeta.CanonicalPrefix(text, limit), "\uFFFD"), nil
}

// minPreview is the least room worth a preview: less says nothing.
const minPreview = 64

// spawnArgs is what a spawn approval records: the child it would start.
type spawnArgs struct {
	Agent  string          `json:"agent"`
	Goal   string          `json:"goal"`
	Script json.RawMessage `json:"script,omitempty"`
}

// finishArgs is what a finish approval records.
type finishArgs struct {
	Answer json.RawMessage `json:"answer"`
}

// shadowed records what the shadow rules would have decided about an
// action (d.Shadows), one GuardShadowed each, given the action's fields in
// base. They are folded in now and written with the action's own verdict
// record, which comes next (emitLater): the records that say what did
// happen and what a shadow rule would have done land together. An action
// whose shadow records are in the log already (a resumed turn judging it
// again) gets none.
func (g *segment) shadowed(base noeta.GuardShadowed, d guards.Decision) error {
	if len(d.Shadows) == 0 || g.st.Turn.Shadowed[shadowKey(base.Action, base.CallID)] {
		return nil
	}
	for _, sv := range d.Shadows {
		rec := base
		rec.Guard, rec.Rule, rec.Verdict, rec.Failed = sv.Guard, sv.Rule, sv.Verdict, sv.Failed
		rec.Reason = truncate(sv.Reason, maxShadowReason)
		rec.Decided, rec.DecidedBy = d.Verdict, d.Guard
		if err := g.emitLater(rec, eventlog.OriginEngine, g.e.cfg.Actor); err != nil {
			return err
		}
	}
	return nil
}

// requestApproval records req, the action's args (spilled when large) and
// the guard's verdict: the durable anchor written before the task suspends.
func (g *segment) requestApproval(req noeta.ApprovalRequested, args json.RawMessage, d guards.Decision) error {
	var err error
	if req.Args, req.ArgsRef, err = eventlog.Spill(g.ctx, g.e.cfg.Content, args, noeta.ArgsInlineLimit); err != nil {
		return err
	}
	req.Guard, req.Reason = d.Guard, d.Reason
	g.requirement(&req, args)
	return g.engineEmit(req)
}

// approvedArgs decodes the args of the turn's approved spawn or finish
// request into v: approve runs exactly what was recorded.
func (g *segment) approvedArgs(action noeta.ApprovalAction, v any) error {
	pa, ok := g.st.approvedRequest(action, "")
	if !ok {
		return fmt.Errorf("engine: task %s: the %s of turn %d is approved but its request is not in the state", g.st.Task, action, g.st.Turn.N)
	}
	raw, err := g.argsOf(pa)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("engine: task %s: the %s request of turn %d: %w", g.st.Task, action, g.st.Turn.N, err)
	}
	return nil
}

// awaitTurnApproval suspends again on the open spawn or finish request of
// the turn.
func (g *segment) awaitTurnApproval(action noeta.ApprovalAction) error {
	handle, ok := g.st.pendingHandle(action, "")
	if !ok {
		return fmt.Errorf("engine: task %s: the %s of turn %d awaits approval but its request is not in the state", g.st.Task, action, g.st.Turn.N)
	}
	return g.suspend(ReasonWaitingApproval, g.approvalWake(handle))
}

func (g *segment) spawn(specs []noeta.SpawnSpec) error {
	st := g.st
	n := st.Turn.N
	if len(specs) == 1 {
		switch st.Turn.Approval {
		case CallAwaiting:
			return g.awaitTurnApproval(noeta.ApprovalSpawnSubtask)
		case CallRefused:
			return g.endTurn()
		case CallApproved:
			var sa spawnArgs
			if err := g.approvedArgs(noeta.ApprovalSpawnSubtask, &sa); err != nil {
				return err
			}
			return g.startChildren([]noeta.SpawnSpec{{Agent: sa.Agent, Goal: sa.Goal, Script: sa.Script}})
		}
	}
	if len(st.Turn.Spawned) > 0 {
		// Resuming a spawn an earlier segment started: finish it.
		return g.startChildren(specs)
	}
	if len(specs) == 1 {
		sp := specs[0]
		d, err := g.check(noeta.ProposedSpawnSubtask{Spawn: noeta.SpawnSubtask{Agent: sp.Agent, Goal: sp.Goal}})
		if err != nil {
			return err
		}
		if err := g.shadowed(noeta.GuardShadowed{Action: noeta.ApprovalSpawnSubtask, Agent: sp.Agent}, d); err != nil {
			return err
		}
		switch d.Verdict {
		case noeta.VerdictAllow:
			return g.startChildren(specs)
		case noeta.VerdictRequireApproval:
			raw, err := json.Marshal(spawnArgs{Agent: sp.Agent, Goal: sp.Goal, Script: sp.Script})
			if err != nil {
				return err
			}
			handle := spawnApprovalHandle(n)
			if err := g.requestApproval(noeta.ApprovalRequested{
				Handle: handle, Action: noeta.ApprovalSpawnSubtask, Agent: sp.Agent,
			}, raw, d); err != nil {
				return err
			}
			return g.suspend(ReasonWaitingApproval, g.approvalWake(handle))
		default:
			return g.denySpawn(sp.Agent, "", d)
		}
	}
	ids := childIDs(st.Task, n, len(specs))
	group := noeta.DeriveGroupID(ids)
	if len(specs) > MaxFanOut {
		return g.denySpawn(specs[0].Agent, group, guards.Decision{
			VerdictResult: noeta.Deny(fmt.Sprintf("fanout_batch_size:%d>%d", len(specs), MaxFanOut)), Guard: "engine",
		})
	}
	members := make([]noeta.SpawnSubtask, len(specs))
	for i, sp := range specs {
		members[i] = noeta.SpawnSubtask{Agent: sp.Agent, Goal: sp.Goal, GroupID: group}
	}
	s, err := g.guards()
	if err != nil {
		return g.denySpawn(specs[0].Agent, group, guards.Decision{VerdictResult: noeta.Deny(err.Error()), Guard: guards.StackName})
	}
	d := s.CheckFanOut(g.ctx, members, g.guardContext())
	if cause := context.Cause(g.ctx); cause != nil {
		return cause
	}
	if !d.IsAllow() {
		m := max(d.Member, 0)
		return g.denySpawn(specs[m].Agent, group, d.Decision)
	}
	return g.startChildren(specs)
}

func (g *segment) denySpawn(agent, group string, d guards.Decision) error {
	if err := g.engineEmit(noeta.SubtaskDenied{Agent: agent, Guard: d.Guard, Reason: d.Reason, GroupID: group}); err != nil {
		return err
	}
	return g.terminate(noeta.TaskFailed{Error: "subtask denied: " + d.Reason, Guard: d.Guard})
}

// startChildren records every child of the spawn first, then creates them:
// once any child exists, its whole group is in the parent's log, so the
// child-lifecycle observer always sees the full member set. Child ids are
// derived from the parent and the turn, so a resumed spawn creates the same
// children (a repeated create is a no-op).
func (g *segment) startChildren(specs []noeta.SpawnSpec) error {
	st := g.st
	n := st.Turn.N
	ids := childIDs(st.Task, n, len(specs))
	group := ""
	if len(specs) > 1 {
		group = noeta.DeriveGroupID(ids)
	}
	allots, err := g.allotments(len(specs))
	if err != nil {
		return err
	}
	created := make([]noeta.TaskCreated, len(specs))
	for i, sp := range specs {
		tc := noeta.TaskCreated{
			TaskID: ids[i], Agent: sp.Agent, ParentTaskID: st.Task, RootTaskID: st.Root,
			SubtaskDepth: st.Depth + 1, GroupID: group, SubmittedBy: st.SubmittedBy,
			Budget: allots[i],
		}
		if i < len(st.Turn.Spawned) {
			// Already recorded: the child gets what the record reserved
			// (none, if it reserved none).
			tc.Budget = nil
			if r, ok := st.Governance.Reserved[ids[i]]; ok {
				tc.Budget = r.Clone()
			}
		}
		if err := g.e.fillCreated(g.ctx, &tc, sp.Goal, sp.Script); err != nil {
			return err
		}
		created[i] = tc
		if i < len(st.Turn.Spawned) {
			continue
		}
		if err := g.engineEmit(noeta.SubtaskSpawned{SubtaskID: tc.TaskID, Agent: tc.Agent, Goal: tc.Goal, GoalRef: tc.GoalRef, GroupID: group, Budget: tc.Budget.Clone()}); err != nil {
			return err
		}
	}
	for _, tc := range created {
		if err := g.e.create(g.ctx, tc, eventlog.OriginEngine, eventlog.EnqueueOptions{}, true); err != nil {
			return err
		}
	}
	if group == "" {
		return g.suspend("waiting_subtask", noeta.SubtaskCompletedWake(ids[0]))
	}
	return g.suspend("waiting_subtask_group", noeta.GroupCompletedWake(group, ids))
}

// allotments carves n children's allotments out of what the task's tree has
// left (docs/adr/0054): the remaining cost split evenly, the remaining tool
// calls split with the odd ones to the first children. A child may spend
// its share and no more, so siblings running at once cannot together spend
// what one of them was not given. The remaining is taken as it was before
// this turn's spawn, so a spawn resumed after some of its children were
// recorded carves the same shares. nil entries: no cap to pass on.
func (g *segment) allotments(n int) ([]*noeta.BudgetAllotment, error) {
	s, err := g.guards()
	if err != nil {
		return nil, err
	}
	gov := g.st.Governance
	if len(g.st.Turn.Spawned) > 0 && len(gov.Reserved) > 0 {
		gov.Reserved = maps.Clone(gov.Reserved)
		for _, id := range g.st.Turn.Spawned {
			delete(gov.Reserved, id)
		}
	}
	rem := s.Remaining(guards.NewContextAppendOnly(guards.ContextParams{TaskID: g.st.Task, Governance: gov, SubtaskDepth: g.st.Depth}))
	out := make([]*noeta.BudgetAllotment, n)
	if rem.CostUSD == nil && rem.ToolCalls == nil {
		return out, nil
	}
	for i := range out {
		a := &noeta.BudgetAllotment{}
		if rem.CostUSD != nil {
			v := *rem.CostUSD / float64(n)
			a.CostUSD = &v
		}
		if rem.ToolCalls != nil {
			v := *rem.ToolCalls / n
			if i < *rem.ToolCalls%n {
				v++
			}
			a.ToolCalls = &v
		}
		out[i] = a
	}
	return out, nil
}

// childIDs derives the ids of the children of a turn's spawn: ULID-shaped,
// a hash of the parent, the turn and the index.
func childIDs(parent string, turn, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		sum := sha256.Sum256([]byte(parent + "/" + strconv.Itoa(turn) + "/" + strconv.Itoa(i)))
		var u ulid.ULID
		copy(u[:], sum[:16])
		u[0] &= 0x7f // keep the first character a digit, as in a ULID of today
		ids[i] = u.String()
	}
	return ids
}

func (g *segment) finish(answer json.RawMessage) error {
	st := g.st
	n := st.Turn.N
	switch st.Turn.Approval {
	case CallAwaiting:
		return g.awaitTurnApproval(noeta.ApprovalFinish)
	case CallRefused:
		return g.endTurn()
	case CallApproved:
		var fa finishArgs
		if err := g.approvedArgs(noeta.ApprovalFinish, &fa); err != nil {
			return err
		}
		return g.complete(fa.Answer)
	}
	d, err := g.check(noeta.ProposedFinish{Answer: answer})
	if err != nil {
		return err
	}
	if err := g.shadowed(noeta.GuardShadowed{Action: noeta.ApprovalFinish}, d); err != nil {
		return err
	}
	switch d.Verdict {
	case noeta.VerdictAllow:
		return g.complete(answer)
	case noeta.VerdictRequireApproval:
		raw, err := json.Marshal(finishArgs{answer})
		if err != nil {
			return err
		}
		handle := finishApprovalHandle(n)
		if err := g.requestApproval(noeta.ApprovalRequested{Handle: handle, Action: noeta.ApprovalFinish}, raw, d); err != nil {
			return err
		}
		return g.suspend(ReasonWaitingApproval, g.approvalWake(handle))
	default:
		if err := g.engineEmit(noeta.FinishDenied{Guard: d.Guard, Reason: d.Reason}); err != nil {
			return err
		}
		return g.terminate(noeta.TaskFailed{Error: "finish denied: " + d.Reason, Guard: d.Guard})
	}
}

func (g *segment) complete(answer json.RawMessage) error {
	a, ref, err := eventlog.Spill(g.ctx, g.e.cfg.Content, answer, noeta.AnswerInlineLimit)
	if err != nil {
		return err
	}
	return g.terminate(noeta.TaskCompleted{Answer: a, AnswerRef: ref})
}

// snapshot stores the folded state and records where it is.
func (g *segment) snapshot() error {
	body, err := g.st.Canonical()
	if err != nil {
		return err
	}
	ref, err := g.e.cfg.Content.Put(g.ctx, body, eventlog.MediaTypeJSON)
	if err != nil {
		return err
	}
	if err := g.engineEmit(noeta.TaskSnapshot{StateRef: ref, UptoSeq: g.st.LastSeq}); err != nil {
		return err
	}
	g.snapSeq = g.st.LastSeq
	return nil
}

// recentSnapshot is how close a snapshot the segment wrote must be for a
// terminal record to go without one of its own: folding the few records
// after it costs less than the write.
const recentSnapshot = 8

// suspend writes the snapshot and then TaskSuspended: resuming after a
// suspend costs the records since it, not the whole log.
func (g *segment) suspend(reason string, w noeta.Wake) error {
	if err := g.snapshot(); err != nil {
		return err
	}
	return g.engineEmit(noeta.TaskSuspended{Reason: reason, WakeOn: w})
}

// terminate writes the snapshot and then the terminal record; the
// snapshot only when the segment wrote none in the last recentSnapshot
// records (a reader of the ended task folds those few from it).
func (g *segment) terminate(p noeta.Payload) error {
	if g.snapSeq == 0 || g.st.LastSeq-g.snapSeq >= recentSnapshot {
		if err := g.snapshot(); err != nil {
			return err
		}
	}
	return g.engineEmit(p)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}

func wakeString(w *noeta.Wake) string {
	if w == nil {
		return "nothing"
	}
	b, err := noeta.Canonical(w)
	if err != nil {
		return string(w.Kind)
	}
	return string(b)
}
