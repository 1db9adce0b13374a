package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/policy"
)

// TestDurableWritesOfAScriptedTask holds the writes of the task stream a
// task of n echo calls costs on the embedded server (packed batches): its
// creation, one per call and its end, the segment's first turn and the
// periodic snapshot riding the calls' writes (ADR 0101). Before, the first
// TurnStarted was a write of its own, the periodic snapshot ended a batch
// of its own and the terminal record followed a snapshot of its own in
// another write: 25 writes for 20 calls. The records are the same, in the
// same order, less the terminal snapshot when one was written a few
// records before.
func TestDurableWritesOfAScriptedTask(t *testing.T) {
	for _, tc := range []struct {
		calls, writes  int
		terminalSnaps  bool // a snapshot right before TaskCompleted
		snapshotsTotal int
	}{
		{calls: 3, writes: 6, terminalSnaps: true, snapshotsTotal: 1},
		{calls: 20, writes: 22, terminalSnaps: false, snapshotsTotal: 1},
		{calls: 30, writes: 33, terminalSnaps: true, snapshotsTotal: 2},
	} {
		t.Run(fmt.Sprint(tc.calls), func(t *testing.T) {
			var steps string
			for i := range tc.calls {
				steps += fmt.Sprintf("  - tool_calls: [{tool: echo, args: {i: %d}}]\n", i)
			}
			tf, err := policy.ParseTaskFile("t.yaml", []byte("agent: bench\ngoal: calls\nscript:\n"+steps+"  - finish: {answer: done}\n"))
			if err != nil {
				t.Fatal(err)
			}
			script, _ := json.Marshal(tf.Script)
			be := jsBackendAt(t, 30*time.Second, natsURL, 1, jetstream.BatchAuto)
			js := be.log.(*jetstream.Log)
			h := newHarness(t, be, benchConfig)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan string, 1)
			pool := h.eng.NewPool("w", 1)
			for _, w := range pool.Workers {
				w.OnSegment = func(out engine.Outcome, err error) {
					if err == nil && out.Status == noeta.StatusTerminal {
						done <- out.Task
					}
				}
			}
			go pool.Run(ctx)
			before := js.DurableWaits()
			id, err := h.eng.Submit(ctx, engine.Submission{Agent: "bench", Goal: "g", Script: script})
			if err != nil {
				t.Fatal(err)
			}
			<-done
			if got := int(js.DurableWaits() - before); got != tc.writes {
				t.Errorf("%d calls: %d writes, want %d", tc.calls, got, tc.writes)
			}
			envs, err := be.log.Read(ctx, id, 0)
			if err != nil {
				t.Fatal(err)
			}
			snaps := 0
			for _, e := range envs {
				if e.Type == noeta.TypeTaskSnapshot {
					snaps++
				}
			}
			last := envs[len(envs)-1]
			if last.Type != noeta.TypeTaskCompleted {
				t.Fatalf("the last record is %s", last.Type)
			}
			if got := envs[len(envs)-2].Type == noeta.TypeTaskSnapshot; got != tc.terminalSnaps || snaps != tc.snapshotsTotal {
				t.Errorf("%d calls: snapshot before the end %v (want %v), %d snapshots (want %d)", tc.calls, got, tc.terminalSnaps, snaps, tc.snapshotsTotal)
			}
			// The task folds from its log and from its latest snapshot to
			// the same state.
			st, _, err := engine.FoldTask(ctx, be.log, be.content, id)
			if err != nil || st.Status != noeta.StatusTerminal || st.LastSeq != last.Seq {
				t.Fatalf("fold: %+v %v", st, err)
			}
		})
	}
}
