package replay_test

import (
	"testing"

	"github.com/noeta-go/noeta/replay"
)

// BenchmarkReplay replays 2,000 recorded tasks of five actions each (four
// tool calls and a finish) under a config with a new deny rule; it reports
// the cost per action (issue 28's measure: 100,000 actions in ≤ 10 s is
// ≤ 100 µs an action).
func BenchmarkReplay(b *testing.B) {
	const tasks = 2000
	rec := record(b, agentsDoc, tasks)
	j := judge(b, agentsDoc+denySecret)
	b.ResetTimer()
	var actions int
	for b.Loop() {
		rep, err := replay.Run(b.Context(), rec.Store, rec.Store, j, replay.Filter{})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Changed != tasks {
			b.Fatalf("changed %d, want %d", rep.Changed, tasks)
		}
		actions += rep.Actions
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(actions), "ns/action")
}
