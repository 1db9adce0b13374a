package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/guards"
)

// State is a task as the fold of its log derives it. Every field is a
// function of the records up to LastSeq and nothing else, so two folds of the
// same log give byte-identical canonical JSON ([State.Canonical]) whether they
// started from genesis or from a snapshot. Snapshots store exactly this.
type State struct {
	Task      string            `json:"task_id"`
	Agent     string            `json:"agent"`
	Goal      string            `json:"goal"`
	GoalRef   *noeta.ContentRef `json:"goal_ref,omitempty"`
	ScriptRef *noeta.ContentRef `json:"script_ref,omitempty"`
	Parent    string            `json:"parent_task_id,omitempty"`
	Root      string            `json:"root_task_id"`
	Depth     int               `json:"subtask_depth"`
	GroupID   string            `json:"group_id,omitempty"`
	// SubmittedBy is who submitted the task (TaskCreated; a child's is its
	// root's): the approvals rules' submitter.
	SubmittedBy string `json:"submitted_by,omitempty"`

	Status noeta.TaskStatus `json:"status"`
	// Reason is the last suspend reason while suspended; for a terminal task,
	// its error or cancel reason.
	Reason string `json:"reason,omitempty"`
	// Guard names the guard that ended a failed task, if one did.
	Guard  string      `json:"guard,omitempty"`
	WakeOn *noeta.Wake `json:"wake_on,omitempty"`
	// LastWake is the wake event of the latest TaskWoken: how a redelivered
	// wake is recognised as consumed.
	LastWake *noeta.Wake `json:"last_wake,omitempty"`
	// Answered is set once the answer the latest TaskWoken delivered is
	// recorded (ApprovalResolved, ApprovalCounted or ApprovalRefused), so a
	// segment resumed after a crash does not judge it a second time.
	Answered bool `json:"answered,omitempty"`
	// WokenFrom is the reason of the suspend the latest TaskWoken ended (a
	// question's "waiting_human: …", a park's): a reply the rules refuse
	// suspends the task on it again.
	WokenFrom string `json:"woken_from,omitempty"`
	// ReplyRefused counts the ApprovalRefused records of the replies to
	// the question or park under ReplyRefusedHandle, so that a flood of
	// refused replies stops being recorded at MaxRefusedPerRequest, as
	// refused answers to an approval do.
	ReplyRefusedHandle string `json:"reply_refused_handle,omitempty"`
	ReplyRefused       int    `json:"reply_refused,omitempty"`
	// SuspendedSeq and SuspendedAt are the latest TaskSuspended's: when a
	// question was asked.
	SuspendedSeq uint64    `json:"suspended_seq,omitempty"`
	SuspendedAt  time.Time `json:"suspended_at,omitzero"`

	LastSeq  uint64 `json:"last_seq"`
	LeaseGen uint64 `json:"lease_gen"`

	Turn Turn `json:"turn"`
	// SnapTurn is the turn of the latest TaskSnapshot; a snapshot is written
	// every SnapshotEveryTurns turns that do not suspend.
	SnapTurn int `json:"snap_turn"`

	Governance noeta.GovernanceState `json:"governance"`
	// Data is the task's free-form state: the JSON merge patches of
	// TaskStatePatched applied in order.
	Data json.RawMessage `json:"data,omitempty"`

	Answer    json.RawMessage   `json:"answer,omitempty"`
	AnswerRef *noeta.ContentRef `json:"answer_ref,omitempty"`

	// Context is the task as a model reads it, composed record by record
	// (every record in log order, like the rest of the state) and carried
	// in snapshots, so a turn's context costs what the turn added, not a
	// re-read of the log. It is set by the first record.
	Context *Composer `json:"context,omitempty"`
}

