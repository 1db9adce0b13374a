package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// approvalMode is how a follower answers approval requests.
type approvalMode string

const (
	approvalsAsk     approvalMode = "ask"     // prompt y/N on the terminal
	approvalsApprove approvalMode = "approve" // approve every request
	approvalsDeny    approvalMode = "deny"    // refuse every request
	approvalsLeave   approvalMode = "leave"   // answer nothing: the run ends waiting (exit 3)
)

func parseApprovalMode(s string) (approvalMode, error) {
	switch m := approvalMode(s); m {
	case approvalsAsk, approvalsApprove, approvalsDeny, approvalsLeave:
		return m, nil
	}
	return "", usageErr("--approvals %q: want ask, approve, deny or leave", s)
}

// How often the follower checks whether the task tree has come to rest.
const settleEvery = 50 * time.Millisecond

// follower follows one task tree — the root task and every task whose
// correlation id is the root — through the records committed to the log: it
// prints each record once, in order per task, with no gaps (a record the
// subscriber did not deliver is read back from the log), answers approval
// requests as its mode says, and reports how the tree came to rest.
type follower struct {
	st   *stack
	eng  *engine.Engine
	root string
	out  io.Writer // the timeline, or JSON lines
	msgs io.Writer // prompts and notes
	json bool

	mode     approvalMode
	approver string
	// reasons are recorded with approve and deny answers.
	approveReason, denyReason string
	answers                   *bufio.Reader // ask: where answers are read

	mu      sync.Mutex
	queue   []eventlog.Envelope
	members map[string]bool
	signal  chan struct{}

	// Owned by the goroutine that runs follow.
	start         time.Time
	tasks         map[string]*taskView
	order         []string
	handled       map[string]bool
	recovered     bool
	childNoted    bool
	externalNoted map[string]bool
}

// taskView is what the follower knows of one task of the tree.
type taskView struct {
	id      string
	depth   int
	agent   string
	printed uint64          // the last log seq printed
	inbox   map[string]bool // inbox keys printed
	end     *eventlog.Envelope
}

func newFollower(st *stack, eng *engine.Engine, root string, out, msgs io.Writer, json bool, mode approvalMode) *follower {
	return &follower{
		st: st, eng: eng, root: root, out: out, msgs: msgs, json: json,
		mode: mode, approver: approver(),
		approveReason: "approved from the command line (--approvals approve)",
		denyReason:    "refused from the command line (--approvals deny)",
		members:       map[string]bool{root: true},
		signal:        make(chan struct{}, 1),
		start:         time.Now(),
		tasks:         map[string]*taskView{},
		handled:       map[string]bool{},
		externalNoted: map[string]bool{},
	}
}

// handle is the follower's eventlog.Handler: it queues the records of the
// tree and returns at once (it runs on the writer's goroutine). A task
// joins the tree by its TaskCreated, which carries the root as correlation
// id and comes before every other record of the task.
func (f *follower) handle(_ context.Context, env eventlog.Envelope) error {
	f.mu.Lock()
	in := f.members[env.Task]
	if !in && env.Type == noeta.TypeTaskCreated && env.CorrelationID == f.root {
		f.members[env.Task], in = true, true
	}
	if in {
		f.queue = append(f.queue, env)
	}
	f.mu.Unlock()
	if in {
		select {
		case f.signal <- struct{}{}:
		default:
		}
	}
	return nil
}

// outcome is how a followed tree came to rest.
type outcome struct {
	status  string // completed, failed, cancelled, waiting, stuck, interrupted
	detail  string // the answer (JSON), the error or the reason
	guard   string // the guard that failed the task, if one did
	waiting []waiting
}

// waiting is a task that waits for a human.
type waiting struct {
	task, handle, reason string
	approval             *noeta.PendingApproval
}

func (o outcome) code() int {
	switch o.status {
	case "completed":
		return exitDone
	case "waiting":
		return exitWaiting
	}
	return exitFailed
}

