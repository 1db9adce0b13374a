package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// DefaultMaxToolOutput is the cap on one tool result's text in a composed
// transcript, in runes, when ComposerConfig leaves it zero.
const DefaultMaxToolOutput = 4000

// ComposerConfig configures a [Composer].
type ComposerConfig struct {
	// MaxToolOutput caps each tool result's (and subtask result's) text, in
	// runes (0: DefaultMaxToolOutput). Longer text is cut with a note naming
	// its size and the content ref when there is one.
	MaxToolOutput int
}

// Composer turns a task's log, record by record, into the transcript a model
// reads ([noeta.Transcript]). It is pure: what it renders is a function of
// the records it was given and its config, nothing else (no IO, no clock),
// so two workers folding one log hand a model the same transcript.
//
// Messages are grouped by turn, because the providers' wire formats demand
// it: a turn's assistant message carries all its tool calls, and a tool
// message for every one of them follows it directly, before anything else
// the turn caused (approval outcomes, subtask starts, a human's answer).
// The records of a turn arrive interleaved (a call's result before the next
// call is known), so the turn is held open and its messages are appended to
// the transcript when the next turn starts or the task ends. Until then
// [Composer.Transcript] renders the open turn into a copy; at a turn's start,
// when a policy is asked, the open turn is empty and no copy is made.
//
// A Composer is not safe for concurrent use; the engine owns one per folded
// state.
type Composer struct {
	cfg  ComposerConfig
	msgs []noeta.Message // closed turns: append-only
	open openTurn
	// asked is the reason of the latest suspend, so a human_response wake is
	// shown as an answer only when the task asked a question (approvals are
	// shown by ApprovalResolved, and a park's release is no news to a model).
	asked string
	// canon is the canonical JSON of msgs[:ncanon], each message followed
	// by a comma. Closed turns' messages never change, so a snapshot
	// encodes only the messages added since the one before: the
	// transcript is most of a snapshot, and encoding all of it every time
	// made a snapshot cost the whole history.
	canon  []byte
	ncanon int
}

// openTurn is the turn whose records are still arriving.
type openTurn struct {
	// Decided is set once the decision's own message is known.
	Kind noeta.DecisionKind `json:"kind,omitempty"`
	// Said is the assistant's text for a decision that is not tool calls.
	Said string `json:"said,omitempty"`
	// Text is what the model said beside its decision, from the record
	// (text, or a note naming text_ref): the assistant message carries it
	// before Said and the calls, as the provider returned it
	// (docs/adr/0084).
	Text string `json:"text,omitempty"`
	// FromRecord is set when the decision record carried its parts (a v2
	// PolicyDecided): later records add results, not a second copy of the
	// decision.
	FromRecord bool `json:"from_record,omitempty"`
	// SpawnAsked is set when a spawn approval request showed the child
	// (an approval is only ever asked for a spawn of one).
	SpawnAsked bool             `json:"spawn_asked,omitempty"`
	Calls      []noeta.ToolCall `json:"calls,omitempty"`
	// Results are the tool messages by call id.
	Results map[string]noeta.Message `json:"results,omitempty"`
	// Notes are the user messages of the turn, in log order, after the tool
	// messages.
	Notes []noeta.Message `json:"notes,omitempty"`
	// Approvals are the turn's unresolved approval requests by handle.
	Approvals map[string]approval `json:"approvals,omitempty"`
}

// approval is what an approval request was for.
type approval struct {
	Subject string               `json:"subject"`
	CallID  string               `json:"call_id,omitempty"`
	Tool    string               `json:"tool,omitempty"`
	Action  noeta.ApprovalAction `json:"action"`
}

// empty reports a turn with nothing to show yet.
func (t *openTurn) empty() bool {
	return len(t.Calls) == 0 && t.Said == "" && t.Text == "" && len(t.Notes) == 0
}

