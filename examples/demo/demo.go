// Package demo runs every example task of examples/ on a host, each in a
// workspace, pool and ready queue of its own, prints each task's timeline
// under a heading, answers approvals from its table, and sums up what each
// example showed and whether it ended as it must. It is `engine demo`; a
// test or an embedding program can run the same tour on a host of its own.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/examples"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/timeline"
)

// Case is what the demo knows of one example: what it shows, how its
// approvals are answered, and how it must end.
type Case struct {
	Shows     string
	Approvals timeline.Mode
	Want      string
}

// Cases is the demo's table, by example file name. An example missing from
// it still runs (approvals left, expected to complete).
var Cases = map[string]Case{
	"01-allowed-call.yaml":        {"two allowed calls, then a finish", timeline.Leave, "completed"},
	"02-budget-denial.yaml":       {"Budget denies the call past max_tool_calls", timeline.Leave, "completed"},
	"03-permission-denial.yaml":   {"Permission denies a tool the agent does not have", timeline.Leave, "completed"},
	"04-rule-denial.yaml":         {"a rule denies rm -rf; the next call runs", timeline.Leave, "completed"},
	"05-repetition-approval.yaml": {"Repetition asks a human on the 3rd identical call: approved", timeline.Approve, "completed"},
	"06-approval-granted.yaml":    {"Permission asks a human for a shell call: approved, it runs", timeline.Approve, "completed"},
	"07-approval-refused.yaml":    {"the same request refused: the call never runs", timeline.Deny, "completed"},
	"08-fan-out.yaml":             {"three subtasks; the parent waits for the group", timeline.Leave, "completed"},
}

// Timeout bounds one example, so a demo never hangs.
const Timeout = 2 * time.Minute

var exampleName = regexp.MustCompile(`^[0-9]+-.*\.yaml$`)

// Options say how the demo runs its examples and where it prints.
type Options struct {
	// Workers is the size of each example's pool.
	Workers int
	// Approver is who answers the approvals the table answers.
	Approver string
	// Out receives the timelines and the outcomes, Msgs the notes.
	Out, Msgs io.Writer
	// Where, if set, is the flags that reach the deployment again, said
	// with a task left waiting; unset, the tasks cannot be reached again
	// (a temporary data directory).
	Where string
}

// Result is how one example ended.
type Result struct {
	Name, Shows, Want string
	Rest              host.Rest
	Took              time.Duration
}

// Run runs every example on h (whose own pool is not started), each in a
// workspace under dir, until they are done or ctx ends; it returns the
// results of those that ran.
func Run(ctx context.Context, h *hostconfig.Host, dir string, o Options) ([]Result, error) {
	names, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, name := range names {
		if !exampleName.MatchString(name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r, err := runExample(ctx, h, dir, name, o)
		if err != nil {
			return results, fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// WriteSummary writes the table of results and returns how many did not
// end as expected.
func WriteSummary(w io.Writer, results []Result) (failed int) {
	fmt.Fprintf(w, "\n== summary ==\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "example\twhat it shows\toutcome")
	for _, r := range results {
		verdict := string(r.Rest.Status) + ", as expected"
		if string(r.Rest.Status) != r.Want {
			verdict = string(r.Rest.Status) + ", NOT AS EXPECTED (want " + r.Want + ")"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%.2fs)\n", strings.TrimSuffix(r.Name, ".yaml"), r.Shows, verdict, r.Took.Seconds())
	}
	_ = tw.Flush()
	return failed
}

// WriteVerdict writes the tour's last line, and reports whether it went as
// it must: every one of total examples ended as expected (failed is
// WriteSummary's count) and the tour was not interrupted.
func WriteVerdict(w io.Writer, total, failed int, interrupted bool) bool {
	switch {
	case interrupted:
		fmt.Fprintln(w, "interrupted")
		return false
	case failed > 0:
		fmt.Fprintf(w, "%d of %d examples did not end as expected\n", failed, total)
		return false
	}
	fmt.Fprintf(w, "all %d examples ended as expected\n", total)
	return true
}

// Config is the examples' governance config, examples/noeta.yaml, as the
// binary embeds it.
func Config() (*config.File, error) {
	data, err := fs.ReadFile(examples.FS, "noeta.yaml")
	if err != nil {
		return nil, err
	}
	return govfile.Parse("examples/noeta.yaml", data)
}

// runExample runs one example task in a fresh workspace with its own engine,
// worker pool and ready queue, and prints its timeline under a heading.
func runExample(ctx context.Context, h *hostconfig.Host, dir, name string, o Options) (Result, error) {
	dc, ok := Cases[name]
	if !ok {
		dc = Case{Shows: "(not in the demo's table)", Approvals: timeline.Leave, Want: "completed"}
	}
	r := Result{Name: name, Shows: dc.Shows, Want: dc.Want}
	body, err := fs.ReadFile(examples.FS, name)
	if err != nil {
		return r, err
	}
	tf, err := policy.ParseTaskFile("examples/"+name, body)
	if err != nil {
		return r, err
	}
	script, err := json.Marshal(tf.Script)
	if err != nil {
		return r, err
	}
	base := strings.TrimSuffix(name, ".yaml")
	workspace := filepath.Join(dir, "workspaces", base)
	if err := os.MkdirAll(workspace, 0o755); err != nil {
		return r, err
	}
	readme := "# demo workspace\n\nhello from the noeta demo\n"
	if err := os.WriteFile(filepath.Join(workspace, "README.md"), []byte(readme), 0o644); err != nil {
		return r, err
	}
	queue := "demo-" + queueToken(base)
	pool, err := h.StartPool(ctx, host.PoolOptions{Workers: o.Workers, Queue: queue, Workspace: workspace})
	if err != nil {
		return r, err
	}
	defer pool.Stop()

	w := o.Out
	fmt.Fprintf(w, "\n== %s: %s (approvals: %s) ==\n", base, dc.Shows, dc.Approvals)
	fmt.Fprintf(w, "   agent %s, goal %q\n", tf.Agent, tf.Goal)
	id := noeta.NewTaskID()
	p := timeline.NewPrinter(id, w, o.Msgs, false, dc.Approvals, o.Approver)
	p.ApproveReason = "the demo's table says approve"
	p.DenyReason = "the demo's table says deny"
	if err := p.Watch(ctx, h.Host, false); err != nil {
		return r, err
	}

	ctx, cancel := context.WithTimeoutCause(ctx, Timeout, fmt.Errorf("%s did not end within %v", name, Timeout))
	defer cancel()
	start := time.Now()
	if _, err := h.Submit(ctx, host.Submission{ID: id, Agent: tf.Agent, Goal: tf.Goal, Script: script, Queue: queue}); err != nil {
		return r, err
	}
	out, err := p.Follow(ctx)
	if err != nil {
		return r, err
	}
	r.Rest, r.Took = out, time.Since(start)
	timeline.WriteOutcome(w, id, o.Where, out)
	return r, nil
}

// queueToken keeps the characters a queue name may have.
func queueToken(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
