package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ApplyWakeForTest applies a wake-stream message (subject, body, stream
// sequence) as the ingress consumer would, so a test can hand a Dispatcher
// a message a second time (a redelivery) without waiting for the server's
// ack timeout; the wake stream, a work queue, no longer holds one applied.
// stored is the broker's timestamp the message would carry.
func ApplyWakeForTest(d *Dispatcher, subject string, data []byte, seq uint64, stored time.Time) {
	d.applyWakeMsg(subject, nats.Header{}, data, seq, stored, false)
}

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

// WithdrawHooksForTest makes d run before and after (either may be nil)
// around the background withdrawal of the ready signals of a task leased by
// name, so a test can act in between or wait for it. Set them before d's
// first Lease.
func WithdrawHooksForTest(d *Dispatcher, before, after func(eventlog.Lease)) {
	d.hooks.beforeWithdraw, d.hooks.afterWithdraw = before, after
}

// ReadsDirectForTest reports whether l reads by direct gets, and sets it
// to direct for the rest of l's life: a benchmark compares both reads on
// one Log.
func ReadsDirectForTest(l *Log, direct bool) (was bool) {
	was, l.direct = l.direct, direct
	return was
}
