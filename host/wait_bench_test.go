package host

import (
	"strings"
	"testing"

	"github.com/noeta-go/noeta/config"
)

// BenchmarkSubmitWait submits a task of 20 echo calls and a finish on
// memlog and waits for it: the latency a caller of Wait sees, its own
// notice of the rest included.
func BenchmarkSubmitWait(b *testing.B) {
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  a: {tools: [echo]}\n"))
	if err != nil {
		b.Fatal(err)
	}
	h := openMem(b, cfg, Options{Workers: 1})
	var body strings.Builder
	body.WriteString("agent: a\ngoal: g\nscript:\n")
	for range 20 {
		body.WriteString("  - tool_calls: [{tool: echo, args: {text: hi}}]\n")
	}
	body.WriteString("  - finish: {answer: done}\n")
	sub := task(b, body.String())
	for b.Loop() {
		id, err := h.Submit(b.Context(), sub)
		if err != nil {
			b.Fatal(err)
		}
		if rest, err := h.Wait(b.Context(), id); err != nil || rest.Status != RestCompleted {
			b.Fatalf("%+v %v", rest, err)
		}
	}
}
