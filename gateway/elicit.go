package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
)

// An agent whose approval: is elicitation has the gateway ask the MCP
// client's own user to answer each approval its session's calls wait on,
// besides the inbox: the answer is given as the session's principal with
// auth elicitation and judged by the approvals rules like any other (a
// rule's approvers can refuse that door, and self_approval: deny refuses
// it, since the session's principal submitted the task). docs/adr/0100.
//
// The question is a multi round-trip request (SEP-2322): the tools/call
// comes back input-required, carrying an elicitation and a request state;
// the client asks its user and calls again with the answer and the state,
// and that call waits for the outcome. For a client on an older protocol
// the go-sdk asks through elicitation/create itself and calls the handler
// again, the same way.

// askInput is the key of the question in the input requests.
const askInput = "approval"

// maxAsked bounds the calls of a session waiting for the client's answer.
const maxAsked = 2 * DefaultMaxQueued

// askSchema is the form asked: approve or not, and why.
var askSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"approve":{"type":"boolean","title":"Approve this call","description":"true runs the call; false refuses it"},` +
	`"reason":{"type":"string","title":"Why (recorded)","maxLength":500}},"required":["approve"]}`)

// asked is a call whose approval was put to the client, by request state.
type asked struct {
	c  *call
	ar *noeta.ApprovalRequested
}

// elicits reports whether the session asks its client's user: the agent
// says so and the client said it can be asked.
func (s *session) elicits(ss *sdk.ServerSession) bool {
	if ss == nil || !s.g.opts.Approvals.Elicits(s.who.Agent) {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// askClient returns the input-required result that puts ar to the client,
// or nil when the session has too many questions open (the call then
// waits for the inbox alone).
func (s *session) askClient(c *call, ar *noeta.ApprovalRequested) *sdk.CallToolResult {
	state := rand.Text()
	s.mu.Lock()
	if s.asks == nil {
		s.asks = map[string]asked{}
	}
	if len(s.asks) >= maxAsked {
		s.mu.Unlock()
		return nil
	}
	s.asks[state] = asked{c: c, ar: ar}
	s.mu.Unlock()
	args := string(ar.Args)
	if ar.ArgsRef != nil {
		args = "(kept in the content store)"
	}
	msg := fmt.Sprintf("noeta: the call of %s with %s needs an approval (%s: %s). Approve it?",
		ar.Tool, truncateText(args, 500), ar.Guard, truncateText(ar.Reason, 300))
	return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{askInput: &sdk.ElicitParams{Message: msg, RequestedSchema: askSchema}}, RequestState: state}
}

// resumeAsked takes the client's answer to a question askClient put, hands
// it to the task, and waits for the call's outcome. A state the session
// did not hand out (or handed out for another tool) is refused.
func (s *session) resumeAsked(ctx context.Context, req *sdk.CallToolRequest, tool string) (*sdk.CallToolResult, error) {
	state := req.Params.RequestState
	s.mu.Lock()
	a, ok := s.asks[state]
	if ok && a.c.tool == tool {
		delete(s.asks, state)
	}
	s.mu.Unlock()
	if !ok || a.c.tool != tool {
		return errorResult("gateway: the request state names no question of this session about %s; the call was not made", tool), nil
	}
	res, _ := req.Params.InputResponses[askInput].(*sdk.ElicitResult)
	if res != nil && res.Action != "cancel" {
		s.answerAsked(ctx, req.Session, a.ar, res)
	}
	return s.await(ctx, req, a.c)
}

// answerAsked gives the task the client's answer. Dismissed, or refused
// by the rules, the request waits in the inbox.
func (s *session) answerAsked(ctx context.Context, ss *sdk.ServerSession, ar *noeta.ApprovalRequested, res *sdk.ElicitResult) {
	decision, reason := noeta.ApprovalDeny, "declined in the client"
	if res.Action == "accept" {
		if ok, _ := res.Content["approve"].(bool); ok {
			decision, reason = noeta.ApprovalApprove, "approved in the client"
		} else {
			reason = "refused in the client"
		}
		if why, _ := res.Content["reason"].(string); strings.TrimSpace(why) != "" {
			reason += ": " + truncateText(strings.TrimSpace(why), 500)
		}
	}
	h, err := s.g.host()
	if err != nil {
		return
	}
	err = h.Approve(ctx, s.taskID(), ar.Handle, host.Answer{Decision: decision, Approver: s.who.SubmittedBy, Reason: reason, Auth: noeta.AuthElicitation})
	if err != nil {
		s.g.log.Warn("the client's answer was not taken; the request waits in the inbox", "handle", ar.Handle, "err", err)
		if ss != nil {
			_ = ss.Log(ctx, &sdk.LoggingMessageParams{Level: "warning", Logger: "noeta", Data: "your answer was not taken (" + err.Error() + "); the request waits in the inbox"})
		}
	}
}
