package guards

import (
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
	"github.com/noeta-go/noeta/internal/celissues"
)

// celEnv declares what a rule's when expression sees. It is built once: an
// environment costs milliseconds, a compile against it far less.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Types(cel.NativeTypeFor[celTask](types.ParseStructTags(true), cel.NativeTypeAlias("noeta.Task"))),
		cel.Variable("task", cel.ObjectType("noeta.Task")),
		// args numbers are doubles (JSON has one number type) and task
		// counters are ints; let them compare without conversions.
		cel.CrossTypeNumericComparisons(true),
		// Bound what a config can make the parser and checker do.
		cel.ParserExpressionSizeLimit(16*1024),
		cel.ParserRecursionLimit(100),
	)
})

// celSizeBound is the input size up to which a when expression may run without
// cost tracking, if its static worst case fits the limit (see compileCEL).
const celSizeBound = 64 * 1024

type celProgram struct {
	src string
	prg cel.Program // with the cost limit
	// fast is the same program without cost tracking, or nil. It exists only
	// if cel-go's static estimate of the worst-case cost, for inputs no larger
	// than celSizeBound, is within CELCostLimit: then the limit cannot be
	// reached for such inputs, and tracking it would only cost time (it
	// triples the price of a typical rule).
	fast    cel.Program
	maxCost uint64 // the static estimate, for the tests
}

// compileCEL parses and type-checks a when expression, which must be of type
// bool (or dyn, checked when it runs).
func compileCEL(src string) (p *celProgram, err error) {
	// A config is input: a parser or checker bug must not take the process
	// down with it.
	defer func() {
		if v := recover(); v != nil {
			p, err = nil, fmt.Errorf("CEL compiler failed: %v", v)
		}
	}()
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if err := celissues.Err(iss); err != nil {
		return nil, err
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("must be a bool expression, not %v", t)
	}
	prg, err := env.Program(ast,
		cel.CostLimit(CELCostLimit),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, err
	}
	p = &celProgram{src: src, prg: prg}
	// cel-go keeps its estimate an upper bound of the tracked cost (its
	// cost_bounds tests pin estimate.Min <= actual <= estimate.Max); given an
	// upper bound on the size of every input, it is a worst case.
	if est, err := env.EstimateCost(ast, inputSizeBound{}); err == nil && est.Max <= CELCostLimit {
		if fast, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize)); err == nil {
			p.fast, p.maxCost = fast, est.Max
		}
	}
	return p, nil
}

// inputSizeBound tells the cost estimator that every value read from the
// inputs — tool, args and task and anything reached through them — has a size
// (characters, elements, entries) of at most celSizeBound. It says nothing
// about computed values, which the estimator sizes itself.
type inputSizeBound struct{}

func (inputSizeBound) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if p := n.Path(); len(p) > 0 && (p[0] == "tool" || p[0] == "args" || p[0] == "task") {
		return &cost.SizeEstimate{Min: 0, Max: celSizeBound}
	}
	return nil
}

func (inputSizeBound) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (p *celProgram) eval(vars *celVars) (bool, error) {
	prg := p.prg
	if p.fast != nil && vars.small() {
		prg = p.fast
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("when: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("when: result is %v, not bool", out.Type())
	}
	return b, nil
}

// celVars is the activation of one check, shared by the check's rules: args
// is a lazy view of the canonical arguments, and task a struct, so that reading
// a counter costs no map. They are pooled: a Rules check that reaches a CEL
// rule would otherwise allocate them every time.
type celVars struct {
	toolName string
	tool     ref.Val
	obj      jsonObject
	args     ref.Val
	task     celTask
	taskSet  bool
	c        *Context

	sizeKnown, isSmall bool
}

var celVarsPool = sync.Pool{New: func() any { return new(celVars) }}

func newCELVars(tool string, canonArgs []byte, c *Context) *celVars {
	v := celVarsPool.Get().(*celVars)
	v.toolName, v.c = tool, c
	if len(canonArgs) > 0 && canonArgs[0] == '{' {
		v.obj = jsonObject{raw: canonArgs}
		v.args = &v.obj
	} else {
		// An error value makes any use of args fail, and so its rule deny.
		v.args = types.NewErr("args is not a JSON object")
	}
	return v
}

// release returns v to the pool. Nothing of v outlives the check: a rule keeps
// only the boolean its expression produced.
func (v *celVars) release() {
	*v = celVars{}
	celVarsPool.Put(v)
}

var _ interpreter.Activation = (*celVars)(nil)

// small reports whether every input is within celSizeBound: no string, list
// or map read from them can then be larger. A decoded string has no more
// characters than its JSON has bytes, and a collection no more elements.
func (v *celVars) small() bool {
	if v.sizeKnown {
		return v.isSmall
	}
	n := max(len(v.obj.raw), len(v.toolName), len(v.c.taskID), len(v.c.skills), len(v.c.metadata))
	for _, s := range v.c.skills {
		n = max(n, len(s))
	}
	for k, val := range v.c.metadata {
		n = max(n, len(k), len(val))
	}
	v.sizeKnown, v.isSmall = true, n <= celSizeBound
	return v.isSmall
}

func (v *celVars) ResolveName(name string) (any, bool) {
	switch name {
	case "tool":
		if v.tool == nil {
			v.tool = types.String(v.toolName)
		}
		return v.tool, true
	case "args":
		return v.args, true
	case "task":
		if !v.taskSet {
			v.task = taskOf(v.c)
			v.taskSet = true
		}
		return &v.task, true
	}
	return nil, false
}

func (v *celVars) Parent() interpreter.Activation { return nil }

// celTask is what a when expression sees as task. It is a declared type, so
// that a misspelt field is an error when the rule is compiled, not a denial
// when it runs.
type celTask struct {
	ID              string            `cel:"id"`
	Iterations      int64             `cel:"iterations"`
	ToolCalls       int64             `cel:"tool_calls"`
	CostUSD         float64           `cel:"cost_usd"`
	SpawnedSubtasks int64             `cel:"spawned_subtasks"`
	InputTokens     int64             `cel:"input_tokens"`
	OutputTokens    int64             `cel:"output_tokens"`
	SubtaskDepth    int64             `cel:"subtask_depth"`
	ActiveSkills    []string          `cel:"active_skills"`
	Metadata        map[string]string `cel:"metadata"`
}

// Shared empty values for a task without skills or metadata; CEL never
// writes to them.
var (
	noSkills   = []string{}
	noMetadata = map[string]string{}
)

func taskOf(c *Context) celTask {
	skills := c.skills
	if skills == nil {
		skills = noSkills
	}
	md := c.metadata
	if md == nil {
		md = noMetadata
	}
	g := &c.gov
	return celTask{
		ID:              c.taskID,
		Iterations:      int64(g.Iterations),
		ToolCalls:       int64(g.ToolCalls),
		CostUSD:         g.CostUSD,
		SpawnedSubtasks: int64(g.SpawnedSubtasks),
		InputTokens:     g.InputTokens,
		OutputTokens:    g.OutputTokens,
		SubtaskDepth:    int64(c.depth),
		ActiveSkills:    skills,
		Metadata:        md,
	}
}
