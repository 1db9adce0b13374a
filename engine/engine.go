package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/backoff"
	"github.com/noeta-go/noeta/tools"
)

// Policy decides a task's next turn. It is asked once per turn: the engine
// records the whole decision in PolicyDecided before acting on it, and a
// turn resumed after a crash, a takeover or an approval is carried out from
// the record (docs/adr/0027), so Decide need not be deterministic. (A turn
// whose record predates that, version 1, is asked again and must get the
// decision, and the call ids, it had.)
type Policy interface {
	Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error)
}

// ClientPolicy is a Policy that decides nothing itself: it hands the engine
// what an outside client asked for (a tool call an MCP client sent through
// the gateway). The engine records its decisions with origin client and
// Client as the actor, and judges and runs them as every other decision
// (docs/adr/0090).
type ClientPolicy interface {
	Policy
	// Client names who sent the decisions (the client's principal).
	Client() string
}

// ResultReader is a ClientPolicy whose client reads each call's result as
// recorded, not as a model reads it in the transcript (clipped, a spilled
// output shown by its ref only): the engine hands it every ToolCallFinished
// it records for a call it ran in the process, before the policy's next
// Decide. A result recorded by another process (a call cut by a crash) is
// only in the transcript.
type ResultReader interface {
	ClientPolicy
	// ToolFinished is called with the record, not yet durable (it is with
	// the next decision's), on the task's worker: it must return promptly.
	ToolFinished(rec *noeta.ToolCallFinished)
}

// ProgressReader is a ClientPolicy whose client is told a running call's
// progress (an MCP server's progress notifications): ToolProgress returns
// where the progress of callID goes, or nil. What is told is not recorded.
type ProgressReader interface {
	ClientPolicy
	ToolProgress(callID string) tools.Progress
}

// PolicyResolver finds the policy of a task from its folded state (its agent
// and script). It is called once per segment; caching is its business.
type PolicyResolver func(ctx context.Context, st *State) (Policy, error)

// Log is the part of an event log backend the engine uses.
type Log interface {
	eventlog.Reader
	eventlog.Writer
}

// Defaults of [Config].
const (
	DefaultAbandonCap    = 3
	DefaultSnapshotEvery = 20
	// DefaultSegmentRetries and DefaultSegmentRetryPause: a segment that
	// fails retryably runs again under its lease after 0.5, 1 and then 2 s
	// each time, eight times (ADR 0115): about 13.5 s, longer than the
	// stream leader elections the partition run saw under load (7-12 s),
	// before the failure counts toward the dispatcher's cap of attempts,
	// and never more than 2 s after the store answers again.
	DefaultSegmentRetries    = 8
	DefaultSegmentRetryPause = 500 * time.Millisecond
	// MaxFanOut is the most children one spawn decision may start.
	MaxFanOut = 16
	// ActorTool is the actor of the records a tool's run produces.
	ActorTool = "tool_runtime"
)

