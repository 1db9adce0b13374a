package noeta

import (
	"encoding/json"
	"slices"
	"time"
)

// RecentToolCallsWindow is how many executed tool calls the governance slice
// remembers for repetition checks.
const RecentToolCallsWindow = 32

// GovernanceState is the slice of a task's state that governance reads: every
// counter is a fold of the log and nothing else writes it. Guards get a copy
// ([GovernanceState.Clone]); changing it cannot reach the engine.
type GovernanceState struct {
	Iterations      int     `json:"iterations"`       // TurnStarted
	ToolCalls       int     `json:"tool_calls"`       // ToolCallStarted (executed calls only)
	CostUSD         float64 `json:"cost_usd"`         // PolicyDecided.cost_usd + ToolCallFinished.cost_usd
	InputTokens     int64   `json:"input_tokens"`     // PolicyDecided
	OutputTokens    int64   `json:"output_tokens"`    // PolicyDecided
	SpawnedSubtasks int     `json:"spawned_subtasks"` // SubtaskSpawned

	// The task's tree (docs/adr/0054). Allotment is the task's share of its
	// ancestors' budgets (TaskCreated.budget; nil on a root). SubtaskCostUSD
	// and SubtaskToolCalls are what the trees of its ended subtasks spent
	// (SubtaskResultRecorded.spend, or the whole allotment of a result that
	// carries none). Reserved holds the allotments of the subtasks spawned
	// whose results are not recorded yet, by subtask id: reserved counts as
	// spent until the result says what was.
	Allotment        *BudgetAllotment           `json:"allotment,omitempty"`
	SubtaskCostUSD   float64                    `json:"subtask_cost_usd,omitempty"`
	SubtaskToolCalls int                        `json:"subtask_tool_calls,omitempty"`
	Reserved         map[string]BudgetAllotment `json:"reserved,omitempty"`

	// Denials lists every refusal in log order: guard denials of tool calls and
	// spawns, finish denials, human denials of approvals, cancellations.
	Denials []Denial `json:"denials"`
	// SubtaskResults lists the children's outcomes as the task recorded them.
	SubtaskResults []SubtaskResult `json:"subtask_results"`
	// RecentToolCalls holds the identity keys of the last RecentToolCallsWindow
	// executed calls, oldest first.
	RecentToolCalls []ToolCallKey `json:"recent_tool_calls"`
	// PendingApprovals maps an approval handle to its open request.
	PendingApprovals map[string]PendingApproval `json:"pending_approvals"`
	// Approvals lists resolved approvals in order: who decided, and how.
	Approvals []ApprovalRecord `json:"approvals"`
}

// Denial is one refusal, naming who refused and why.
type Denial struct {
	Type   string `json:"type"` // the record type that carried it
	Guard  string `json:"guard,omitempty"`
	Reason string `json:"reason"`
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Agent  string `json:"agent,omitempty"`
}

// SubtaskResult is one child's outcome.
type SubtaskResult struct {
	SubtaskID string          `json:"subtask_id"`
	Status    SubtaskStatus   `json:"status"`
	Result    json.RawMessage `json:"result,omitempty"`
	ResultRef *ContentRef     `json:"result_ref,omitempty"`
	Error     string          `json:"error,omitempty"`
	GroupID   string          `json:"group_id,omitempty"`
}

// ToolCallKey identifies a call for repetition checks: the tool and the
// canonical bytes of its arguments, or, for arguments longer than
// ArgsInlineLimit, "sha256:" and the hex sha256 of those bytes (the hash of
// the args_ref they were spilled to), so a key stays small and a fold can
// build it without fetching the body.
type ToolCallKey struct {
	Tool string `json:"tool"`
	Args string `json:"args"`
}

