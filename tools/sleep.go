package tools

import (
	"context"
	"encoding/json"
	"math"
	"time"
)

// sleepTool waits {"seconds": n}, 0 <= n <= its maximum, and returns
// {"slept_seconds": n}. A context that ends first ends the call with its error.
type sleepTool struct{ max time.Duration }

func (sleepTool) Name() string    { return "sleep" }
func (sleepTool) Risk() RiskLevel { return RiskLow }
func (sleepTool) Edits() bool     { return false }
func (sleepTool) Description() string {
	return "Waits the given number of seconds."
}
func (t sleepTool) InputSchema() json.RawMessage { return sleepSchema(t.max.Seconds()) }

type sleepArgs struct {
	Seconds float64 `json:"seconds" args:"required"`
}

func (t sleepTool) Run(ctx context.Context, call Call) (Result, error) {
	var a sleepArgs
	if err := DecodeArgs("sleep", call.Args, &a); err != nil {
		return Failf("%v", err), nil
	}
	if a.Seconds < 0 || math.IsNaN(a.Seconds) {
		return Failf("sleep: args.seconds must be >= 0, not %v", a.Seconds), nil
	}
	if a.Seconds > t.max.Seconds() {
		return Failf("sleep: args.seconds %v is over the maximum of %v", a.Seconds, t.max.Seconds()), nil
	}
	if err := ctxErr(ctx, "sleep"); err != nil {
		return Result{}, err
	}
	timer := time.NewTimer(time.Duration(a.Seconds * float64(time.Second)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return Result{}, ctxErr(ctx, "sleep")
	case <-timer.C:
	}
	return Succeed(map[string]float64{"slept_seconds": a.Seconds})
}
