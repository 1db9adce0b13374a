package tools

import (
	"bytes"
	"context"
	"encoding/json"
)

// echoTool returns its args object as its output: {"text": "hi"} gives
// {"text": "hi"}. Any object is accepted; empty args give {}.
type echoTool struct{}

func (echoTool) Name() string    { return "echo" }
func (echoTool) Risk() RiskLevel { return RiskLow }
func (echoTool) Edits() bool     { return false }
func (echoTool) Description() string {
	return "Returns its args object unchanged."
}
func (echoTool) InputSchema() json.RawMessage { return json.RawMessage(echoSchema) }

func (echoTool) Run(ctx context.Context, call Call) (Result, error) {
	if err := ctxErr(ctx, "echo"); err != nil {
		return Result{}, err
	}
	args := bytes.TrimSpace(call.Args)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if !json.Valid(args) {
		return Failf("echo: args are not valid JSON"), nil
	}
	if args[0] != '{' {
		return Failf("echo: args must be a JSON object, not %s", jsonKind(args[0])), nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, args); err != nil {
		return Failf("echo: args are not valid JSON"), nil
	}
	return Result{Output: out.Bytes(), OK: true}, nil
}