// Config wires an Engine. Log, Dispatcher, Content, Governance, Tools and
// Policies are required.
type Config struct {
	Log        Log
	Dispatcher eventlog.Dispatcher
	Content    eventlog.ContentStore
	Governance *guards.Config
	Tools      *tools.Registry
	Policies   PolicyResolver

	// UserGuards are Go guards added to every agent's stack after the
	// configured ones (priority at least guards.MinUserPriority).
	UserGuards []guards.Guard
	// GuardTimeout is each guard's deadline (guards.DefaultTimeout if 0).
	GuardTimeout time.Duration
	// Rates counts the calls of the agents' rate limits; every engine of
	// the deployment must share it (nil: a call a rate limit applies to
	// is denied).
	Rates guards.RateCounter
	// Workspace is the directory file tools are confined to and shell runs
	// in. Empty: file and shell tools fail with tools.ErrNoWorkspace.
	Workspace string
	// Actor names this engine instance in the records it writes; default
	// engine@<hostname>:<pid>.
	Actor string
	// Queue is the ready queue workers lease from (eventlog.DefaultQueue).
	Queue string
	// LeaseTTL is the lease length workers ask for; 0 asks for the
	// dispatcher's own (the JetStream dispatcher's leases all last its
	// configured TTL, and it refuses another).
	LeaseTTL time.Duration
	// HeartbeatEvery is how often a worker renews its lease; if 0, a third
	// of the time each lease has left when it is granted.
	HeartbeatEvery time.Duration
	// AbandonCap is how many times in a row a turn may be found interrupted
	// and resumed before the task is parked for a human (DefaultAbandonCap).
	AbandonCap int
	// SegmentRetries is how many times a segment that failed retryably (the
	// store unavailable, a policy's server unreachable) runs again under
	// its lease, after a pause that starts at SegmentRetryPause and doubles
	// up to four times that, before the failure counts toward the
	// dispatcher's cap of attempts (DefaultSegmentRetries and
	// DefaultSegmentRetryPause if 0). The lease is renewed meanwhile. A
	// negative SegmentRetries runs no segment again: each failure is an
	// attempt, and the task is ready again at once.
	SegmentRetries    int
	SegmentRetryPause time.Duration
	// SnapshotEvery writes a snapshot after that many turns without one
	// (DefaultSnapshotEvery), at the end of the batch that writes the turn's
	// next record an effect waits on; suspends always write one, terminals
	// unless the segment wrote one in the last few records.
	SnapshotEvery int
	// Now is the clock of timers (time.Now).
	Now func() time.Time
	// Logger gets what the log cannot hold: lease losses, recovery notes.
	Logger *slog.Logger

	// Waiting is the fleet's index of open requests (the inbox); nil keeps
	// none. The engine puts an entry once the request is committed and
	// before the task suspends on it, and deletes it once resolved.
	Waiting eventlog.WaitingIndex
	// RequireAuthenticatedApprovals refuses (records ApprovalRefused) an
	// answer to an approval whose Auth is noeta.AuthNone or empty: on a
	// remote NATS any publisher of wakes could send it.
	RequireAuthenticatedApprovals bool
	// Approvals is the approvals rules (config's File.Approvals): who may
	// answer which request, the quorum, the expiry. nil: anyone may answer
	// any request, once, and requests never expire.
	Approvals *approvals.Policy
	// Fresh keeps the genesis of the tasks this engine creates for their
	// first segment, which then folds without reading the log (ADR 0113):
	// the engines of a process share one. nil: the engine keeps its own.
	Fresh *FreshTasks
}

// Engine runs tasks to their next suspend or terminal record under
// governance. It is safe for concurrent use by many workers.
type Engine struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	stacks map[string]*guards.Stack
	// cancels holds the cancel functions of the segments this process runs,
	// by task, for cooperative cancellation.
	cancels map[string]segmentStop

	damaged atomic.Uint64 // segments refused on a damaged log

	// refusedAnswers counts leases whose human_response answered nothing
	// the task waited on.
	refusedAnswers atomic.Uint64
	// indexDirty holds the tasks an index write failed for (under mu):
	// their next segment reconciles with a listing.
	indexDirty map[string]bool

	// refusedApprovals counts answers to approvals refused (recorded as
	// ApprovalRefused, or only counted past the per-request cap).
	refusedApprovals atomic.Uint64
}

// RefusedApprovals returns how many answers to approvals this engine
// refused: an approver the rules do not allow, self-approval, a second
// approval by one approver, an unauthenticated answer.
func (e *Engine) RefusedApprovals() uint64 { return e.refusedApprovals.Load() }

// RefusedAnswers returns how many human answers this engine refused when a
// lease delivered one that answers no request the task waits on.
func (e *Engine) RefusedAnswers() uint64 { return e.refusedAnswers.Load() }

// segmentStop stops the segment running under lease.
type segmentStop struct {
	lease string
	stop  context.CancelCauseFunc
}

// ErrConfig is wrapped by New for a Config it cannot run with.
var ErrConfig = errors.New("engine: bad config")