// PendingApproval is an approval request not yet resolved.
type PendingApproval struct {
	Action ApprovalAction `json:"action"`
	CallID string         `json:"call_id,omitempty"`
	Tool   string         `json:"tool,omitempty"`
	// Args are the arguments of the action: a tool call's args, a spawn's
	// {agent, goal, script}, a finish's {answer}. ArgsRef replaces them when
	// they were spilled.
	Args    json.RawMessage `json:"args,omitempty"`
	ArgsRef *ContentRef     `json:"args_ref,omitempty"`
	Agent   string          `json:"agent,omitempty"`
	Guard   string          `json:"guard"`
	Reason  string          `json:"reason"`
	// Seq and RequestedAt are the ApprovalRequested record's.
	Seq         uint64    `json:"seq,omitempty"`
	RequestedAt time.Time `json:"requested_at,omitzero"`
	// Quorum, Rules and ExpiresAt are the request's (ApprovalRequested).
	Quorum    int       `json:"quorum,omitempty"`
	Rules     []string  `json:"rules,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Approvers lists the distinct approvers counted toward the quorum so
	// far (ApprovalCounted), in order; Refused counts the ApprovalRefused
	// records of the request.
	Approvers []string `json:"approvers,omitempty"`
	Refused   int      `json:"refused,omitempty"`
}

// ApprovalRecord is a resolved approval.
type ApprovalRecord struct {
	Handle   string           `json:"handle"`
	Action   ApprovalAction   `json:"action"`
	CallID   string           `json:"call_id,omitempty"`
	Tool     string           `json:"tool,omitempty"`
	Decision ApprovalDecision `json:"decision"`
	Approver string           `json:"approver"`
	Reason   string           `json:"reason,omitempty"`
	// Auth says how Approver was authenticated; Approvers lists every
	// approver of a quorum approval (see ApprovalResolved).
	Auth      string   `json:"auth,omitempty"`
	Approvers []string `json:"approvers,omitempty"`
}

// Tree is what the task's tree has spent or holds reserved: the task's own
// spend, its ended subtasks' trees' and its running subtasks' allotments.
// The budgets that bound a tree compare this.
func (g *GovernanceState) Tree() TreeSpend {
	t := TreeSpend{CostUSD: g.CostUSD + g.SubtaskCostUSD, ToolCalls: g.ToolCalls + g.SubtaskToolCalls}
	for _, r := range g.Reserved {
		if r.CostUSD != nil {
			t.CostUSD += *r.CostUSD
		}
		if r.ToolCalls != nil {
			t.ToolCalls += *r.ToolCalls
		}
	}
	return t
}

// NoteSpawned reserves a spawned subtask's allotment.
func (g *GovernanceState) NoteSpawned(id string, a *BudgetAllotment) {
	if a == nil {
		return
	}
	if g.Reserved == nil {
		g.Reserved = map[string]BudgetAllotment{}
	}
	g.Reserved[id] = *a.Clone()
}

// NoteSubtaskSpend releases an ended subtask's reservation and counts what
// its tree spent: spend when the result carries it, the whole allotment
// otherwise (a result that does not say what was spent is charged all it
// could have spent). A subtask whose result was counted already counts
// nothing more, so a repeated result never charges twice.
func (g *GovernanceState) NoteSubtaskSpend(id string, spend *TreeSpend) {
	if slices.ContainsFunc(g.SubtaskResults, func(r SubtaskResult) bool { return r.SubtaskID == id }) {
		return
	}
	r, reserved := g.Reserved[id]
	delete(g.Reserved, id)
	switch {
	case spend != nil:
		g.SubtaskCostUSD += spend.CostUSD
		g.SubtaskToolCalls += spend.ToolCalls
	case reserved:
		if r.CostUSD != nil {
			g.SubtaskCostUSD += *r.CostUSD
		}
		if r.ToolCalls != nil {
			g.SubtaskToolCalls += *r.ToolCalls
		}
	}
}

// NoteToolCall appends k to the recent calls, keeping the window. A full
// window slides forward in an array with room for a few windows, and moves
// to a new one when it reaches the end: the calls are copied once every few
// windows instead of on every call (a long task's fold spent a tenth of its
// time here), and an entry once written is never written over.
func (g *GovernanceState) NoteToolCall(k ToolCallKey) {
	r := g.RecentToolCalls
	if len(r) >= RecentToolCallsWindow {
		r = r[len(r)-RecentToolCallsWindow+1:]
		if len(r) == cap(r) {
			n := make([]ToolCallKey, len(r), 4*RecentToolCallsWindow)
			copy(n, r)
			r = n
		}
	}
	g.RecentToolCalls = append(r, k)
}

// Clone returns a deep copy: nothing in it shares memory with g.
func (g GovernanceState) Clone() GovernanceState {
	c := g
	// slices.Clone keeps a nil slice nil and an empty one empty: the two
	// encode differently (null, []), and a clone encodes as its original.
	c.Denials = slices.Clone(g.Denials)
	c.SubtaskResults = slices.Clone(g.SubtaskResults)
	for i, r := range c.SubtaskResults {
		r.Result = cloneRaw(r.Result)
		r.ResultRef = cloneRef(r.ResultRef)
		c.SubtaskResults[i] = r
	}
	c.RecentToolCalls = slices.Clone(g.RecentToolCalls)
	if g.PendingApprovals != nil {
		c.PendingApprovals = make(map[string]PendingApproval, len(g.PendingApprovals))
		for k, v := range g.PendingApprovals {
			v.Args = cloneRaw(v.Args)
			v.ArgsRef = cloneRef(v.ArgsRef)
			v.Rules = append([]string(nil), v.Rules...)
			v.Approvers = append([]string(nil), v.Approvers...)
			c.PendingApprovals[k] = v
		}
	}
	c.Allotment = g.Allotment.Clone()
	if g.Reserved != nil {
		c.Reserved = make(map[string]BudgetAllotment, len(g.Reserved))
		for k, v := range g.Reserved {
			c.Reserved[k] = *v.Clone()
		}
	}
	c.Approvals = slices.Clone(g.Approvals)
	for i := range c.Approvals {
		c.Approvals[i].Approvers = slices.Clone(c.Approvals[i].Approvers)
	}
	return c
}

func cloneRef(r *ContentRef) *ContentRef {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}
