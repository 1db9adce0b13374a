package main

import (
	"context"
	"encoding/json"
	"fmt"

	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/examples"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/timeline"
)

// demoCase is what the demo knows of one example: what it shows, how its
// approvals are answered, and how it must end.
type demoCase struct {
	shows     string
	approvals timeline.Mode
	want      string
}

// demoCases is the demo's table, by example file name. An example missing
// from it still runs (approvals left, expected to complete).
var demoCases = map[string]demoCase{
	"01-allowed-call.yaml":        {"two allowed calls, then a finish", timeline.Leave, "completed"},
	"02-budget-denial.yaml":       {"Budget denies the call past max_tool_calls", timeline.Leave, "completed"},
	"03-permission-denial.yaml":   {"Permission denies a tool the agent does not have", timeline.Leave, "completed"},
	"04-rule-denial.yaml":         {"a rule denies rm -rf; the next call runs", timeline.Leave, "completed"},
	"05-repetition-approval.yaml": {"Repetition asks a human on the 3rd identical call: approved", timeline.Approve, "completed"},
	"06-approval-granted.yaml":    {"Permission asks a human for a shell call: approved, it runs", timeline.Approve, "completed"},
	"07-approval-refused.yaml":    {"the same request refused: the call never runs", timeline.Deny, "completed"},
	"08-fan-out.yaml":             {"three subtasks; the parent waits for the group", timeline.Leave, "completed"},
}

// demoTimeout bounds one example, so a demo never hangs.
const demoTimeout = 2 * time.Minute

var exampleName = regexp.MustCompile(`^[0-9]+-.*\.yaml$`)

func newDemoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run every example task and show what each governance path does",
		Long: `demo runs every example task of examples/ (embedded in the binary) under the
examples' noeta.yaml, each in a fresh temporary workspace holding a README.md,
on the embedded server (in a temporary data directory unless --data is
given). It answers approvals from its own table (05 and 06 approve, 07
denies), prints each task's timeline under a heading, then a summary. It
exits 0 when every example ended as expected, else 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), g) },
	}
}

type demoResult struct {
	name, shows, want string
	out               host.Rest
	took              time.Duration
}

func runDemo(ctx context.Context, g *globals) error {
	if err := g.check(); err != nil {
		return err
	}
	cfg, err := readExampleConfig()
	if err != nil {
		return failErr(err)
	}
	names, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil {
		return failErr(err)
	}
	tmp, err := os.MkdirTemp("", "noeta-demo-")
	if err != nil {
		return failErr(err)
	}
	defer os.RemoveAll(tmp)
	data := g.data
	if data == "" {
		data = filepath.Join(tmp, "data")
	} else if data, err = g.dataDir(); err != nil {
		return err
	}
	if !g.conn.embedded() {
		data = ""
	}
	// The demo runs tasks, so it runs its config's observers like run does
	// (examples/noeta.yaml has none today, and the demo's output stays its
	// own). Its own pool is never started: each example runs in a pool of
	// its own, on its own queue and workspace (runExample).
	h, err := g.open(ctx, "demo", host.Options{DataDir: data, Config: cfg, Workers: g.workers, Deferred: true, Workspace: tmp, Verb: "demo", Stdout: g.stdout})
	if err != nil {
		return err
	}
	defer h.Close()

	w := g.stdout
	on := "an embedded NATS JetStream in " + data
	if !g.conn.embedded() {
		on = "NATS JetStream at " + g.describe(h)
	}
	fmt.Fprintf(w, "noeta demo: every example of examples/ under examples/noeta.yaml, on %s\n", on)
	var results []demoResult
	for _, name := range names {
		if !exampleName.MatchString(name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r, err := runExample(ctx, g, h, tmp, name)
		if err != nil {
			return failErr(fmt.Errorf("%s: %w", name, err))
		}
		results = append(results, r)
	}

	fmt.Fprintf(w, "\n== summary ==\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "example\twhat it shows\toutcome")
	failed := 0
	for _, r := range results {
		verdict := string(r.out.Status) + ", as expected"
		if string(r.out.Status) != r.want {
			verdict = string(r.out.Status) + ", NOT AS EXPECTED (want " + r.want + ")"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%.2fs)\n", strings.TrimSuffix(r.name, ".yaml"), r.shows, verdict, r.took.Seconds())
	}
	_ = tw.Flush()
	if ctx.Err() != nil {
		fmt.Fprintln(w, "interrupted")
		return exitCode(exitFailed)
	}
	if failed > 0 {
		fmt.Fprintf(w, "%d of %d examples did not end as expected\n", failed, len(results))
		return exitCode(exitFailed)
	}
	fmt.Fprintf(w, "all %d examples ended as expected\n", len(results))
	return nil
}

func readExampleConfig() (*config.File, error) {
	data, err := fs.ReadFile(examples.FS, "noeta.yaml")
	if err != nil {
		return nil, err
	}
	return parseConfig("examples/noeta.yaml", data)
}

// runExample runs one example task in a fresh workspace with its own engine,
// worker pool and ready queue, and prints its timeline under a heading.
func runExample(ctx context.Context, g *globals, h *host.Host, tmp, name string) (demoResult, error) {
	dc, ok := demoCases[name]
	if !ok {
		dc = demoCase{shows: "(not in the demo's table)", approvals: timeline.Leave, want: "completed"}
	}
	r := demoResult{name: name, shows: dc.shows, want: dc.want}
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
	workspace := filepath.Join(tmp, "workspaces", base)
	if err := os.MkdirAll(workspace, 0o755); err != nil {
		return r, err
	}
	readme := "# demo workspace\n\nhello from the noeta demo\n"
	if err := os.WriteFile(filepath.Join(workspace, "README.md"), []byte(readme), 0o644); err != nil {
		return r, err
	}
	queue := "demo-" + queueToken(base)
	pool, err := h.StartPool(ctx, host.PoolOptions{Workers: g.workers, Queue: queue, Workspace: workspace})
	if err != nil {
		return r, err
	}
	defer pool.Stop()

	w := g.stdout
	fmt.Fprintf(w, "\n== %s: %s (approvals: %s) ==\n", base, dc.shows, dc.approvals)
	fmt.Fprintf(w, "   agent %s, goal %q\n", tf.Agent, tf.Goal)
	id := noeta.NewTaskID()
	p := timeline.NewPrinter(id, w, g.stderr, false, dc.approvals, approver())
	p.ApproveReason = "the demo's table says approve"
	p.DenyReason = "the demo's table says deny"
	if err := p.Watch(ctx, h, false); err != nil {
		return r, err
	}

	ctx, cancel := context.WithTimeoutCause(ctx, demoTimeout, fmt.Errorf("%s did not end within %v", name, demoTimeout))
	defer cancel()
	start := time.Now()
	if _, err := h.Submit(ctx, host.Submission{ID: id, Agent: tf.Agent, Goal: tf.Goal, Script: script, Queue: queue}); err != nil {
		return r, err
	}
	out, err := p.Follow(ctx)
	if err != nil {
		return r, err
	}
	r.out, r.took = out, time.Since(start)
	where := ""
	if g.data != "" || !g.conn.embedded() {
		where = g.flags(h)
	}
	reportOutcome(w, id, where, out)
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
