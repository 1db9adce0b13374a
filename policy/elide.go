package policy

import (
	"strconv"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
)

// Elide returns t cut to a budget of maxChars characters (runes of every
// message's text and every tool call's arguments): when t is over it, the
// text of the oldest successful tool outputs is replaced, one at a time, by
// a note ("[output elided: N chars]") until it fits, and Elided counts them.
//
// What is never elided: the goal and every other user message, the
// assistant's own decisions, tool errors (a denial, a refusal: why something
// did not happen is what a model needs to adapt, and they are short), and
// anything in the last turn (from the last assistant message on), which the
// model is answering. So a transcript may still be over the budget when
// Elide has done what it may; a policy that must fit a hard limit sees that
// from the size it sends.
//
// Elide is pure and deterministic: the same transcript and budget give the
// same result, and t is not modified (the result shares its unmodified
// messages). maxChars <= 0 means no budget: t is returned as it is.
func Elide(t *noeta.Transcript, maxChars int) *noeta.Transcript {
	if t == nil || maxChars <= 0 {
		return t
	}
	total := 0
	for _, m := range t.Messages {
		total += messageChars(m)
	}
	if total <= maxChars {
		return t
	}
	last := len(t.Messages)
	for i := len(t.Messages) - 1; i >= 0; i-- {
		if t.Messages[i].Role == noeta.RoleAssistant {
			last = i
			break
		}
	}
	if last == len(t.Messages) {
		// No decision yet: the goal alone, which is never cut.
		return t
	}
	out := &noeta.Transcript{Messages: make([]noeta.Message, len(t.Messages)), Elided: t.Elided}
	copy(out.Messages, t.Messages)
	for i := 1; i < last && total > maxChars; i++ {
		m := &out.Messages[i]
		if m.Role != noeta.RoleTool || m.IsError {
			continue
		}
		n := utf8.RuneCountInString(m.Text)
		note := "[output elided: " + strconv.Itoa(n) + " chars]"
		saved := n - utf8.RuneCountInString(note)
		if saved <= 0 {
			continue
		}
		m.Text = note
		total -= saved
		out.Elided++
	}
	return out
}

// messageChars is what a message counts toward the budget.
func messageChars(m noeta.Message) int {
	n := utf8.RuneCountInString(m.Text)
	for _, c := range m.ToolCalls {
		n += utf8.RuneCount(c.Args)
	}
	return n
}
