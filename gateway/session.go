package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/tools"
)

// Principal is who a session acts for: the agent whose task it is, and
// who submitted it (recorded in TaskCreated, read by the approvals rules).
type Principal struct {
	Agent       string
	SubmittedBy string
}

// session is one client session: its task's policy. Decide hands the
// engine the client's next call and reads the previous call's outcome
// from the transcript; the handler of tools/call queues a call and waits
// for its outcome.
type session struct {
	g   *Gateway
	who Principal
	// goal, if set, is the task's goal; else it names the MCP client.
	goal string

	mu    sync.Mutex
	task  string
	queue []*call
	asked map[string]*call // handed to the engine, by call id
	// finished are the records of the asked calls the engine ran, by call
	// id, until deliver hands them over.
	finished map[string]*noeta.ToolCallFinished
	parked   bool             // the task waits on EventKind
	done     bool             // the client is gone
	ended    string           // why the task ended under the session, if it did
	notify   chan struct{}    // cap 1: a call was queued, or the session ended
	asks     map[string]asked // calls whose approval was put to the client, by request state

	srv     *sdk.Server
	tmu     sync.Mutex        // guards offered
	offered map[string]string // the tools offered, name → sha256 of the definition
}

// call is one tools/call on its way through the engine.
type call struct {
	tool string
	args json.RawMessage
	id   string
	out  chan outcome // cap 1

	// requested, if not nil, gets the approval request the call waits
	// on (cap 1), for an MCP session that may elicit the answer.
	requested chan *noeta.ApprovalRequested

	mu       sync.Mutex
	approval string // the handle it waits on, once requested

	// progress is the upstream's progress while it runs, handed from the
	// upstream client's reader to the handler (cap progressQueue; more is
	// dropped, the handler sends what it has).
	progress chan progressNote
}

// progressNote is one progress notification of the upstream server, its
// numbers only: its message, text the log does not hold, is not passed on.
type progressNote struct {
	progress, total float64
}

// progressQueue bounds the progress notifications of one call waiting to
// be sent to the client.
const progressQueue = 16

// outcome is a call's result as the log has it: the transcript's text, and
// the ToolCallFinished when the call ran (its output whole, or by ref).
type outcome struct {
	text  string
	isErr bool
	rec   *noeta.ToolCallFinished
}

func newSession(g *Gateway, who Principal) *session {
	return &session{g: g, who: who, asked: map[string]*call{}, finished: map[string]*noeta.ToolCallFinished{}, notify: make(chan struct{}, 1)}
}

// Client names the session's principal in its decisions' records.
func (s *session) Client() string { return s.who.SubmittedBy }

func (s *session) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// ensureTask submits the session's task on its first call; client names
// the client as it introduced itself.
func (s *session) ensureTask(ctx context.Context, client string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.task != "" {
		return s.task, nil
	}
	if s.done {
		return "", errors.New("the session has ended")
	}
	h, err := s.g.host()
	if err != nil {
		return "", err
	}
	goal := s.goal
	if goal == "" {
		goal = "MCP session of " + client + " through the gateway"
	}
	id := noeta.NewTaskID()
	// Known before the task exists: its first turn asks Policies for it.
	s.g.mu.Lock()
	s.g.sessions[id] = s
	s.g.mu.Unlock()
	// Listed before it exists: a gateway that dies in between leaves no
	// task the sweepers do not know of.
	if err := s.g.enlist(ctx, id); err != nil {
		s.g.mu.Lock()
		delete(s.g.sessions, id)
		s.g.mu.Unlock()
		return "", err
	}
	_, err = h.Submit(ctx, host.Submission{ID: id, Agent: s.who.Agent, Goal: goal, Queue: s.g.queue, SubmittedBy: s.who.SubmittedBy})
	if err != nil {
		s.g.mu.Lock()
		delete(s.g.sessions, id)
		s.g.mu.Unlock()
		return "", fmt.Errorf("submitting the session's task: %w", err)
	}
	s.task = id
	return id, nil
}

// submit queues c and wakes the task if it is parked.
func (s *session) submit(ctx context.Context, c *call, client string) error {
	task, err := s.ensureTask(ctx, client)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.done {
		why := s.ended
		s.mu.Unlock()
		if why != "" {
			return fmt.Errorf("%w: %s", errEnded, why)
		}
		return errors.New("the session has ended")
	}
	if n := len(s.queue); n >= s.g.opts.MaxQueued {
		s.mu.Unlock()
		return fmt.Errorf("%d calls of this session are already waiting their turn", n)
	}
	s.queue = append(s.queue, c)
	wake := s.parked
	s.parked = false
	s.mu.Unlock()
	s.signal()
	if wake {
		return s.wake(ctx, task)
	}
	return nil
}