// Turn is the progress of the current turn: what a worker resuming it after
// another stopped mid-turn needs to finish it without repeating anything.
type Turn struct {
	N   int    `json:"n"`   // the turn number (TurnStarted.turn)
	Seq uint64 `json:"seq"` // the seq of its TurnStarted
	// Open is true from TurnStarted until the turn's decision is carried
	// out: the next TurnStarted, a suspend that ends the turn, or a terminal
	// record. An approval or park suspend leaves it open: the turn resumes
	// after the wake.
	Open    bool               `json:"open"`
	Decided bool               `json:"decided"`
	Kind    noeta.DecisionKind `json:"kind,omitempty"`
	// Calls is what the log holds about each tool call of the turn.
	Calls map[string]CallStatus `json:"calls,omitempty"`
	// Spawned lists the subtask ids spawned in this turn, in order.
	Spawned []string `json:"spawned,omitempty"`
	// Approval is the resolution of a spawn or finish approval of this turn.
	Approval CallStatus `json:"approval,omitempty"`
	// Approved holds the approved requests of this turn by handle: approve
	// runs exactly what was recorded, not what the policy proposes again.
	Approved map[string]noeta.PendingApproval `json:"approved,omitempty"`
	// Seals counts StepAttemptAbandoned records in this turn in a row.
	Seals int `json:"seals"`
	// Patched is set once the turn's TaskStatePatched is in the log.
	Patched bool `json:"patched,omitempty"`
	// Decision is the turn's PolicyDecided when it carries the decision
	// (version 2): the turn is carried out from it and the policy is not
	// asked again. A version 1 record leaves it nil.
	Decision *noeta.PolicyDecided `json:"decision,omitempty"`
	// Shadowed holds the actions of the turn whose GuardShadowed records
	// are in the log (shadowKey): an action judged again, because its
	// verdict record never landed, does not record them twice.
	Shadowed map[string]bool `json:"shadowed,omitempty"`
}

// shadowKey names an action of the turn in Turn.Shadowed: a tool call by
// its id, the turn's spawn or finish by its action point.
func shadowKey(action noeta.ApprovalAction, callID string) string {
	return string(action) + ":" + callID
}

// CallStatus is where a tool call (or a spawn or finish approval) of the
// current turn stands.
type CallStatus string

// The call statuses.
const (
	CallStarted  CallStatus = "started"  // ToolCallStarted, no result yet
	CallFinished CallStatus = "finished" // ToolCallFinished
	CallDenied   CallStatus = "denied"   // ToolCallDenied
	CallAwaiting CallStatus = "awaiting" // ApprovalRequested, not resolved
	CallApproved CallStatus = "approved" // ApprovalResolved approve, not yet run
	CallRefused  CallStatus = "refused"  // ApprovalResolved deny
)

// Reasons of the suspends that leave the turn open.
const (
	ReasonWaitingApproval = "waiting_approval"
	ReasonParked          = "parked"
)

// fastFold turns the direct field reader of fastfold.go on; tests turn it
// off to compare it with the ordinary decoder.
var fastFold = true

// ErrBadLog is wrapped by Apply for a log a fold cannot make sense of: a first
// record that is not TaskCreated, a gap in seq, a known record whose payload
// does not decode.
var ErrBadLog = errors.New("engine: bad log")

// Apply folds one log record into s. It is the only place state changes:
// the engine applies every record it writes, and a fold from the log applies
// the same records, so both reach the same state. Records of types outside
// the catalogue are skipped (their seq still counts); inbox records (Seq 0)
// are refused, since fold reads the log only.
func (s *State) Apply(env eventlog.Envelope) error { return s.apply(env, nil) }

