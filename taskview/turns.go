package taskview

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/timeline"
)

// Turn is one decision of a task as inspect shows it: what was decided,
// by which model, what it cost, and what the model said beside it (whole,
// or where the content store holds it; docs/adr/0084).
type Turn struct {
	Seq          uint64             `json:"seq"`
	Time         time.Time          `json:"time"`
	Turn         int                `json:"turn"`
	Decision     noeta.DecisionKind `json:"decision"`
	Model        string             `json:"model,omitempty"`
	Provider     string             `json:"provider,omitempty"`
	CostUSD      float64            `json:"cost_usd,omitempty"`
	InputTokens  int64              `json:"input_tokens,omitempty"`
	OutputTokens int64              `json:"output_tokens,omitempty"`
	LatencyMS    int64              `json:"latency_ms,omitempty"`
	Text         string             `json:"text,omitempty"`
	TextRef      *noeta.ContentRef  `json:"text_ref,omitempty"`
	ResponseRef  *noeta.ContentRef  `json:"response_ref,omitempty"`
}

// Turns lists the decisions among a task's records (its log, in order):
// one Turn per PolicyDecided. A record that does not decode is skipped;
// the events listing shows it as it is.
func Turns(envs []eventlog.Envelope) []Turn {
	var out []Turn
	for _, env := range envs {
		if env.Type != noeta.TypePolicyDecided {
			continue
		}
		p, known, err := env.Decode()
		d, ok := p.(*noeta.PolicyDecided)
		if err != nil || !known || !ok {
			continue
		}
		out = append(out, Turn{Seq: env.Seq, Time: env.Time, Turn: d.Turn, Decision: d.Decision, Model: d.Model, Provider: d.Provider,
			CostUSD: d.CostUSD, InputTokens: d.InputTokens, OutputTokens: d.OutputTokens, LatencyMS: d.LatencyMS,
			Text: d.Text, TextRef: d.TextRef, ResponseRef: d.ResponseRef})
	}
	return out
}

// TurnsJSON is Turns as inspect --json prints them beside the state: an
// JSON array ([] for a task that decided nothing yet).
func TurnsJSON(envs []eventlog.Envelope) ([]byte, error) {
	ts := Turns(envs)
	if ts == nil {
		ts = []Turn{}
	}
	return json.Marshal(ts)
}

// InspectJSON is StateJSON with the task's decisions beside the state:
// {"state": …, "dispatcher": …, "turns": […]}, what engine inspect --json
// prints once it reads the task's records too.
func InspectJSON(s *engine.State, ds eventlog.DispatchState, known bool, envs []eventlog.Envelope) ([]byte, error) {
	ts := Turns(envs)
	if ts == nil {
		ts = []Turn{}
	}
	out := struct {
		State      *engine.State           `json:"state"`
		Dispatcher *eventlog.DispatchState `json:"dispatcher,omitempty"`
		Turns      []Turn                  `json:"turns"`
	}{State: s, Turns: ts}
	if known {
		out.Dispatcher = &ds
	}
	return json.Marshal(out)
}

// WriteTurns writes the decisions among a task's records, a line each,
// and under a decision a model made with words, those words whole on a
// line of their own: every line escaped whole, so a model's text cannot
// act on the terminal or pass for another line.
func WriteTurns(w io.Writer, envs []eventlog.Envelope) {
	ts := Turns(envs)
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "turns")
	for _, t := range ts {
		d := noeta.PolicyDecided{Turn: t.Turn, Decision: t.Decision, Model: t.Model, Provider: t.Provider, CostUSD: t.CostUSD,
			InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, LatencyMS: t.LatencyMS, Text: t.Text, TextRef: t.TextRef}
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("  #%-4d %s", t.Seq, decidedString(&d))))
		if said := saidString(&d); said != "" {
			fmt.Fprintln(w, termsafe.Line("        said "+said))
		}
	}
}

// decidedString is a decision's line: turn, kind, who decided, what it
// cost.
func decidedString(d *noeta.PolicyDecided) string {
	var b strings.Builder
	fmt.Fprintf(&b, "turn %d: %s", d.Turn, d.Decision)
	if d.Model != "" {
		b.WriteString(" by " + d.Model)
		if d.Provider != "" {
			b.WriteString(" (" + d.Provider + ")")
		}
	}
	if d.CostUSD > 0 {
		fmt.Fprintf(&b, " cost $%.4g", d.CostUSD)
	}
	if d.InputTokens > 0 || d.OutputTokens > 0 {
		fmt.Fprintf(&b, " tokens %d/%d", d.InputTokens, d.OutputTokens)
	}
	if d.LatencyMS > 0 {
		fmt.Fprintf(&b, " %dms", d.LatencyMS)
	}
	return b.String()
}

// saidString is the model's text of a decision, whole and quoted (the
// caller escapes the line), where the content store holds it, or "".
func saidString(d *noeta.PolicyDecided) string {
	switch {
	case d.TextRef != nil:
		return timeline.Ref(*d.TextRef)
	case d.Text != "":
		return `"` + d.Text + `"`
	}
	return ""
}
