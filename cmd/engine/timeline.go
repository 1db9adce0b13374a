package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/termsafe"
)

// approvalMode is how a follower answers approval requests.
type approvalMode string

const (
	approvalsAsk     approvalMode = "ask"     // prompt y/N on the terminal
	approvalsApprove approvalMode = "approve" // approve every request
	approvalsDeny    approvalMode = "deny"    // refuse every request
	approvalsLeave   approvalMode = "leave"   // answer nothing: the run ends waiting (exit 3)
)

func parseApprovalMode(s string) (approvalMode, error) {
	switch m := approvalMode(s); m {
	case approvalsAsk, approvalsApprove, approvalsDeny, approvalsLeave:
		return m, nil
	}
	return "", usageErr("--approvals %q: want ask, approve, deny or leave", s)
}

// printer prints one task tree's records as a watch delivers them — the
// timeline, or JSON lines — and answers approval requests as its mode says.
type printer struct {
	w    *host.Watch
	root string
	out  io.Writer // the timeline, or JSON lines
	msgs io.Writer // prompts and notes
	json bool

	mode     approvalMode
	approver string
	// reasons are recorded with approve and deny answers.
	approveReason, denyReason string
	answers                   *bufio.Reader // ask: where answers are read
	start                     time.Time

	// ask's read of a line, in flight: a read of the terminal cannot be
	// interrupted, so a prompt that ends before its line comes (the request
	// was answered elsewhere) leaves it here, stale, and the next prompt
	// throws that line away rather than take it as its own answer. The
	// goroutine of a read ends when the line (or the end of input) comes;
	// at most one is in flight. Owned by the goroutine that runs the watch.
	pending chan lineRead
	stale   bool
}

type lineRead struct {
	text string
	err  error
}

func newPrinter(root string, out, msgs io.Writer, json bool, mode approvalMode) *printer {
	return &printer{
		root: root, out: out, msgs: msgs, json: json,
		mode: mode, approver: approver(),
		approveReason: "approved from the command line (--approvals approve)",
		denyReason:    "refused from the command line (--approvals deny)",
		start:         time.Now(),
	}
}

// watch starts watching the tree of the printer's root on h; fromNow
// prints only what is committed from now on.
func (p *printer) watch(ctx context.Context, h *host.Host, fromNow bool) error {
	opts := host.WatchOptions{
		FromNow:  fromNow,
		OnRecord: p.print,
		OnNote:   func(msg string) { fmt.Fprintf(p.msgs, "engine: %s\n", msg) },
	}
	if p.mode != approvalsLeave {
		opts.OnApproval = p.answer
	}
	w, err := h.Watch(ctx, p.root, opts)
	if err != nil {
		return err
	}
	p.w = w
	return nil
}

// follow prints the tree's records until it comes to rest.
func (p *printer) follow(ctx context.Context) (host.Rest, error) {
	defer p.w.Stop()
	return p.w.Wait(ctx)
}

func (p *printer) print(env eventlog.Envelope) {
	if p.json {
		body, err := jetstream.CloudEvent(env)
		if err != nil {
			fmt.Fprintf(p.msgs, "engine: record %s of task %s: %v\n", env.ID, env.Task, err)
			return
		}
		body = append(body, '\n')
		_, _ = p.out.Write(body)
		return
	}
	pl, known, err := env.Decode()
	if err != nil {
		known = false
	}
	// One record, one line: a newline in any field is escaped with the rest.
	fmt.Fprintln(p.out, termsafe.Line(p.line(env, pl, known)))
}

// answer answers an approval request as the mode says.
func (p *printer) answer(ctx context.Context, req host.ApprovalRequest) (host.Answer, bool) {
	a := host.Answer{Approver: p.approver}
	switch p.mode {
	case approvalsApprove:
		a.Decision, a.Reason = noeta.ApprovalApprove, p.approveReason
	case approvalsDeny:
		a.Decision, a.Reason = noeta.ApprovalDeny, p.denyReason
	case approvalsAsk:
		var ok bool
		if a.Decision, ok = p.ask(ctx, req); !ok {
			return a, false
		}
		a.Reason = "answered on the terminal"
	default:
		return a, false
	}
	return a, true
}

