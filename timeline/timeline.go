// Package timeline renders the records of a task tree for a person: one
// line per record, each field that came from outside escaped
// (internal/termsafe) so that nothing in a record reaches a terminal raw,
// and a Printer that follows a tree as it runs and answers its approval
// requests as told (ask on a terminal, approve, deny, or leave them);
// AnswerRequest answers one open request from the command line and
// follows the tree it frees to its next rest. It is what `engine run`,
// `engine approve`, `engine events` and the demo print.
package timeline

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/termsafe"
)

// The timeline: one line per record.
//
//	  0.012s  child …4QZK7M  #5   ToolCallDenied        guard=budget  echo call-1-1: max_tool_calls 1 reached

// Detail is the detail column of env: what the record says, for a known
// type, else its payload.
func Detail(env eventlog.Envelope) string {
	p, known, err := env.Decode()
	if err != nil || !known {
		return Raw(env.Payload)
	}
	return Describe(env, p)
}

// Role names a task's place in its tree in the timeline: root, child (depth
// 1), subN (depth N).
func Role(root bool, depth int) string {
	switch {
	case root:
		return "root"
	case depth > 1:
		return "sub" + strconv.Itoa(depth)
	}
	return "child"
}

// Line is the timeline's line of env, at seconds since the timeline began,
// for a task of role; escaped whole, so one record stays on one line.
func Line(env eventlog.Envelope, at float64, role string) string {
	pos := "in"
	if env.Seq > 0 {
		pos = "#" + strconv.FormatUint(env.Seq, 10)
	}
	return termsafe.Line(strings.TrimRight(fmt.Sprintf("%8.3fs  %-5s %-7s  %-4s %-21s %s", at, role, Short(env.Task), pos, env.Type, Detail(env)), " "))
}

// EventLine is the line of `engine events`: a task's own records, at
// seconds since its first, with their origin; escaped whole.
func EventLine(env eventlog.Envelope, at float64) string {
	pos := "in"
	if env.Seq > 0 {
		pos = fmt.Sprintf("#%d", env.Seq)
	}
	return termsafe.Line(strings.TrimRight(fmt.Sprintf("%8.3fs  %-5s %-21s %-8s %s", at, pos, env.Type, env.Origin, Detail(env)), " "))
}

// Describe is the detail column of a record of a known type.
func Describe(env eventlog.Envelope, p noeta.Payload) string {
	switch p := p.(type) {
	case *noeta.TaskCreated:
		s := "agent=" + p.Agent + " goal=" + Goal(p.Goal, p.GoalRef)
		if p.ParentTaskID != "" {
			s += " parent=" + Short(p.ParentTaskID)
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
		return s + Said(p.Text, p.TextRef)
	case *noeta.ToolCallStarted:
		return p.Tool + " " + p.CallID + " " + Args(p.Args, p.ArgsRef)
	case *noeta.ToolCallFinished:
		s := fmt.Sprintf("%s %s ", p.Tool, p.CallID)
		if !p.OK {
			return s + fmt.Sprintf("failed %dms: %s", p.DurationMS, Cut(p.Error, 80))
		}
		s += fmt.Sprintf("ok %dms → ", p.DurationMS)
		if p.OutputRef != nil {
			s += Ref(*p.OutputRef)
			if p.Preview != "" {
				// What a model read of it (docs/adr/0102).
				s += ` "` + Cut(p.Preview, 80) + `"`
			}
			return s
		}
		return s + Cut(string(p.Output), 80)
	case *noeta.ToolCallDenied:
		return fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Tool, p.CallID, p.Reason)
	case *noeta.SubtaskDenied:
		return fmt.Sprintf("guard=%s  agent=%s: %s", p.Guard, p.Agent, p.Reason)
	case *noeta.FinishDenied:
		return fmt.Sprintf("guard=%s: %s", p.Guard, p.Reason)
	case *noeta.GuardShadowed:
		return shadowed(p)
	case *noeta.ApprovalRequested:
		pa := noeta.PendingApproval{Action: p.Action, CallID: p.CallID, Tool: p.Tool, Args: p.Args, ArgsRef: p.ArgsRef, Agent: p.Agent}
		s := fmt.Sprintf("guard=%s  %s %s: %s", p.Guard, p.Handle, ApprovalWhat(pa), p.Reason)
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
		s := fmt.Sprintf("subtask %s agent=%s goal=%s", Short(p.SubtaskID), p.Agent, Goal(p.Goal, p.GoalRef))
		if p.GroupID != "" {
			s += " group=" + p.GroupID
		}
		return s + Allotment(p.Budget)
	case *noeta.SubtaskCompleted:
		return "from " + subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error) + " (inbox " + env.Key + ")"
	case *noeta.SubtaskResultRecorded:
		s := subtaskResult(p.SubtaskID, p.Status, p.Result, p.ResultRef, p.Error)
		if p.Spend != nil {
			s += fmt.Sprintf(" (its tree spent $%.4g, %d tool calls)", p.Spend.CostUSD, p.Spend.ToolCalls)
		}
		return s
	case *noeta.TaskStatePatched:
		return "patch " + Cut(string(p.Patch), 80)
	case *noeta.TaskSuspended:
		return p.Reason + "; wakes on " + Wake(&p.WakeOn)
	case *noeta.TaskWoken:
		return "by " + Wake(&p.WakeEvent)
	case *noeta.TaskSnapshot:
		return fmt.Sprintf("state up to #%d", p.UptoSeq)
	case *noeta.StepAttemptAbandoned:
		return fmt.Sprintf("%s: %s", p.Action, p.Reason)
	case *noeta.TaskCompleted:
		if p.AnswerRef != nil {
			return "answer " + Ref(*p.AnswerRef)
		}
		return "answer " + Cut(string(p.Answer), 80)
	case *noeta.TaskFailed:
		if p.Guard != "" {
			return fmt.Sprintf("guard=%s  %s", p.Guard, p.Error)
		}
		return p.Error
	case *noeta.TaskCancelled:
		return p.Reason
	}
	return Raw(env.Payload)
}

