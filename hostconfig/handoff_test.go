package hostconfig

import (
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/host"
)

// TestSubmitHandsOffToAnIdleWorker: on the embedded default, a task
// submitted while a worker of the host waits for one is created leased to
// that worker (ADR 0112): it never waits in the ready queue, and it runs as
// any task does. A worker may not be back in its wait yet when a Submit
// comes, so a few tasks are submitted one after another; at least one must
// be handed off, and every one must complete under a single lease.
func TestSubmitHandsOffToAnIdleWorker(t *testing.T) {
	t.Parallel()
	h := openRunner(t, t.TempDir())
	const tasks = 6
	for i := range tasks {
		id, err := h.Submit(t.Context(), task(t, "agent: helper\ngoal: g\nscript: [{tool_calls: [{tool: echo, args: {text: hi}}]}, {finish: {answer: ok}}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		rest, err := h.Wait(t.Context(), id)
		if err != nil || rest.Status != host.RestCompleted {
			t.Fatalf("task %d (%s): %+v, %v", i, id, rest, err)
		}
		log, err := h.Events(t.Context(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var leases []noeta.LeaseGranted
		for _, env := range log {
			if env.Type != noeta.TypeLeaseGranted {
				continue
			}
			p, _, err := env.Decode()
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, *p.(*noeta.LeaseGranted))
		}
		if len(leases) != 1 || leases[0].Generation != 1 || leases[0].Worker == "" {
			t.Fatalf("task %d (%s): leases %+v, want one of generation 1 naming its worker", i, id, leases)
		}
	}
	if n := h.Dispatcher().Stats().HandOffs; n == 0 {
		t.Fatalf("%d tasks submitted to a host whose workers waited: none was handed to a worker", tasks)
	}
}