// ask prompts for an approval; ok is false when no answer came (end of
// input, or ctx ended: the request was answered elsewhere): the request is
// left as it is.
func (p *printer) ask(ctx context.Context, req host.ApprovalRequest) (noeta.ApprovalDecision, bool) {
	pa := req.Approval
	l := termsafe.Line
	fmt.Fprintf(p.msgs, "\napproval needed: task %s (%s), %s\n  %s\n  guard %s: %s\napprove? [y/N] ",
		l(req.Task), l(req.Agent), l(req.Handle), l(approvalWhat(pa)), l(pa.Guard), l(pa.Reason))
	if p.answers == nil {
		fmt.Fprintln(p.msgs, "(no input; left waiting)")
		return "", false
	}
	r, ok := p.readLine(ctx)
	if !ok {
		fmt.Fprintf(p.msgs, "\n(%v)\n", context.Cause(ctx))
		return "", false
	}
	line, err := r.text, r.err
	if err != nil && line == "" {
		fmt.Fprintln(p.msgs, "(no input; left waiting)")
		return "", false
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return noeta.ApprovalApprove, true
	}
	return noeta.ApprovalDeny, true
}

// readLine reads the answer to the prompt just shown; ok is false when
// ctx ended first. A line that completes a read begun for an earlier
// prompt is not this prompt's answer: it is dropped, said, and read again.
func (p *printer) readLine(ctx context.Context) (lineRead, bool) {
	for {
		if p.pending == nil {
			ch := make(chan lineRead, 1)
			go func(r *bufio.Reader) {
				s, err := r.ReadString('\n')
				ch <- lineRead{s, err}
			}(p.answers)
			p.pending = ch
		}
		select {
		case <-ctx.Done():
			p.stale = true
			return lineRead{}, false
		case r := <-p.pending:
			p.pending = nil
			if p.stale {
				p.stale = false
				if r.err == nil {
					fmt.Fprintf(p.msgs, "(%q answered an earlier request, which was closed before it; answer this one again) approve? [y/N] ", strings.TrimSpace(r.text))
					continue
				}
			}
			return r, true
		}
	}
}

// restCode is the exit code of a tree's rest.
func restCode(r host.Rest) int {
	switch r.Status {
	case host.RestCompleted:
		return exitDone
	case host.RestWaiting:
		return exitWaiting
	}
	return exitFailed
}

// The timeline: one line per record.
//
//	  0.012s  child …4QZK7M  #5   ToolCallDenied        guard=budget  echo call-1-1: max_tool_calls 1 reached

func (p *printer) line(env eventlog.Envelope, pl noeta.Payload, known bool) string {
	role := "root"
	depth := p.w.Depth(env.Task)
	switch {
	case env.Task == p.root:
	case depth > 1:
		role = "sub" + strconv.Itoa(depth)
	default:
		role = "child"
	}
	pos := "in"
	if env.Seq > 0 {
		pos = "#" + strconv.FormatUint(env.Seq, 10)
	}
	at := env.Time.Sub(p.start).Seconds()
	detail := rawDetail(env.Payload)
	if known {
		detail = describe(env, pl)
	}
	return strings.TrimRight(fmt.Sprintf("%8.3fs  %-5s %-7s  %-4s %-21s %s", at, role, short(env.Task), pos, env.Type, detail), " ")
}

