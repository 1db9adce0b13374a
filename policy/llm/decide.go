package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/policy"
)

// The tools a model is offered beside the agent's own. Their calls are
// decisions, not tool runs: spawn_subtask becomes a spawn decision (several
// in one reply, a fan-out), ask_human a yield for a human.
const (
	ToolSpawn    = "spawn_subtask"
	ToolAskHuman = "ask_human"
)

// MaxCallsPerReply bounds the calls one reply may ask for: those past it
// are recorded as invalid calls (without their arguments), so a runaway
// reply cannot make one turn run hundreds of calls.
const MaxCallsPerReply = 32

// maxSnippet bounds what of a model's malformed output is quoted back to it.
const maxSnippet = 200

var objectSchema = json.RawMessage(`{"type":"object"}`)

var askHumanSpec = noeta.ToolSpec{
	Name:        ToolAskHuman,
	Description: "Ask a human a question and wait for the answer. Use it when you cannot go on without a person's decision or information. Call it alone.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","description":"The question, complete enough to answer without other context."}},"required":["question"],"additionalProperties":false}`),
}

func spawnSpec(agents []string) noeta.ToolSpec {
	schema, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"agent": map[string]any{"type": "string", "enum": agents, "description": "The agent that works on the subtask."},
			"goal":  map[string]any{"type": "string", "description": "What the subtask must achieve; its result comes back to you."},
		},
		"required":             []string{"agent", "goal"},
		"additionalProperties": false,
	})
	return noeta.ToolSpec{
		Name:        ToolSpawn,
		Description: "Start a subtask run by another agent and wait for its result. Several calls in one reply run in parallel. Call it only with other spawn_subtask calls.",
		InputSchema: schema,
	}
}

// Tools returns the tools a model is offered for in: the agent's tools,
// then spawn_subtask (when it may spawn) and ask_human.
func Tools(in noeta.PolicyInput) ([]noeta.ToolSpec, error) { return offered(in) }

func offered(in noeta.PolicyInput) ([]noeta.ToolSpec, error) {
	out := make([]noeta.ToolSpec, 0, len(in.Tools)+2)
	for _, t := range in.Tools {
		if t.Name == ToolSpawn || t.Name == ToolAskHuman {
			return nil, fmt.Errorf("the agent's tool %q has the name of a tool the policy offers itself", t.Name)
		}
		if len(bytes.TrimSpace(t.InputSchema)) == 0 {
			t.InputSchema = objectSchema
		}
		out = append(out, t)
	}
	if len(in.SpawnAgents) > 0 {
		out = append(out, spawnSpec(in.SpawnAgents))
	}
	return append(out, askHumanSpec), nil
}

// decide turns a reply into d's kind and payload, and keeps the reply's
// text beside calls as d.Text: the model's words ("Let me check the file
// first.") are recorded with the decision and read back by the model on
// later turns (docs/adr/0084).
//
//   - No tool calls: finish, the text as a JSON string (and no Text: the
//     answer is the text, recorded once).
//   - Only spawn_subtask calls, every one valid: a spawn decision.
//   - One ask_human call, valid: a yield for a human.
//   - Otherwise tool calls, ids call-<turn>-<index>. A call that cannot
//     run — arguments that are not a JSON object, an unknown tool, a
//     spawn_subtask or ask_human mixed with other calls or with bad
//     arguments — has Invalid set: the engine records it as a failed call
//     and the model reads why on its next turn.
func decide(d noeta.Decision, r Reply, in noeta.PolicyInput) noeta.Decision {
	if len(r.Calls) == 0 {
		d.Kind = noeta.DecisionFinish
		d.Answer, _ = json.Marshal(r.Text)
		return d
	}
	d.Text = r.Text
	if spawn, ok := spawnOnly(r.Calls, in.SpawnAgents); ok {
		d.Kind = noeta.DecisionSpawn
		d.Spawn = spawn
		return d
	}
	if len(r.Calls) == 1 && r.Calls[0].Name == ToolAskHuman {
		if q, why := askArgs(r.Calls[0].Args); why == "" {
			d.Kind = noeta.DecisionYieldForHuman
			d.Question = q
			return d
		}
	}
	known := make(map[string]bool, len(in.Tools))
	names := make([]string, 0, len(in.Tools))
	for _, t := range in.Tools {
		known[t.Name] = true
		names = append(names, t.Name)
	}
	d.Kind = noeta.DecisionToolCalls
	d.ToolCalls = make([]noeta.ToolCall, len(r.Calls))
	for i, c := range r.Calls {
		tc := noeta.ToolCall{CallID: policy.CallID(in.Turn, i), Tool: truncate(c.Name, noeta.MaxCallIDLen)}
		if i >= MaxCallsPerReply {
			tc.Invalid = fmt.Sprintf("not run: a reply may ask for at most %d calls", MaxCallsPerReply)
			d.ToolCalls[i] = tc
			continue
		}
		args, why := objectArgs(c.Args)
		tc.Args = args
		switch {
		case why != "":
			tc.Invalid = why
		case c.Name == ToolSpawn:
			if _, w := spawnArgs(c.Args, in.SpawnAgents); w != "" {
				tc.Invalid = w
			} else {
				tc.Invalid = "spawn_subtask must not be mixed with other calls in one reply: call it alone, or only with other spawn_subtask calls"
			}
		case c.Name == ToolAskHuman:
			if _, w := askArgs(c.Args); w != "" {
				tc.Invalid = w
			} else {
				tc.Invalid = "ask_human must be the only call of its reply: call it alone"
			}
		case !known[c.Name]:
			tc.Invalid = fmt.Sprintf("unknown tool %q (the tools: %s)", tc.Tool, strings.Join(names, ", "))
		}
		d.ToolCalls[i] = tc
	}
	return d
}

// spawnOnly returns the children when every call is a valid spawn_subtask.
func spawnOnly(calls []Call, agents []string) ([]noeta.SpawnSpec, bool) {
	if len(agents) == 0 {
		return nil, false
	}
	out := make([]noeta.SpawnSpec, 0, len(calls))
	for _, c := range calls {
		if c.Name != ToolSpawn {
			return nil, false
		}
		s, why := spawnArgs(c.Args, agents)
		if why != "" {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func spawnArgs(raw string, agents []string) (noeta.SpawnSpec, string) {
	if len(agents) == 0 {
		return noeta.SpawnSpec{}, "this agent may not spawn subtasks"
	}
	var a struct {
		Agent string `json:"agent"`
		Goal  string `json:"goal"`
	}
	if why := strict(raw, &a); why != "" {
		return noeta.SpawnSpec{}, why
	}
	switch {
	case !slices.Contains(agents, a.Agent):
		return noeta.SpawnSpec{}, fmt.Sprintf("agent %q is not one this task may spawn (%s)", truncate(a.Agent, 64), strings.Join(agents, ", "))
	case strings.TrimSpace(a.Goal) == "":
		return noeta.SpawnSpec{}, "goal is empty"
	}
	return noeta.SpawnSpec{Agent: a.Agent, Goal: a.Goal}, ""
}

func askArgs(raw string) (string, string) {
	var a struct {
		Question string `json:"question"`
	}
	if why := strict(raw, &a); why != "" {
		return "", why
	}
	if strings.TrimSpace(a.Question) == "" {
		return "", "question is empty"
	}
	return a.Question, ""
}

// strict decodes an argument object refusing unknown fields.
func strict(raw string, v any) string {
	args, why := objectArgs(raw)
	if why != "" {
		return why
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return "the arguments do not match the tool's schema: " + err.Error()
	}
	return ""
}

// objectArgs returns raw as a JSON object, or why it is not one. An empty
// text is {} (models send it for a tool without parameters).
func objectArgs(raw string) (json.RawMessage, string) {
	t := strings.TrimSpace(raw)
	if t == "" {
		return json.RawMessage("{}"), ""
	}
	if !json.Valid([]byte(t)) {
		return nil, fmt.Sprintf("the arguments are not valid JSON: %q", truncate(t, maxSnippet))
	}
	if t[0] != '{' {
		return json.RawMessage(t), fmt.Sprintf("the arguments must be a JSON object, not %s", truncate(t, maxSnippet))
	}
	// encoding/json accepts what the log cannot hold: a duplicate key
	// (which of the two would the tool see?), a lone surrogate escape,
	// invalid UTF-8, a number past float64. Such a call is refused here,
	// its text quoted but not kept as arguments, so the decision that
	// carries it can be recorded whole and replayed as recorded.
	if _, err := noeta.CanonicalizeJSON([]byte(t)); err != nil {
		why := strings.TrimPrefix(err.Error(), noeta.ErrInvalidJSON.Error()+" ")
		return nil, fmt.Sprintf("the arguments are not valid JSON (%s): %q", why, truncate(t, maxSnippet))
	}
	return json.RawMessage(t), ""
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Arrange puts a transcript in the order the providers accept, keeping
// every message but a superseded result: the (last) results of an assistant message's tool calls right
// after it, in the order of its calls (the composer may interleave an
// approval's outcome before a call's result); a call without a result gets
// an error result saying so; a tool message answering no call of the
// assistant message before it becomes a user message. Deterministic, and
// msgs is not modified.
func Arrange(msgs []noeta.Message) []noeta.Message {
	out := make([]noeta.Message, 0, len(msgs)+2)
	for i := 0; i < len(msgs); {
		m := msgs[i]
		if m.Role == noeta.RoleTool {
			out = append(out, orphan(m))
			i++
			continue
		}
		out = append(out, m)
		i++
		if m.Role != noeta.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		// The span this assistant message answers: up to the next one.
		j := i
		for j < len(msgs) && msgs[j].Role != noeta.RoleAssistant {
			j++
		}
		results := map[string]noeta.Message{}
		var rest []noeta.Message
		for _, x := range msgs[i:j] {
			if x.Role == noeta.RoleTool && slices.ContainsFunc(m.ToolCalls, func(c noeta.ToolCall) bool { return c.CallID == x.ToolCallID }) {
				results[x.ToolCallID] = x // the last word on a call wins
				continue
			}
			rest = append(rest, x)
		}
		for _, c := range m.ToolCalls {
			r, ok := results[c.CallID]
			if !ok {
				r = noeta.Message{Role: noeta.RoleTool, ToolCallID: c.CallID, ToolName: c.Tool, IsError: true,
					Text: "no result was recorded for this call: it did not run"}
			}
			out = append(out, r)
		}
		for _, x := range rest {
			if x.Role == noeta.RoleTool {
				x = orphan(x)
			}
			out = append(out, x)
		}
		i = j
	}
	return out
}

// orphan renders a tool message that answers no call in reach as the user
// telling the model about it.
func orphan(m noeta.Message) noeta.Message {
	what := "result"
	if m.IsError {
		what = "error"
	}
	return noeta.Message{Role: noeta.RoleUser, Text: fmt.Sprintf("[%s of %s call %s] %s", what, m.ToolName, m.ToolCallID, m.Text)}
}

// HistoryToolName is the name a past call is sent back under. A call the
// model named badly ("", "functions.echo") is recorded as it was asked
// for, but both APIs refuse a request whose history holds a name outside
// [A-Za-z0-9_-]{1,64}: the model's own mistake would then fail every later
// turn. Other characters become _, and an empty name unknown_tool.
func HistoryToolName(name string) string {
	if name == "" {
		return "unknown_tool"
	}
	b := []byte(truncate(name, 64))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