// follow prints the tree's records until it comes to rest: the root task has
// ended (and no task of the tree is running or ready), or every task is idle
// and one of them waits for a human, or nothing can move any more. It
// returns early, with status interrupted, when ctx ends.
func (f *follower) follow(ctx context.Context) (outcome, error) {
	tick := time.NewTicker(settleEvery)
	defer tick.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			f.drain(context.WithoutCancel(ctx))
			return outcome{status: "interrupted", detail: context.Cause(ctx).Error()}, nil
		case <-f.signal:
			f.drain(ctx)
			continue
		case <-tick.C:
		}
		f.drain(ctx)
		out, done, err := f.settled(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// The server is local: a few failures in a row mean it is gone.
			if failures++; failures >= 20 {
				return outcome{}, err
			}
		case done:
			return out, nil
		default:
			failures = 0
		}
	}
}

// drain processes every queued record and returns how many there were.
func (f *follower) drain(ctx context.Context) int {
	n := 0
	for {
		f.mu.Lock()
		batch := f.queue
		f.queue = nil
		f.mu.Unlock()
		if len(batch) == 0 {
			return n
		}
		n += len(batch)
		for _, env := range batch {
			f.take(ctx, env)
		}
	}
}

func (f *follower) view(task string) *taskView {
	tv, ok := f.tasks[task]
	if !ok {
		tv = &taskView{id: task, inbox: map[string]bool{}}
		f.tasks[task] = tv
		f.order = append(f.order, task)
	}
	return tv
}

// take prints env unless it was printed already; a log record that skips
// ahead of the last one printed first brings the records in between from the
// log, so the timeline of every task is dense.
func (f *follower) take(ctx context.Context, env eventlog.Envelope) {
	tv := f.view(env.Task)
	if env.Seq == 0 {
		if tv.inbox[env.Key] {
			return
		}
		tv.inbox[env.Key] = true
		f.record(ctx, tv, env)
		return
	}
	if env.Seq <= tv.printed {
		return
	}
	if env.Seq > tv.printed+1 {
		if missed, err := f.st.log.Read(ctx, env.Task, tv.printed); err == nil {
			for _, m := range missed {
				if m.Seq >= env.Seq {
					break
				}
				if m.Seq == tv.printed+1 {
					f.record(ctx, tv, m)
				}
			}
		}
	}
	f.record(ctx, tv, env)
}

func (f *follower) record(ctx context.Context, tv *taskView, env eventlog.Envelope) {
	if env.Seq > 0 {
		tv.printed = env.Seq
	}
	f.recovered = false
	p, known, err := env.Decode()
	if err != nil {
		known = false
	}
	if known {
		f.note(tv, env, p)
	}
	f.print(env, p, known)
	if s, ok := p.(*noeta.TaskSuspended); known && ok && s.Reason == engine.ReasonWaitingApproval {
		f.answer(ctx, env.Task, s.WakeOn.Handle)
	}
}

// note keeps what the follower needs of a record: a task's depth and
// agent, its end, and its subtasks, which join the tree (a subtask another
// process runs is known by its parent's SubtaskSpawned, not by a
// TaskCreated this process committed).
func (f *follower) note(tv *taskView, env eventlog.Envelope, p noeta.Payload) {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		tv.depth, tv.agent = p.SubtaskDepth, p.Agent
	case *noeta.SubtaskSpawned:
		f.mu.Lock()
		f.members[p.SubtaskID] = true
		f.mu.Unlock()
		f.view(p.SubtaskID)
	case *noeta.TaskCompleted, *noeta.TaskFailed, *noeta.TaskCancelled:
		if tv.end == nil {
			e := env
			tv.end = &e
		}
	}
}

// seed makes the follower start from the tree as it is now: every task of
// it, found from the root through the SubtaskSpawned records, is known, with
// everything already in its log and inbox taken as printed. Call it before
// tapping the stack; only what is committed afterwards is printed.
func (f *follower) seed(ctx context.Context) error {
	queue := []string{f.root}
	seen := map[string]bool{f.root: true}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		tv := f.view(id)
		f.mu.Lock()
		f.members[id] = true
		f.mu.Unlock()
		envs, err := f.st.log.Read(ctx, id, 0)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		for _, env := range envs {
			tv.printed = env.Seq
			p, known, err := env.Decode()
			if err != nil || !known {
				continue
			}
			f.note(tv, env, p)
			if sp, ok := p.(*noeta.SubtaskSpawned); ok && !seen[sp.SubtaskID] {
				seen[sp.SubtaskID] = true
				queue = append(queue, sp.SubtaskID)
			}
		}
		inbox, err := f.st.log.Inbox(ctx, id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		for _, env := range inbox {
			tv.inbox[env.Key] = true
		}
	}
	return nil
}