// apply is Apply, reading the hot records' payloads into sc's structs when
// sc is not nil (a fold of many records).
func (s *State) apply(env eventlog.Envelope, sc *foldScratch) error {
	if env.Seq == 0 {
		return fmt.Errorf("%w: task %s: an inbox record (key %q) is not part of the log", ErrBadLog, env.Task, env.Key)
	}
	if env.Seq != s.LastSeq+1 {
		return fmt.Errorf("%w: task %s: record seq %d follows seq %d", ErrBadLog, env.Task, env.Seq, s.LastSeq)
	}
	if s.LastSeq == 0 && env.Type != noeta.TypeTaskCreated {
		return fmt.Errorf("%w: task %s: the first record is %s, not TaskCreated", ErrBadLog, env.Task, env.Type)
	}
	p, known := fastPayload(env.Type, env.Payload, sc)
	if !known || !fastFold {
		var err error
		if p, known, err = env.Decode(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadLog, err)
		}
	}
	s.LastSeq = env.Seq
	if env.LeaseGen > s.LeaseGen {
		s.LeaseGen = env.LeaseGen
	}
	if !known {
		return nil
	}
	g := &s.Governance
	switch p := p.(type) {
	case *noeta.TaskCreated:
		s.Task, s.Agent, s.Goal, s.GoalRef, s.ScriptRef = p.TaskID, p.Agent, p.Goal, p.GoalRef, p.ScriptRef
		s.Parent, s.Root, s.Depth, s.GroupID = p.ParentTaskID, p.RootTaskID, p.SubtaskDepth, p.GroupID
		s.SubmittedBy = p.SubmittedBy
		g.Allotment = p.Budget.Clone()
		s.Status = noeta.StatusPending
	case *noeta.LeaseGranted:
		if s.Status == noeta.StatusPending {
			s.Status = noeta.StatusRunning
		}
	case *noeta.TurnStarted:
		// The calls map is emptied for the new turn, not dropped: a map a
		// turn was a fifth of what folding a long log allocated. Nothing
		// keeps the last turn's map (Clone copies it).
		calls := s.Turn.Calls
		clear(calls)
		s.Turn = Turn{N: p.Turn, Seq: env.Seq, Open: true, Calls: calls}
		g.Iterations++
	case *noeta.PolicyDecided:
		s.Turn.Decided, s.Turn.Kind = true, p.Decision
		if p.Version >= 2 {
			s.Turn.Decision = p
			if sc != nil && sc.decided == p {
				sc.decided = nil // kept: the next decision needs its own
			}
		}
		g.CostUSD += p.CostUSD
		g.InputTokens += p.InputTokens
		g.OutputTokens += p.OutputTokens
	case *noeta.ToolCallStarted:
		g.ToolCalls++
		key := noeta.ToolCallKey{Tool: p.Tool, Args: string(p.Args)}
		if p.ArgsRef != nil {
			key.Args = guards.SpilledArgsKey(p.ArgsRef.Hash)
		} else if len(p.Args) == 0 {
			key.Args = "{}"
		}
		g.NoteToolCall(key)
		s.setCall(p.CallID, CallStarted)
	case *noeta.ToolCallFinished:
		g.CostUSD += p.CostUSD
		s.setCall(p.CallID, CallFinished)
	case *noeta.ToolCallDenied:
		g.Denials = append(g.Denials, noeta.Denial{Type: env.Type, Guard: p.Guard, Reason: p.Reason, CallID: p.CallID, Tool: p.Tool})
		s.setCall(p.CallID, CallDenied)
	case *noeta.SubtaskSpawned:
		g.SpawnedSubtasks++
		s.Turn.Spawned = append(s.Turn.Spawned, p.SubtaskID)
		g.NoteSpawned(p.SubtaskID, p.Budget)
	case *noeta.SubtaskDenied:
		g.Denials = append(g.Denials, noeta.Denial{Type: env.Type, Guard: p.Guard, Reason: p.Reason, Agent: p.Agent})
	case *noeta.FinishDenied:
		g.Denials = append(g.Denials, noeta.Denial{Type: env.Type, Guard: p.Guard, Reason: p.Reason})
	case *noeta.GuardShadowed:
		// A shadow verdict never decides: no denial, no count, nothing
		// a guard reads. Only that it is recorded.
		if s.Turn.Shadowed == nil {
			s.Turn.Shadowed = map[string]bool{}
		}
		s.Turn.Shadowed[shadowKey(p.Action, p.CallID)] = true
	case *noeta.ApprovalRequested:
		if g.PendingApprovals == nil {
			g.PendingApprovals = map[string]noeta.PendingApproval{}
		}
		g.PendingApprovals[p.Handle] = noeta.PendingApproval{
			Action: p.Action, CallID: p.CallID, Tool: p.Tool, Args: p.Args, ArgsRef: p.ArgsRef,
			Agent: p.Agent, Guard: p.Guard, Reason: p.Reason,
			Quorum: p.Quorum, Rules: slices.Clone(p.Rules), ExpiresAt: p.ExpiresAt,
			Seq: env.Seq, RequestedAt: foldTime(env.Time),
		}
		if p.Action == noeta.ApprovalToolCall {
			s.setCall(p.CallID, CallAwaiting)
		} else {
			s.Turn.Approval = CallAwaiting
		}
	case *noeta.ApprovalResolved:
		pa, ok := g.PendingApprovals[p.Handle]
		if !ok {
			// Resolving nothing changes nothing; the engine never writes it.
			return nil
		}
		delete(g.PendingApprovals, p.Handle)
		s.Answered = true
		g.Approvals = append(g.Approvals, noeta.ApprovalRecord{
			Handle: p.Handle, Action: pa.Action, CallID: pa.CallID, Tool: pa.Tool,
			Decision: p.Decision, Approver: p.Approver, Reason: p.Reason,
			Auth: p.Auth, Approvers: slices.Clone(p.Approvers),
		})
		st := CallApproved
		if p.Decision == noeta.ApprovalApprove {
			if s.Turn.Approved == nil {
				s.Turn.Approved = map[string]noeta.PendingApproval{}
			}
			s.Turn.Approved[p.Handle] = pa
		} else {
			st = CallRefused
			reason := p.Reason
			if reason == "" {
				reason = "denied by " + p.Approver
			}
			g.Denials = append(g.Denials, noeta.Denial{Type: env.Type, Reason: reason, CallID: pa.CallID, Tool: pa.Tool, Agent: pa.Agent})
		}
		if pa.Action == noeta.ApprovalToolCall {
			s.setCall(pa.CallID, st)
		} else {
			s.Turn.Approval = st
		}
	case *noeta.ApprovalCounted:
		// Counts toward the quorum; the request stays open and no status
		// changes.
		if pa, ok := g.PendingApprovals[p.Handle]; ok {
			if !slices.Contains(pa.Approvers, p.Approver) {
				pa.Approvers = append(slices.Clone(pa.Approvers), p.Approver)
			}
			g.PendingApprovals[p.Handle] = pa
			s.Answered = true
		}
	case *noeta.ApprovalRefused:
		if pa, ok := g.PendingApprovals[p.Handle]; ok {
			pa.Refused++
			g.PendingApprovals[p.Handle] = pa
			s.Answered = true
		} else if s.Status == noeta.StatusRunning && s.LastWake != nil && s.LastWake.Handle == p.Handle {
			// A reply to a question or a park, refused: the task asks
			// again.
			s.Answered = true
			if s.ReplyRefusedHandle != p.Handle {
				s.ReplyRefusedHandle, s.ReplyRefused = p.Handle, 0
			}
			s.ReplyRefused++
		}
	case *noeta.SubtaskResultRecorded:
		g.NoteSubtaskSpend(p.SubtaskID, p.Spend)
		g.SubtaskResults = append(g.SubtaskResults, noeta.SubtaskResult{
			SubtaskID: p.SubtaskID, Status: p.Status, Result: p.Result, ResultRef: p.ResultRef, Error: p.Error, GroupID: p.GroupID,
		})
	case *noeta.TaskStatePatched:
		merged, err := mergePatch(s.Data, p.Patch)
		if err != nil {
			return fmt.Errorf("%w: task %s seq %d: %v", ErrBadLog, env.Task, env.Seq, err)
		}
		s.Data = merged
		s.Turn.Patched = true
	case *noeta.TaskSuspended:
		s.Status, s.Reason = noeta.StatusSuspended, p.Reason
		s.SuspendedSeq, s.SuspendedAt = env.Seq, foldTime(env.Time)
		w := p.WakeOn.Clone()
		s.WakeOn = &w
		if p.Reason != ReasonWaitingApproval && !isParkReason(p.Reason) {
			s.Turn.Open = false
		}
	case *noeta.TaskWoken:
		w := p.WakeEvent.Clone()
		s.WokenFrom = s.Reason
		s.Status, s.WakeOn, s.LastWake, s.Reason = noeta.StatusRunning, nil, &w, ""
		s.Answered = false
		s.Turn.Seals = 0
	case *noeta.TaskSnapshot:
		s.SnapTurn = s.Turn.N
	case *noeta.StepAttemptAbandoned:
		s.Turn.Seals++
	case *noeta.TaskCompleted:
		s.end("")
		s.Answer, s.AnswerRef = p.Answer, p.AnswerRef
	case *noeta.TaskFailed:
		s.end(p.Error)
		s.Guard = p.Guard
	case *noeta.TaskCancelled:
		s.end(p.Reason)
		g.Denials = append(g.Denials, noeta.Denial{Type: env.Type, Reason: p.Reason})
	}
	if s.Context == nil {
		s.Context = NewComposer(ComposerConfig{})
	}
	// p is the whole payload for every type the composer shows; only
	// LeaseGranted and TaskSnapshot come from the fast reader empty (their
	// type is all the fold needs, and the context shows neither).
	s.Context.Apply(env, p)
	return nil
}

