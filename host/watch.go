package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
)

// How often a watch checks whether the task tree has come to rest.
const settleEvery = 50 * time.Millisecond

// RestStatus is how a task tree came to rest.
type RestStatus string

const (
	RestCompleted RestStatus = "completed"
	RestFailed    RestStatus = "failed"
	RestCancelled RestStatus = "cancelled"
	// RestWaiting: every task is idle and one of them waits for a human.
	RestWaiting RestStatus = "waiting"
	// RestStuck: every task is idle and nothing will wake them.
	RestStuck RestStatus = "stuck"
	// RestInterrupted: the watch's context ended first.
	RestInterrupted RestStatus = "interrupted"
)

// Rest is how a task tree came to rest.
type Rest struct {
	Status RestStatus
	// Detail is the answer (JSON, or a note of where the content store
	// holds it), the error or the reason.
	Detail string
	// Answer and AnswerRef are a completed root's answer.
	Answer    json.RawMessage
	AnswerRef *noeta.ContentRef
	// Guard is the guard that failed the task, if one did.
	Guard string
	// Waiting are the tasks that wait for a human (RestWaiting).
	Waiting []Waiting
}

// Waiting is a task that waits for a human.
type Waiting struct {
	Task, Handle, Reason string
	// Approval is the request, when the task waits for an approval.
	Approval *noeta.PendingApproval
}

// Answer is a human's answer to an approval request.
type Answer struct {
	Decision noeta.ApprovalDecision
	// Approver says who answered; Reason why.
	Approver, Reason string
	// Auth says how Approver was authenticated (noeta.AuthToken,
	// noeta.AuthProxy from an HTTP layer that checked it; noeta.AuthLocal
	// on the embedded default). Empty: the host decides (local on the
	// embedded default; on a remote NATS the answer goes through the
	// approver's own approval subject, so the broker vouches for it).
	Auth string
}

// ApprovalRequest is an approval a watched task waits on.
type ApprovalRequest struct {
	Task, Agent, Handle string
	Approval            noeta.PendingApproval
}

// WatchOptions say what a watch does besides waiting.
type WatchOptions struct {
	// FromNow delivers only what is committed after the watch starts (the
	// tree as it is is taken as seen); otherwise everything from the start.
	FromNow bool
	// OnRecord is called once per record of the tree (log and inbox), in
	// order per task, with no gaps, on the goroutine that called Wait.
	OnRecord func(eventlog.Envelope)
	// OnApproval answers an approval request once its task has suspended
	// on it; ok false leaves it open. Its ctx ends, with the cause
	// ErrRequestClosed, as soon as the request is no longer open (answered
	// by someone else, expired, the task gone on): a prompt stops asking
	// then, and whatever it returns is not sent.
	OnApproval func(ctx context.Context, req ApprovalRequest) (a Answer, ok bool)
	// OnNote is told what the watch notices on the way (a task that waits
	// for an event nothing here sends; an answer that was not applied).
	OnNote func(msg string)
}

// Watch follows one task tree — the root and every task whose correlation
// id is the root — through the records committed to the log, until it
// comes to rest.
type Watch struct {
	h    *Host
	root string
	opts WatchOptions

	mu      sync.Mutex
	queue   []eventlog.Envelope
	members map[string]bool
	signal  chan struct{}
	untap   func()

	// Owned by the goroutine that runs Wait.
	tasks         map[string]*taskView
	order         []string
	handled       map[string]bool
	recovered     bool
	childNoted    bool
	externalNoted map[string]bool
}

// taskView is what a watch knows of one task of the tree.
type taskView struct {
	id    string
	depth int
	agent string
	// seen is the last log seq delivered.
	seen  uint64
	inbox map[string]bool // inbox keys delivered
	end   *eventlog.Envelope
}

