package policy

import (
	"math"
	"strconv"
	"strings"

	"github.com/noeta-go/noeta"
)

// The keys of a step: one decision kind, and what deciding it cost.
const (
	keyCostUSD      = "cost_usd"
	keyInputTokens  = "input_tokens"
	keyOutputTokens = "output_tokens"
)

var (
	stepKinds = noeta.DecisionKinds()
	stepKeys  = func() []string {
		keys := make([]string, 0, len(stepKinds)+3)
		for _, k := range stepKinds {
			keys = append(keys, string(k))
		}
		return append(keys, keyCostUSD, keyInputTokens, keyOutputTokens)
	}()
	kindList = strings.Join(stepKeys[:len(stepKinds)], ", ")
)

// checker reads the step schema off a value tree.
type checker struct{ errs *errorList }

// taskFile reads the top level: agent and goal, required, and script.
func (c *checker) taskFile(root *value) TaskFile {
	var tf TaskFile
	if root.kind == kNull {
		c.errs.add(root.line, "", "the file is empty; a task file needs agent and goal (and a script, unless the agent's model decides)")
		return tf
	}
	if root.kind != kMap {
		c.wrong(root, "", "a task file must be a mapping with agent, goal and an optional script, not %s", root.kindName())
		return tf
	}
	f := c.fields(root, "", "agent", "goal", "script")
	tf.Agent, _ = c.text(f, root, "", "agent")
	tf.Goal, _ = c.text(f, root, "", "goal")
	// Without a script the agent's model decides each turn (the config
	// must give the agent one); a script given is read as one, even empty.
	if m, ok := f["script"]; ok && m.val.kind != kNull {
		tf.Script, _ = c.script(m.val, "script")
		tf.Scripted = true
	}
	return tf
}

// script reads a list of steps. An empty list is a script: its task fails at
// its first turn, which is a path worth being able to drive.
func (c *checker) script(v *value, path string) (Script, bool) {
	if v.kind != kList {
		c.wrong(v, path, "must be a list of steps, not %s", v.kindName())
		return nil, false
	}
	out := make(Script, 0, len(v.items))
	ok := true
	for i, it := range v.items {
		d, sok := c.step(it, index(path, i))
		ok = ok && sok
		out = append(out, d)
	}
	return out, ok
}

