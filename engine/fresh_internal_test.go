package engine

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/noeta-go/noeta/eventlog"
)

func genesisOf(task string, payload int) eventlog.Envelope {
	return eventlog.Envelope{Task: task, Seq: 1, Payload: bytes.Repeat([]byte("x"), payload)}
}

// TestFreshTasksBounds: what FreshTasks keeps, hands out and forgets.
func TestFreshTasksBounds(t *testing.T) {
	first := eventlog.Lease{Task: "T", Generation: 1}
	cases := []struct {
		name  string
		put   eventlog.Envelope
		lease eventlog.Lease
		want  bool
	}{
		{"the first lease takes it", genesisOf("T", 10), first, true},
		{"a later lease does not", genesisOf("T", 10), eventlog.Lease{Task: "T", Generation: 2}, false},
		{"another task's lease does not", genesisOf("U", 10), first, false},
		{"a genesis too large is not kept", genesisOf("T", freshMaxPayload+1), first, false},
		{"a record not the genesis is not kept", eventlog.Envelope{Task: "T", Seq: 2}, first, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f FreshTasks
			f.put(c.put)
			if _, ok := f.take(c.lease); ok != c.want {
				t.Errorf("take: %v, want %v", ok, c.want)
			}
			// Taken or refused, it is forgotten.
			if _, ok := f.take(eventlog.Lease{Task: c.lease.Task, Generation: 1}); ok {
				t.Error("taken twice")
			}
		})
	}

	t.Run("the oldest falls out past the bound", func(t *testing.T) {
		var f FreshTasks
		for i := range freshMax + 10 {
			f.put(genesisOf(strconv.Itoa(i), 1))
		}
		if len(f.envs) != freshMax {
			t.Errorf("kept %d, want %d", len(f.envs), freshMax)
		}
		if _, ok := f.take(eventlog.Lease{Task: "0", Generation: 1}); ok {
			t.Error("the oldest was kept")
		}
		if _, ok := f.take(eventlog.Lease{Task: strconv.Itoa(freshMax + 9), Generation: 1}); !ok {
			t.Error("the newest was not kept")
		}
	})

	t.Run("taking keeps the names bounded", func(t *testing.T) {
		var f FreshTasks
		for i := range 10 * freshMax {
			task := strconv.Itoa(i)
			f.put(genesisOf(task, 1))
			f.take(eventlog.Lease{Task: task, Generation: 1})
		}
		if len(f.envs) != 0 || len(f.order) > 2*freshMax {
			t.Errorf("kept %d tasks and %d names", len(f.envs), len(f.order))
		}
	})
}
