package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tasklist"
)

// ParseFilter reads the filters of the policy verbs: since is a duration
// back from now (24h, 90m, 7d) or an RFC 3339 time, empty for no bound;
// task, if set, must be a task id. Messages name the flags.
func ParseFilter(since, agent, task string, now time.Time) (Filter, error) {
	f := Filter{Agent: agent, Task: task}
	if task != "" {
		if err := noeta.ValidateTaskID(task); err != nil {
			return Filter{}, fmt.Errorf("--task: %v", err)
		}
	}
	t, err := tasklist.ParseSince(since, now)
	if err != nil {
		return Filter{}, fmt.Errorf("--%w", err)
	}
	f.Since = t
	return f, nil
}

// filterDoc is a filter as the JSON reports show it.
type filterDoc struct {
	Since time.Time `json:"since,omitzero"`
	Agent string    `json:"agent,omitempty"`
	Task  string    `json:"task,omitempty"`
}

// ReplayDoc is the JSON document of a replay: the report, with the config
// it replayed under and the filter.
type ReplayDoc struct {
	Kind   string    `json:"kind"` // policy_replay
	Config string    `json:"config"`
	Filter filterDoc `json:"filter"`
	*Report
}

// WriteReport prints rep, replayed under the config named config: a
// header, a table of the changes by recorded and new verdict, point, tool
// and guard, the examples of each, and the actions not replayed, by why.
// With asJSON it prints one JSON object (ReplayDoc).
func WriteReport(w io.Writer, config string, f Filter, rep *Report, asJSON bool) error {
	if asJSON {
		return writeJSON(w, ReplayDoc{Kind: "policy_replay", Config: config, Filter: filterDoc(f), Report: rep})
	}
	nr := 0
	for _, n := range rep.NotReplayed {
		nr += n
	}
	fmt.Fprintf(w, "%s of %s replayed under %s: %s, %d not replayed\n",
		plural(rep.Actions, "action"), plural(rep.Tasks, "task"), config, wouldChange(rep.Changed), nr)
	if len(rep.Changes) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FROM\tTO\tPOINT\tTOOL\tGUARD\tCOUNT")
		for _, g := range rep.Changes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", g.From, g.To, g.Point, dash(g.Tool), dash(g.Guard), g.Count)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, g := range rep.Changes {
			fmt.Fprintf(w, "\n%s → %s, %s%s, %s (%d):\n", g.From, g.To, g.Point, prefixed(g.Tool), dash(g.Guard), g.Count)
			for _, o := range g.Examples {
				what := prefixed(o.CallID)
				if o.Child != "" {
					what += " of " + o.Child
				}
				fmt.Fprintf(w, "  task %s seq %d turn %d%s: was %s, now %s\n", o.Task, o.Seq, o.Turn, what,
					verdictText(o.Recorded), verdictText(o.Replayed))
			}
		}
	}
	if nr > 0 {
		fmt.Fprintln(w, "\nnot replayed (never guessed):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  WHY\tCOUNT\tFIRST")
		for _, k := range slices.Sorted(maps.Keys(rep.NotReplayed)) {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", k, rep.NotReplayed[k], rep.NotReplayedFirst[k])
		}
		return tw.Flush()
	}
	return nil
}

// ShadowDoc is the JSON document of a shadow report.
type ShadowDoc struct {
	Kind   string    `json:"kind"` // policy_shadow_report
	Filter filterDoc `json:"filter"`
	*ShadowSummary
}