// New checks cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Log == nil:
		return nil, fmt.Errorf("%w: Log is nil", ErrConfig)
	case cfg.Dispatcher == nil:
		return nil, fmt.Errorf("%w: Dispatcher is nil", ErrConfig)
	case cfg.Content == nil:
		return nil, fmt.Errorf("%w: Content is nil", ErrConfig)
	case cfg.Governance == nil:
		return nil, fmt.Errorf("%w: Governance is nil", ErrConfig)
	case cfg.Tools == nil:
		return nil, fmt.Errorf("%w: Tools is nil", ErrConfig)
	case cfg.Policies == nil:
		return nil, fmt.Errorf("%w: Policies is nil", ErrConfig)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"LeaseTTL", int64(cfg.LeaseTTL)}, {"HeartbeatEvery", int64(cfg.HeartbeatEvery)}, {"AbandonCap", int64(cfg.AbandonCap)}, {"SnapshotEvery", int64(cfg.SnapshotEvery)},
		{"SegmentRetryPause", int64(cfg.SegmentRetryPause)}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: %s is negative", ErrConfig, f.name)
		}
	}
	if err := eventlog.ValidateQueue("Queue", cfg.Queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.Actor == "" {
		cfg.Actor = DefaultActor()
	}
	if cfg.AbandonCap == 0 {
		cfg.AbandonCap = DefaultAbandonCap
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	switch {
	case cfg.SegmentRetries == 0:
		cfg.SegmentRetries = DefaultSegmentRetries
	case cfg.SegmentRetries < 0:
		cfg.SegmentRetries = 0
	}
	if cfg.SegmentRetryPause == 0 {
		cfg.SegmentRetryPause = DefaultSegmentRetryPause
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.Fresh == nil {
		cfg.Fresh = &FreshTasks{}
	}
	return &Engine{cfg: cfg, log: cfg.Logger, stacks: map[string]*guards.Stack{}, cancels: map[string]segmentStop{}}, nil
}

// stack returns the guard stack of agent, built once.
func (e *Engine) stack(agent string) (*guards.Stack, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.stacks[agent]; ok {
		return s, nil
	}
	var opts []guards.StackOption
	if e.cfg.GuardTimeout > 0 {
		opts = append(opts, guards.WithTimeout(e.cfg.GuardTimeout))
	}
	opts = append(opts, guards.WithLogger(e.log), guards.WithEditTools(e.cfg.Tools.Edits))
	if e.cfg.Rates != nil {
		opts = append(opts, guards.WithRates(e.cfg.Rates))
	}
	s, err := e.cfg.Governance.AgentStack(agent, e.cfg.Tools.RiskString, e.cfg.UserGuards, opts...)
	if err != nil {
		return nil, err
	}
	e.stacks[agent] = s
	return s, nil
}

// Submission is a new root task.
type Submission struct {
	// ID is the task id; a fresh ULID if empty. A caller that names the id
	// may submit again after an error it cannot interpret (a timeout while
	// the cluster elects a leader): the same submission under the same id
	// is the same task, returned and not created twice; a different one
	// fails with eventlog.ErrTaskExists.
	ID    string
	Agent string
	Goal  string
	// Script is the task's scripted policy as JSON (a task file's script);
	// empty: the agent's configured policy.
	Script json.RawMessage
	// Queue is the ready queue (eventlog.DefaultQueue if empty).
	Queue string
	// SubmittedBy says who submits the task (the HTTP principal,
	// cli:$USER); it is recorded in TaskCreated, inherited by the task's
	// subtasks, and read by the approvals rules (self_approval).
	SubmittedBy string
}

// Submit creates a root task and makes it ready. The agent must be in the
// governance config.
func (e *Engine) Submit(ctx context.Context, sub Submission) (string, error) {
	if _, ok := e.cfg.Governance.Agent(sub.Agent); !ok {
		return "", fmt.Errorf("%w: agent %q is not in the config (agents: %v)", eventlog.ErrInvalidArgument, sub.Agent, e.cfg.Governance.Agents())
	}
	if sub.Goal == "" {
		return "", fmt.Errorf("%w: goal is empty", eventlog.ErrInvalidArgument)
	}
	id := sub.ID
	if id == "" {
		id = noeta.NewTaskID()
	}
	if err := noeta.ValidateTaskID(id); err != nil {
		return "", fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	tc := noeta.TaskCreated{TaskID: id, Agent: sub.Agent, RootTaskID: id, SubmittedBy: sub.SubmittedBy}
	if err := e.fillCreated(ctx, &tc, sub.Goal, sub.Script); err != nil {
		return "", err
	}
	opts := eventlog.EnqueueOptions{Queue: sub.Queue}
	err := e.create(ctx, tc, eventlog.OriginSystem, opts, false)
	if sub.ID != "" && errors.Is(err, eventlog.ErrTaskExists) {
		var same bool
		if same, err = e.sameGenesis(ctx, tc); err == nil {
			if !same {
				return "", fmt.Errorf("%w: %s was created by a different submission", eventlog.ErrTaskExists, id)
			}
			// A retry: the earlier attempt may have died between the log
			// and the dispatcher's row, which create(existing) completes.
			err = e.create(ctx, tc, eventlog.OriginSystem, opts, true)
		}
	}
	if err != nil {
		return "", err
	}
	return id, nil
}

// sameGenesis reports whether the task's log opens with tc, the TaskCreated
// a retried submission would write.
func (e *Engine) sameGenesis(ctx context.Context, tc noeta.TaskCreated) (bool, error) {
	envs, err := e.cfg.Log.Read(ctx, tc.TaskID, 0)
	if err != nil {
		return false, err
	}
	if len(envs) == 0 || envs[0].Type != noeta.TypeTaskCreated {
		return false, nil
	}
	p, _, err := envs[0].Decode()
	if err != nil {
		return false, err
	}
	got, ok := p.(*noeta.TaskCreated)
	return ok && reflect.DeepEqual(*got, tc), nil
}

// fillCreated spills the goal and stores the script of a TaskCreated.
func (e *Engine) fillCreated(ctx context.Context, tc *noeta.TaskCreated, goal string, script json.RawMessage) error {
	g, ref, err := eventlog.SpillString(ctx, e.cfg.Content, goal, noeta.GoalInlineLimit)
	if err != nil {
		return err
	}
	tc.Goal, tc.GoalRef = g, ref
	if len(script) > 0 {
		canon, err := noeta.CanonicalizeJSON(script)
		if err != nil {
			return fmt.Errorf("%w: script: %v", eventlog.ErrInvalidArgument, err)
		}
		r, err := e.cfg.Content.Put(ctx, canon, eventlog.MediaTypeJSON)
		if err != nil {
			return err
		}
		tc.ScriptRef = &r
	}
	return nil
}

// signalRepairer is a dispatcher whose ready tasks are announced by a
// signal that a crash can lose (the JetStream one): RepairSignal publishes
// it again if the task is ready and has none, and never changes the row.
type signalRepairer interface {
	RepairSignal(ctx context.Context, task string) error
}

// create writes a task's genesis and enqueues it. With existing, a task
// that is already there is fine (a resumed spawn creates children it may have
// created before, under the same derived ids): it is enqueued only if the
// dispatcher has never seen it, since enqueueing a known task forces it back
// to ready, fencing its worker and dropping a wake it has not consumed.
// A known task that is ready has its ready signal repaired instead, where
// the dispatcher has signals (signalRepairer): the process that created it
// may have died between writing its row and signalling it.
func (e *Engine) create(ctx context.Context, tc noeta.TaskCreated, origin eventlog.Origin, opts eventlog.EnqueueOptions, existing bool) error {
	env, err := eventlog.NewEnvelope(tc.TaskID, origin, e.cfg.Actor, tc)
	if err != nil {
		return err
	}
	env.CorrelationID = tc.RootTaskID
	if stored, err := e.cfg.Log.Create(ctx, env); err == nil {
		e.cfg.Fresh.put(e.cfg.Log, stored)
	} else {
		if !existing || !errors.Is(err, eventlog.ErrTaskExists) {
			return err
		}
		ds, err := e.cfg.Dispatcher.Inspect(ctx, tc.TaskID)
		if err == nil {
			if sr, ok := e.cfg.Dispatcher.(signalRepairer); ok && ds.Status == eventlog.DispatchReady {
				return sr.RepairSignal(ctx, tc.TaskID)
			}
			return nil
		}
		if !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
	}
	// A new task goes straight to a worker of this process blocked on its
	// queue, if one is (ADR 0112).
	opts.Parent, opts.HandOff = tc.ParentTaskID, true
	return e.cfg.Dispatcher.Enqueue(ctx, tc.TaskID, opts)
}

// AnswerSettle bounds how long an answer waits for a task whose request is
// in its log to be suspended on it (Approve here, the host's answers sent
// on an approval subject): the segment that asked releases the task right
// after writing the suspend, unless its worker died, and then the lease's
// expiry hands the task to another; another answer being judged (the first
// approval of a quorum) leaves the request open meanwhile.
const AnswerSettle = 30 * time.Second

// AnswerPollFirst and AnswerPollMax are the pause of the loops that watch
// an answer settle: short, since it settles in a round trip or two, and
// bounded, since it may take a lease's expiry.
const (
	AnswerPollFirst = 5 * time.Millisecond
	AnswerPollMax   = 200 * time.Millisecond
)

// ErrApproverNotAllowed is wrapped by Approve when the approvals rules (or
// self-approval, or a quorum's one-vote-per-approver, or the need for an
// authenticated answer) refuse the answer: it is known before the task is
// woken, and nothing is sent.
var ErrApproverNotAllowed = errors.New("engine: approver not allowed")

// ErrRequestExpired is wrapped by Approve when the request's deadline has
// passed: an answer received now is refused, and the request resolves
// denied by timeout (its timer's answer, or the woken task's judgement of
// any late answer).
var ErrRequestExpired = errors.New("engine: the approval request has expired")

// Approve answers the request behind handle: a human_response wake with the
// decision, who made it (approver, authenticated as auth: one of the
// noeta.Auth* constants, set by the trusted caller, never by the sender)
// and why. The task records the resolution when it resumes, and the task,
// woken, is the authority: it judges the answer against the rules again.
//
// It answers only a request that is open now: an approval whose
// ApprovalRequested is in the task's log and unresolved, or the handle the
// task is suspended on (a park, a question). Anything else is refused with
// eventlog.ErrNotWaiting, naming what is open, if anything; a request
// already answered (the loser of a race between two answers) with
// eventlog.ErrAlreadyAnswered, naming the answer that won. An answer the
// approvals rules refuse, judged from the folded log, is refused with
// ErrApproverNotAllowed. Nothing refused is kept for later. Between the
// request and the suspend that waits on it (the segment that asked has not
// yet handed the task back) Approve waits for the suspend, up to
// AnswerSettle.
func (e *Engine) Approve(ctx context.Context, task, handle string, decision noeta.ApprovalDecision, approver, reason, auth string) error {
	if decision != noeta.ApprovalApprove && decision != noeta.ApprovalDeny {
		return fmt.Errorf("%w: decision %q (want approve or deny)", eventlog.ErrInvalidArgument, decision)
	}
	if approver == "" {
		return fmt.Errorf("%w: approver is empty: an approval must say who gave it", eventlog.ErrInvalidArgument)
	}
	name, err := approvals.Approver(approver)
	if err != nil {
		return fmt.Errorf("%w: approver: %w", eventlog.ErrInvalidArgument, err)
	}
	approver = name
	switch {
	case auth == noeta.AuthTimer || approvals.Reserved(approver):
		return fmt.Errorf("%w: the approver %q and auth %q are the expiry's own; no one answers as them", eventlog.ErrInvalidArgument, noeta.ApproverTimeout, noeta.AuthTimer)
	case !validAuth(auth):
		return fmt.Errorf("%w: auth %q (want nats, token, proxy, local, none, elicitation or client_prompt)", eventlog.ErrInvalidArgument, auth)
	}
	w := noeta.HumanResponseWake(handle)
	w.Decision, w.Approver, w.Text, w.Auth = string(decision), approver, reason, auth
	deadline := time.Now().Add(AnswerSettle)
	pause := backoff.New(AnswerPollFirst, AnswerPollMax)
	for {
		st, err := e.Inspect(ctx, task)
		if err != nil {
			return err
		}
		if err := OpenRequest(st, handle); err != nil {
			return err
		}
		if _, ok := st.Governance.PendingApprovals[handle]; !ok && st.Status == noeta.StatusSuspended {
			// A question or a park: judged as the woken task will.
			if ref := e.judgeReply(st, st.Reason, w); ref != nil {
				return fmt.Errorf("%w: task %s, %s: %s", ErrApproverNotAllowed, task, handle, ref.Reason)
			}
		}
		if pa, ok := st.Governance.PendingApprovals[handle]; ok {
			j, err := e.judge(ctx, st, pa, w)
			if err != nil {
				return err
			}
			if j.late {
				return fmt.Errorf("%w: task %s, %s: %s; nothing was sent, and the request resolves denied by timeout", ErrRequestExpired, task, handle, j.refused.Reason)
			}
			if j.refused != nil {
				return fmt.Errorf("%w: task %s, %s: %s", ErrApproverNotAllowed, task, handle, j.refused.Reason)
			}
		}
		_, err = e.cfg.Dispatcher.Wake(ctx, task, w)
		if !errors.Is(err, eventlog.ErrNotWaiting) && !errors.Is(err, eventlog.ErrAlreadyAnswered) {
			return err
		}
		// The log has the request open and the dispatcher does not wait on
		// it: the task has not been handed back since it asked, or another
		// answer is being judged (the first approval of a quorum, a refused
		// one): the log, read again, says whether that answer closed it.
		ds, derr := e.cfg.Dispatcher.Inspect(ctx, task)
		// Suspended on the handle again by now (the other answer was
		// judged and left the request open between the Wake and this
		// look): the next round's Wake finds it waiting.
		again := derr == nil && ds.Status == eventlog.DispatchSuspended && noeta.Matches(ds.WakeOn, &w)
		transit := again || derr == nil && (ds.Status == eventlog.DispatchLeased || ds.Status == eventlog.DispatchReady)
		if !transit || time.Now().After(deadline) {
			if st, rerr := e.Inspect(ctx, task); rerr == nil {
				if oerr := OpenRequest(st, handle); oerr != nil {
					return oerr
				}
			}
			if transit {
				return fmt.Errorf("%w: task %s asked under %s but has not suspended on it within %s (the dispatcher has it %s); answer again once it waits",
					eventlog.ErrNotWaiting, task, handle, AnswerSettle, ds.Status)
			}
			return err
		}
		if err := pause.Wait(ctx); err != nil {
			return err
		}
	}
}

// OpenRequest reports, from a task's folded state, whether handle names a
// request open now: an approval requested and not resolved, or the
// human_response the task is suspended on (a park, a question). If not, the
// error wraps eventlog.ErrAlreadyAnswered when the log holds the answer to
// it (and ErrRequestExpired too when that answer was its expiry), and
// eventlog.ErrNotWaiting otherwise; either names what is open.
func OpenRequest(st *State, handle string) error {
	for i := len(st.Governance.Approvals) - 1; i >= 0; i-- {
		if a := st.Governance.Approvals[i]; a.Handle == handle {
			if a.Auth == noeta.AuthTimer {
				return fmt.Errorf("%w: %w: task %s: %s expired unanswered (denied by %s: %s)", ErrRequestExpired, eventlog.ErrAlreadyAnswered, st.Task, handle, a.Approver, a.Reason)
			}
			return fmt.Errorf("%w: task %s: %s was answered already (%s by %s)", eventlog.ErrAlreadyAnswered, st.Task, handle, a.Decision, a.Approver)
		}
	}
	if st.Status == noeta.StatusTerminal {
		return fmt.Errorf("%w: task %s has ended; there is nothing to answer", eventlog.ErrNotWaiting, st.Task)
	}
	if _, ok := st.Governance.PendingApprovals[handle]; ok {
		return nil
	}
	if st.Status == noeta.StatusSuspended && st.WakeOn != nil && st.WakeOn.Kind == noeta.WakeHumanResponse && st.WakeOn.Handle == handle {
		return nil
	}
	open := OpenHandles(st)
	if len(open) == 0 {
		return fmt.Errorf("%w: task %s has asked nothing under %s, and no request of it is open", eventlog.ErrNotWaiting, st.Task, handle)
	}
	return fmt.Errorf("%w: task %s has asked nothing under %s; open now: %s", eventlog.ErrNotWaiting, st.Task, handle, strings.Join(open, ", "))
}

// OpenHandles lists the handles a task can be answered on now, sorted.
func OpenHandles(st *State) []string {
	open := make([]string, 0, len(st.Governance.PendingApprovals)+1)
	for h := range st.Governance.PendingApprovals {
		open = append(open, h)
	}
	if st.Status == noeta.StatusSuspended && st.WakeOn != nil && st.WakeOn.Kind == noeta.WakeHumanResponse &&
		!slices.Contains(open, st.WakeOn.Handle) {
		open = append(open, st.WakeOn.Handle)
	}
	slices.Sort(open)
	return open
}

// Inspect folds a task's log.
func (e *Engine) Inspect(ctx context.Context, task string) (*State, error) {
	st, note, err := FoldTask(ctx, e.cfg.Log, e.cfg.Content, task)
	if note != "" {
		e.log.Warn("fold", "task", task, "note", note)
	}
	return st, err
}

// Cancel ends a task with TaskCancelled. A segment this process is running
// for the task is stopped first, at its next cancellation point (between
// turns and between tool calls); then the task is taken over with a fresh
// lease, which fences any worker elsewhere that still holds one, and the
// cancellation is recorded. A terminal task is left as it is (false).
func (e *Engine) Cancel(ctx context.Context, task, reason string) (bool, error) {
	if reason == "" {
		reason = "cancelled"
	}
	e.mu.Lock()
	if s, ok := e.cancels[task]; ok {
		s.stop(errCancelRequested)
	}
	e.mu.Unlock()
	st, err := e.Inspect(ctx, task)
	if err != nil {
		return false, err
	}
	if st.Status == noeta.StatusTerminal {
		return false, nil
	}
	lease, err := e.takeOver(ctx, task)
	if err != nil {
		return false, err
	}
	seg, err := e.newSegment(ctx, lease)
	if err != nil {
		return false, err
	}
	if seg.st.Status == noeta.StatusTerminal {
		return false, e.release(ctx, seg)
	}
	if err := seg.terminate(noeta.TaskCancelled{Reason: reason}); err != nil {
		return false, err
	}
	return true, e.release(ctx, seg)
}

var errCancelRequested = errors.New("engine: cancel requested")

// takeOver leases task whatever its state: forced back to ready and
// reserved, so only a lease naming it takes it, which also fences any holder.
// A worker can still take it in the moment before the reservation (a task
// that was ready unreserved keeps that); then the next round forces it again.
func (e *Engine) takeOver(ctx context.Context, task string) (eventlog.Lease, error) {
	var last error
	for range 100 {
		if err := e.cfg.Dispatcher.Enqueue(ctx, task, eventlog.EnqueueOptions{Reserved: true}); err != nil {
			return eventlog.Lease{}, err
		}
		lease, err := e.cfg.Dispatcher.Lease(ctx, eventlog.LeaseRequest{Worker: e.cfg.Actor + "/control", Task: task, TTL: e.cfg.LeaseTTL})
		if err == nil {
			return lease, nil
		}
		if !errors.Is(err, eventlog.ErrNoReadyTask) {
			return eventlog.Lease{}, err
		}
		last = err
		select {
		case <-ctx.Done():
			return eventlog.Lease{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return eventlog.Lease{}, fmt.Errorf("engine: could not take task %s over: %w", task, last)
}

// DefaultActor names this process in the records it writes and in its
// workers' leases: engine@<host>:<pid>.
func DefaultActor() string {
	host, _ := os.Hostname()
	return "engine@" + host + ":" + strconv.Itoa(os.Getpid())
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