// NewComposer returns an empty composer.
func NewComposer(cfg ComposerConfig) *Composer {
	if cfg.MaxToolOutput <= 0 {
		cfg.MaxToolOutput = DefaultMaxToolOutput
	}
	return &Composer{cfg: cfg}
}

// Apply takes one record of the task's log, in log order, with its decoded
// payload p (env's payload, decoded: the composer reads the decision from
// p, not from env); records it does not show (leases, snapshots, seals,
// types it does not know) are ignored.
func (c *Composer) Apply(env eventlog.Envelope, p noeta.Payload) {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		text := p.Goal
		if p.GoalRef != nil {
			text = joinNonEmpty(text, "[the goal is stored by content ref "+refName(p.GoalRef)+"; it is not shown here]")
		}
		c.msgs = append(c.msgs, noeta.Message{Role: noeta.RoleUser, Text: text})
	case *noeta.TurnStarted:
		c.closeTurn()
	case *noeta.PolicyDecided:
		c.decided(env.Payload, p)
	case *noeta.ToolCallStarted:
		c.call(p.CallID, p.Tool, p.Args, p.ArgsRef)
	case *noeta.ToolCallFinished:
		c.call(p.CallID, p.Tool, nil, nil)
		m := noeta.Message{Role: noeta.RoleTool, ToolCallID: p.CallID, ToolName: p.Tool}
		if p.OK {
			m.Text = c.capped(p.Output, p.OutputRef, "output")
			if p.OutputRef != nil && p.Preview != "" {
				m.Text = c.previewed(p.Preview, p.OutputRef)
			}
		} else {
			m.IsError = true
			m.Text = p.Error
			if m.Text == "" {
				m.Text = "the call failed without an error message"
			}
		}
		c.result(m)
	case *noeta.ToolCallDenied:
		c.call(p.CallID, p.Tool, nil, nil)
		c.result(noeta.Message{Role: noeta.RoleTool, ToolCallID: p.CallID, ToolName: p.Tool, IsError: true,
			Text: "denied by " + p.Guard + ": " + p.Reason})
	case *noeta.ApprovalRequested:
		switch p.Action {
		case noeta.ApprovalToolCall:
			c.call(p.CallID, p.Tool, p.Args, p.ArgsRef)
		case noeta.ApprovalSpawnSubtask:
			if !c.open.FromRecord {
				c.say(noeta.DecisionSpawn, spawnText(p.Agent, spawnGoal(p.Args)))
				// Its SubtaskSpawned, if approved, is the same child.
				c.open.SpawnAsked = true
			}
		case noeta.ApprovalFinish:
			if !c.open.FromRecord {
				c.say(noeta.DecisionFinish, answerText(p.Args, p.ArgsRef))
			}
		}
		subject := approvalSubject(p.Action, p.CallID, p.Tool, p.Agent)
		if c.open.Approvals == nil {
			c.open.Approvals = map[string]approval{}
		}
		c.open.Approvals[p.Handle] = approval{Subject: subject, CallID: p.CallID, Tool: p.Tool, Action: p.Action}
		c.note(subject + " needs a human's approval (asked by " + p.Guard + ": " + p.Reason + ")")
	case *noeta.ApprovalResolved:
		a, ok := c.open.Approvals[p.Handle]
		if !ok {
			// Resolving nothing changes nothing (the fold ignores it too).
			return
		}
		delete(c.open.Approvals, p.Handle)
		verb := "approved"
		if p.Decision != noeta.ApprovalApprove {
			verb = "refused"
		}
		// Counted and refused answers are not shown: the model sees what
		// was decided, not who tried.
		who := p.Approver
		if len(p.Approvers) > 1 {
			who = strings.Join(p.Approvers, " and ")
		}
		text := verb + " by " + who
		if p.Reason != "" {
			text += ": " + p.Reason
		}
		if p.Auth == noeta.AuthTimer {
			text = "refused: no one answered in time (" + p.Reason + ")"
		}
		if a.Action == noeta.ApprovalToolCall && verb == "refused" {
			// The call never runs: its refusal is its result.
			c.result(noeta.Message{Role: noeta.RoleTool, ToolCallID: a.CallID, ToolName: a.Tool, IsError: true, Text: text})
		}
		c.note(a.Subject + " was " + text)
	case *noeta.SubtaskSpawned:
		if !c.open.FromRecord && !c.open.SpawnAsked {
			c.say(noeta.DecisionSpawn, spawnText(p.Agent, p.Goal))
		}
		c.note("subtask " + p.SubtaskID + " started (agent " + p.Agent + ")")
	case *noeta.SubtaskDenied:
		if !c.open.FromRecord {
			c.say(noeta.DecisionSpawn, spawnText(p.Agent, ""))
		}
		c.note("spawn of agent " + p.Agent + " denied by " + p.Guard + ": " + p.Reason)
	case *noeta.SubtaskResultRecorded:
		text := "subtask " + p.SubtaskID + " " + string(p.Status)
		switch {
		case p.Status == noeta.SubtaskStatusCompleted:
			text += ": " + c.capped(p.Result, p.ResultRef, "result")
		case p.Error != "":
			text += ": " + p.Error
		}
		c.note(text)
	case *noeta.FinishDenied:
		c.note("finish denied by " + p.Guard + ": " + p.Reason)
	case *noeta.TaskStatePatched:
		if !c.open.FromRecord {
			c.say(noeta.DecisionStatePatch, "state_patch: "+string(p.Patch))
		}
	case *noeta.TaskSuspended:
		c.asked = p.Reason
		if c.open.FromRecord || c.open.Said != "" {
			break
		}
		// A first-version decision record names only its kind: the
		// suspend says what was asked or awaited.
		switch k := c.open.Kind; {
		case k == noeta.DecisionYieldForHuman && strings.HasPrefix(p.Reason, "waiting_human: "):
			c.say(k, "ask_human: "+strings.TrimPrefix(p.Reason, "waiting_human: "))
		case k == noeta.DecisionWaitTimer:
			c.say(k, "wait_timer: until "+fireAt(p.WakeOn))
		case k == noeta.DecisionWaitExternal:
			c.say(k, "wait_external: "+p.WakeOn.EventKind)
		}
	case *noeta.TaskWoken:
		c.woken(p.WakeEvent)
	case *noeta.TaskCompleted:
		if c.open.Said == "" && (c.open.Kind == noeta.DecisionFinish || c.open.Kind == "") {
			c.say(noeta.DecisionFinish, answerText(p.Answer, p.AnswerRef))
		}
		c.closeTurn()
	case *noeta.TaskFailed:
		if c.open.Kind == noeta.DecisionFail && c.open.Said == "" {
			c.say(noeta.DecisionFail, "fail: "+p.Error)
		} else if c.open.Kind != noeta.DecisionFail {
			c.note("the task failed: " + p.Error)
		}
		c.closeTurn()
	case *noeta.TaskCancelled:
		c.note("the task was cancelled: " + p.Reason)
		c.closeTurn()
	}
}

