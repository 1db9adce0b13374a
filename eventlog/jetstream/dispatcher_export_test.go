package jetstream

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
)

// ApplyIngressForTest applies one wake-ingress message as the ingress
// consumer would, so a test can hand a Dispatcher a real message a second
// time (a redelivery) without waiting for the server's ack timeout.
func ApplyIngressForTest(d *Dispatcher, m jetstream.Msg) { d.applyIngress(m) }

// BufferWakeForTest appends ev to the buffer of task's row as it is stored,
// the way a Dispatcher of an earlier version buffered every early wake.
func BufferWakeForTest(t *testing.T, d *Dispatcher, task string, ev noeta.Wake) {
	t.Helper()
	if _, err := d.mutate(t.Context(), task, func(r *taskRow) (*taskRow, error) {
		r.Pending = append(r.Pending, ev)
		return r, nil
	}); err != nil {
		t.Fatalf("buffer %s for %s: %v", ev.Kind, task, err)
	}
}
