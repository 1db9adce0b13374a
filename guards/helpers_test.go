package guards

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/noeta-go/noeta"
)

func toolCall(tool, args string) noeta.ProposedAction {
	return noeta.ProposedToolCall{Call: noeta.ToolCall{CallID: "call-1", Tool: tool, Args: json.RawMessage(args)}}
}

func spawn(agent string) noeta.ProposedAction {
	return noeta.ProposedSpawnSubtask{Spawn: noeta.SpawnSubtask{Agent: agent, Goal: "g"}}
}

func finish() noeta.ProposedAction {
	return noeta.ProposedFinish{Answer: json.RawMessage(`"done"`)}
}

// gctx builds a Context from a governance slice and a depth.
func gctx(g noeta.GovernanceState, depth int) *Context {
	return NewContext(ContextParams{TaskID: "task-1", Governance: g, SubtaskDepth: depth})
}

// checkGuard calls g directly and fails the test on an error.
func checkGuard(t *testing.T, g Guard, a noeta.ProposedAction, c *Context) noeta.VerdictResult {
	t.Helper()
	r, err := g.Check(context.Background(), a, c)
	if err != nil {
		t.Fatalf("%s.Check(%#v): unexpected error %v", g.Name(), a, err)
	}
	return r
}

// wantVerdict compares a result with a verdict and, if want is not ALLOW, a
// reason ("" means any reason).
func wantVerdict(t *testing.T, got noeta.VerdictResult, want noeta.Verdict, reason string) {
	t.Helper()
	if got.Verdict != want || (reason != "" && got.Reason != reason) {
		t.Errorf("got %v %q, want %v %q", got.Verdict, got.Reason, want, reason)
	}
}

func allow() noeta.VerdictResult { return noeta.Allow() }