func (f *follower) print(env eventlog.Envelope, p noeta.Payload, known bool) {
	if f.json {
		body, err := jetstream.CloudEvent(env)
		if err != nil {
			fmt.Fprintf(f.msgs, "engine: record %s of task %s: %v\n", env.ID, env.Task, err)
			return
		}
		body = append(body, '\n')
		_, _ = f.out.Write(body)
		return
	}
	fmt.Fprintln(f.out, f.line(env, p, known))
}

// answer answers the approval request behind handle as the mode says, once
// the task is suspended on it.
func (f *follower) answer(ctx context.Context, task, handle string) {
	key := task + "\x00" + handle
	if f.mode == approvalsLeave || f.handled[key] {
		return
	}
	st, err := f.eng.Inspect(ctx, task)
	if err != nil {
		fmt.Fprintf(f.msgs, "engine: inspect task %s for approval %s: %v\n", task, handle, err)
		return
	}
	if st.Status != noeta.StatusSuspended || st.Reason != engine.ReasonWaitingApproval || st.WakeOn == nil || st.WakeOn.Handle != handle {
		return
	}
	f.handled[key] = true
	pa := st.Governance.PendingApprovals[handle]
	var decision noeta.ApprovalDecision
	var reason string
	switch f.mode {
	case approvalsApprove:
		decision, reason = noeta.ApprovalApprove, f.approveReason
	case approvalsDeny:
		decision, reason = noeta.ApprovalDeny, f.denyReason
	case approvalsAsk:
		var ok bool
		if decision, ok = f.ask(task, handle, pa); !ok {
			return
		}
		reason = "answered on the terminal"
	}
	if err := f.eng.Approve(ctx, task, handle, decision, f.approver, reason); err != nil {
		if errors.Is(err, eventlog.ErrAlreadyAnswered) || errors.Is(err, eventlog.ErrNotWaiting) {
			// Final: another answer came first, or the request is gone.
			fmt.Fprintf(f.msgs, "engine: the answer to %s of task %s was not applied: %v\n", handle, task, err)
			return
		}
		f.handled[key] = false
		fmt.Fprintf(f.msgs, "engine: answer %s of task %s: %v\n", handle, task, err)
	}
}

// ask prompts for an approval; ok is false when no answer came (end of
// input): the request is left as it is.
func (f *follower) ask(task, handle string, pa noeta.PendingApproval) (noeta.ApprovalDecision, bool) {
	what := approvalWhat(pa)
	fmt.Fprintf(f.msgs, "\napproval needed: task %s (%s), %s\n  %s\n  guard %s: %s\napprove? [y/N] ",
		task, f.view(task).agent, handle, what, pa.Guard, pa.Reason)
	if f.answers == nil {
		fmt.Fprintln(f.msgs, "(no input; left waiting)")
		return "", false
	}
	line, err := f.answers.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(f.msgs, "(no input; left waiting)")
		return "", false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return noeta.ApprovalApprove, true
	}
	return noeta.ApprovalDeny, true
}