// Watch starts watching the tree of root. Call Wait to follow it to rest,
// then Stop.
func (h *Host) Watch(ctx context.Context, root string, opts WatchOptions) (*Watch, error) {
	if err := taskCheck(root); err != nil {
		return nil, err
	}
	if h.log == nil {
		return nil, ErrReadOnly
	}
	w := &Watch{
		h: h, root: root, opts: opts,
		members:       map[string]bool{root: true},
		signal:        make(chan struct{}, 1),
		tasks:         map[string]*taskView{},
		handled:       map[string]bool{},
		externalNoted: map[string]bool{},
	}
	// The root is watched from the start: a tree that has run (or runs in
	// another process) is read from its logs once it is idle.
	w.view(root)
	if opts.FromNow {
		if err := w.seed(ctx); err != nil {
			return nil, err
		}
	}
	w.untap = h.Tap(w.handle)
	return w, nil
}

// Stop stops the watch's subscription.
func (w *Watch) Stop() { w.untap() }

// Wait follows the tree of id until it comes to rest (see [Host.Watch]).
func (h *Host) Wait(ctx context.Context, id string) (Rest, error) {
	w, err := h.Watch(ctx, id, WatchOptions{})
	if err != nil {
		return Rest{}, err
	}
	defer w.Stop()
	return w.Wait(ctx)
}

// Stuck tasks wait on nothing that will come.

func (w *Watch) note(format string, args ...any) {
	if w.opts.OnNote != nil {
		w.opts.OnNote(fmt.Sprintf(format, args...))
	}
}

// handle queues the records of the tree and returns at once (it runs on
// the writer's goroutine). A task joins the tree by its TaskCreated, which
// carries the root as correlation id and comes before every other record.
func (w *Watch) handle(_ context.Context, env eventlog.Envelope) error {
	w.mu.Lock()
	in := w.members[env.Task]
	if !in && env.Type == noeta.TypeTaskCreated && env.CorrelationID == w.root {
		w.members[env.Task], in = true, true
	}
	if in {
		w.queue = append(w.queue, env)
	}
	w.mu.Unlock()
	if in {
		select {
		case w.signal <- struct{}{}:
		default:
		}
	}
	return nil
}

// Wait delivers the tree's records until it comes to rest: the root task
// has ended (and no task of the tree is running or ready), or every task is
// idle and one of them waits for a human, or nothing can move any more. It
// returns early, with RestInterrupted, when ctx ends.
func (w *Watch) Wait(ctx context.Context) (Rest, error) {
	tick := time.NewTicker(settleEvery)
	defer tick.Stop()
	failures := 0
	ended := w.h.segmentEnd()
	for {
		select {
		case <-ctx.Done():
			w.drain(context.WithoutCancel(ctx))
			return Rest{Status: RestInterrupted, Detail: context.Cause(ctx).Error()}, nil
		case <-w.signal:
			// A record that may put the tree to rest (an end, a suspend)
			// is looked at now, not at the next tick.
			if _, rest := w.drainRest(ctx); !rest {
				continue
			}
		case <-ended:
			// A worker of this host left a segment: the tree it held may
			// rest now (settled waits for the worker to return).
		case <-tick.C:
		}
		// Taken before the look: a segment that ends after it wakes the
		// next round.
		ended = w.h.segmentEnd()
		w.drain(ctx)
		out, done, err := w.settled(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// A few failures in a row mean the server is gone.
			if failures++; failures >= 20 {
				return Rest{}, err
			}
		case done:
			return out, nil
		default:
			failures = 0
		}
	}
}

// drain processes every queued record and returns how many there were.
func (w *Watch) drain(ctx context.Context) int {
	n, _ := w.drainRest(ctx)
	return n
}

// drainRest is drain, also saying whether a record of the batch may have
// put the tree to rest: a terminal record or a suspend.
func (w *Watch) drainRest(ctx context.Context) (n int, rest bool) {
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			return n, rest
		}
		n += len(batch)
		for _, env := range batch {
			switch env.Type {
			case noeta.TypeTaskCompleted, noeta.TypeTaskFailed, noeta.TypeTaskCancelled, noeta.TypeTaskSuspended:
				rest = true
			}
			w.take(ctx, env)
		}
	}
}