// decided starts the turn's decision from its record: the whole decision
// when the record carries it, else only its kind (the parts come from the
// records that carry it out). d is the record decoded (or read by the fold's
// fast reader, which gives the same); raw is its payload, read only for what
// the decoded struct cannot say: whether a wait of zero seconds was written
// or left out.
func (c *Composer) decided(raw json.RawMessage, d *noeta.PolicyDecided) {
	kind := d.Decision
	c.open.Kind = kind
	// The model's own words go back to it as it said them, whatever the
	// record carries of the parts; a text by ref is named, not fetched
	// (the composer is pure). A record without text (a script's, or one
	// written before records had it) composes as it always did.
	c.open.Text = d.Text
	if d.TextRef != nil {
		c.open.Text = "[text stored by content ref " + refName(d.TextRef) + " (" + strconv.FormatInt(d.TextRef.Size, 10) + " bytes); not shown]"
	}
	full := true
	switch kind {
	case noeta.DecisionToolCalls:
		full = len(d.ToolCalls) > 0
		for _, rc := range d.ToolCalls {
			i := c.call(rc.CallID, rc.Tool, rc.Args, rc.ArgsRef)
			if rc.Invalid != "" {
				// Why it cannot run, for a provider that must send the call
				// back as the model made it.
				c.open.Calls[i].Invalid = rc.Invalid
			}
		}
	case noeta.DecisionSpawn:
		full = len(d.Spawn) > 0
		var parts []string
		for _, s := range d.Spawn {
			goal := s.Goal
			if s.GoalRef != nil {
				goal = joinNonEmpty(goal, "[goal stored by content ref "+refName(s.GoalRef)+"; not shown]")
			}
			parts = append(parts, spawnText(s.Agent, goal))
		}
		c.open.Said = strings.Join(parts, "\n")
	case noeta.DecisionYieldForHuman:
		full = d.Question != ""
		c.open.Said = "ask_human: " + d.Question
	case noeta.DecisionWaitTimer:
		secs, set := d.WaitSeconds, d.WaitSeconds != 0
		if !set {
			var w struct {
				WaitSeconds *float64 `json:"wait_seconds"`
			}
			if json.Unmarshal(raw, &w) == nil && w.WaitSeconds != nil {
				secs, set = *w.WaitSeconds, true
			}
		}
		full = set
		if full {
			c.open.Said = "wait_timer: " + strconv.FormatFloat(secs, 'g', -1, 64) + " s"
		}
	case noeta.DecisionWaitExternal:
		full = d.EventKind != ""
		c.open.Said = "wait_external: " + d.EventKind
	case noeta.DecisionStatePatch:
		full = len(d.Patch) > 0 || d.PatchRef != nil
		c.open.Said = "state_patch: " + string(d.Patch)
		if d.PatchRef != nil {
			c.open.Said = "state_patch: [stored by content ref " + refName(d.PatchRef) + "; not shown]"
		}
	case noeta.DecisionFinish:
		full = len(d.Answer) > 0 || d.AnswerRef != nil
		c.open.Said = answerText(d.Answer, d.AnswerRef)
	case noeta.DecisionFail:
		full = d.Error != ""
		c.open.Said = "fail: " + d.Error
	}
	if !full {
		c.open.Said = ""
	}
	c.open.FromRecord = full
	// The suspend of a wait says nothing more than its decision; a v1
	// record of a wait is rendered from its kind and suspend.
}