func (s *State) end(reason string) {
	s.Status, s.Reason, s.WakeOn = noeta.StatusTerminal, reason, nil
	s.Turn.Open = false
}

func (s *State) setCall(id string, st CallStatus) {
	if s.Turn.Calls == nil {
		s.Turn.Calls = map[string]CallStatus{}
	}
	s.Turn.Calls[id] = st
}

func isParkReason(r string) bool {
	return r == ReasonParked || len(r) > len(ReasonParked) && r[:len(ReasonParked)+1] == ReasonParked+":"
}

// Canonical returns the state's canonical JSON: the snapshot body, and the
// bytes two folds of one log agree on. The composed context, most of the
// bytes, is encoded by the composer (which encodes each closed message
// once) and set into the rest as its member "context": the same bytes as
// encoding the whole state at once (TestCanonicalSplicesTheContext).
func (s *State) Canonical() ([]byte, error) {
	if s.Context == nil {
		return noeta.Canonical(s)
	}
	rest := *s
	rest.Context = nil
	body, err := noeta.Canonical(&rest)
	if err != nil {
		return nil, err
	}
	ctx, err := s.Context.canonical()
	if err != nil {
		return nil, err
	}
	if out, ok := withMember(body, "context", ctx); ok {
		return out, nil
	}
	return noeta.Canonical(s)
}