func (w *Watch) view(task string) *taskView {
	tv, ok := w.tasks[task]
	if !ok {
		tv = &taskView{id: task, inbox: map[string]bool{}}
		w.tasks[task] = tv
		w.order = append(w.order, task)
	}
	return tv
}

// Depth is a task's subtask depth (0 for the root), as far as the watch
// knows it. Call it from the watch's callbacks, which run on the goroutine
// of Wait.
func (w *Watch) Depth(task string) int {
	if tv, ok := w.tasks[task]; ok {
		return tv.depth
	}
	return 0
}

// take delivers env unless it was delivered already; a log record that
// skips ahead of the last one delivered first brings the records in
// between from the log, so every task's records are dense.
func (w *Watch) take(ctx context.Context, env eventlog.Envelope) {
	tv := w.view(env.Task)
	if env.Seq == 0 {
		if tv.inbox[env.Key] {
			return
		}
		tv.inbox[env.Key] = true
		w.record(ctx, tv, env)
		return
	}
	if env.Seq <= tv.seen {
		return
	}
	if env.Seq > tv.seen+1 {
		if missed, err := w.h.log.Read(ctx, env.Task, tv.seen); err == nil {
			for _, m := range missed {
				if m.Seq >= env.Seq {
					break
				}
				if m.Seq == tv.seen+1 {
					w.record(ctx, tv, m)
				}
			}
		}
	}
	w.record(ctx, tv, env)
}

func (w *Watch) record(ctx context.Context, tv *taskView, env eventlog.Envelope) {
	if env.Seq > 0 {
		tv.seen = env.Seq
	}
	w.recovered = false
	p, known, err := env.Decode()
	if err != nil {
		known = false
	}
	if known {
		w.keep(tv, env, p)
	}
	if w.opts.OnRecord != nil {
		w.opts.OnRecord(env)
	}
	if s, ok := p.(*noeta.TaskSuspended); known && ok && s.Reason == engine.ReasonWaitingApproval {
		w.answer(ctx, env.Task, s.WakeOn.Handle)
	}
}

// keep keeps what the watch needs of a record: a task's depth and agent,
// its end, and its subtasks, which join the tree (a subtask another process
// runs is known by its parent's SubtaskSpawned, not by a TaskCreated this
// process committed).
func (w *Watch) keep(tv *taskView, env eventlog.Envelope, p noeta.Payload) {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		tv.depth, tv.agent = p.SubtaskDepth, p.Agent
	case *noeta.SubtaskSpawned:
		w.mu.Lock()
		w.members[p.SubtaskID] = true
		w.mu.Unlock()
		w.view(p.SubtaskID)
	case *noeta.TaskCompleted, *noeta.TaskFailed, *noeta.TaskCancelled:
		if tv.end == nil {
			e := env
			tv.end = &e
		}
	}
}

// seed makes the watch start from the tree as it is now: every task of it,
// found from the root through the SubtaskSpawned records, is known, with
// everything already in its log and inbox taken as delivered.
func (w *Watch) seed(ctx context.Context) error {
	queue := []string{w.root}
	seen := map[string]bool{w.root: true}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		tv := w.view(id)
		w.mu.Lock()
		w.members[id] = true
		w.mu.Unlock()
		envs, err := w.h.log.Read(ctx, id, 0)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		for _, env := range envs {
			tv.seen = env.Seq
			p, known, err := env.Decode()
			if err != nil || !known {
				continue
			}
			w.keep(tv, env, p)
			if sp, ok := p.(*noeta.SubtaskSpawned); ok && !seen[sp.SubtaskID] {
				seen[sp.SubtaskID] = true
				queue = append(queue, sp.SubtaskID)
			}
		}
		inbox, err := w.h.log.Inbox(ctx, id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		for _, env := range inbox {
			tv.inbox[env.Key] = true
		}
	}
	return nil
}