// shadowed is the detail of a GuardShadowed: what the shadow rule would
// have decided, beside what was decided, so that the line is never read as
// a verdict.
func shadowed(p *noeta.GuardShadowed) string {
	what := string(p.Action)
	switch p.Action {
	case noeta.ApprovalToolCall:
		what = p.Tool + " " + p.CallID
	case noeta.ApprovalSpawnSubtask:
		what = "spawn agent=" + p.Agent
	}
	rule := p.Rule
	if rule == "" {
		rule = "-"
	}
	s := fmt.Sprintf("guard=%s rule=%s  %s: would %s", p.Guard, rule, what, p.Verdict)
	if p.Failed {
		s += " (failed)"
	}
	s += ", decided " + p.Decided.String()
	if p.DecidedBy != "" {
		s += " by " + p.DecidedBy
	}
	return s + ": " + p.Reason
}

// Raw is the detail column of a record whose type is not known: its
// payload, escaped and cut.
func Raw(payload json.RawMessage) string { return Cut(string(payload), 100) }

func subtaskResult(id string, status noeta.SubtaskStatus, result json.RawMessage, ref *noeta.ContentRef, errText string) string {
	s := "subtask " + Short(id) + " " + string(status)
	switch {
	case errText != "":
		s += ": " + Cut(errText, 80)
	case ref != nil:
		s += " → " + Ref(*ref)
	case len(result) > 0:
		s += " → " + Cut(string(result), 80)
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

// ApprovalWhat names what an approval is asked for.
func ApprovalWhat(pa noeta.PendingApproval) string {
	args := Args(pa.Args, pa.ArgsRef)
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

// Wake is a wake condition or event, readable.
func Wake(w *noeta.Wake) string { return host.WakeString(w) }

// Goal is a task's goal, quoted, or where the content store holds it.
func Goal(goal string, ref *noeta.ContentRef) string {
	if ref != nil {
		return Ref(*ref)
	}
	// cut has escaped what needs it; the quotes show where the goal ends.
	return `"` + Cut(goal, 60) + `"`
}

// Said is what a model said beside its decision, for the end of a line:
// ` said "…"` quoted and cut (the record keeps it whole), where the content
// store holds it, or nothing for a decision made without words (a script,
// a record written before records had it), so such lines read as before.
func Said(text string, ref *noeta.ContentRef) string {
	switch {
	case ref != nil:
		return " said " + Ref(*ref)
	case text != "":
		// Cut escapes what needs it; the quotes show where the words end.
		return ` said "` + Cut(text, 100) + `"`
	}
	return ""
}

// Args is a call's arguments, or where the content store holds them.
func Args(args json.RawMessage, ref *noeta.ContentRef) string {
	if ref != nil {
		return Ref(*ref)
	}
	if len(args) == 0 {
		return "{}"
	}
	return Cut(string(args), 80)
}

// Ref names content held in the content store: its size and hash.
func Ref(ref noeta.ContentRef) string { return host.RefString(ref) }

// Short is the last six characters of an id, which tell the tasks of one
// tree apart (a ULID's first characters are its time).
func Short(id string) string {
	if len(id) <= 7 {
		return id
	}
	return "…" + id[len(id)-6:]
}

// Cut shortens s to at most n runes, marking the cut with …; runs of
// spaces become one, and every character a terminal would act on or hide
// (the newline included) is escaped first, so one record stays on one line
// and shows what was there.
func Cut(s string, n int) string {
	s = strings.Join(strings.Fields(termsafe.Line(s)), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Allotment shows what a spawned child's tree may spend (ADR 0054).
func Allotment(a *noeta.BudgetAllotment) string {
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
