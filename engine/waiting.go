package engine

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// The waiting index (Config.Waiting) is a summary of the log kept for the
// inbox: an entry is put once its request is committed and before the
// segment releases the task, deleted once the request is resolved or the
// task ends, and every segment starts by reconciling the task's entries
// with its folded state, so a crash between a record and its index write
// heals when the task next runs. The log stays the truth: an index write
// that fails is logged and left to the next reconcile, never a reason to
// fail the task.
//
// Putting every open entry is cheap (one write per open request) and done
// at every start. Finding stale entries needs a listing, which is done only
// when one can exist: the task's last lease ended without a release (a
// worker died between a record and its index write: the dispatcher counts
// the reclaim), or an index write of the task failed in this process.

// Cuts of an index entry.
const (
	waitingGoalRunes = 300
	waitingArgsBytes = 2 << 10
)

// taskWaitingLister is an index that lists one task's entries without
// reading the others'; reconcile uses it when the index has it.
type taskWaitingLister interface {
	ListTaskWaiting(ctx context.Context, task string) ([]eventlog.Waiting, error)
}

// openEntries returns the index entries of every request of st open now:
// its unresolved approvals, and the question it is suspended on.
func (e *Engine) openEntries(ctx context.Context, st *State) map[string]eventlog.Waiting {
	out := map[string]eventlog.Waiting{}
	if st.Status == noeta.StatusTerminal {
		return out
	}
	for h, pa := range st.Governance.PendingApprovals {
		out[h] = e.approvalEntry(ctx, st, h, pa)
	}
	if q, ok := strings.CutPrefix(st.Reason, "waiting_human: "); ok && st.Status == noeta.StatusSuspended &&
		st.WakeOn != nil && st.WakeOn.Kind == noeta.WakeHumanResponse {
		w := baseEntry(st)
		w.Handle, w.Kind, w.Seq, w.Question, w.RequestedAt = st.WakeOn.Handle, eventlog.WaitingQuestion, st.SuspendedSeq, q, st.SuspendedAt
		out[w.Handle] = w
	}
	return out
}

func baseEntry(st *State) eventlog.Waiting {
	return eventlog.Waiting{Task: st.Task, Agent: st.Agent, Goal: cutRunes(st.Goal, waitingGoalRunes), SubmittedBy: st.SubmittedBy}
}

func (e *Engine) approvalEntry(ctx context.Context, st *State, handle string, pa noeta.PendingApproval) eventlog.Waiting {
	w := baseEntry(st)
	w.Handle, w.Kind, w.Seq, w.RequestedAt, w.ExpiresAt = handle, eventlog.WaitingApproval, pa.Seq, pa.RequestedAt, pa.ExpiresAt
	w.Action, w.Tool, w.Guard, w.Reason = string(pa.Action), pa.Tool, pa.Guard, pa.Reason
	if pa.Action == noeta.ApprovalSpawnSubtask {
		w.Child = pa.Agent
	}
	args := pa.Args
	if pa.ArgsRef != nil {
		if b, err := e.cfg.Content.Get(ctx, *pa.ArgsRef); err == nil {
			args = b
		} else {
			args, w.ArgsCut = nil, true
		}
	}
	if len(args) > waitingArgsBytes {
		// Cut JSON is no JSON: the cut is kept as a string, itself at
		// most waitingArgsBytes once encoded (escapes grow it).
		var cut []byte
		for n := waitingArgsBytes; ; {
			cut, _ = json.Marshal(cutBytes(string(args), n))
			if len(cut) <= waitingArgsBytes || n == 0 {
				break
			}
			n = max(n-(len(cut)-waitingArgsBytes), 0)
		}
		args, w.ArgsCut = cut, true
	}
	w.Args = args
	w.Rules, w.Quorum, w.Approvals = pa.Rules, max(pa.Quorum, 1), pa.Approvers
	w.MayAnswer = e.cfg.Approvals.MayAnswer(pa.Rules)
	return w
}

// index puts the entry of handle if it is open in st.
func (e *Engine) index(ctx context.Context, st *State, handle string) {
	if e.cfg.Waiting == nil {
		return
	}
	if w, ok := e.openEntries(ctx, st)[handle]; ok {
		e.put(ctx, w)
	}
}

func (e *Engine) put(ctx context.Context, w eventlog.Waiting) {
	if err := e.cfg.Waiting.PutWaiting(ctx, w); err != nil {
		e.indexFailed(w.Task)
		e.log.Warn("waiting index: put failed; the task's next segment puts it again", "task", w.Task, "handle", w.Handle, "err", err)
	}
}

// indexFailed notes that an index write of task failed: its next segment
// lists the index to reconcile.
func (e *Engine) indexFailed(task string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.indexDirty == nil {
		e.indexDirty = map[string]bool{}
	}
	e.indexDirty[task] = true
}

// fullReconcile reports whether the index may hold stale entries of task.
func (e *Engine) fullReconcile(ctx context.Context, task string) bool {
	e.mu.Lock()
	dirty := e.indexDirty[task]
	e.mu.Unlock()
	if dirty {
		return true
	}
	ds, err := e.cfg.Dispatcher.Inspect(ctx, task)
	return err != nil || ds.ReclaimCount > 0
}

// unindex deletes the entry of handle.
func (e *Engine) unindex(ctx context.Context, task, handle string) {
	if e.cfg.Waiting == nil {
		return
	}
	if err := e.cfg.Waiting.DeleteWaiting(ctx, task, handle); err != nil {
		e.indexFailed(task)
		e.log.Warn("waiting index: delete failed; the task's next segment deletes it again", "task", task, "handle", handle, "err", err)
	}
}

// reconcile makes the index hold the open requests of st: it puts every
// one and, when stale entries can exist (fullReconcile), deletes every
// other entry of the task. It returns the handles it put.
func (e *Engine) reconcile(ctx context.Context, st *State) map[string]bool {
	if e.cfg.Waiting == nil {
		return nil
	}
	open := e.openEntries(ctx, st)
	put := make(map[string]bool, len(open))
	for h, w := range open {
		e.put(ctx, w)
		put[h] = true
	}
	if !e.fullReconcile(ctx, st.Task) {
		return put
	}
	e.mu.Lock()
	delete(e.indexDirty, st.Task)
	e.mu.Unlock()
	var have []eventlog.Waiting
	var err error
	if l, ok := e.cfg.Waiting.(taskWaitingLister); ok {
		have, err = l.ListTaskWaiting(ctx, st.Task)
	} else {
		have, err = e.cfg.Waiting.ListWaiting(ctx)
	}
	if err != nil {
		e.indexFailed(st.Task)
		e.log.Warn("waiting index: list failed; stale entries of the task stay until its next segment", "task", st.Task, "err", err)
		return put
	}
	for _, w := range have {
		if w.Task == st.Task && !put[w.Handle] {
			e.unindex(ctx, st.Task, w.Handle)
		}
	}
	return put
}

// settleIndex, at the end of a segment (before its release), puts every
// request open now and deletes those that were open in the segment and are
// no longer.
func (e *Engine) settleIndex(ctx context.Context, st *State, seen map[string]bool) {
	if e.cfg.Waiting == nil {
		return
	}
	open := e.openEntries(ctx, st)
	for _, w := range open {
		e.put(ctx, w)
	}
	for h := range seen {
		if _, ok := open[h]; !ok {
			e.unindex(ctx, st.Task, h)
		}
	}
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// cutBytes cuts s to at most n bytes on a rune boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