// describe is the detail column of a record of a known type.
func describe(env eventlog.Envelope, p noeta.Payload) string {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		s := "agent=" + p.Agent + " goal=" + goalString(p.Goal, p.GoalRef)
		if p.ParentTaskID != "" {
			s += " parent=" + short(p.ParentTaskID)
		}
		return s + " id=" + p.TaskID
	case *noeta.LeaseGranted:
		return fmt.Sprintf("%s gen %d", p.Worker, p.Generation)
	case *noeta.TurnStarted:
		return fmt.Sprintf("turn %d", p.Turn)
	case *noeta.PolicyDecided:
		s := fmt.Sprintf("turn %d: %s", p.Turn, p.Decision)
		if p.CostUSD > 0 {
			s += fmt.Sprintf(" cost=$%.4g", p.CostUSD)
		}
		if p.InputTokens > 0 || p.OutputTokens > 0 {
			s += fmt.Sprintf(" tokens=%d/%d", p.InputTokens, p.OutputTokens)
		}
		return s
	case *noeta.ToolCallStarted:
		return p.Tool + " " + p.CallID + " " + argsString(p.Args, p.ArgsRef)
	case *noeta.ToolCallFinished:
		s := fmt.Sprintf("%s %s ", p.Tool, p.CallID)
		if !p.OK {
			return s + fmt.Sprintf("failed %dms: %s", p.DurationMS, cut(p.Error, 80))
		}
		s += fmt.Sprintf("ok %dms → ", p.DurationMS)
		if p.OutputRef != nil {
			return s + refString(*p.OutputRef)
		}
		return s + cut(string(p.Output), 80)
	case *noeta.ToolCallDenied:
		return fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Tool, p.CallID, p.Reason)
	case *noeta.SubtaskDenied:
		return fmt.Sprintf("guard=%s  agent=%s: %s", p.Guard, p.Agent, p.Reason)
	case *noeta.FinishDenied:
		return fmt.Sprintf("guard=%s: %s", p.Guard, p.Reason)
	case *noeta.ApprovalRequested:
		pa := noeta.PendingApproval{Action: p.Action, CallID: p.CallID, Tool: p.Tool, Args: p.Args, ArgsRef: p.ArgsRef, Agent: p.Agent}
		s := fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Handle, approvalWhat(pa), p.Reason)
		return s + requestTerms(p)
	case *noeta.ApprovalResolved:
		if p.Auth == noeta.AuthTimer {
			return fmt.Sprintf("%s %s: expired: %s", p.Handle, p.Decision, p.Reason)
		}
		who := p.Approver
		if len(p.Approvers) > 1 {
			who = strings.Join(p.Approvers, ", ")
		}
		s := fmt.Sprintf("%s %s by %s%s", p.Handle, p.Decision, who, authString(p.Auth))
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		return s
	case *noeta.ApprovalCounted:
		s := fmt.Sprintf("%s approved by %s%s: %d of %d approvals", p.Handle, p.Approver, authString(p.Auth), p.Approvals, p.Quorum)
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		return s
	case *noeta.ApprovalRefused:
		return fmt.Sprintf("%s %s by %s%s REFUSED: %s", p.Handle, p.Decision, p.Approver, authString(p.Auth), p.Reason)
	case *noeta.SubtaskSpawned:
		s := fmt.Sprintf("subtask %s agent=%s goal=%s", short(p.SubtaskID), p.Agent, goalString(p.Goal, p.GoalRef))
		if p.GroupID != "" {
			s += " group=" + p.GroupID
		}
		return s + allotmentString(p.Budget)
	case *noeta.SubtaskCompleted:
		return "from " + subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error) + " (inbox " + env.Key + ")"
	case *noeta.SubtaskResultRecorded:
		s := subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error)
		if p.Spend != nil {
			s += fmt.Sprintf(" (its tree spent $%.4g, %d tool calls)", p.Spend.CostUSD, p.Spend.ToolCalls)
		}
		return s
	case *noeta.TaskStatePatched:
		return "patch " + cut(string(p.Patch), 80)
	case *noeta.TaskSuspended:
		return p.Reason + "; wakes on " + wakeString(&p.WakeOn)
	case *noeta.TaskWoken:
		return "by " + wakeString(&p.WakeEvent)
	case *noeta.TaskSnapshot:
		return fmt.Sprintf("state up to #%d", p.UptoSeq)
	case *noeta.StepAttemptAbandoned:
		return fmt.Sprintf("%s: %s", p.Action, p.Reason)
	case *noeta.TaskCompleted:
		if p.AnswerRef != nil {
			return "answer " + refString(*p.AnswerRef)
		}
		return "answer " + cut(string(p.Answer), 80)
	case *noeta.TaskFailed:
		if p.Guard != "" {
			return fmt.Sprintf("guard=%s  %s", p.Guard, p.Error)
		}
		return p.Error
	case *noeta.TaskCancelled:
		return p.Reason
	}
	return rawDetail(env.Payload)
}

