package gateway_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/gateway"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/govfile"
)

// connectAsking connects a client that answers elicitations with answer
// (counting them), as the local user cli:tester.
func (r *rig) connectAsking(t *testing.T, answer func(*sdk.ElicitRequest) *sdk.ElicitResult, asked *atomic.Int32) (*sdk.ClientSession, func()) {
	t.Helper()
	return r.connectWith(t, &sdk.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked.Add(1)
			return answer(req), nil
		}})
}

// elicitRig is a gateway whose agent dev asks its client's user
// (approval: elicitation), with extra config appended.
func elicitRig(t *testing.T, door, extra string) *rig {
	yaml := strings.Replace(config(t, "1h"), "    approval_timeout: 1h\n", "    approval_timeout: 1h\n    approval: "+door+"\n", 1) + extra
	cfg, err := govfile.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return open(t, yaml, gateway.Options{Idle: 200 * time.Millisecond, Approvals: cfg.Approvals})
}

// TestElicitationApproves: the client's user approves in the client; the
// call runs and the resolution names the session's principal with auth
// elicitation.
func TestElicitationApproves(t *testing.T) {
	r := elicitRig(t, "elicitation", "")
	var asked atomic.Int32
	cs, stop := r.connectAsking(t, func(req *sdk.ElicitRequest) *sdk.ElicitResult {
		if !strings.Contains(req.Params.Message, "toggle-simulated-logging") {
			t.Errorf("the question does not name the tool: %q", req.Params.Message)
		}
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "reason": "looks fine"}}
	}, &asked)
	defer stop()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("approved in the client: %+v %v", res, err)
	}
	if asked.Load() != 1 {
		t.Fatalf("asked %d times, want 1", asked.Load())
	}
	e := r.waitFor(t, r.sessionTask(t), noeta.TypeApprovalResolved)
	p, _, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	ar := p.(*noeta.ApprovalResolved)
	if ar.Decision != noeta.ApprovalApprove || ar.Auth != noeta.AuthElicitation || ar.Approver != "cli:tester" || !strings.Contains(ar.Reason, "looks fine") {
		t.Fatalf("resolution: %+v", ar)
	}
}

// TestElicitationDeclined: a decline is a denial, recorded.
func TestElicitationDeclined(t *testing.T) {
	r := elicitRig(t, "elicitation", "")
	var asked atomic.Int32
	cs, stop := r.connectAsking(t, func(*sdk.ElicitRequest) *sdk.ElicitResult { return &sdk.ElicitResult{Action: "decline"} }, &asked)
	defer stop()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "declined in the client") {
		t.Fatalf("declined: %+v %q %v", res, text(res), err)
	}
	// A request state the gateway did not hand out answers nothing.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{},
		RequestState: "forged", InputResponses: sdk.InputResponseMap{"approval": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}})
	if err != nil || !res.IsError || !strings.Contains(text(res), "names no question") {
		t.Fatalf("forged state: %+v %q %v", res, text(res), err)
	}
	if n := len(r.recordsOf(t, noeta.TypeToolCallStarted)); n != 0 {
		t.Fatalf("%d calls started; the declined one and the forged one must not run", n)
	}
}

// recordsOf are the session task's records of type typ.
func (r *rig) recordsOf(t *testing.T, typ string) []eventlog.Envelope {
	t.Helper()
	envs, err := r.h.Events(context.Background(), r.sessionTask(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []eventlog.Envelope
	for _, e := range envs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestElicitationMeetsTheRules: where the rules refuse the session's own
// user (self_approval: deny), the client's yes is not taken; the request
// waits for someone else in the inbox. Where the agent says nothing, the
// client is never asked.
func TestElicitationMeetsTheRules(t *testing.T) {
	for _, tc := range []struct {
		name, door, extra string
		wantAsked         int32
	}{
		{"self approval denied", "elicitation", "approvals: {self_approval: deny}\n", 1},
		{"a rule refusing the door", "elicitation", "approvals:\n  rules:\n    - {name: no-elicit, approvers: 'auth != \"elicitation\"'}\n", 1},
		{"inbox only", "inbox", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := elicitRig(t, tc.door, tc.extra)
			var asked atomic.Int32
			cs, stop := r.connectAsking(t, func(*sdk.ElicitRequest) *sdk.ElicitResult {
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
			}, &asked)
			defer stop()
			ctx := context.Background()
			type answer struct {
				res *sdk.CallToolResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "mcp__everything__toggle-simulated-logging", Arguments: map[string]any{}})
				done <- answer{res, err}
			}()
			var task string
			for deadline := time.Now().Add(30 * time.Second); task == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if ts, _ := r.h.Tasks(ctx); len(ts) == 1 {
					task = ts[0].Task
				}
			}
			p, _, err := r.waitFor(t, task, noeta.TypeApprovalRequested).Decode()
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); asked.Load() < tc.wantAsked && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			}
			select {
			case a := <-done:
				t.Fatalf("the call ended on the client's own word: %+v %v", a.res, a.err)
			case <-time.After(300 * time.Millisecond):
			}
			if asked.Load() != tc.wantAsked {
				t.Fatalf("asked %d times, want %d", asked.Load(), tc.wantAsked)
			}
			if err := r.h.Approve(ctx, task, p.(*noeta.ApprovalRequested).Handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "cli:approver"}); err != nil {
				t.Fatal(err)
			}
			if a := <-done; a.err != nil || a.res.IsError {
				t.Fatalf("approved in the inbox: %+v %v", a.res, a.err)
			}
		})
	}
}
