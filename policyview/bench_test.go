package policyview_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/policyview"
	"github.com/noeta-go/noeta/replay"
)

// benchDoc is the recorded config of BenchmarkReplayJetStream; the replay
// adds a deny rule.
const benchDoc = `
agents:
  a:
    tools: [echo]
    budget: {max_tool_calls: 1000, max_iterations: 100}
`

const benchDeny = `
rules:
  - {match_tool: echo, match_arg: {path: text, regex: "7$"}, action: deny, reason: "no sevens"}
`

// Each recorded task proposes benchCalls tool calls, benchPerTurn a turn,
// and a finish: 100 actions.
const (
	benchTasks   = 1000
	benchCalls   = 99
	benchPerTurn = 11
)

// BenchmarkReplayJetStream replays 100,000 recorded actions (1,000 tasks
// of 99 echo calls and a finish) on the embedded default, JetStream on a
// data directory, single node, through a read-only host as engine policy
// replay opens it; a new deny rule changes a tenth of the calls (issue
// 28's measure: ≤ 10 s). Recording takes minutes: with
// NOETA_REPLAY_BENCH_DATA=DIR the data directory is DIR, recorded once and
// reused (and kept for engine policy replay --data DIR).
func BenchmarkReplayJetStream(b *testing.B) {
	data := os.Getenv("NOETA_REPLAY_BENCH_DATA")
	if data == "" {
		data = b.TempDir()
	}
	cfg, err := govfile.Parse("noeta.yaml", []byte(benchDoc))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "recorded")); err != nil {
		recordBench(b, data, cfg)
	}
	h, err := hostconfig.Open(b.Context(), hostconfig.Options{DataDir: data, ReadOnly: true, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	replayCfg, err := govfile.Parse("new.yaml", []byte(benchDoc+benchDeny))
	if err != nil {
		b.Fatal(err)
	}
	j, err := policyview.Judge(replayCfg)
	if err != nil {
		b.Fatal(err)
	}
	be := h.Backend()
	var rep *replay.Report
	for b.Loop() {
		if rep, err = replay.Run(b.Context(), be.Log(), be.Content(), j, replay.Filter{}); err != nil {
			b.Fatal(err)
		}
	}
	if want := benchTasks * (benchCalls + 1); rep.Actions != want || rep.Changed != benchTasks*10 || len(rep.NotReplayed) != 0 {
		b.Fatalf("%d actions, %d changed, not replayed %v; want %d actions, %d changed", rep.Actions, rep.Changed, rep.NotReplayed, want, benchTasks*10)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rep.Actions), "ns/action")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/replay")
}

// recordBench runs the tasks of BenchmarkReplayJetStream into data.
func recordBench(b *testing.B, data string, cfg *config.File) {
	b.Helper()
	h, err := hostconfig.Open(b.Context(), hostconfig.Options{DataDir: data, Config: cfg, Workers: 16, Workspace: b.TempDir(), Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	var turns []string
	for i := 0; i < benchCalls; i += benchPerTurn {
		var calls []string
		for k := i; k < i+benchPerTurn && k < benchCalls; k++ {
			calls = append(calls, fmt.Sprintf(`{"tool":"echo","args":{"text":"call %d"}}`, k))
		}
		turns = append(turns, `{"tool_calls":[`+strings.Join(calls, ",")+`]}`)
	}
	script := json.RawMessage(`[` + strings.Join(append(turns, `{"finish":{"answer":"done"}}`), ",") + `]`)
	var wg sync.WaitGroup
	errs := make(chan error, benchTasks)
	sem := make(chan struct{}, 64)
	for i := range benchTasks {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id, err := h.Submit(b.Context(), host.Submission{Agent: "a", Goal: fmt.Sprintf("task %d", i), Script: script})
			if err == nil {
				var rest host.Rest
				if rest, err = h.Wait(b.Context(), id); err == nil && rest.Status != host.RestCompleted {
					err = fmt.Errorf("task %s: %+v", id, rest)
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "recorded"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
}
