package engine

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// decoded is one record and its decoded payload, as the fold hands them to
// the composer.
type decoded struct {
	env eventlog.Envelope
	p   noeta.Payload
}

// composeTurnRecords returns the records of turn: a TurnStarted, a decision
// record carrying its call (as a model policy's is recorded), the call
// started and finished; every tenth call is denied by a guard instead.
func composeTurnRecords(tb testing.TB, turn int, seq uint64) []decoded {
	tb.Helper()
	id := "call-" + strconv.Itoa(turn) + "-0"
	args := `{"i":` + strconv.Itoa(turn%7) + `,"text":"hello"}`
	var out []decoded
	add := func(typ string, body string) {
		env := eventlog.Envelope{Task: "T", Seq: seq + uint64(len(out)), Type: typ, Payload: json.RawMessage(body)}
		p, _, err := env.Decode()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, decoded{env, p})
	}
	add(noeta.TypeTurnStarted, `{"turn":`+strconv.Itoa(turn)+`}`)
	add(noeta.TypePolicyDecided, `{"decision":"tool_calls","input_tokens":1200,"output_tokens":40,"model":"m","provider":"openai",`+
		`"tool_calls":[{"args":`+args+`,"call_id":"`+id+`","tool":"echo"}],"turn":`+strconv.Itoa(turn)+`}`)
	if turn%10 == 0 {
		add(noeta.TypeToolCallDenied, `{"call_id":"`+id+`","guard":"rules","reason":"no tens","tool":"echo"}`)
	} else {
		add(noeta.TypeToolCallStarted, `{"args":`+args+`,"call_id":"`+id+`","tool":"echo","turn":`+strconv.Itoa(turn)+`}`)
		add(noeta.TypeToolCallFinished, `{"call_id":"`+id+`","duration_ms":1,"ok":true,"output":`+args+`,"tool":"echo"}`)
	}
	return out
}

// BenchmarkComposeTurn is the composer's cost per turn with n records of
// history behind it: the turn's records applied and the transcript taken
// at the turn's start, as the engine does before it asks a policy.
// Each iteration adds a turn (4 records), so the history grows past n as
// the benchmark runs; the per-turn cost must not grow with it.
func BenchmarkComposeTurn(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(strconv.Itoa(n)+"-records", func(b *testing.B) {
			c := NewComposer(ComposerConfig{})
			created := eventlog.Envelope{Task: "T", Seq: 1, Type: noeta.TypeTaskCreated}
			c.Apply(created, &noeta.TaskCreated{TaskID: "T", Agent: "bench", Goal: "g", RootTaskID: "T"})
			seq, turn := uint64(2), 1
			for seq < uint64(n) {
				for _, r := range composeTurnRecords(b, turn, seq) {
					c.Apply(r.env, r.p)
					seq++
				}
				turn++
			}
			// Records of turns to come, decoded beforehand: decoding is the
			// fold's cost, paid once for the state and the composer alike.
			const ahead = 4096
			next := make([][]decoded, ahead)
			for i := range next {
				next[i] = composeTurnRecords(b, turn+i, seq)
			}
			b.ReportAllocs()
			i := 0
			start := cpuTime()
			for b.Loop() {
				recs := next[i%ahead]
				c.Apply(recs[0].env, recs[0].p) // TurnStarted: the policy is asked
				if tr := c.Transcript(); len(tr.Messages) == 0 {
					b.Fatal("empty transcript")
				}
				for _, r := range recs[1:] {
					c.Apply(r.env, r.p)
				}
				i++
			}
			reportCPU(b, start)
		})
	}
}