// settled reports whether the tree has come to rest, and how.
func (f *follower) settled(ctx context.Context) (outcome, bool, error) {
	states := map[string]eventlog.DispatchState{}
	for _, id := range f.order {
		ds, found, err := f.st.inspect(ctx, id)
		if err != nil {
			return outcome{}, false, err
		}
		if !found || ds.Status == eventlog.DispatchReady || ds.Status == eventlog.DispatchLeased {
			return outcome{}, false, nil
		}
		states[id] = ds
	}
	if len(states) == 0 || f.drain(ctx) > 0 {
		return outcome{}, false, nil
	}
	// Every task is idle, so each log is complete: print whatever the
	// subscriber did not deliver, and look again if there was any.
	caught := 0
	for _, id := range f.order {
		envs, err := f.st.log.Read(ctx, id, f.tasks[id].printed)
		if err != nil {
			return outcome{}, false, err
		}
		for _, env := range envs {
			f.take(ctx, env)
		}
		caught += len(envs)
	}
	if caught > 0 {
		return outcome{}, false, nil
	}

	root := f.tasks[f.root]
	if root.end != nil {
		return f.final(ctx, endOutcome(*root.end))
	}
	if ds := states[f.root]; ds.Status == eventlog.DispatchTerminal {
		return f.final(ctx, outcome{status: "failed", detail: "the dispatcher ended the task: " + ds.Reason})
	}
	var waits []waiting
	clock := false
	for _, id := range f.order {
		ds := states[id]
		if ds.Status != eventlog.DispatchSuspended || ds.WakeOn == nil {
			continue
		}
		switch ds.WakeOn.Kind {
		case noeta.WakeHumanResponse:
			w := waiting{task: id, handle: ds.WakeOn.Handle, reason: ds.Reason}
			if st, err := f.eng.Inspect(ctx, id); err == nil {
				if pa, ok := st.Governance.PendingApprovals[w.handle]; ok {
					w.approval = &pa
				}
			}
			waits = append(waits, w)
		case noeta.WakeTimerFired:
			clock = true
		case noeta.WakeExternalEvent:
			if !f.externalNoted[id] {
				f.externalNoted[id] = true
				fmt.Fprintf(f.msgs, "engine: task %s waits for an external event of kind %q; nothing in this process sends one (Ctrl-C to stop)\n", id, ds.WakeOn.EventKind)
			}
		}
	}
	switch {
	case len(waits) > 0:
		return f.final(ctx, outcome{status: "waiting", waiting: waits})
	case clock || len(f.externalNoted) > 0:
		return outcome{}, false, nil
	case !f.recovered && f.st.child.Load() != nil:
		// Every task is idle and the tree waits on subtasks that have all
		// ended: a handoff was lost. Redo the handoffs once.
		f.recovered = true
		if _, err := f.st.child.Load().Recover(ctx); err != nil {
			fmt.Fprintf(f.msgs, "engine: child handoff recovery: %v\n", err)
		}
		return outcome{}, false, nil
	case f.st.child.Load() == nil && f.waitsOnChildren(states):
		// On a remote NATS the handoff is an observer-worker's (--observers
		// child), which may be behind: keep waiting.
		if !f.childNoted {
			f.childNoted = true
			fmt.Fprintf(f.msgs, "engine: waiting for subtask results to be handed over (an observer-worker with --observers child, or engine serve --child, does it)\n")
		}
		return outcome{}, false, nil
	}
	var stuck []string
	for _, id := range f.order {
		ds := states[id]
		if ds.Status == eventlog.DispatchSuspended {
			stuck = append(stuck, fmt.Sprintf("%s %s on %s", id, ds.Reason, wakeString(ds.WakeOn)))
		}
	}
	return f.final(ctx, outcome{status: "stuck", detail: "every task is idle and nothing will wake them: " + strings.Join(stuck, "; ")})
}

// waitsOnChildren reports whether a task of the tree is suspended on
// subtasks that have all ended.
func (f *follower) waitsOnChildren(states map[string]eventlog.DispatchState) bool {
	for _, ds := range states {
		if ds.Status != eventlog.DispatchSuspended || ds.WakeOn == nil {
			continue
		}
		switch ds.WakeOn.Kind {
		case noeta.WakeSubtaskCompleted, noeta.WakeSubtaskGroupCompleted:
			return true
		}
	}
	return false
}

// final prints the inbox records the subscriber did not deliver and returns
// out as the end of the run.
func (f *follower) final(ctx context.Context, out outcome) (outcome, bool, error) {
	for _, id := range f.order {
		envs, err := f.st.log.Inbox(ctx, id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return outcome{}, false, err
		}
		for _, env := range envs {
			f.take(ctx, env)
		}
	}
	return out, true, nil
}