// Clone returns a composer that goes on from where c is without changing
// it: the closed turns' messages are shared (they are never modified, and
// the clone's appends cannot reach them), the open turn is copied. Its
// cost is the open turn's size, not the history's.
func (c *Composer) Clone() *Composer {
	d := *c
	d.msgs = c.msgs[:len(c.msgs):len(c.msgs)]
	d.canon = c.canon[:len(c.canon):len(c.canon)]
	d.open.Calls = slices.Clone(c.open.Calls)
	d.open.Results = maps.Clone(c.open.Results)
	d.open.Notes = slices.Clone(c.open.Notes)
	d.open.Approvals = maps.Clone(c.open.Approvals)
	return &d
}

// say sets the assistant's text of a decision that is not tool calls; a
// decision carried out in parts (the children of a fan-out) adds a line
// per part.
func (c *Composer) say(kind noeta.DecisionKind, text string) {
	if c.open.Kind == "" {
		c.open.Kind = kind
	}
	c.open.Said = joinNonEmpty(c.open.Said, text)
}

// call adds a tool call to the turn's assistant message, unless it is
// there: the first record to name a call id gives its tool and arguments.
// It returns the call's index.
func (c *Composer) call(id, tool string, args json.RawMessage, ref *noeta.ContentRef) int {
	for i := range c.open.Calls {
		if c.open.Calls[i].CallID == id {
			if c.open.Calls[i].Args == nil {
				c.open.Calls[i].Args = argsOf(args, ref)
			}
			return i
		}
	}
	if c.open.Kind == "" {
		c.open.Kind = noeta.DecisionToolCalls
	}
	c.open.Calls = append(c.open.Calls, noeta.ToolCall{CallID: id, Tool: tool, Args: argsOf(args, ref)})
	return len(c.open.Calls) - 1
}

