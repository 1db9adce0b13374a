package guards

import (
	"maps"
	"slices"

	"github.com/noeta-go/noeta"
)

// ContextParams is what the engine knows about a task when it asks the guards.
type ContextParams struct {
	TaskID string
	// Governance is the task's governance slice from a fold of its log made for
	// this check, so that a guard inside a batch sees the calls that already ran.
	Governance noeta.GovernanceState
	// ActiveSkills lists the skills active in the task, in activation order.
	ActiveSkills []string
	// SubtaskDepth is 0 for a root task and parent+1 for a child.
	SubtaskDepth int
	// Metadata is free-form context for user guards.
	Metadata map[string]string
	// SubmittedBy is the principal that submitted the task's tree
	// (TaskCreated's submitted_by; a subtask inherits its parent's): whom
	// a per-principal rate limit counts the call against.
	SubmittedBy string
}

// Context is the read-only view of a task that guards decide on. [NewContext]
// copies everything it is given and no accessor hands out memory the Context
// keeps, so a guard can neither change the engine's state nor what the next
// guard in the stack sees. A Context may be shared by concurrent checks.
type Context struct {
	taskID   string
	gov      noeta.GovernanceState
	skills   []string
	depth    int
	metadata map[string]string
	by       string
}

// NewContext returns a Context holding a deep copy of p.
func NewContext(p ContextParams) *Context {
	return &Context{
		taskID:   p.TaskID,
		gov:      p.Governance.Clone(),
		skills:   slices.Clone(p.ActiveSkills),
		depth:    p.SubtaskDepth,
		metadata: maps.Clone(p.Metadata),
		by:       p.SubmittedBy,
	}
}

// NewContextAppendOnly is [NewContext] for a caller that never changes an
// element of the governance slice's history lists (Denials, SubtaskResults,
// Approvals, and RecentToolCalls, whose window
// [noeta.GovernanceState.NoteToolCall] slides without writing over an
// entry) once it is in them, only appends: those lists are shared, not
// copied, so building a context costs the same at the ten-thousandth record
// of a task as at the first. The metadata map is shared too, so the caller
// must not change it afterwards. Everything else is copied as by
// NewContext, and no accessor hands the shared memory out (Governance and
// Metadata return deep copies), so guards see the same read-only view either
// way. The engine, whose fold only ever appends to those lists and whose
// segment builds its metadata once, builds its contexts this way.
func NewContextAppendOnly(p ContextParams) *Context {
	gov := p.Governance
	gov.Denials = slices.Clip(gov.Denials)
	gov.SubtaskResults = slices.Clip(gov.SubtaskResults)
	gov.Approvals = slices.Clip(gov.Approvals)
	gov.RecentToolCalls = slices.Clip(gov.RecentToolCalls)
	if len(gov.PendingApprovals) > 0 {
		gov.PendingApprovals = maps.Clone(gov.PendingApprovals)
	}
	// The fold replaces a reservation's entry, never the memory it points
	// to, so a copy of the map is enough.
	if len(gov.Reserved) > 0 {
		gov.Reserved = maps.Clone(gov.Reserved)
	}
	return &Context{
		taskID:   p.TaskID,
		gov:      gov,
		skills:   slices.Clone(p.ActiveSkills),
		depth:    p.SubtaskDepth,
		metadata: p.Metadata,
		by:       p.SubmittedBy,
	}
}

// TaskID is the id of the task being stepped.
func (c *Context) TaskID() string { return c.taskID }

// SubtaskDepth is 0 for a root task and parent+1 for a child.
func (c *Context) SubtaskDepth() int { return c.depth }

// Iterations is the number of steps started, the current one included.
func (c *Context) Iterations() int { return c.gov.Iterations }

// ToolCalls is the number of tool calls that ran.
func (c *Context) ToolCalls() int { return c.gov.ToolCalls }

// CostUSD is what the task has cost so far.
func (c *Context) CostUSD() float64 { return c.gov.CostUSD }

// SpawnedSubtasks is the number of subtasks spawned. During a fan-out check
// ([Stack.CheckFanOut]) it counts the members admitted before this one.
func (c *Context) SpawnedSubtasks() int { return c.gov.SpawnedSubtasks }

// Governance returns a deep copy of the governance slice.
func (c *Context) Governance() noeta.GovernanceState { return c.gov.Clone() }

// RecentToolCalls returns a copy of the identity keys of the last executed
// calls ([noeta.RecentToolCallsWindow] at most), oldest first.
func (c *Context) RecentToolCalls() []noeta.ToolCallKey { return slices.Clone(c.gov.RecentToolCalls) }

// ActiveSkills returns a copy of the active skills, in activation order.
func (c *Context) ActiveSkills() []string { return slices.Clone(c.skills) }

// Metadata returns a copy of the metadata.
func (c *Context) Metadata() map[string]string { return maps.Clone(c.metadata) }

// SubmittedBy is the principal that submitted the task's tree ("" when
// none was recorded).
func (c *Context) SubmittedBy() string { return c.by }