// endOutcome reads a terminal record.
func endOutcome(env eventlog.Envelope) outcome {
	p, _, err := env.Decode()
	if err != nil {
		return outcome{status: "failed", detail: err.Error()}
	}
	switch p := p.(type) {
	case *noeta.TaskCompleted:
		if p.AnswerRef != nil {
			return outcome{status: "completed", detail: refString(*p.AnswerRef)}
		}
		return outcome{status: "completed", detail: string(p.Answer)}
	case *noeta.TaskFailed:
		return outcome{status: "failed", detail: p.Error, guard: p.Guard}
	case *noeta.TaskCancelled:
		return outcome{status: "cancelled", detail: p.Reason}
	}
	return outcome{status: "failed", detail: "unexpected terminal record " + env.Type}
}

// The timeline: one line per record.
//
//	  0.012s  child …4QZK7M  #5   ToolCallDenied        guard=budget  echo call-1-1: max_tool_calls 1 reached

func (f *follower) line(env eventlog.Envelope, p noeta.Payload, known bool) string {
	tv := f.view(env.Task)
	role := "root"
	switch {
	case env.Task == f.root:
	case tv.depth > 1:
		role = "sub" + strconv.Itoa(tv.depth)
	default:
		role = "child"
	}
	pos := "in"
	if env.Seq > 0 {
		pos = "#" + strconv.FormatUint(env.Seq, 10)
	}
	at := env.Time.Sub(f.start).Seconds()
	detail := rawDetail(env.Payload)
	if known {
		detail = describe(env, p)
	}
	return strings.TrimRight(fmt.Sprintf("%8.3fs  %-5s %-7s  %-4s %-21s %s", at, role, short(env.Task), pos, env.Type, detail), " ")
}

// describe is the detail column of a record of a known type.
func describe(env eventlog.Envelope, p noeta.Payload) string {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		s := "agent=" + p.Agent + " goal=" + goalString(p.Goal, p.GoalRef)
		if p.ParentTaskID != "" {
			s += " parent=" + short(p.ParentTaskID)
		}
		return s + " id=" + p.TaskID
	case *noeta.LeaseGranted:
		return fmt.Sprintf("%s gen %d", p.Worker, p.Generation)
	case *noeta.TurnStarted:
		return fmt.Sprintf("turn %d", p.Turn)
	case *noeta.PolicyDecided:
		s := fmt.Sprintf("turn %d: %s", p.Turn, p.Decision)
		if p.CostUSD > 0 {
			s += fmt.Sprintf(" cost=$%.4g", p.CostUSD)
		}
		if p.InputTokens > 0 || p.OutputTokens > 0 {
			s += fmt.Sprintf(" tokens=%d/%d", p.InputTokens, p.OutputTokens)
		}
		return s
	case *noeta.ToolCallStarted:
		return p.Tool + " " + p.CallID + " " + argsString(p.Args, p.ArgsRef)
	case *noeta.ToolCallFinished:
		s := fmt.Sprintf("%s %s ", p.Tool, p.CallID)
		if !p.OK {
			return s + fmt.Sprintf("failed %dms: %s", p.DurationMS, cut(p.Error, 80))
		}
		s += fmt.Sprintf("ok %dms → ", p.DurationMS)
		if p.OutputRef != nil {
			return s + refString(*p.OutputRef)
		}
		return s + cut(string(p.Output), 80)
	case *noeta.ToolCallDenied:
		return fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Tool, p.CallID, p.Reason)
	case *noeta.SubtaskDenied:
		return fmt.Sprintf("guard=%s  agent=%s: %s", p.Guard, p.Agent, p.Reason)
	case *noeta.FinishDenied:
		return fmt.Sprintf("guard=%s: %s", p.Guard, p.Reason)
	case *noeta.ApprovalRequested:
		pa := noeta.PendingApproval{Action: p.Action, CallID: p.CallID, Tool: p.Tool, Args: p.Args, ArgsRef: p.ArgsRef, Agent: p.Agent}
		return fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Handle, approvalWhat(pa), p.Reason)
	case *noeta.ApprovalResolved:
		s := fmt.Sprintf("%s %s by %s", p.Handle, p.Decision, p.Approver)
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		return s
	case *noeta.SubtaskSpawned:
		s := fmt.Sprintf("subtask %s agent=%s goal=%s", short(p.SubtaskID), p.Agent, goalString(p.Goal, p.GoalRef))
		if p.GroupID != "" {
			s += " group=" + p.GroupID
		}
		return s
	case *noeta.SubtaskCompleted:
		return "from " + subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error) + " (inbox " + env.Key + ")"
	case *noeta.SubtaskResultRecorded:
		return subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error)
	case *noeta.TaskStatePatched:
		return "patch " + cut(string(p.Patch), 80)
	case *noeta.TaskSuspended:
		return p.Reason + "; wakes on " + wakeString(&p.WakeOn)
	case *noeta.TaskWoken:
		return "by " + wakeString(&p.WakeEvent)
	case *noeta.TaskSnapshot:
		return fmt.Sprintf("state up to #%d", p.UptoSeq)
	case *noeta.StepAttemptAbandoned:
		return fmt.Sprintf("%s: %s", p.Action, p.Reason)
	case *noeta.TaskCompleted:
		if p.AnswerRef != nil {
			return "answer " + refString(*p.AnswerRef)
		}
		return "answer " + cut(string(p.Answer), 80)
	case *noeta.TaskFailed:
		if p.Guard != "" {
			return fmt.Sprintf("guard=%s  %s", p.Guard, p.Error)
		}
		return p.Error
	case *noeta.TaskCancelled:
		return p.Reason
	}
	return rawDetail(env.Payload)
}

