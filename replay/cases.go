package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/guards"
)

// MaxCasesBytes bounds a cases file.
const MaxCasesBytes = 4 << 20

// Case is one line of a policy's unit tests: a proposed action of an
// agent, judged on a fresh task (no history), and the verdict it must
// get.
type Case struct {
	Name  string `yaml:"name"`
	Agent string `yaml:"agent"`
	// Exactly one of ToolCall and Finish.
	ToolCall *CaseCall   `yaml:"tool_call"`
	Finish   *CaseFinish `yaml:"finish"`
	// Depth is the task's subtask depth (0: a root task).
	Depth int `yaml:"depth"`
	// Expect is allow, deny or require_approval; Guard, when set, the
	// guard that must decide it.
	Expect string `yaml:"expect"`
	Guard  string `yaml:"guard"`
}

// CaseCall is a proposed tool call.
type CaseCall struct {
	Tool string         `yaml:"tool"`
	Args map[string]any `yaml:"args"`
}

// CaseFinish is a proposed finish.
type CaseFinish struct {
	Answer any `yaml:"answer"`
}

// CaseResult is a case judged.
type CaseResult struct {
	Case Case    `json:"-"`
	Name string  `json:"name"`
	Got  Verdict `json:"got"`
	// Pass is whether Got is what the case expects; Err says why it could
	// not be judged (a failure too).
	Pass bool   `json:"pass"`
	Err  string `json:"error,omitempty"`
}

// ParseCases reads a cases file: a YAML document with a list under
// cases:. Unknown keys, a case without a name, an agent or an expected
// verdict, or with both or neither of tool_call and finish, are errors
// naming the case.
func ParseCases(name string, r io.Reader) ([]Case, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxCasesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > MaxCasesBytes {
		return nil, fmt.Errorf("%s: over %d bytes", name, MaxCasesBytes)
	}
	var doc struct {
		Cases []Case `yaml:"cases"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Cases) == 0 {
		return nil, fmt.Errorf("%s: no cases (a list under cases:)", name)
	}
	for i, c := range doc.Cases {
		at := fmt.Sprintf("%s: cases[%d]", name, i)
		if c.Name != "" {
			at += " (" + c.Name + ")"
		}
		var v noeta.Verdict
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("%s: name is required", at)
		case c.Agent == "":
			return nil, fmt.Errorf("%s: agent is required", at)
		case (c.ToolCall == nil) == (c.Finish == nil):
			return nil, fmt.Errorf("%s: give exactly one of tool_call and finish", at)
		case c.ToolCall != nil && c.ToolCall.Tool == "":
			return nil, fmt.Errorf("%s: tool_call.tool is required", at)
		case v.UnmarshalText([]byte(c.Expect)) != nil:
			return nil, fmt.Errorf("%s: expect is %q; want allow, deny or require_approval", at, c.Expect)
		}
	}
	return doc.Cases, nil
}

// Test judges each case with j's stacks and says whether it got what it
// expects.
func Test(ctx context.Context, j *Judge, cases []Case) []CaseResult {
	out := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		res := CaseResult{Case: c, Name: c.Name}
		got, err := j.judgeCase(ctx, c)
		if err != nil {
			res.Err = err.Error()
		} else {
			res.Got = got
			res.Pass = got.Verdict.String() == c.Expect && (c.Guard == "" || got.Guard == c.Guard)
		}
		out = append(out, res)
	}
	return out
}

func (j *Judge) judgeCase(ctx context.Context, c Case) (Verdict, error) {
	s, err := j.stack(c.Agent)
	if err != nil {
		return Verdict{}, err
	}
	var a noeta.ProposedAction
	if c.ToolCall != nil {
		args, err := json.Marshal(c.ToolCall.Args)
		if err != nil {
			return Verdict{}, fmt.Errorf("tool_call.args: %w", err)
		}
		if c.ToolCall.Args == nil {
			args = []byte("{}")
		}
		a = noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "call-1-0", Tool: c.ToolCall.Tool, Args: args}}
	} else {
		answer, err := json.Marshal(c.Finish.Answer)
		if err != nil {
			return Verdict{}, fmt.Errorf("finish.answer: %w", err)
		}
		a = noeta.ProposedFinish{Answer: answer}
	}
	gc := guards.NewContext(guards.ContextParams{TaskID: "case", SubtaskDepth: c.Depth, Metadata: map[string]string{"agent": c.Agent}})
	// A case is one call: the first of its window, which a rate limit
	// admits.
	j.inCase = true
	defer func() { j.inCase = false }()
	return j.check(ctx, s, a, gc)
}