func rawDetail(payload json.RawMessage) string { return cut(string(payload), 100) }

func subtaskResult(id string, status noeta.SubtaskStatus, result json.RawMessage, ref *noeta.ContentRef, errText string) string {
	s := "subtask " + short(id) + " " + string(status)
	switch {
	case errText != "":
		s += ": " + cut(errText, 80)
	case ref != nil:
		s += " → " + refString(*ref)
	case len(result) > 0:
		s += " → " + cut(string(result), 80)
	}
	return s
}

// authString says how an approver was authenticated, when it says more
// than the local user of the embedded default.
func authString(auth string) string {
	if auth == "" || auth == noeta.AuthLocal {
		return ""
	}
	return " (" + auth + ")"
}

// requestTerms says what the approvals rules asked of a request, if
// anything: its rules, quorum and expiry.
func requestTerms(p *noeta.ApprovalRequested) string {
	var terms []string
	if len(p.Rules) > 0 {
		terms = append(terms, "rules "+strings.Join(p.Rules, ","))
	}
	if p.Quorum > 1 {
		terms = append(terms, fmt.Sprintf("quorum %d", p.Quorum))
	}
	if !p.ExpiresAt.IsZero() {
		terms = append(terms, "expires "+p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if len(terms) == 0 {
		return ""
	}
	return " [" + strings.Join(terms, "; ") + "]"
}

// approvalWhat names what an approval is asked for.
func approvalWhat(pa noeta.PendingApproval) string {
	args := argsString(pa.Args, pa.ArgsRef)
	switch pa.Action {
	case noeta.ApprovalToolCall:
		return fmt.Sprintf("%s %s %s", pa.Tool, pa.CallID, args)
	case noeta.ApprovalSpawnSubtask:
		return "spawn " + pa.Agent + " " + args
	case noeta.ApprovalFinish:
		return "finish " + args
	}
	return string(pa.Action) + " " + args
}

func wakeString(w *noeta.Wake) string { return host.WakeString(w) }

func goalString(goal string, ref *noeta.ContentRef) string {
	if ref != nil {
		return refString(*ref)
	}
	// cut has escaped what needs it; the quotes show where the goal ends.
	return `"` + cut(goal, 60) + `"`
}

func argsString(args json.RawMessage, ref *noeta.ContentRef) string {
	if ref != nil {
		return refString(*ref)
	}
	if len(args) == 0 {
		return "{}"
	}
	return cut(string(args), 80)
}

func refString(ref noeta.ContentRef) string { return host.RefString(ref) }

// short is the last six characters of an id, which tell the tasks of one
// tree apart (a ULID's first characters are its time).
func short(id string) string {
	if len(id) <= 7 {
		return id
	}
	return "…" + id[len(id)-6:]
}

// cut shortens s to at most n runes, marking the cut with …; runs of
// spaces become one, and every character a terminal would act on or hide
// (the newline included) is escaped first, so one record stays on one line
// and shows what was there.
func cut(s string, n int) string {
	s = strings.Join(strings.Fields(termsafe.Line(s)), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// allotmentString shows what a spawned child's tree may spend (ADR 0054).
func allotmentString(a *noeta.BudgetAllotment) string {
	if a == nil {
		return ""
	}
	s := " allotted"
	if a.CostUSD != nil {
		s += fmt.Sprintf(" $%.4g", *a.CostUSD)
	}
	if a.ToolCalls != nil {
		s += fmt.Sprintf(" %d tool calls", *a.ToolCalls)
	}
	return s
}
