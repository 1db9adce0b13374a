package gateway

import (
	"testing"
)

// TestToolProgressKeepsTheNewest: a call whose progress queue is full (its
// client slower than the upstream) drops the oldest note, not the newest:
// the last the upstream sent, often its "done", still reaches the client.
func TestToolProgressKeepsTheNewest(t *testing.T) {
	c := &call{progress: make(chan progressNote, progressQueue)}
	s := &session{asked: map[string]*call{"c1": c}}
	p := s.ToolProgress("c1")
	const sent = progressQueue + 5
	for i := 1; i <= sent; i++ {
		p(float64(i), sent, "")
	}
	if len(c.progress) != progressQueue {
		t.Fatalf("%d notes queued, want %d", len(c.progress), progressQueue)
	}
	var last progressNote
	for len(c.progress) > 0 {
		last = <-c.progress
	}
	if last.progress != sent {
		t.Errorf("the last note queued is %v, want %d (the newest)", last.progress, sent)
	}
	if s.ToolProgress("unknown") != nil {
		t.Error("a call the session did not ask for has a Progress")
	}
}