// argsOf is what a model is shown of a call's arguments: as recorded, or a
// stand-in naming the content ref of arguments too large to record inline.
func argsOf(args json.RawMessage, ref *noeta.ContentRef) json.RawMessage {
	if ref != nil {
		b, _ := json.Marshal(map[string]any{"args_ref": refName(ref), "size": ref.Size})
		return b
	}
	if len(args) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), args...)
}

// result records a call's tool message; the first wins (a refusal is final).
func (c *Composer) result(m noeta.Message) {
	if c.open.Results == nil {
		c.open.Results = map[string]noeta.Message{}
	}
	if _, ok := c.open.Results[m.ToolCallID]; !ok {
		c.open.Results[m.ToolCallID] = m
	}
}

func (c *Composer) note(text string) {
	c.open.Notes = append(c.open.Notes, noeta.Message{Role: noeta.RoleUser, Text: text})
}

// woken shows what a wake brought that no other record shows: a human's
// answer to a question, a fired timer, an external event. A subtask wake is
// shown by its SubtaskResultRecorded records; an approval's by
// ApprovalResolved.
func (c *Composer) woken(w noeta.Wake) {
	asked := c.asked
	c.asked = ""
	switch w.Kind {
	case noeta.WakeHumanResponse:
		if strings.HasPrefix(asked, "waiting_human") {
			text := "the human answered"
			if w.Approver != "" {
				text += " (" + w.Approver + ")"
			}
			c.note(text + ": " + w.Text)
		}
	case noeta.WakeTimerFired:
		c.note("the timer set for " + fireAt(w) + " fired")
	case noeta.WakeExternalEvent:
		text := "the external event " + w.EventKind + " arrived"
		if len(w.Data) > 0 {
			text += ": " + c.clip(string(w.Data), nil)
		}
		c.note(text)
	}
}

// closeTurn appends the open turn's messages to the transcript. The
// transcript grows by doubling (append grows a long slice by a quarter,
// which copied a long task's history a dozen times over), the turn's calls
// go to its assistant message as they are (the next turn starts without
// them) and its results map is emptied for the next turn, not dropped:
// a map a turn is most of what folding a turn allocated.
func (c *Composer) closeTurn() {
	if !c.open.empty() {
		if need := len(c.open.Calls) + 2; cap(c.msgs)-len(c.msgs) < need {
			c.msgs = slices.Grow(c.msgs, max(need, len(c.msgs)))
		}
		c.msgs = c.open.render(c.msgs, true)
	}
	results := c.open.Results
	clear(results)
	c.open = openTurn{Results: results}
}