func rawDetail(payload json.RawMessage) string { return cut(string(payload), 100) }

func subtaskResult(id string, status noeta.SubtaskStatus, result json.RawMessage, ref *noeta.ContentRef, errText string) string {
	s := "subtask " + short(id) + " " + string(status)
	switch {
	case errText != "":
		s += ": " + cut(errText, 80)
	case ref != nil:
		s += " → " + refString(*ref)
	case len(result) > 0:
		s += " → " + cut(string(result), 80)
	}
	return s
}

// approvalWhat names what an approval is asked for.
func approvalWhat(pa noeta.PendingApproval) string {
	args := argsString(pa.Args, pa.ArgsRef)
	switch pa.Action {
	case noeta.ApprovalToolCall:
		return fmt.Sprintf("%s %s %s", pa.Tool, pa.CallID, args)
	case noeta.ApprovalSpawnSubtask:
		return "spawn " + pa.Agent + " " + args
	case noeta.ApprovalFinish:
		return "finish " + args
	}
	return string(pa.Action) + " " + args
}

func wakeString(w *noeta.Wake) string {
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
		if w.Decision != "" {
			s += " " + w.Decision
		}
		if w.Approver != "" {
			s += " by " + w.Approver
		}
		return s
	case noeta.WakeTimerFired:
		return "timer_fired at " + w.FireAt.Format(time.RFC3339)
	case noeta.WakeExternalEvent:
		return "external_event " + w.EventKind
	}
	return string(w.Kind)
}

func goalString(goal string, ref *noeta.ContentRef) string {
	if ref != nil {
		return refString(*ref)
	}
	return strconv.Quote(cut(goal, 60))
}

func argsString(args json.RawMessage, ref *noeta.ContentRef) string {
	if ref != nil {
		return refString(*ref)
	}
	if len(args) == 0 {
		return "{}"
	}
	return cut(string(args), 80)
}

func refString(ref noeta.ContentRef) string {
	return fmt.Sprintf("(%d bytes in the content store, sha256 %s)", ref.Size, cut(ref.Hash, 12))
}

// short is the last six characters of an id, which tell the tasks of one
// tree apart (a ULID's first characters are its time).
func short(id string) string {
	if len(id) <= 7 {
		return id
	}
	return "…" + id[len(id)-6:]
}

// cut shortens s to at most n runes, marking the cut with …; newlines
// become spaces, so one record stays on one line.
func cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