// answer answers the approval request behind handle through OnApproval,
// once the task is suspended on it.
func (w *Watch) answer(ctx context.Context, task, handle string) {
	key := task + "\x00" + handle
	if w.opts.OnApproval == nil || w.handled[key] {
		return
	}
	st, err := w.h.Inspect(ctx, task)
	if err != nil {
		w.note("inspect task %s for approval %s: %v", task, handle, err)
		return
	}
	if st.Status != noeta.StatusSuspended || st.Reason != engine.ReasonWaitingApproval || st.WakeOn == nil || st.WakeOn.Handle != handle {
		return
	}
	w.handled[key] = true
	// OnApproval may wait on a person for as long as they take; meanwhile
	// the request may be answered elsewhere (another terminal's engine
	// approve, the inbox) or expire. A watcher ends the prompt's ctx then,
	// and stops when the prompt returns.
	actx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.whileOpen(actx, cancel, task, handle)
	}()
	a, ok := w.opts.OnApproval(actx, ApprovalRequest{Task: task, Agent: w.view(task).agent, Handle: handle, Approval: st.Governance.PendingApprovals[handle]})
	// Whatever a prompt ended by the request's closing returns is not sent.
	closed := errors.Is(context.Cause(actx), ErrRequestClosed)
	cancel(nil)
	<-watched
	if closed || !ok {
		return
	}
	if err := w.h.Approve(ctx, task, handle, a); err != nil {
		if errors.Is(err, eventlog.ErrAlreadyAnswered) || errors.Is(err, eventlog.ErrNotWaiting) || errors.Is(err, engine.ErrApproverNotAllowed) {
			// Final: another answer came first, the request is gone, or
			// the approvals rules refuse this approver (they would again).
			w.note("the answer to %s of task %s was not applied: %v", handle, task, err)
			return
		}
		w.handled[key] = false
		w.note("answer %s of task %s: %v", handle, task, err)
	}
}

// ErrRequestClosed is the cause of an OnApproval ctx that ended because
// the request is no longer open.
var ErrRequestClosed = errors.New("the request is no longer open (answered elsewhere, expired, or its task moved on); not asking any more")

// openPoll is how often a request being asked is checked to be open still:
// a person's time, not a machine's.
const openPoll = 250 * time.Millisecond

// whileOpen ends ctx with ErrRequestClosed once handle is no longer an
// open request of task, checking every openPoll; it returns when ctx ends.
func (w *Watch) whileOpen(ctx context.Context, cancel context.CancelCauseFunc, task, handle string) {
	t := time.NewTicker(openPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := w.h.Inspect(ctx, task)
		if err != nil {
			continue // a read that failed says nothing; the next may not
		}
		if !requestOpen(st, handle) {
			cancel(ErrRequestClosed)
			return
		}
	}
}

// requestOpen reports whether handle is an approval request of the task in
// st that is still open, as engine.OpenRequest, the one judge of that,
// says: not yet resolved and the task not ended, not "the task is
// suspended on it this instant": a vote counted toward a quorum or a
// refused answer wakes the task for a moment and it suspends on the same
// open request again, which must still be asked.
func requestOpen(st *engine.State, handle string) bool {
	_, approval := st.Governance.PendingApprovals[handle]
	return approval && engine.OpenRequest(st, handle) == nil
}