// render appends the turn's messages to dst: the decision, a tool message
// for each call (a call with no result says so, as every call must be
// answered on the wire), then the turn's notes. With handOver the
// assistant message takes the turn's calls slice itself, which the turn
// must then no longer use; else it takes a copy.
func (t *openTurn) render(dst []noeta.Message, handOver bool) []noeta.Message {
	said := t.Said
	if said == "" && len(t.Calls) == 0 && t.Kind != "" {
		// A first-version decision record whose parts no later record
		// carries (a finish a guard denied): its kind is all there is.
		said = "[" + string(t.Kind) + ": not recorded]"
	}
	said = joinNonEmpty(t.Text, said)
	if len(t.Calls) > 0 || said != "" {
		m := noeta.Message{Role: noeta.RoleAssistant, Text: said}
		switch {
		case len(t.Calls) > 0 && handOver:
			m.ToolCalls = t.Calls[:len(t.Calls):len(t.Calls)]
		case len(t.Calls) > 0:
			m.ToolCalls = append([]noeta.ToolCall(nil), t.Calls...)
		}
		dst = append(dst, m)
	}
	for _, call := range t.Calls {
		r, ok := t.Results[call.CallID]
		if !ok {
			r = noeta.Message{Role: noeta.RoleTool, ToolCallID: call.CallID, ToolName: call.Tool, IsError: true,
				Text: "no result: the call has not finished"}
		}
		dst = append(dst, r)
	}
	if len(t.Notes) > 0 {
		// One user message for all the turn brought: what the world said
		// back is one reply, not a run of them.
		text := make([]string, len(t.Notes))
		for i, n := range t.Notes {
			text[i] = n.Text
		}
		dst = append(dst, noeta.Message{Role: noeta.RoleUser, Text: strings.Join(text, "\n")})
	}
	return dst
}

// Transcript is the transcript so far. Between turns (when a policy is
// asked) it shares the composer's append-only message slice, capped so an
// append by the caller cannot reach it: the caller must not modify it.
// In the middle of a turn it is a copy with the open turn rendered.
func (c *Composer) Transcript() *noeta.Transcript {
	msgs := c.msgs[:len(c.msgs):len(c.msgs)]
	if !c.open.empty() {
		msgs = c.open.render(append([]noeta.Message(nil), c.msgs...), false)
	}
	return &noeta.Transcript{Messages: msgs}
}

// capped is the text of a tool output (or subtask result): a JSON string as
// its text, any other value as its JSON; by ref only, a note naming the ref;
// over the cap, cut with a note.
func (c *Composer) capped(v json.RawMessage, ref *noeta.ContentRef, what string) string {
	if len(v) == 0 && ref != nil {
		return "[" + what + " stored by content ref " + refName(ref) + " (" + strconv.FormatInt(ref.Size, 10) + " bytes); not shown]"
	}
	return c.clip(jsonText(v), ref)
}

// previewed is an output recorded by ref as a model reads it when its
// record carries a preview (docs/adr/0102): said to be a preview, with the
// ref of the whole, before the preview's text (cut to the cap like any
// output). A record without one reads as the ref alone, as it always did.
func (c *Composer) previewed(preview string, ref *noeta.ContentRef) string {
	return "[output stored by content ref " + refName(ref) + " (" + strconv.FormatInt(ref.Size, 10) +
		" bytes); not shown whole: a preview of it follows]\n" + c.clip(preview, ref)
}

// clip cuts s to the cap, saying how much was cut and where the whole is.
func (c *Composer) clip(s string, ref *noeta.ContentRef) string {
	n := utf8.RuneCountInString(s)
	if n <= c.cfg.MaxToolOutput {
		return s
	}
	cut, runes := s, 0
	for i := range s {
		if runes == c.cfg.MaxToolOutput {
			cut = s[:i]
			break
		}
		runes++
	}
	note := fmt.Sprintf("\n[output cut: %d of %d chars shown", c.cfg.MaxToolOutput, n)
	if ref != nil {
		note += "; the whole is stored by content ref " + refName(ref)
	}
	return cut + note + "]"
}

// jsonText is a JSON value as a model reads it: a string unquoted, anything
// else as written.
func jsonText(v json.RawMessage) string {
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return string(v)
}

func answerText(v json.RawMessage, ref *noeta.ContentRef) string {
	if len(v) == 0 && ref != nil {
		return "[answer stored by content ref " + refName(ref) + "; not shown]"
	}
	return jsonText(v)
}

func spawnText(agent, goal string) string {
	if goal == "" {
		return "spawn_subtask: " + agent
	}
	return "spawn_subtask: " + agent + ": " + goal
}