// WriteShadow prints sum: a header, a table of the shadow rules by guard,
// rule and would-be verdict, and the examples of each. With asJSON it
// prints one JSON object (ShadowDoc).
func WriteShadow(w io.Writer, f Filter, sum *ShadowSummary, asJSON bool) error {
	if asJSON {
		return writeJSON(w, ShadowDoc{Kind: "policy_shadow_report", Filter: filterDoc(f), ShadowSummary: sum})
	}
	fmt.Fprintf(w, "%s, %s, %d would have changed, %d failed\n",
		plural(sum.Tasks, "task"), plural(sum.Verdicts, "shadow verdict"), sum.Changed, sum.Failed)
	if len(sum.Rules) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GUARD\tRULE\tWOULD\tCOUNT\tCHANGED\tFAILED\tDECIDED")
	for _, r := range sum.Rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.Guard, dash(r.Rule), r.Verdict, r.Count, r.Changed, r.Failed, decided(r.Decided))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range sum.Rules {
		fmt.Fprintf(w, "\n%s %s would %s:\n", r.Guard, dash(r.Rule), r.Verdict)
		for _, ex := range r.Examples {
			what := ex.Point + prefixed(ex.Tool) + prefixed(ex.CallID)
			if ex.Child != "" {
				what += " of agent " + ex.Child
			}
			failed := ""
			if ex.Failed {
				failed = " (failed)"
			}
			fmt.Fprintf(w, "  task %s seq %d turn %d %s: %s%s; decided %s\n", ex.Task, ex.Seq, ex.Turn, what,
				dash(ex.Reason), failed, verdictText(ex.Decided))
		}
	}
	return nil
}

// CasesDoc is the JSON document of a policy test.
type CasesDoc struct {
	Kind    string     `json:"kind"` // policy_test
	Rules   string     `json:"rules"`
	Cases   string     `json:"cases"`
	Total   int        `json:"total"`
	Passed  int        `json:"passed"`
	Failed  int        `json:"failed"`
	Results []CaseLine `json:"results"`
}

// CaseLine is a case's result as the JSON document shows it.
type CaseLine struct {
	Name        string `json:"name"`
	Agent       string `json:"agent"`
	Expect      string `json:"expect"`
	ExpectGuard string `json:"expect_guard,omitempty"`
	// Got is nil when the case could not be judged (Error says why).
	Got   *Verdict `json:"got,omitempty"`
	Pass  bool     `json:"pass"`
	Error string   `json:"error,omitempty"`
}

// WriteCases prints the results of a policy test, rules and cases naming
// its files: each failing case with what it expected and what it got,
// then the count. With asJSON it prints one JSON object (CasesDoc) with
// every case.
func WriteCases(w io.Writer, rules, cases string, res []CaseResult, asJSON bool) error {
	doc := CasesDoc{Kind: "policy_test", Rules: rules, Cases: cases, Total: len(res), Results: []CaseLine{}}
	for _, r := range res {
		if r.Pass {
			doc.Passed++
		} else {
			doc.Failed++
		}
		l := CaseLine{Name: r.Name, Agent: r.Case.Agent, Expect: r.Case.Expect, ExpectGuard: r.Case.Guard, Pass: r.Pass, Error: r.Err}
		if r.Err == "" {
			l.Got = &r.Got
		}
		doc.Results = append(doc.Results, l)
	}
	if asJSON {
		return writeJSON(w, doc)
	}
	if doc.Failed > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FAILED\tAGENT\tEXPECTED\tGOT")
		for _, l := range doc.Results {
			if l.Pass {
				continue
			}
			want := l.Expect
			if l.ExpectGuard != "" {
				want += " by " + l.ExpectGuard
			}
			got := "not judged: " + l.Error
			if l.Got != nil {
				got = verdictText(*l.Got)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Name, l.Agent, want, got)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "%s of %s under %s: %d passed, %d failed\n", plural(doc.Total, "case"), cases, rules, doc.Passed, doc.Failed)
	return err
}

// writeJSON writes a report as one line: every --json of the CLI is JSON
// Lines (docs/cli.md, ADR 0088).
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// verdictText is "deny by rules: no secrets", "allow".
func verdictText(v Verdict) string {
	s := v.Verdict.String()
	if v.Guard != "" {
		s += " by " + v.Guard
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	return s
}

// decided is "allow 2, deny 1", the verdicts in order.
func decided(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return dash(strings.Join(parts, ", "))
}

func wouldChange(n int) string {
	if n == 0 {
		return "nothing would change"
	}
	return fmt.Sprintf("%d would change", n)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}