// step reads one step: exactly one decision kind, and optionally its cost.
func (c *checker) step(v *value, path string) (noeta.Decision, bool) {
	var d noeta.Decision
	if v.kind != kMap {
		c.wrong(v, path, "a step must be a mapping with one of %s, not %s", kindList, v.kindName())
		return d, false
	}
	before := len(c.errs.list)
	f := c.fields(v, path, stepKeys...)
	var kinds []member
	for _, m := range v.keys {
		if noeta.DecisionKind(m.key).Valid() {
			kinds = append(kinds, m)
		}
	}
	switch len(kinds) {
	case 0:
		c.errs.addf(v.line, path, "a step needs one of %s", kindList)
		return d, false
	case 1:
	default:
		c.errs.addf(kinds[1].line, path, "has both %s and %s; a step is exactly one decision (make them two steps)", kinds[0].key, kinds[1].key)
		return d, false
	}
	d.Kind = noeta.DecisionKind(kinds[0].key)
	body, kp := kinds[0].val, join(path, kinds[0].key)
	switch d.Kind {
	case noeta.DecisionToolCalls:
		d.ToolCalls = c.toolCalls(body, kp)
	case noeta.DecisionSpawn:
		d.Spawn = c.spawn(body, kp)
	case noeta.DecisionYieldForHuman:
		if bf, ok := c.mapping(body, kp, "question"); ok {
			d.Question, _ = c.text(bf, body, kp, "question")
		}
	case noeta.DecisionWaitTimer:
		if bf, ok := c.mapping(body, kp, "seconds"); ok {
			if m, ok := c.require(bf, body, kp, "seconds"); ok {
				if s, ok := c.number(m.val, join(kp, "seconds")); ok {
					d.WaitSeconds = s
				}
			}
		}
	case noeta.DecisionWaitExternal:
		if bf, ok := c.mapping(body, kp, "event_kind"); ok {
			d.EventKind, _ = c.text(bf, body, kp, "event_kind")
		}
	case noeta.DecisionStatePatch:
		// The mapping is the patch itself: state_patch: {phase: review}.
		if body.kind != kMap {
			c.wrong(body, kp, "must be a mapping (the patch), not %s", body.kindName())
		} else {
			d.Patch = c.json(body, kp)
		}
	case noeta.DecisionFinish:
		if bf, ok := c.mapping(body, kp, "answer"); ok {
			// Any JSON value is an answer, null included; only a missing
			// key is a mistake.
			if m, ok := c.require(bf, body, kp, "answer"); ok {
				d.Answer = c.json(m.val, join(kp, "answer"))
			}
		}
	case noeta.DecisionFail:
		if bf, ok := c.mapping(body, kp, "error"); ok {
			d.Error, _ = c.text(bf, body, kp, "error")
		}
	}
	if m, ok := f[keyCostUSD]; ok && m.val.kind != kNull {
		if x, ok := c.number(m.val, join(path, keyCostUSD)); ok {
			d.CostUSD = x
		}
	}
	if m, ok := f[keyInputTokens]; ok && m.val.kind != kNull {
		d.InputTokens, _ = c.count(m.val, join(path, keyInputTokens))
	}
	if m, ok := f[keyOutputTokens]; ok && m.val.kind != kNull {
		d.OutputTokens, _ = c.count(m.val, join(path, keyOutputTokens))
	}
	if len(c.errs.list) > before {
		return d, false
	}
	// Every check Validate makes is made above, with the file's paths; this
	// is the backstop that keeps the two from drifting apart.
	if err := withCallIDs(d, 1).Validate(); err != nil {
		c.errs.addf(v.line, path, "%v", err)
		return d, false
	}
	return d, true
}

func (c *checker) toolCalls(v *value, path string) []noeta.ToolCall {
	if v.kind != kList {
		c.wrong(v, path, "must be a list of {tool, args}, not %s", v.kindName())
		return nil
	}
	if len(v.items) == 0 {
		c.errs.add(v.line, path, "must list at least one call")
		return nil
	}
	out := make([]noeta.ToolCall, 0, len(v.items))
	for i, it := range v.items {
		ip := index(path, i)
		f, ok := c.mapping(it, ip, "tool", "args")
		if !ok {
			continue
		}
		var tc noeta.ToolCall
		tc.Tool, _ = c.text(f, it, ip, "tool")
		// A call without args gets {}: every recorded call has an object,
		// and a tool reads the same thing for "no args" either way.
		tc.Args = []byte("{}")
		if m, ok := f["args"]; ok && m.val.kind != kNull {
			ap := join(ip, "args")
			if m.val.kind != kMap {
				c.wrong(m.val, ap, "must be a mapping, not %s", m.val.kindName())
			} else {
				tc.Args = c.json(m.val, ap)
			}
		}
		out = append(out, tc)
	}
	return out
}