// spawnGoal reads the goal out of a spawn approval's recorded arguments.
func spawnGoal(args json.RawMessage) string {
	var a struct {
		Goal string `json:"goal"`
	}
	_ = json.Unmarshal(args, &a)
	return a.Goal
}

func approvalSubject(a noeta.ApprovalAction, callID, tool, agent string) string {
	switch a {
	case noeta.ApprovalToolCall:
		return "the call " + callID + " (" + tool + ")"
	case noeta.ApprovalSpawnSubtask:
		return "the spawn of agent " + agent
	case noeta.ApprovalFinish:
		return "the finish"
	}
	return string(a)
}

// fireAt is a timer's deadline as recorded (UTC, milliseconds).
func fireAt(w noeta.Wake) string { return w.FireAt.UTC().Format("2006-01-02T15:04:05.000Z") }

func refName(r *noeta.ContentRef) string { return "sha256:" + r.Hash }

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "\n" + b
}

// composerJSON is a composer as a snapshot stores it.
type composerJSON struct {
	MaxToolOutput int             `json:"max_tool_output"`
	Messages      []noeta.Message `json:"messages"`
	Open          openTurn        `json:"open"`
	Asked         string          `json:"asked,omitempty"`
}

// MarshalJSON encodes the composer for a snapshot: its config, the closed
// turns' messages and the open turn, so a fold from the snapshot composes
// exactly what a fold from genesis does. The encoding is canonical JSON,
// the value of a composerJSON.
func (c *Composer) MarshalJSON() ([]byte, error) {
	return c.canonical()
}

// canonical is the canonical JSON of the composer's composerJSON, the
// closed turns' messages from the cache (their canonical JSON, joined, is
// the canonical JSON of the array: canonical JSON is made member by member
// and element by element).
func (c *Composer) canonical() ([]byte, error) {
	for ; c.ncanon < len(c.msgs); c.ncanon++ {
		b, err := noeta.Canonical(c.msgs[c.ncanon])
		if err != nil {
			return nil, fmt.Errorf("engine: composer message %d: %w", c.ncanon, err)
		}
		c.canon = append(append(c.canon, b...), ',')
	}
	open, err := noeta.Canonical(c.open)
	if err != nil {
		return nil, fmt.Errorf("engine: composer open turn: %w", err)
	}
	out := make([]byte, 0, len(c.canon)+len(open)+len(c.asked)+64)
	out = append(out, '{')
	if c.asked != "" {
		asked, err := noeta.Canonical(c.asked)
		if err != nil {
			return nil, err
		}
		out = append(append(append(out, `"asked":`...), asked...), ',')
	}
	out = strconv.AppendInt(append(out, `"max_tool_output":`...), int64(c.cfg.MaxToolOutput), 10)
	out = append(out, `,"messages":`...)
	switch {
	case c.msgs == nil:
		out = append(out, "null"...)
	case len(c.canon) == 0:
		out = append(out, "[]"...)
	default:
		out = append(append(append(out, '['), c.canon[:len(c.canon)-1]...), ']')
	}
	out = append(append(out, `,"open":`...), open...)
	return append(out, '}'), nil
}

// UnmarshalJSON restores a composer MarshalJSON encoded.
func (c *Composer) UnmarshalJSON(b []byte) error {
	var j composerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("engine: composer snapshot: %w", err)
	}
	if j.MaxToolOutput < 0 {
		return fmt.Errorf("engine: composer snapshot: max_tool_output %d is negative", j.MaxToolOutput)
	}
	*c = Composer{cfg: ComposerConfig{MaxToolOutput: j.MaxToolOutput}, msgs: j.Messages, open: j.Open, asked: j.Asked}
	if c.cfg.MaxToolOutput == 0 {
		c.cfg.MaxToolOutput = DefaultMaxToolOutput
	}
	return nil
}