// withdraw takes c off the queue if the engine has not taken it yet.
func (s *session) withdraw(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue {
		if q == c {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return true
		}
	}
	return false
}

func (s *session) wake(ctx context.Context, task string) error {
	h, err := s.g.host()
	if err != nil {
		return err
	}
	if _, err := h.Backend().Dispatcher().Wake(ctx, task, noeta.ExternalWake(EventKind)); err != nil {
		return fmt.Errorf("waking the session's task: %w", err)
	}
	return nil
}

// end marks the client gone: the task finishes at its next decision (a
// parked task is woken for it). A call waiting for an approval stays
// answerable; it runs once if approved, and nobody reads its result.
func (s *session) end() {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done = true
	task, wake := s.task, s.parked
	s.parked = false
	s.queue = nil
	s.mu.Unlock()
	s.signal()
	if wake && task != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.wake(ctx, task); err != nil {
			s.g.log.Warn("a parked session's task was not woken to finish", "task", task, "err", err)
		}
	}
}

// forget drops the session from the gateway once its task is done with it.
func (s *session) forget() {
	s.mu.Lock()
	task := s.task
	s.mu.Unlock()
	if task == "" {
		return
	}
	s.g.mu.Lock()
	delete(s.g.sessions, task)
	s.g.mu.Unlock()
}

// awaiting notes that a call waits on an approval.
func (s *session) awaiting(ar *noeta.ApprovalRequested) {
	s.mu.Lock()
	c := s.asked[ar.CallID]
	s.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.approval = ar.Handle
		c.mu.Unlock()
		if c.requested != nil {
			select {
			case c.requested <- ar:
			default:
			}
		}
	}
}

// Decide is the session task's policy: it delivers the outcomes of the
// calls it handed the engine (from the transcript), then hands it the next
// call, or finishes when the client is gone, or parks when the client has
// been idle for the gateway's Idle.
func (s *session) Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	s.deliver(in.Context)
	idle := time.NewTimer(s.g.opts.Idle)
	defer idle.Stop()
	for {
		s.mu.Lock()
		switch {
		case len(s.queue) > 0:
			c := s.queue[0]
			s.queue = s.queue[1:]
			if c.id == "" { // a hook's call comes with the client's id
				c.id = "c" + strconv.Itoa(in.Turn)
			}
			s.asked[c.id] = c
			s.mu.Unlock()
			return noeta.Decision{Kind: noeta.DecisionToolCalls, ToolCalls: []noeta.ToolCall{{CallID: c.id, Tool: c.tool, Args: c.args}}}, nil
		case s.done:
			s.mu.Unlock()
			s.forget()
			return noeta.Decision{Kind: noeta.DecisionFinish, Answer: []byte(`"the client session ended"`)}, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return noeta.Decision{}, context.Cause(ctx)
		case <-idle.C:
			s.mu.Lock()
			if len(s.queue) == 0 && !s.done {
				s.parked = true
				s.mu.Unlock()
				return noeta.Decision{Kind: noeta.DecisionWaitExternal, EventKind: EventKind}, nil
			}
			s.mu.Unlock()
		}
	}
}

// ToolFinished keeps the record of a call the session asked for: its
// client gets the output as recorded, not the transcript's text of it
// (engine.ResultReader).
func (s *session) ToolFinished(rec *noeta.ToolCallFinished) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.asked[rec.CallID]; ok {
		r := *rec
		s.finished[rec.CallID] = &r
	}
}

// ToolProgress is where the upstream's progress of a call the session
// asked for goes: to the call's handler, which tells the client
// (engine.ProgressReader). It never blocks the upstream client's reader.
func (s *session) ToolProgress(callID string) tools.Progress {
	s.mu.Lock()
	c := s.asked[callID]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return func(progress, total float64, _ string) {
		// A full queue drops its oldest note, not this one: the latest
		// says the most (the last one may be the one the client waits
		// for). One reader tells a call its progress, so this ends.
		for range 2 {
			select {
			case c.progress <- progressNote{progress, total}:
				return
			default:
			}
			select {
			case <-c.progress:
			default:
			}
		}
	}
}

// deliver hands each call the engine has answered its outcome.
func (s *session) deliver(t *noeta.Transcript) {
	if t == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) == 0 {
		return
	}
	for _, m := range t.Messages {
		if m.Role != noeta.RoleTool {
			continue
		}
		c, ok := s.asked[m.ToolCallID]
		if !ok {
			continue
		}
		delete(s.asked, m.ToolCallID)
		rec := s.finished[m.ToolCallID]
		delete(s.finished, m.ToolCallID)
		c.out <- outcome{text: m.Text, isErr: m.IsError, rec: rec}
	}
}