// settled reports whether the tree has come to rest, and how.
func (w *Watch) settled(ctx context.Context) (Rest, bool, error) {
	states := map[string]eventlog.DispatchState{}
	for _, id := range w.order {
		if w.h.runsNow(id) {
			// A worker of this host has released the task, or is about
			// to, and has not returned yet: the tree rests once it has
			// (a Close right after Wait then cuts nothing).
			return Rest{}, false, nil
		}
	}
	for _, id := range w.order {
		ds, err := w.h.Dispatch(ctx, id)
		if errors.Is(err, eventlog.ErrNotFound) {
			// Created, not yet enqueued.
			return Rest{}, false, nil
		}
		if err != nil {
			return Rest{}, false, err
		}
		if ds.Status == eventlog.DispatchReady || ds.Status == eventlog.DispatchLeased {
			return Rest{}, false, nil
		}
		states[id] = ds
	}
	if len(states) == 0 || w.drain(ctx) > 0 {
		return Rest{}, false, nil
	}
	// Every task is idle, so each log is complete: deliver whatever the
	// subscriber did not, and look again if there was any.
	caught := 0
	for _, id := range w.order {
		envs, err := w.h.log.Read(ctx, id, w.tasks[id].seen)
		if err != nil {
			return Rest{}, false, err
		}
		for _, env := range envs {
			w.take(ctx, env)
		}
		caught += len(envs)
	}
	if caught > 0 {
		return Rest{}, false, nil
	}

	root := w.tasks[w.root]
	if root.end != nil {
		return w.final(ctx, endRest(*root.end))
	}
	if ds := states[w.root]; ds.Status == eventlog.DispatchTerminal {
		return w.final(ctx, Rest{Status: RestFailed, Detail: "the dispatcher ended the task: " + ds.Reason})
	}
	var waits []Waiting
	clock := false
	for _, id := range w.order {
		ds := states[id]
		if ds.Status != eventlog.DispatchSuspended || ds.WakeOn == nil {
			continue
		}
		switch ds.WakeOn.Kind {
		case noeta.WakeHumanResponse:
			wt := Waiting{Task: id, Handle: ds.WakeOn.Handle, Reason: ds.Reason}
			if st, err := w.h.Inspect(ctx, id); err == nil {
				if pa, ok := st.Governance.PendingApprovals[wt.Handle]; ok {
					wt.Approval = &pa
				}
			}
			waits = append(waits, wt)
		case noeta.WakeTimerFired:
			clock = true
		case noeta.WakeExternalEvent:
			if !w.externalNoted[id] {
				w.externalNoted[id] = true
				w.note("task %s waits for an external event of kind %q; nothing in this process sends one (Ctrl-C to stop)", id, ds.WakeOn.EventKind)
			}
		}
	}
	child := w.h.child.Load()
	switch {
	case len(waits) > 0:
		return w.final(ctx, Rest{Status: RestWaiting, Waiting: waits})
	case clock || len(w.externalNoted) > 0:
		return Rest{}, false, nil
	case !w.recovered && child != nil:
		// Every task is idle and the tree waits on subtasks that have all
		// ended: a handoff was lost. Redo the handoffs once.
		w.recovered = true
		if _, err := child.RecoverTasks(ctx, awaitedChildren(states)); err != nil {
			w.note("child handoff recovery: %v", err)
		}
		return Rest{}, false, nil
	case child == nil && waitsOnChildren(states):
		// The handoff is another process's (an observer-worker with
		// --observers child), which may be behind: keep waiting.
		if !w.childNoted {
			w.childNoted = true
			w.note("waiting for subtask results to be handed over (an observer-worker with --observers child, or engine serve --child, does it)")
		}
		return Rest{}, false, nil
	}
	var stuck []string
	for _, id := range w.order {
		ds := states[id]
		if ds.Status == eventlog.DispatchSuspended {
			stuck = append(stuck, fmt.Sprintf("%s %s on %s", id, ds.Reason, WakeString(ds.WakeOn)))
		}
	}
	return w.final(ctx, Rest{Status: RestStuck, Detail: "every task is idle and nothing will wake them: " + strings.Join(stuck, "; ")})
}

// waitsOnChildren reports whether a task is suspended on subtasks.
func waitsOnChildren(states map[string]eventlog.DispatchState) bool {
	return len(awaitedChildren(states)) > 0
}