// withMember returns the canonical JSON object obj with the member name:
// val added in its place in key order. Keys are compared as bytes, which is
// canonical order for ASCII keys; ok is false if obj has another kind of
// key (or is not an object withMember can walk), or has name already.
func withMember(obj []byte, name string, val []byte) ([]byte, bool) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, false
	}
	at := len(obj) - 1 // where the member goes: before the key there, or at the end
	if len(obj) > 2 {
		i := 1
		for {
			if obj[i] != '"' {
				return nil, false
			}
			j := i + 1
			for j < len(obj) && obj[j] != '"' {
				if obj[j] == '\\' || obj[j] >= 0x80 {
					return nil, false
				}
				j++
			}
			if j+1 >= len(obj) || obj[j+1] != ':' {
				return nil, false
			}
			if key := string(obj[i+1 : j]); key == name {
				return nil, false
			} else if key > name {
				at = i
				break
			}
			end, ok := skipValue(obj, j+2)
			if !ok || end >= len(obj) {
				return nil, false
			}
			if obj[end] == '}' {
				if end != len(obj)-1 {
					return nil, false
				}
				break
			}
			if obj[end] != ',' {
				return nil, false
			}
			i = end + 1
		}
	}
	out := make([]byte, 0, len(obj)+len(name)+len(val)+4)
	out = append(out, obj[:at]...)
	if at == len(obj)-1 && len(obj) > 2 {
		out = append(out, ',')
	}
	out = append(append(append(append(out, '"'), name...), `":`...), val...)
	if at != len(obj)-1 {
		out = append(out, ',')
	}
	return append(out, obj[at:]...), true
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Governance = s.Governance.Clone()
	c.Turn.Calls = maps.Clone(s.Turn.Calls)
	c.Turn.Approved = maps.Clone(s.Turn.Approved)
	c.Turn.Shadowed = maps.Clone(s.Turn.Shadowed)
	c.Turn.Spawned = slices.Clone(s.Turn.Spawned)
	c.Data = slices.Clone(s.Data)
	c.Answer = slices.Clone(s.Answer)
	if s.WakeOn != nil {
		w := s.WakeOn.Clone()
		c.WakeOn = &w
	}
	if s.LastWake != nil {
		w := s.LastWake.Clone()
		c.LastWake = &w
	}
	if s.Turn.Decision != nil {
		d := *s.Turn.Decision
		c.Turn.Decision = &d
	}
	if s.Context != nil {
		// The composer has no copy of its own: its snapshot form is one.
		c.Context = NewComposer(ComposerConfig{})
		if b, err := s.Context.MarshalJSON(); err == nil {
			if err := c.Context.UnmarshalJSON(b); err != nil {
				c.Context = nil
			}
		} else {
			c.Context = nil
		}
	}
	return &c
}