func (c *checker) spawn(v *value, path string) []noeta.SpawnSpec {
	if v.kind != kList {
		c.wrong(v, path, "must be a list of {agent, goal, script}, not %s", v.kindName())
		return nil
	}
	if len(v.items) == 0 {
		c.errs.add(v.line, path, "must list at least one child")
		return nil
	}
	out := make([]noeta.SpawnSpec, 0, len(v.items))
	for i, it := range v.items {
		ip := index(path, i)
		f, ok := c.mapping(it, ip, "agent", "goal", "script")
		if !ok {
			continue
		}
		var s noeta.SpawnSpec
		s.Agent, _ = c.text(f, it, ip, "agent")
		s.Goal, _ = c.text(f, it, ip, "goal")
		// A child without a script has no scripted decisions: it fails at
		// its first turn ("script exhausted at turn 1").
		if m, ok := f["script"]; ok && m.val.kind != kNull {
			if child, ok := c.script(m.val, join(ip, "script")); ok {
				b, err := child.MarshalJSON()
				if err != nil {
					c.errs.addf(m.val.line, join(ip, "script"), "%v", err)
				} else {
					s.Script = b
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// wrong reports that v has the wrong type, unless v is a placeholder for a
// value whose own mistake is already reported.
func (c *checker) wrong(v *value, path, format string, args ...any) {
	if v.kind != kBad {
		c.errs.addf(v.line, path, format, args...)
	}
}

// fields returns a mapping's entries by key, reporting unknown keys at their
// line. The caller has checked that v is a mapping.
func (c *checker) fields(v *value, path string, known ...string) map[string]member {
	out := make(map[string]member, len(v.keys))
	for _, m := range v.keys {
		if !contains(known, m.key) {
			c.errs.addf(m.line, join(path, m.key), "unknown key (known: %s)", strings.Join(known, ", "))
			continue
		}
		out[m.key] = m
	}
	return out
}

// mapping is fields for a value that must be a mapping; null stands for an
// empty one, so that a missing required key is reported as such.
func (c *checker) mapping(v *value, path string, known ...string) (map[string]member, bool) {
	switch v.kind {
	case kNull:
		return map[string]member{}, true
	case kMap:
		return c.fields(v, path, known...), true
	}
	c.wrong(v, path, "must be a mapping with %s, not %s", strings.Join(known, ", "), v.kindName())
	return nil, false
}

// require returns a key's entry, reporting it at its mapping's line when it is
// missing.
func (c *checker) require(f map[string]member, parent *value, path, key string) (member, bool) {
	m, ok := f[key]
	if !ok {
		c.errs.add(parent.line, join(path, key), "required")
	}
	return m, ok
}

// text reads a required, non-empty string.
func (c *checker) text(f map[string]member, parent *value, path, key string) (string, bool) {
	m, ok := c.require(f, parent, path, key)
	if !ok {
		return "", false
	}
	p := join(path, key)
	if m.val.kind != kString {
		c.wrong(m.val, p, "must be a string, not %s", m.val.kindName())
		return "", false
	}
	if m.val.text == "" {
		c.errs.add(m.val.line, p, "must not be empty")
		return "", false
	}
	return m.val.text, true
}

// number reads a finite number >= 0: seconds and dollars.
func (c *checker) number(v *value, path string) (float64, bool) {
	if v.kind != kNumber {
		c.wrong(v, path, "must be a number, not %s", v.kindName())
		return 0, false
	}
	x, err := strconv.ParseFloat(v.text, 64)
	if err != nil || math.IsInf(x, 0) {
		c.errs.addf(v.line, path, "%s is out of range", v.text)
		return 0, false
	}
	if x < 0 {
		c.errs.addf(v.line, path, "must be >= 0, not %s", v.text)
		return 0, false
	}
	return x, true
}

// count reads an integer >= 0: token counts.
func (c *checker) count(v *value, path string) (int64, bool) {
	if v.kind != kNumber || !isIntLiteral(v.text) {
		c.wrong(v, path, "must be an integer, not %s", v.kindName())
		return 0, false
	}
	x, err := strconv.ParseInt(v.text, 10, 64)
	if err != nil {
		c.errs.addf(v.line, path, "%s is out of range", v.text)
		return 0, false
	}
	if x < 0 {
		c.errs.addf(v.line, path, "must be >= 0, not %s", v.text)
		return 0, false
	}
	return x, true
}

// json returns v as canonical JSON.
func (c *checker) json(v *value, path string) []byte {
	b, err := v.canonicalJSON()
	if err != nil {
		c.errs.addf(v.line, path, "cannot be written as JSON: %v", err)
		return nil
	}
	return b
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