// awaitedChildren lists the subtasks the suspended tasks wait on.
func awaitedChildren(states map[string]eventlog.DispatchState) []string {
	var ids []string
	for _, ds := range states {
		if ds.Status != eventlog.DispatchSuspended || ds.WakeOn == nil {
			continue
		}
		switch ds.WakeOn.Kind {
		case noeta.WakeSubtaskCompleted:
			ids = append(ids, ds.WakeOn.SubtaskID)
		case noeta.WakeSubtaskGroupCompleted:
			ids = append(ids, ds.WakeOn.SubtaskIDs...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// final delivers the inbox records the subscriber did not and returns r as
// the rest of the tree.
func (w *Watch) final(ctx context.Context, r Rest) (Rest, bool, error) {
	for _, id := range w.order {
		envs, err := w.h.log.Inbox(ctx, id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return Rest{}, false, err
		}
		for _, env := range envs {
			w.take(ctx, env)
		}
	}
	return r, true, nil
}

// endRest reads a terminal record.
func endRest(env eventlog.Envelope) Rest {
	p, _, err := env.Decode()
	if err != nil {
		return Rest{Status: RestFailed, Detail: err.Error()}
	}
	switch p := p.(type) {
	case *noeta.TaskCompleted:
		if p.AnswerRef != nil {
			return Rest{Status: RestCompleted, Detail: RefString(*p.AnswerRef), AnswerRef: p.AnswerRef}
		}
		return Rest{Status: RestCompleted, Detail: string(p.Answer), Answer: p.Answer}
	case *noeta.TaskFailed:
		return Rest{Status: RestFailed, Detail: p.Error, Guard: p.Guard}
	case *noeta.TaskCancelled:
		return Rest{Status: RestCancelled, Detail: p.Reason}
	}
	return Rest{Status: RestFailed, Detail: "unexpected terminal record " + env.Type}
}

// RefString names content held in the content store.
func RefString(ref noeta.ContentRef) string {
	h := ref.Hash
	if len(h) > 12 {
		h = h[:11] + "…"
	}
	return fmt.Sprintf("(%d bytes in the content store, sha256 %s)", ref.Size, h)
}

// WakeString is a wake condition or event, readable.
func WakeString(w *noeta.Wake) string {
	if w == nil {
		return "nothing"
	}
	switch w.Kind {
	case noeta.WakeSubtaskCompleted:
		return "subtask_completed " + short(w.SubtaskID)
	case noeta.WakeSubtaskGroupCompleted:
		return fmt.Sprintf("subtask_group_completed %s (%d subtasks)", w.GroupID, len(w.SubtaskIDs))
	case noeta.WakeHumanResponse:
		s := "human_response " + w.Handle
		switch {
		case w.Text != "" && !strings.HasPrefix(w.Handle, "approval-"):
			// A question's or a park's reply: its words are the answer
			// (an approval's reason is shown by ApprovalResolved).
			s += " answered " + quoteCut(w.Text, 100)
		case w.Decision != "":
			s += " " + w.Decision
		}
		if w.Approver != "" {
			s += " by " + w.Approver
		}
		if w.Auth != "" && w.Auth != noeta.AuthLocal {
			s += " (" + w.Auth + ")"
		}
		if !w.ExpireAt.IsZero() {
			s += " until " + w.ExpireAt.UTC().Format(time.RFC3339)
		}
		return s
	case noeta.WakeTimerFired:
		return "timer_fired at " + w.FireAt.Format(time.RFC3339)
	case noeta.WakeExternalEvent:
		return "external_event " + w.EventKind
	}
	return string(w.Kind)
}

// quoteCut is s quoted, cut to n runes with … where it was cut.
func quoteCut(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return strconv.Quote(s)
}

// short is the last six characters of an id, which tell the tasks of one
// tree apart (a ULID's first characters are its time).
func short(id string) string {
	if len(id) <= 7 {
		return id
	}
	return "…" + id[len(id)-6:]
}