// Fold folds a list of log records from genesis.
func Fold(envs []eventlog.Envelope) (*State, error) {
	s := &State{}
	var sc foldScratch
	for _, env := range envs {
		if err := s.apply(env, &sc); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// snapshotReader is what FoldTask reads.
type snapshotReader interface {
	Read(ctx context.Context, task string, afterSeq uint64) ([]eventlog.Envelope, error)
	LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error)
}

// contentGetter fetches snapshot bodies.
type contentGetter interface {
	Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error)
}

// FoldTask returns the state of task from its latest snapshot and the records
// after it, or from genesis when it has none or the snapshot cannot be used
// (its body is missing or does not match its record: note says why, for the
// caller to log; it is never fatal). ErrNotFound if the task has no log.
func FoldTask(ctx context.Context, r snapshotReader, cs contentGetter, task string) (s *State, note string, err error) {
	snap, err := r.LatestSnapshot(ctx, task)
	switch {
	case err == nil:
		s, note = fromSnapshot(ctx, cs, snap)
	case errors.Is(err, eventlog.ErrNotFound):
	default:
		return nil, "", err
	}
	if s == nil {
		s = &State{}
	}
	tail, err := r.Read(ctx, task, s.LastSeq)
	if err != nil {
		return nil, "", err
	}
	if s.LastSeq == 0 && len(tail) == 0 {
		return nil, "", fmt.Errorf("%w: task %s has no log", eventlog.ErrNotFound, task)
	}
	var sc foldScratch
	for _, env := range tail {
		if err := s.apply(env, &sc); err != nil {
			return nil, "", err
		}
	}
	return s, note, nil
}

// fromSnapshot loads the state a TaskSnapshot points at, or returns nil and
// why it could not.
func fromSnapshot(ctx context.Context, cs contentGetter, snap eventlog.Envelope) (*State, string) {
	p, _, err := snap.Decode()
	if err != nil {
		return nil, fmt.Sprintf("snapshot seq %d does not decode (%v); folding from genesis", snap.Seq, err)
	}
	ts, ok := p.(*noeta.TaskSnapshot)
	if !ok {
		return nil, ""
	}
	body, err := cs.Get(ctx, ts.StateRef)
	if err != nil {
		return nil, fmt.Sprintf("snapshot seq %d: body %s unavailable (%v); folding from genesis", snap.Seq, ts.StateRef.Hash, err)
	}
	var s State
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Sprintf("snapshot seq %d: body does not decode (%v); folding from genesis", snap.Seq, err)
	}
	if s.LastSeq != ts.UptoSeq || s.Task != snap.Task {
		return nil, fmt.Sprintf("snapshot seq %d: body is of %s up to seq %d, the record says %s up to %d; folding from genesis", snap.Seq, s.Task, s.LastSeq, snap.Task, ts.UptoSeq)
	}
	if s.Context == nil {
		// Written before the composed context was part of the state: its
		// context would start from the snapshot, missing the history.
		return nil, fmt.Sprintf("snapshot seq %d predates the composed context; folding from genesis", snap.Seq)
	}
	return &s, ""
}

// mergePatch applies an RFC 7396 JSON merge patch to doc and returns the
// canonical result.
func mergePatch(doc, patch json.RawMessage) (json.RawMessage, error) {
	var d, p any
	if len(doc) > 0 {
		if err := decodeNumbers(doc, &d); err != nil {
			return nil, fmt.Errorf("state data: %v", err)
		}
	}
	if err := decodeNumbers(patch, &p); err != nil {
		return nil, fmt.Errorf("patch: %v", err)
	}
	out, err := noeta.Canonical(merge(d, p))
	if err != nil {
		return nil, err
	}
	return out, nil
}

func merge(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = merge(tm[k], v)
	}
	return tm
}

// decodeNumbers decodes JSON keeping numbers as written, so a patch never
// rounds an integer.
func decodeNumbers(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// foldTime is a record's append time as the state keeps it: UTC, whole
// seconds, so that a fold of the records a segment wrote and a fold of the
// same records read back (a backend may keep the time at a coarser
// precision, or in another zone) agree byte for byte.
func foldTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Second)
}
